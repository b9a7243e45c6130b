"""ASM health rules, table-driven over every documented value of each column they read."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pytest_fabricqa.oracle import health
from pytest_fabricqa.oracle.health import Severity, check_asm_health

Rows = list[dict[str, Any]]


def _snapshot(view: str = "asm") -> dict[str, Rows]:
    """Seed 000's lab as two RAC instances see it: NVME (external, two disks) and OCR (normal)."""
    state = "MOUNTED" if view == "asm" else "CONNECTED"
    mount = "CACHED" if view == "asm" else "OPENED"
    groups: Rows = []
    disks: Rows = []
    for inst in (1, 2):
        groups.append(
            {
                "INST_ID": inst,
                "GROUP_NUMBER": 1,
                "NAME": "NVME",
                "STATE": state,
                "TYPE": "EXTERN",
                "TOTAL_MB": 2289440,
                "FREE_MB": 2287112,
                "USABLE_FILE_MB": 2287112,
                "OFFLINE_DISKS": 0,
            }
        )
        groups.append(
            {
                "INST_ID": inst,
                "GROUP_NUMBER": 2,
                "NAME": "OCR",
                "STATE": state,
                "TYPE": "NORMAL",
                "TOTAL_MB": 30717,
                "FREE_MB": 29820,
                "USABLE_FILE_MB": 9790,
                "OFFLINE_DISKS": 0,
            }
        )
        for number, path in ((0, "/dev/nvme0n1"), (1, "/dev/nvme1n1")):
            disks.append(
                {
                    "INST_ID": inst,
                    "GROUP_NUMBER": 1,
                    "DISK_NUMBER": number,
                    "NAME": f"NVME_000{number}",
                    "PATH": path,
                    "MODE_STATUS": "ONLINE",
                    "MOUNT_STATUS": mount,
                    "STATE": "NORMAL",
                    "HEADER_STATUS": "MEMBER",
                    "REPAIR_TIMER": 0,
                    "READ_ERRS": 0,
                    "WRITE_ERRS": 0,
                }
            )
        # A candidate disk in no group: must be ignored.
        disks.append(
            {
                "INST_ID": inst,
                "GROUP_NUMBER": 0,
                "DISK_NUMBER": 0,
                "NAME": "",
                "PATH": "/dev/sdq",
                "MODE_STATUS": "ONLINE",
                "MOUNT_STATUS": "CLOSED",
                "STATE": "NORMAL",
                "HEADER_STATUS": "CANDIDATE",
                "REPAIR_TIMER": 0,
                "READ_ERRS": 0,
                "WRITE_ERRS": 0,
            }
        )
    return {"diskgroups": groups, "disks": disks, "operations": []}


def _verdict(snap: dict[str, Rows], view: str = "asm", **kwargs: Any) -> health.HealthVerdict:
    return check_asm_health(
        snap["diskgroups"],
        snap["disks"],
        snap["operations"],
        expected=["NVME"],
        view=view,
        **kwargs,  # type: ignore[arg-type]
    )


def _set_disk(snap: dict[str, Rows], column: str, value: object, inst: int = 2, path: str = "/dev/nvme1n1") -> None:
    for row in snap["disks"]:
        if row["INST_ID"] == inst and row["PATH"] == path:
            row[column] = value


@pytest.mark.parametrize("view", ["asm", "database"])
def test_a_healthy_lab_has_no_problem(view: str) -> None:
    verdict = _verdict(_snapshot(view), view=view)
    assert verdict.healthy and not verdict.failed and verdict.messages() == []


DISKGROUP_STATE_EXPECTED = {
    # value: (problem in the ASM view?, problem in the database view?)
    "MOUNTED": (False, True),
    "CONNECTED": (True, False),
    "BROKEN": (True, True),
    "DISMOUNTED": (True, True),
    "QUIESCING": (True, True),
    "RESTRICTED": (True, True),
    "UNKNOWN": (True, True),
}


def test_the_state_table_covers_every_documented_value() -> None:
    assert set(DISKGROUP_STATE_EXPECTED) == set(health.DISKGROUP_STATES)


@pytest.mark.parametrize("view", ["asm", "database"])
@pytest.mark.parametrize("state", health.DISKGROUP_STATES)
def test_diskgroup_state(view: str, state: str) -> None:
    snap = _snapshot(view)
    snap["diskgroups"][2]["STATE"] = state  # NVME on instance 2
    verdict = _verdict(snap, view=view)
    expect_problem = DISKGROUP_STATE_EXPECTED[state][0 if view == "asm" else 1]
    assert verdict.failed is expect_problem
    if expect_problem:
        (problem,) = verdict.problems
        assert problem.rule == "diskgroup-state" and problem.severity is Severity.HARD
        assert f"Disk group NVME is in state {state} on instance 2" in problem.message
        assert problem.instance == 2 and problem.diskgroup == "NVME"


