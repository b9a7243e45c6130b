"""Read ASM health with asmcmd over a lab host (SSH), when no SQL connection to ASM is available.

asmcmd's columns differ between releases (12.2 added ``Logical_Sector`` to lsdg, ``-g`` adds ``Inst_ID``,
lsop grew ``Pass`` and estimate columns), so tables are parsed by their HEADER line, never by position,
and headers are mapped to the documented V$ view column names the health rules use. Values are located
by the column gaps shared by every line, so an empty cell (a blank Label or Product) does not shift
the cells after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.lab.database import AsmcmdSettings
from pytest_fabricqa.transport.base import CommandError, Host

Row = dict[str, object]

# asmcmd header -> V$ column. Headers not listed are upper-cased as they are.
HEADER_TO_COLUMN: dict[str, str] = {
    "Inst_ID": "INST_ID",
    "Inst_Num": "INST_ID",
    "State": "STATE",
    "Type": "TYPE",
    "Rebal": "REBAL",
    "Sector": "SECTOR_SIZE",
    "Logical_Sector": "LOGICAL_SECTOR_SIZE",
    "Block": "BLOCK_SIZE",
    "AU": "ALLOCATION_UNIT_SIZE",
    "Req_mir_free_MB": "REQUIRED_MIRROR_FREE_MB",
    "Usable_file_MB": "USABLE_FILE_MB",
    "Offline_disks": "OFFLINE_DISKS",
    "Voting_files": "VOTING_FILES",
    "Voting_File": "VOTING_FILE",
    "Group_Num": "GROUP_NUMBER",
    "Disk_Num": "DISK_NUMBER",
    "Incarn": "INCARNATION",
    "Mount_Stat": "MOUNT_STATUS",
    "Header_Stat": "HEADER_STATUS",
    "Mode_Stat": "MODE_STATUS",
    "Redund": "REDUNDANCY",
    "Write": "WRITES",
    "Group_Name": "GROUP_NAME",
    # The 12.1 documentation's lsop example heads the operation column "Dsk_Num" (values REBAL).
    "Dsk_Num": "OPERATION",
}


class AsmcmdParseError(FabricQAError):
    """asmcmd printed something that is not a table this module understands."""


def parse_table(text: str) -> list[dict[str, str]]:
    """Parse an asmcmd table into one dict per row, keyed by the header's own words.

    Column boundaries are the character positions that are blank on every line; a segment under
    several header words is split on whitespace and must then have exactly as many values.
    """
    lines = [
        line.rstrip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("ASMCMD", "Connected to"))
    ]
    if not lines:
        return []
    width = max(len(line) for line in lines)
    padded = [line.ljust(width) for line in lines]
    blank = [all(line[i] == " " for line in padded) for i in range(width)]
    segments: list[tuple[int, int]] = []
    start: int | None = None
    for i, is_blank in enumerate([*blank, True]):
        if not is_blank and start is None:
            start = i
        elif is_blank and start is not None:
            segments.append((start, i))
            start = None

    header, *body = padded
    rows: list[dict[str, str]] = []
    for line in body:
        row: dict[str, str] = {}
        for begin, end in segments:
            names = header[begin:end].split()
            cell = line[begin:end].strip()
            if not names:
                raise AsmcmdParseError(f"asmcmd value {cell!r} sits under no header: {line.strip()!r}")
            if len(names) == 1:
                row[names[0]] = cell
                continue
            values = cell.split()
            if len(values) != len(names):
                raise AsmcmdParseError(
                    f"asmcmd columns {' '.join(names)} cannot be told apart in line {line.strip()!r}"
                )
            row.update(zip(names, values, strict=True))
        rows.append(row)
    return rows


def to_view_rows(rows: Sequence[dict[str, str]]) -> list[Row]:
    """Rename asmcmd headers to V$ column names; numbers become ints, disk group names lose their '/'."""
    converted: list[Row] = []
    for row in rows:
        out: Row = {}
        for header, value in row.items():
            column = HEADER_TO_COLUMN.get(header, header.upper())
            if column in ("NAME", "GROUP_NAME"):
                out[column] = value.rstrip("/")
            elif value.lstrip("-").isdigit():
                out[column] = int(value)
            else:
                out[column] = value
        converted.append(out)
    return converted


@dataclass(frozen=True)
class Asmcmd:
    """Runs asmcmd on a lab host as the grid user, with ORACLE_SID/ORACLE_HOME set through ``env``."""

    host: Host
    settings: AsmcmdSettings
    timeout_s: float = 120.0

    def argv(self, *args: str) -> list[str]:
        """The argv: ``[sudo -n -u USER] env ORACLE_SID=.. ORACLE_HOME=.. $ORACLE_HOME/bin/asmcmd ARGS``."""
        home = self.settings.oracle_home.rstrip("/")
        command = [
            "env",
            f"ORACLE_SID={self.settings.oracle_sid}",
            f"ORACLE_HOME={home}",
            f"{home}/bin/asmcmd",
            *args,
        ]
        if self.settings.user:
            # -n: fail instead of prompting for a password over a non-interactive session.
            command = ["sudo", "-n", "-u", self.settings.user, *command]
        return command

    def table(self, *args: str) -> list[Row]:
        """Run one asmcmd listing and return its rows with V$ column names."""
        result = self.host.run(self.argv(*args), timeout=self.timeout_s)
        # asmcmd reports some failures (ASMCMD-8102 "no connection to ASM") with exit 0.
        if "ASMCMD-" in result.stdout or "ASMCMD-" in result.stderr:
            raise CommandError(result, "asmcmd reported an error")
        return to_view_rows(parse_table(result.stdout))

    def diskgroups(self) -> list[Row]:
        """``lsdg -g``: GV$ASM_DISKGROUP_STAT rows (no GROUP_NUMBER; see :meth:`snapshot`)."""
        return self.table("lsdg", "-g")

    def disks(self, diskgroup: str) -> list[Row]:
        """The disks of ``diskgroup`` joined across ``lsdsk -p``, ``-k``, ``-t`` and ``--statistics``."""
        joined: dict[tuple[object, object], Row] = {}
        for flags in (("-p",), ("-k",), ("-t",), ("--statistics",)):
            for row in self.table("lsdsk", "-g", *flags, "-G", diskgroup):
                joined.setdefault((row.get("INST_ID"), row.get("PATH")), {}).update(row)
        return list(joined.values())

    def operations(self) -> list[Row]:
        """``lsop``: V$ASM_OPERATION rows, keyed by GROUP_NAME."""
        return self.table("lsop")

    def group_zero(self, paths: Sequence[str]) -> list[Row]:
        """``lsdsk -g --discovery -p``: the group-0 rows (discovered, in no mounted group) of ``paths``.

        ``--discovery`` reads V$ASM_DISK, which discovers disks, instead of V$ASM_DISK_STAT, which lists only
        members: a disk whose header was overwritten shows only there.
        """
        wanted = set(paths)
        return [
            row
            for row in self.table("lsdsk", "-g", "--discovery", "-p")
            if row.get("GROUP_NUMBER") == 0 and str(row.get("PATH", "")) in wanted
        ]

    def snapshot(self, diskgroups: Sequence[str], paths: Sequence[str] = ()) -> dict[str, list[Row]]:
        """Disk groups, disks and operations shaped like :func:`pytest_fabricqa.oracle.sql.read_asm_snapshot`.

        lsdg prints no group number, so each disk group row takes the GROUP_NUMBER its disks report. ``paths``
        are the lab's devices as ASM sees them: their group-0 rows are added to the disks.
        """
        groups = self.diskgroups()
        disks: list[Row] = []
        for name in diskgroups:
            members = self.disks(name)
            disks.extend(members)
            numbers = {(m.get("INST_ID"), m.get("GROUP_NUMBER")) for m in members}
            for group in groups:
                if str(group.get("NAME", "")).upper() != name.upper():
                    continue
                for inst, number in numbers:
                    if inst == group.get("INST_ID") or inst is None:
                        group["GROUP_NUMBER"] = number
        if paths:
            disks.extend(self.group_zero(paths))
        return {"diskgroups": groups, "disks": disks, "operations": self.operations()}
