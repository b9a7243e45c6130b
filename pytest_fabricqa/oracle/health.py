"""ASM disk group health: pure rules over rows of GV$ASM_DISKGROUP, GV$ASM_DISK and GV$ASM_OPERATION.

Rows are mappings keyed by Oracle's documented column names (INST_ID, GROUP_NUMBER, NAME, STATE, ...),
whether they came from SQL (:mod:`pytest_fabricqa.oracle.sql`) or from asmcmd
(:mod:`pytest_fabricqa.oracle.asmcmd`). Nothing here talks to a database: the verdict is a function of
the rows, so every rule is tested table-driven over every documented value of its column.

The documented values below are taken from the Oracle Database Reference (V$ASM_DISKGROUP, V$ASM_DISK,
V$ASM_OPERATION, releases 11.2 to 19c). A value outside them is reported, never silently accepted.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Row = Mapping[str, object]
View = Literal["asm", "database"]

# V$ASM_DISKGROUP.STATE. MOUNTED is normal in an ASM instance, CONNECTED in a database instance.
DISKGROUP_STATES = ("BROKEN", "CONNECTED", "DISMOUNTED", "MOUNTED", "QUIESCING", "RESTRICTED", "UNKNOWN")
# V$ASM_DISKGROUP.TYPE (FLEX and EXTEND since 12.2).
DISKGROUP_TYPES = ("EXTERN", "NORMAL", "HIGH", "FLEX", "EXTEND")
# V$ASM_DISK.MODE_STATUS.
DISK_MODE_STATUSES = ("UNKNOWN", "ONLINE", "OFFLINE", "SYNCING")
# V$ASM_DISK.MOUNT_STATUS. CACHED is normal in an ASM instance, OPENED in a database instance.
DISK_MOUNT_STATUSES = ("MISSING", "CLOSED", "OPENED", "CACHED", "IGNORED", "CLOSING")
# V$ASM_DISK.HEADER_STATUS.
DISK_HEADER_STATUSES = (
    "UNKNOWN",
    "CANDIDATE",
    "INCOMPATIBLE",
    "PROVISIONED",
    "MEMBER",
    "FORMER",
    "CONFLICT",
    "FOREIGN",
)
# V$ASM_DISK.STATE.
DISK_STATES = ("UNKNOWN", "NORMAL", "ADDING", "DROPPING", "HUNG", "FORCING", "DROPPED")
# V$ASM_OPERATION.STATE (HALT and ERRORS from 10.2/11.1, EST and DONE from 12.1).
OPERATION_STATES = ("WAIT", "EST", "RUN", "REAP", "DONE", "HALT", "ERRS", "ERRORS")

# Redundancy types where USABLE_FILE_MB is meaningful and must not go negative. For FLEX and EXTEND
# the column is 0 ("unset"), and for EXTERN there is no mirror to restore.
_MIRRORED_TYPES = frozenset({"NORMAL", "HIGH"})

# Transient disk states: an administrator is changing the group; worth a warning, not a failed run.
_SOFT_DISK_STATES = frozenset({"ADDING", "DROPPING"})
# States of an operation that is still working on the group (a rebalance skews any I/O measurement).
_ACTIVE_OPERATION_STATES = frozenset({"WAIT", "EST", "RUN", "REAP"})
_FAILED_OPERATION_STATES = frozenset({"ERRS", "ERRORS"})
# HEADER_STATUS of a discovered disk in group 0 whose header no longer names a disk group: CANDIDATE (no ASM
# header at all: overwritten or never written), FORMER (a clean drop), PROVISIONED (an ASMLib/AFD label only).
# A member whose header a raw-device write destroyed shows exactly so (seed 000).
LOST_HEADER_STATUSES = ("CANDIDATE", "FORMER", "PROVISIONED")


class Severity(enum.Enum):
    """How bad a broken rule is: HARD fails the qualification, SOFT is a warning in the report."""

    HARD = "hard"
    SOFT = "soft"


@dataclass(frozen=True)
class Problem:
    """One broken health rule, as a sentence naming the disk group, disk and instance."""

    severity: Severity
    rule: str
    message: str
    diskgroup: str | None = None
    disk: str | None = None
    instance: int | None = None


@dataclass(frozen=True)
class HealthVerdict:
    """The verdict on the expected disk groups: healthy when no rule is broken."""

    problems: tuple[Problem, ...] = field(default_factory=tuple)

    @property
    def healthy(self) -> bool:
        """True when no rule at all is broken."""
        return not self.problems

    @property
    def failed(self) -> bool:
        """True when at least one hard rule is broken."""
        return bool(self.hard)

    @property
    def hard(self) -> tuple[Problem, ...]:
        """The problems that fail the run."""
        return tuple(p for p in self.problems if p.severity is Severity.HARD)

    @property
    def soft(self) -> tuple[Problem, ...]:
        """The problems reported as warnings."""
        return tuple(p for p in self.problems if p.severity is Severity.SOFT)

    def messages(self, severity: Severity | None = None) -> list[str]:
        """The problem sentences, optionally only those of one severity."""
        return [p.message for p in self.problems if severity is None or p.severity is severity]


def _text(row: Row, column: str) -> str:
    value = row.get(column)
    # CHAR columns (OPERATION is CHAR(5)) come back blank-padded.
    return "" if value is None else str(value).strip().upper()


def _name(row: Row, column: str = "NAME") -> str:
    value = row.get(column)
    # asmcmd prints disk group names with a trailing slash (DATA/).
    return "" if value is None else str(value).strip().rstrip("/")


def _int(row: Row, column: str) -> int | None:
    value = row.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _inst(row: Row) -> int:
    # V$ views (no INST_ID) are a single instance; treat them as instance 1.
    inst = _int(row, "INST_ID")
    return 1 if inst is None else inst


def _disk_label(row: Row) -> str:
    name = _name(row)
    path = _name(row, "PATH")
    if name and path:
        return f"{name} ({path})"
    return name or path or f"disk number {_int(row, 'DISK_NUMBER')}"


def check_asm_health(
    diskgroups: Sequence[Row],
    disks: Sequence[Row],
    operations: Sequence[Row] = (),
    *,
    expected: Collection[str],
    instances: Collection[int] | None = None,
    view: View = "asm",
    before_disks: Sequence[Row] | None = None,
    before_diskgroups: Sequence[Row] | None = None,
    lab_paths: Collection[str] = (),
    baseline: bool = False,
) -> HealthVerdict:
    """Judge the health of the ``expected`` disk groups from GV$ASM_* rows.

    ``view`` says where the rows were read: ``"asm"`` (an ASM instance, where MOUNTED/CACHED are normal)
    or ``"database"`` (a database instance, where CONNECTED/OPENED are normal and HEADER_STATUS may read
    UNKNOWN because the instance never reads disk headers). ``instances`` are the INST_IDs every disk
    group must be seen on; when None, every INST_ID present in the rows.

    ``before_disks`` and ``before_diskgroups``, when given, are the snapshot taken before the I/O: READ_ERRS and
    WRITE_ERRS must not have grown since, each expected group keeps its disk count and TOTAL_MB, and a disk that
    was a member then and shows in group 0 now with a lost header (:data:`LOST_HEADER_STATUSES`) left its group
    during the run. ``lab_paths`` are the PATHs ASM sees for the lab's devices: a group-0 row of one of them is
    reported even without a before snapshot. ``baseline`` marks the snapshot taken before the I/O: an operation
    still running on an expected group then fails the phase (figures measured during a rebalance are no
    baseline), where afterwards it is only a warning.
    """
    problems: list[Problem] = []
    wanted = {name.strip().upper() for name in expected}
    normal_state = "MOUNTED" if view == "asm" else "CONNECTED"
    normal_mount = "CACHED" if view == "asm" else "OPENED"

    seen_instances = {_inst(r) for r in (*diskgroups, *disks)}
    must_see = set(instances) if instances is not None else seen_instances

    # (instance, group number) -> disk group name, to attach disks and operations to their group.
    group_names: dict[tuple[int, int], str] = {}
    found: dict[str, set[int]] = {name: set() for name in wanted}
    for row in diskgroups:
        name = _name(row).upper()
        inst = _inst(row)
        number = _int(row, "GROUP_NUMBER")
        if number is not None:
            group_names[(inst, number)] = name
        if name not in wanted:
            continue
        found[name].add(inst)
        problems.extend(_diskgroup_problems(row, name, inst, normal_state))

    for name in sorted(wanted):
        for inst in sorted(must_see - found[name]):
            problems.append(
                Problem(
                    Severity.HARD,
                    "diskgroup-missing",
                    f"Disk group {name} is not listed on instance {inst}: it is not mounted there "
                    "(or the instance is down).",
                    diskgroup=name,
                    instance=inst,
                )
            )
        if not found[name] and not must_see:
            problems.append(
                Problem(
                    Severity.HARD,
                    "diskgroup-missing",
                    f"Disk group {name} is not listed on any instance.",
                    diskgroup=name,
                )
            )

    members = [r for r in disks if _member_of(r, group_names) in wanted]
    for row in members:
        group = _member_of(row, group_names) or "?"
        problems.extend(_disk_problems(row, group, _inst(row), normal_mount, view))

    before_names = dict(group_names)
    for row in before_diskgroups or ():
        number = _int(row, "GROUP_NUMBER")
        if number is not None:
            before_names[(_inst(row), number)] = _name(row).upper()
    before_members = [r for r in before_disks or () if _member_of(r, before_names) in wanted]

    if before_disks is not None:
        problems.extend(_error_counter_problems(before_disks, members, group_names))
        problems.extend(_size_problems(before_members, members, before_names, group_names, wanted))
    if before_diskgroups is not None:
        problems.extend(_total_mb_problems(before_diskgroups, diskgroups, wanted))
    problems.extend(_group_zero_problems(disks, before_members, before_names, lab_paths))

    for row in operations:
        operation_group = _operation_group(row, group_names)
        if operation_group is not None and operation_group in wanted:
            problems.extend(_operation_problems(row, operation_group, _inst(row), baseline))

    return HealthVerdict(tuple(problems))


def _member_of(row: Row, group_names: Mapping[tuple[int, int], str]) -> str | None:
    number = _int(row, "GROUP_NUMBER")
    # Group 0 holds discovered disks that belong to no mounted group.
    if number is None or number == 0:
        return None
    return group_names.get((_inst(row), number))


def _operation_group(row: Row, group_names: Mapping[tuple[int, int], str]) -> str | None:
    # asmcmd lsop names the group; SQL gives its number.
    if _name(row, "GROUP_NAME"):
        return _name(row, "GROUP_NAME").upper()
    return _member_of(row, group_names)


def _diskgroup_problems(row: Row, name: str, inst: int, normal_state: str) -> Iterable[Problem]:
    state = _text(row, "STATE")
    if state != normal_state:
        meaning = "an undocumented state" if state not in DISKGROUP_STATES else f"state {state}"
        yield Problem(
            Severity.HARD,
            "diskgroup-state",
            f"Disk group {name} is in {meaning} on instance {inst}, expected {normal_state}.",
            diskgroup=name,
            instance=inst,
        )
    offline = _int(row, "OFFLINE_DISKS")
    if offline:
        yield Problem(
            Severity.HARD,
            "diskgroup-offline-disks",
            f"Disk group {name} has {offline} offline disk(s) on instance {inst}, expected 0.",
            diskgroup=name,
            instance=inst,
        )
    kind = _text(row, "TYPE")
    usable = _int(row, "USABLE_FILE_MB")
    if kind in _MIRRORED_TYPES and usable is not None and usable < 0:
        yield Problem(
            Severity.SOFT,
            "diskgroup-usable-file-mb",
            f"Disk group {name} ({kind} redundancy) has USABLE_FILE_MB {usable} MB on instance {inst}: "
            "it could not restore redundancy after a disk failure (expected >= 0 MB).",
            diskgroup=name,
            instance=inst,
        )
    elif kind and kind not in DISKGROUP_TYPES:
        yield Problem(
            Severity.SOFT,
            "diskgroup-type",
            f"Disk group {name} has an undocumented redundancy type {kind!r} on instance {inst}.",
            diskgroup=name,
            instance=inst,
        )


def _disk_problems(row: Row, group: str, inst: int, normal_mount: str, view: View) -> Iterable[Problem]:
    disk = _disk_label(row)
    where = f"Disk {disk} of disk group {group} on instance {inst}"

    def problem(severity: Severity, rule: str, message: str) -> Problem:
        return Problem(severity, rule, message, diskgroup=group, disk=disk, instance=inst)

    mode = _text(row, "MODE_STATUS")
    if mode != "ONLINE":
        # SYNCING is a disk coming back online: redundancy is being restored, not yet lost.
        severity = Severity.SOFT if mode == "SYNCING" else Severity.HARD
        yield problem(severity, "disk-mode-status", f"{where} has MODE_STATUS {mode or 'empty'}, expected ONLINE.")

    mount = _text(row, "MOUNT_STATUS")
    if mount != normal_mount:
        yield problem(
            Severity.HARD,
            "disk-mount-status",
            f"{where} has MOUNT_STATUS {mount or 'empty'}, expected {normal_mount}.",
        )

    state = _text(row, "STATE")
    if state != "NORMAL":
        severity = Severity.SOFT if state in _SOFT_DISK_STATES else Severity.HARD
        yield problem(severity, "disk-state", f"{where} has STATE {state or 'empty'}, expected NORMAL.")

    header = _text(row, "HEADER_STATUS")
    # A database instance does not read disk headers, so it shows UNKNOWN for healthy members.
    header_ok = header == "MEMBER" or (view == "database" and header == "UNKNOWN")
    if not header_ok:
        yield problem(
            Severity.HARD,
            "disk-header-status",
            f"{where} has HEADER_STATUS {header or 'empty'}, expected MEMBER.",
        )

    timer = _int(row, "REPAIR_TIMER")
    if timer:
        yield problem(
            Severity.HARD,
            "disk-repair-timer",
            f"{where} has REPAIR_TIMER {timer} s: it failed and will be dropped when the timer runs out (expected 0).",
        )


def _error_counter_problems(
    before: Sequence[Row], after: Sequence[Row], group_names: Mapping[tuple[int, int], str]
) -> Iterable[Problem]:
    def key(row: Row) -> tuple[int, str]:
        return (_inst(row), _name(row, "PATH") or _name(row))

    earlier = {key(r): r for r in before}
    for row in after:
        previous = earlier.get(key(row))
        if previous is None:
            continue
        group = _member_of(row, group_names) or "?"
        disk = _disk_label(row)
        inst = _inst(row)
        for column, what in (("READ_ERRS", "read"), ("WRITE_ERRS", "write")):
            old, new = _int(previous, column), _int(row, column)
            if old is not None and new is not None and new > old:
                yield Problem(
                    Severity.HARD,
                    f"disk-{what}-errors",
                    f"Disk {disk} of disk group {group} on instance {inst} had {new - old} new {what} "
                    f"error(s) during the run ({column} {old} -> {new}).",
                    diskgroup=group,
                    disk=disk,
                    instance=inst,
                )


def _path(row: Row) -> str:
    return _name(row, "PATH")


def _size_problems(
    before: Sequence[Row],
    after: Sequence[Row],
    before_names: Mapping[tuple[int, int], str],
    group_names: Mapping[tuple[int, int], str],
    wanted: Collection[str],
) -> Iterable[Problem]:
    def counts(rows: Sequence[Row], names: Mapping[tuple[int, int], str]) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for row in rows:
            key = (_member_of(row, names) or "?", _inst(row))
            out[key] = out.get(key, 0) + 1
        return out

    earlier, now = counts(before, before_names), counts(after, group_names)
    for group, inst in sorted(earlier):
        old, new = earlier[(group, inst)], now.get((group, inst), 0)
        if new == old or group not in wanted:
            continue
        severity = Severity.HARD if new < old else Severity.SOFT
        yield Problem(
            severity,
            "diskgroup-disk-count",
            f"Disk group {group} on instance {inst} had {old} disk(s) before the I/O and {new} after"
            + (": a member left the group during the run." if new < old else " (a disk was added during the run)."),
            diskgroup=group,
            instance=inst,
        )


def _total_mb_problems(before: Sequence[Row], after: Sequence[Row], wanted: Collection[str]) -> Iterable[Problem]:
    def sizes(rows: Sequence[Row]) -> dict[tuple[str, int], int]:
        return {
            (_name(r).upper(), _inst(r)): size
            for r in rows
            if _name(r).upper() in wanted and (size := _int(r, "TOTAL_MB")) is not None
        }

    earlier, now = sizes(before), sizes(after)
    for (group, inst), old in sorted(earlier.items()):
        new = now.get((group, inst))
        if new is None or new == old:
            continue  # a group no longer listed is reported as missing
        severity = Severity.HARD if new < old else Severity.SOFT
        yield Problem(
            severity,
            "diskgroup-total-mb",
            f"Disk group {group} on instance {inst} had TOTAL_MB {old} MB before the I/O and {new} MB after.",
            diskgroup=group,
            instance=inst,
        )


def _group_zero_problems(
    disks: Sequence[Row],
    before_members: Sequence[Row],
    before_names: Mapping[tuple[int, int], str],
    lab_paths: Collection[str],
) -> Iterable[Problem]:
    was_in = {(_inst(r), _path(r)): _member_of(r, before_names) or "?" for r in before_members if _path(r)}
    watched = {p.strip() for p in lab_paths if p.strip()} | {path for _, path in was_in}
    for row in disks:
        path = _path(row)
        if _int(row, "GROUP_NUMBER") != 0 or path not in watched:
            continue
        inst = _inst(row)
        header = _text(row, "HEADER_STATUS")
        left = was_in.get((inst, path))
        if left is not None and header in LOST_HEADER_STATUSES:
            yield Problem(
                Severity.HARD,
                "disk-left-group",
                f"Disk {path} left disk group {left} on instance {inst}: ASM now lists it in group 0 with "
                f"HEADER_STATUS {header}, its ASM header overwritten or the disk dropped during the run.",
                diskgroup=left,
                disk=path,
                instance=inst,
            )
        elif left is None and header in LOST_HEADER_STATUSES:
            yield Problem(
                Severity.SOFT,
                "lab-disk-in-group-zero",
                f"Lab device {path} is in no disk group on instance {inst} (group 0, HEADER_STATUS {header}).",
                disk=path,
                instance=inst,
            )


def _operation_problems(row: Row, group: str, inst: int, baseline: bool = False) -> Iterable[Problem]:
    operation = _text(row, "PASS") or _text(row, "OPERATION") or "operation"
    state = _text(row, "STATE")
    error = _text(row, "ERROR_CODE")

    def problem(severity: Severity, rule: str, message: str) -> Problem:
        return Problem(severity, rule, message, diskgroup=group, instance=inst)

    if state in _FAILED_OPERATION_STATES or error:
        detail = f" with error {error}" if error else ""
        yield problem(
            Severity.HARD,
            "operation-error",
            f"A {operation} on disk group {group} on instance {inst} stopped in state {state or 'empty'}{detail}.",
        )
    elif state in _ACTIVE_OPERATION_STATES:
        yield problem(
            Severity.HARD if baseline else Severity.SOFT,
            "operation-running",
            f"A {operation} is in progress on disk group {group} on instance {inst} (state {state}): "
            + (
                "figures measured during it are no baseline; wait for it to finish (GV$ASM_OPERATION empty)."
                if baseline
                else "I/O figures measured now include its traffic."
            ),
        )
    elif state == "HALT":
        yield problem(
            Severity.SOFT,
            "operation-halted",
            f"A {operation} on disk group {group} on instance {inst} was halted by an administrator.",
        )
    elif state not in OPERATION_STATES:
        yield problem(
            Severity.SOFT,
            "operation-state",
            f"A {operation} on disk group {group} on instance {inst} is in an undocumented state {state!r}.",
        )