def test_an_undocumented_diskgroup_state_is_a_hard_problem() -> None:
    snap = _snapshot()
    snap["diskgroups"][0]["STATE"] = "SLEEPING"
    assert "undocumented state" in _verdict(snap).hard[0].message


@pytest.mark.parametrize("offline", [0, 1, 2])
def test_offline_disks(offline: int) -> None:
    snap = _snapshot()
    snap["diskgroups"][0]["OFFLINE_DISKS"] = offline
    verdict = _verdict(snap)
    assert verdict.failed is (offline > 0)
    if offline:
        assert f"Disk group NVME has {offline} offline disk(s) on instance 1" in verdict.messages()[0]


@pytest.mark.parametrize("kind", health.DISKGROUP_TYPES)
@pytest.mark.parametrize("usable", [-1, 0, 1024])
def test_usable_file_mb_only_matters_for_normal_and_high(kind: str, usable: int) -> None:
    snap = _snapshot()
    snap["diskgroups"][0].update(TYPE=kind, USABLE_FILE_MB=usable)
    verdict = _verdict(snap)
    flagged = kind in ("NORMAL", "HIGH") and usable < 0
    assert [p.rule for p in verdict.problems] == (["diskgroup-usable-file-mb"] if flagged else [])
    if flagged:
        assert verdict.problems[0].severity is Severity.SOFT
        assert f"{kind} redundancy) has USABLE_FILE_MB -1 MB on instance 1" in verdict.messages()[0]


MODE_EXPECTED = {"ONLINE": None, "SYNCING": Severity.SOFT, "OFFLINE": Severity.HARD, "UNKNOWN": Severity.HARD}
MOUNT_EXPECTED_ASM = {s: (None if s == "CACHED" else Severity.HARD) for s in health.DISK_MOUNT_STATUSES}
MOUNT_EXPECTED_DB = {s: (None if s == "OPENED" else Severity.HARD) for s in health.DISK_MOUNT_STATUSES}
STATE_EXPECTED = {
    "NORMAL": None,
    "ADDING": Severity.SOFT,
    "DROPPING": Severity.SOFT,
    "HUNG": Severity.HARD,
    "FORCING": Severity.HARD,
    "DROPPED": Severity.HARD,
    "UNKNOWN": Severity.HARD,
}
HEADER_EXPECTED_ASM = {s: (None if s == "MEMBER" else Severity.HARD) for s in health.DISK_HEADER_STATUSES}
HEADER_EXPECTED_DB = {s: (None if s in ("MEMBER", "UNKNOWN") else Severity.HARD) for s in health.DISK_HEADER_STATUSES}

DISK_COLUMN_CASES = [
    ("MODE_STATUS", "asm", MODE_EXPECTED, "disk-mode-status", "expected ONLINE"),
    ("MOUNT_STATUS", "asm", MOUNT_EXPECTED_ASM, "disk-mount-status", "expected CACHED"),
    ("MOUNT_STATUS", "database", MOUNT_EXPECTED_DB, "disk-mount-status", "expected OPENED"),
    ("STATE", "asm", STATE_EXPECTED, "disk-state", "expected NORMAL"),
    ("HEADER_STATUS", "asm", HEADER_EXPECTED_ASM, "disk-header-status", "expected MEMBER"),
    ("HEADER_STATUS", "database", HEADER_EXPECTED_DB, "disk-header-status", "expected MEMBER"),
]


def test_disk_tables_cover_every_documented_value() -> None:
    assert set(MODE_EXPECTED) == set(health.DISK_MODE_STATUSES)
    assert set(STATE_EXPECTED) == set(health.DISK_STATES)


@pytest.mark.parametrize(
    ("column", "view", "value", "severity", "rule", "expected"),
    [
        (column, view, value, severity, rule, expected)
        for column, view, table, rule, expected in DISK_COLUMN_CASES
        for value, severity in table.items()
    ],
    ids=lambda v: str(v) if isinstance(v, str) else None,
)
def test_disk_column(column: str, view: str, value: str, severity: Severity | None, rule: str, expected: str) -> None:
    snap = _snapshot(view)
    _set_disk(snap, column, value)
    verdict = _verdict(snap, view=view)
    if severity is None:
        assert verdict.healthy, verdict.messages()
        return
    (problem,) = verdict.problems
    assert (problem.rule, problem.severity) == (rule, severity)
    assert problem.message == (
        f"Disk NVME_0001 (/dev/nvme1n1) of disk group NVME on instance 2 has {column} {value}, {expected}."
    )
    assert (problem.diskgroup, problem.disk, problem.instance) == ("NVME", "NVME_0001 (/dev/nvme1n1)", 2)


