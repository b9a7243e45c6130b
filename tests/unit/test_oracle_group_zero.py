"""The damage seed 000 suffered: a member whose header was overwritten falls into group 0.

Rows are GV$ASM_* in Oracle's documented layout (tests/data/oracle/README.md); the adapters are proven against
the fake connection and the asmcmd sample files, the rules against the rows.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import ScriptedHost

from pytest_fabricqa.lab.database import AsmcmdSettings
from pytest_fabricqa.oracle import sql
from pytest_fabricqa.oracle.asmcmd import Asmcmd
from pytest_fabricqa.oracle.fake import FakeConnection, FakeResult
from pytest_fabricqa.oracle.health import Severity, check_asm_health

DATA = Path(__file__).parents[1] / "data" / "oracle"
LAB_PATHS = ("/dev/nvme0n1", "/dev/nvme1n1")


def _rows(name: str) -> list[dict[str, Any]]:
    with (DATA / name).open() as handle:
        return [
            {k: (None if v == "" else int(v) if v.lstrip("-").isdigit() else v) for k, v in row.items()}
            for row in csv.DictReader(handle)
        ]


def test_the_csv_headers_are_the_columns_the_sql_adapter_reads() -> None:
    assert tuple(_rows("gv_asm_disk_before.csv")[0]) == sql.DISK_COLUMNS
    assert tuple(_rows("gv_asm_diskgroup_before.csv")[0]) == sql.DISKGROUP_COLUMNS
    assert tuple(_rows("gv_asm_operation_rebalance.csv")[0]) == sql.OPERATION_COLUMNS_12C


def test_the_before_snapshot_is_healthy() -> None:
    verdict = check_asm_health(
        _rows("gv_asm_diskgroup_before.csv"),
        _rows("gv_asm_disk_before.csv"),
        expected=["NVME"],
        lab_paths=LAB_PATHS,
        baseline=True,
    )
    assert verdict.healthy, verdict.messages()


def test_a_lab_device_that_fell_into_group_0_fails_naming_the_device_and_its_group() -> None:
    verdict = check_asm_health(
        _rows("gv_asm_diskgroup_after_overwrite.csv"),
        _rows("gv_asm_disk_after_overwrite.csv"),
        expected=["NVME"],
        before_disks=_rows("gv_asm_disk_before.csv"),
        before_diskgroups=_rows("gv_asm_diskgroup_before.csv"),
        lab_paths=LAB_PATHS,
    )
    left = [p for p in verdict.hard if p.rule == "disk-left-group"]
    assert [(p.disk, p.diskgroup, p.instance) for p in left] == [
        ("/dev/nvme1n1", "NVME", 1),
        ("/dev/nvme1n1", "NVME", 2),
    ]
    assert left[0].message == (
        "Disk /dev/nvme1n1 left disk group NVME on instance 1: ASM now lists it in group 0 with HEADER_STATUS "
        "CANDIDATE, its ASM header overwritten or the disk dropped during the run."
    )
    rules = {p.rule for p in verdict.hard}
    assert {"diskgroup-state", "diskgroup-disk-count", "diskgroup-total-mb"} <= rules
    assert (
        "Disk group NVME on instance 1 had 2 disk(s) before the I/O and 0 after: a member left the group during the "
        "run." in verdict.messages()
    )
    # The candidate disk that was never in a group, and is no lab device, is nobody's business.
    assert not any(p.disk == "/dev/sdq" for p in verdict.problems)


@pytest.mark.parametrize("header", ["CANDIDATE", "FORMER", "PROVISIONED"])
def test_each_lost_header_status_counts_and_a_mounted_group_can_lose_one_disk(header: str) -> None:
    # NORMAL redundancy: the group stays mounted, the member row goes MISSING and the path reappears in group 0.
    before = _rows("gv_asm_disk_before.csv")
    after = [dict(r) for r in before if not (r["INST_ID"] == 2 and r["PATH"] == "/dev/nvme0n1")]
    after.append({**before[1], "INST_ID": 2, "GROUP_NUMBER": 0, "NAME": None, "MOUNT_STATUS": "CLOSED",
                  "HEADER_STATUS": header})  # fmt: skip
    groups_after = [dict(g) for g in _rows("gv_asm_diskgroup_before.csv")]
    groups_after[1]["TOTAL_MB"] = 1144720
    verdict = check_asm_health(
        groups_after, after, expected=["NVME"], before_disks=before,
        before_diskgroups=_rows("gv_asm_diskgroup_before.csv"),
    )  # fmt: skip
    assert [(p.rule, p.instance) for p in verdict.hard] == [
        ("diskgroup-disk-count", 2),
        ("diskgroup-total-mb", 2),
        ("disk-left-group", 2),
    ]
    assert f"HEADER_STATUS {header}" in verdict.hard[-1].message


def test_a_listed_lab_device_in_group_0_without_a_before_snapshot_is_a_warning() -> None:
    disks = _rows("gv_asm_disk_before.csv")
    verdict = check_asm_health(_rows("gv_asm_diskgroup_before.csv"), disks, expected=["NVME"], lab_paths=("/dev/sdq",))
    assert [(p.rule, p.severity) for p in verdict.problems] == [("lab-disk-in-group-zero", Severity.SOFT)] * 2


def test_a_running_rebalance_fails_the_before_phase_and_only_warns_after() -> None:
    args = (
        _rows("gv_asm_diskgroup_before.csv"),
        _rows("gv_asm_disk_before.csv"),
        _rows("gv_asm_operation_rebalance.csv"),
    )
    before = check_asm_health(*args, expected=["NVME"], baseline=True)
    assert before.failed and [p.rule for p in before.hard] == ["operation-running", "operation-running"]
    assert "no baseline" in before.hard[0].message and "REBALANCE" in before.hard[0].message
    after = check_asm_health(*args, expected=["NVME"])
    assert not after.failed and len(after.soft) == 2


def test_sql_reads_group_0_rows_of_the_lab_paths_through_bind_variables() -> None:
    connection = FakeConnection({"FROM GV$ASM_DISK WHERE": FakeResult(sql.DISK_COLUMNS, [])})
    sql.read_disks(connection, ["/dev/nvme1n1", "AFD:NVME1", "/dev/nvme1n1"])
    assert connection.executed[-1].endswith(
        "FROM GV$ASM_DISK WHERE GROUP_NUMBER > 0 OR PATH IN (:p0, :p1) ORDER BY INST_ID, GROUP_NUMBER, DISK_NUMBER"
    )
    assert connection.binds[-1] == {"p0": "/dev/nvme1n1", "p1": "AFD:NVME1"}
    sql.read_disks(connection)
    assert "PATH IN" not in connection.executed[-1]


def discovery_host() -> ScriptedHost:
    """Answers ``lsdsk -g --discovery -p`` with the sample file and every other asmcmd listing with nothing."""
    listing = (DATA / "lsdsk_g_discovery_p_after_overwrite.txt").read_text()
    return ScriptedHost("el72h1", lambda argv: listing if "--discovery" in argv else "")


def test_asmcmd_adds_the_group_0_rows_of_the_watched_paths() -> None:
    asmcmd = Asmcmd(discovery_host(), AsmcmdSettings(host="el72h1", oracle_home="/u01/app/19.0.0/grid"))
    rows = asmcmd.group_zero(["/dev/nvme1n1", "/dev/nvme0n1"])
    assert [(r["INST_ID"], r["PATH"], r["HEADER_STATUS"]) for r in rows] == [
        (1, "/dev/nvme1n1", "CANDIDATE"),
        (2, "/dev/nvme1n1", "CANDIDATE"),
    ]
    assert asmcmd.snapshot([], [])["disks"] == []


@pytest.mark.parametrize("lib_dir", [None, "/opt/oracle/instantclient_19_25"])
def test_thick_mode_reaches_init_oracle_client(lib_dir: str | None) -> None:
    seen: list[dict[str, Any]] = []

    class Driver:
        Error = RuntimeError

        @staticmethod
        def init_oracle_client(**kwargs: Any) -> None:
            seen.append(kwargs)

    sql.init_driver("thin", lib_dir, driver=Driver)
    assert seen == []
    sql.init_driver("thick", lib_dir, driver=Driver)
    assert seen == [{"lib_dir": lib_dir} if lib_dir else {}]


def test_thick_mode_without_a_client_library_is_one_line() -> None:
    # The real python-oracledb, in a fresh process (thick mode cannot be undone), with no Oracle Client installed.
    code = (
        "from pytest_fabricqa.oracle.sql import init_driver, OracleConfigError\n"
        "try:\n    init_driver('thick', '/nonexistent/instantclient')\n"
        "except OracleConfigError as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.count("\n") == 1, out
    assert out.startswith("database.driver_mode thick: no usable Oracle Client library in lib_dir /nonexistent/")
    assert "DPI-1047" in out and "set database.lib_dir" in out and "http" not in out
