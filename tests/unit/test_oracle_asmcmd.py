"""asmcmd over a Host: argv shape, header-based parsing of documented output, and the health verdict.

Samples are in tests/data/oracle (see its README: documentation examples, and tables written in the
documented layout; none is a capture from a live system).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import ScriptedHost

from pytest_fabricqa.lab.database import AsmcmdSettings
from pytest_fabricqa.oracle.asmcmd import Asmcmd, AsmcmdParseError, parse_table, to_view_rows
from pytest_fabricqa.oracle.health import check_asm_health
from pytest_fabricqa.transport.base import CommandError

DATA = Path(__file__).resolve().parents[1] / "data" / "oracle"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_documented_lsdg_example_parses_by_header() -> None:
    (row,) = to_view_rows(parse_table(_read("lsdg_oda_doc.txt")))
    assert row == {
        "STATE": "MOUNTED",
        "TYPE": "NORMAL",
        "REBAL": "N",
        "SECTOR_SIZE": 512,
        "BLOCK_SIZE": 4096,
        "ALLOCATION_UNIT_SIZE": 4194304,
        "TOTAL_MB": 12288,
        "FREE_MB": 8835,
        "REQUIRED_MIRROR_FREE_MB": 1117,
        "USABLE_FILE_MB": 3859,
        "OFFLINE_DISKS": 0,
        "VOTING_FILES": "N",
        "NAME": "DATA",
    }


def test_newer_lsdg_with_extra_columns_parses_to_the_same_names() -> None:
    rows = to_view_rows(parse_table(_read("lsdg_g.txt")))
    assert [(r["INST_ID"], r["NAME"], r["TYPE"], r["USABLE_FILE_MB"]) for r in rows] == [
        (1, "NVME", "EXTERN", 2287112),
        (2, "NVME", "EXTERN", 2287112),
        (1, "OCR", "NORMAL", 9790),
        (2, "OCR", "NORMAL", 9790),
    ]
    assert rows[0]["LOGICAL_SECTOR_SIZE"] == 512


def test_documented_lsop_example() -> None:
    (row,) = to_view_rows(parse_table(_read("lsop_doc.txt")))
    assert row == {"GROUP_NAME": "DATA", "OPERATION": "REBAL", "STATE": "WAIT", "POWER": 2}


def test_empty_cells_do_not_shift_the_columns_after_them() -> None:
    rows = parse_table(_read("lsdsk_g_k_nvme.txt"))
    assert rows[0]["Label"] == rows[0]["UDID"] == rows[0]["Product"] == ""
    assert rows[0]["Redund"] == "UNKNOWN" and rows[0]["Path"] == "/dev/nvme0n1"


def test_columns_that_cannot_be_told_apart_are_an_error() -> None:
    text = "State Type Name\nMOUNTED EXTERN DATA/ extra\n"
    with pytest.raises(AsmcmdParseError):
        parse_table(text)


def test_no_output_is_no_rows() -> None:
    assert parse_table("") == []


ASMCMD = "/u01/app/19.0.0/grid/bin/asmcmd"
LISTINGS = {
    ("lsdg", "-g"): "lsdg_g.txt",
    ("lsdsk", "-g", "-p", "-G", "NVME"): "lsdsk_g_p_nvme.txt",
    ("lsdsk", "-g", "-k", "-G", "NVME"): "lsdsk_g_k_nvme.txt",
    ("lsdsk", "-g", "-t", "-G", "NVME"): "lsdsk_g_t_nvme.txt",
    ("lsdsk", "-g", "--statistics", "-G", "NVME"): "lsdsk_g_statistics_nvme.txt",
}


def file_host(overrides: dict[str, str] | None = None) -> ScriptedHost:
    """Answers asmcmd commands with the sample files (``overrides`` replaces one by its file name)."""

    def script(argv: tuple[str, ...]) -> str:
        command = argv[argv.index(ASMCMD) + 1 :]
        name = "lsop" if command == ("lsop",) else LISTINGS[command]
        return (overrides or {}).get(name, "" if name == "lsop" else _read(name))

    return ScriptedHost("el72h1", script)


SETTINGS = AsmcmdSettings(host="el72h1", oracle_home="/u01/app/19.0.0/grid/", oracle_sid="+ASM1", user="grid")


def test_asmcmd_runs_as_the_grid_user_with_its_environment() -> None:
    host = file_host()
    Asmcmd(host, SETTINGS).diskgroups()
    assert host.commands == [
        (
            "sudo", "-n", "-u", "grid", "env", "ORACLE_SID=+ASM1", "ORACLE_HOME=/u01/app/19.0.0/grid",
            "/u01/app/19.0.0/grid/bin/asmcmd", "lsdg", "-g",
        )
    ]  # fmt: skip


def test_without_a_user_asmcmd_runs_as_the_ssh_user() -> None:
    asmcmd = Asmcmd(file_host(), AsmcmdSettings(host="el72h1", oracle_home="/u01/app/19.0.0/grid", user=None))
    assert asmcmd.argv("lsop")[0] == "env"


def test_snapshot_of_a_healthy_lab_is_healthy() -> None:
    snap = Asmcmd(file_host(), SETTINGS).snapshot(["NVME"])
    nvme = [g for g in snap["diskgroups"] if g["NAME"] == "NVME"]
    assert [g["GROUP_NUMBER"] for g in nvme] == [1, 1]
    assert len(snap["disks"]) == 4
    disk = snap["disks"][0]
    # Joined across -p, -k, -t and --statistics by instance and path.
    assert (disk["NAME"], disk["MODE_STATUS"], disk["REPAIR_TIMER"], disk["READ_ERRS"]) == ("NVME_0000", "ONLINE", 0, 0)
    verdict = check_asm_health(snap["diskgroups"], snap["disks"], snap["operations"], expected=["NVME"])
    assert verdict.healthy, verdict.messages()


def test_snapshot_with_an_offline_disk_fails_with_a_named_disk() -> None:
    broken = "      2          1         1  3915917150  MISSING     MEMBER       OFFLINE    NORMAL  /dev/nvme1n1"
    healthy = "      2          1         1  3915917150  CACHED      MEMBER       ONLINE     NORMAL  /dev/nvme1n1"
    lsdsk_p = _read("lsdsk_g_p_nvme.txt")
    assert healthy in lsdsk_p
    lsop = "Group_Name  Dsk_Num  State  Power\nNVME        REBAL    RUN    4\n"
    host = file_host({"lsdsk_g_p_nvme.txt": lsdsk_p.replace(healthy, broken), "lsop": lsop})
    snap = Asmcmd(host, SETTINGS).snapshot(["NVME"])
    verdict = check_asm_health(snap["diskgroups"], snap["disks"], snap["operations"], expected=["NVME"])
    assert verdict.messages() == [
        "Disk NVME_0001 (/dev/nvme1n1) of disk group NVME on instance 2 has MODE_STATUS OFFLINE, expected ONLINE.",
        "Disk NVME_0001 (/dev/nvme1n1) of disk group NVME on instance 2 has MOUNT_STATUS MISSING, expected CACHED.",
        "A REBAL is in progress on disk group NVME on instance 1 (state RUN): I/O figures measured now include "
        "its traffic.",
    ]
    assert [p.severity.value for p in verdict.problems] == ["hard", "hard", "soft"]


def test_asmcmd_errors_printed_with_exit_0_are_raised() -> None:
    host = ScriptedHost("el72h1", lambda argv: (0, "", "ASMCMD-08102: no connection to Oracle ASM"))
    with pytest.raises(CommandError, match="asmcmd reported an error"):
        Asmcmd(host, SETTINGS).operations()