@pytest.mark.parametrize("timer", [0, 1, 3600])
def test_repair_timer(timer: int) -> None:
    snap = _snapshot()
    _set_disk(snap, "REPAIR_TIMER", timer)
    verdict = _verdict(snap)
    assert verdict.failed is (timer > 0)
    if timer:
        assert f"has REPAIR_TIMER {timer} s" in verdict.messages()[0]


OPERATION_EXPECTED = {
    "WAIT": ("operation-running", Severity.SOFT),
    "EST": ("operation-running", Severity.SOFT),
    "RUN": ("operation-running", Severity.SOFT),
    "REAP": ("operation-running", Severity.SOFT),
    "DONE": None,
    "HALT": ("operation-halted", Severity.SOFT),
    "ERRS": ("operation-error", Severity.HARD),
    "ERRORS": ("operation-error", Severity.HARD),
}


def test_operation_table_covers_every_documented_state() -> None:
    assert set(OPERATION_EXPECTED) == set(health.OPERATION_STATES)


@pytest.mark.parametrize("state", health.OPERATION_STATES)
def test_operation_state(state: str) -> None:
    snap = _snapshot()
    # CHAR(5) comes back blank-padded; PASS names the operation from 12.1 on.
    snap["operations"] = [
        {"INST_ID": 1, "GROUP_NUMBER": 1, "OPERATION": "REBAL", "PASS": "REBALANCE", "STATE": state, "ERROR_CODE": None}
    ]
    verdict = _verdict(snap)
    expected = OPERATION_EXPECTED[state]
    if expected is None:
        assert verdict.healthy
        return
    (problem,) = verdict.problems
    assert (problem.rule, problem.severity) == expected
    assert "REBALANCE" in problem.message and "disk group NVME on instance 1" in problem.message


def test_an_error_code_is_a_hard_failure_whatever_the_state() -> None:
    snap = _snapshot()
    snap["operations"] = [
        {"INST_ID": 1, "GROUP_NUMBER": 1, "OPERATION": "REBAL", "STATE": "RUN", "ERROR_CODE": "ORA-15041"}
    ]
    (problem,) = _verdict(snap).hard
    assert "with error ORA-15041" in problem.message


def test_asmcmd_operations_are_matched_by_group_name() -> None:
    snap = _snapshot()
    snap["operations"] = [
        {"GROUP_NAME": "NVME", "OPERATION": "REBAL ", "STATE": "RUN", "POWER": 4},
        {"GROUP_NAME": "OCR", "OPERATION": "REBAL", "STATE": "ERRS"},
    ]
    verdict = _verdict(snap)
    assert [p.rule for p in verdict.problems] == ["operation-running"]  # OCR is not an expected group


def test_a_diskgroup_missing_on_an_instance_is_named() -> None:
    snap = _snapshot()
    snap["diskgroups"] = [r for r in snap["diskgroups"] if not (r["INST_ID"] == 2 and r["NAME"] == "NVME")]
    (problem,) = _verdict(snap).problems
    assert problem.message.startswith("Disk group NVME is not listed on instance 2")


def test_an_instance_that_reports_nothing_is_caught_when_instances_are_declared() -> None:
    snap = _snapshot()
    assert _verdict(snap).healthy
    verdict = _verdict(snap, instances=[1, 2, 3])
    assert [p.instance for p in verdict.problems] == [3]


def test_no_rows_at_all_is_a_failure() -> None:
    verdict = check_asm_health([], [], [], expected=["NVME"])
    assert verdict.failed and "not listed on any instance" in verdict.messages()[0]


@pytest.mark.parametrize("column", ["READ_ERRS", "WRITE_ERRS"])
@pytest.mark.parametrize(("before", "after"), [(0, 0), (3, 3), (0, 2), (5, 6)])
def test_io_errors_must_not_grow_during_the_run(column: str, before: int, after: int) -> None:
    earlier = _snapshot()
    _set_disk(earlier, column, before, inst=1, path="/dev/nvme0n1")
    later = copy.deepcopy(earlier)
    _set_disk(later, column, after, inst=1, path="/dev/nvme0n1")
    verdict = _verdict(later, before_disks=earlier["disks"])
    if after == before:
        assert verdict.healthy
        return
    (problem,) = verdict.hard
    what = "read" if column == "READ_ERRS" else "write"
    assert problem.message == (
        f"Disk NVME_0000 (/dev/nvme0n1) of disk group NVME on instance 1 had {after - before} new {what} "
        f"error(s) during the run ({column} {before} -> {after})."
    )


def test_problems_in_other_disk_groups_are_not_reported() -> None:
    snap = _snapshot()
    snap["diskgroups"][1]["STATE"] = "DISMOUNTED"  # OCR on instance 1
    assert _verdict(snap).healthy
    assert not check_asm_health(snap["diskgroups"], snap["disks"], expected=["NVME", "OCR"]).healthy
