"""DBMS_RESOURCE_MANAGER.CALIBRATE_IO: prerequisites, the call itself, and gates on its result.

CALIBRATE_IO runs in a database instance (not ASM) as SYSDBA. Oracle documents its prerequisites:
TIMED_STATISTICS = TRUE, asynchronous I/O for the data files (DISK_ASYNCH_IO = TRUE, and
FILESYSTEMIO_OPTIONS = SETALL or ASYNCH when data files live on a file system; V$IOSTAT_FILE.ASYNCH_IO
shows the result per file), and only one calibration at a time (V$IO_CALIBRATION_STATUS). Each missing
prerequisite is named before anything runs, because a calibration takes many minutes to fail otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.lab.database import CalibrateThresholds
from pytest_fabricqa.oracle.sql import query

PROCEDURE = "DBMS_RESOURCE_MANAGER.CALIBRATE_IO"

_PARAMETERS_SQL = (
    "SELECT NAME, VALUE FROM V$PARAMETER WHERE NAME IN ('timed_statistics', 'disk_asynch_io', 'filesystemio_options')"
)
_DATAFILE_ASYNC_SQL = (
    "SELECT F.NAME, I.ASYNCH_IO FROM V$DATAFILE F, V$IOSTAT_FILE I "
    "WHERE F.FILE# = I.FILE_NO AND I.FILETYPE_NAME = 'Data File'"
)
_STATUS_SQL = "SELECT STATUS FROM V$IO_CALIBRATION_STATUS"


class CalibrationPrerequisiteError(FabricQAError):
    """CALIBRATE_IO cannot run: every missing prerequisite is listed."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        super().__init__("CALIBRATE_IO prerequisites are missing: " + " ".join(missing))


@dataclass(frozen=True)
class CalibrationResult:
    """What CALIBRATE_IO measured, with the inputs it was given."""

    max_iops: int
    max_mbps: int
    actual_latency_ms: int
    num_physical_disks: int
    max_latency_ms: int


def check_prerequisites(connection: Any) -> list[str]:
    """Return one sentence per missing CALIBRATE_IO prerequisite (empty when all are met)."""
    missing: list[str] = []
    rows = query(connection, _PARAMETERS_SQL)
    params = {str(r["NAME"]).lower(): str(r["VALUE"] or "").upper() for r in rows}

    timed = params.get("timed_statistics", "")
    if timed != "TRUE":
        missing.append(
            f"TIMED_STATISTICS is {timed or 'unset'}; CALIBRATE_IO needs TRUE "
            "(ALTER SYSTEM SET timed_statistics = TRUE)."
        )
    asynch = params.get("disk_asynch_io", "")
    if asynch != "TRUE":
        missing.append(
            f"DISK_ASYNCH_IO is {asynch or 'unset'}; CALIBRATE_IO needs asynchronous I/O "
            "(ALTER SYSTEM SET disk_asynch_io = TRUE SCOPE=SPFILE, then restart)."
        )

    files = query(connection, _DATAFILE_ASYNC_SQL)
    synchronous = [str(r["NAME"]) for r in files if str(r["ASYNCH_IO"] or "").upper() != "ASYNC_ON"]
    if synchronous:
        fsio = params.get("filesystemio_options", "") or "unset"
        missing.append(
            f"Asynchronous I/O is off for {len(synchronous)} data file(s), e.g. {synchronous[0]}; "
            f"FILESYSTEMIO_OPTIONS is {fsio}, set it to SETALL or ASYNCH for data files on a file system."
        )
    elif not files:
        missing.append("V$IOSTAT_FILE lists no data files, so asynchronous I/O cannot be confirmed.")

    statuses = [str(r["STATUS"] or "").upper() for r in query(connection, _STATUS_SQL)]
    if "IN PROGRESS" in statuses:
        missing.append(
            "A calibration is already in progress (V$IO_CALIBRATION_STATUS = IN PROGRESS); "
            "only one can run at a time on the same storage."
        )
    return missing


def calibrate_io(
    connection: Any,
    *,
    num_physical_disks: int,
    max_latency_ms: int,
    timeout_s: float = 3600.0,
    check: bool = True,
) -> CalibrationResult:
    """Run CALIBRATE_IO and return its result.

    The call takes minutes, so the connection's ``call_timeout`` (milliseconds) is raised to
    ``timeout_s`` for this call only and restored afterwards. With ``check`` the prerequisites are
    verified first and :class:`CalibrationPrerequisiteError` lists every one that is missing.
    """
    if num_physical_disks < 1 or max_latency_ms < 1:
        raise ValueError("num_physical_disks and max_latency_ms must be at least 1")
    if check:
        missing = check_prerequisites(connection)
        if missing:
            raise CalibrationPrerequisiteError(missing)
    previous_timeout = connection.call_timeout
    connection.call_timeout = int(timeout_s * 1000)
    cursor = connection.cursor()
    try:
        max_iops = cursor.var(int)
        max_mbps = cursor.var(int)
        actual_latency = cursor.var(int)
        cursor.callproc(PROCEDURE, [num_physical_disks, max_latency_ms, max_iops, max_mbps, actual_latency])
    finally:
        cursor.close()
        connection.call_timeout = previous_timeout
    return CalibrationResult(
        max_iops=int(max_iops.getvalue() or 0),
        max_mbps=int(max_mbps.getvalue() or 0),
        actual_latency_ms=int(actual_latency.getvalue() or 0),
        num_physical_disks=num_physical_disks,
        max_latency_ms=max_latency_ms,
    )


def check_thresholds(result: CalibrationResult, thresholds: CalibrateThresholds) -> list[str]:
    """Return one sentence per violated gate (empty when the result passes)."""
    messages: list[str] = []
    if thresholds.min_iops is not None and result.max_iops < thresholds.min_iops:
        messages.append(
            f"CALIBRATE_IO max_iops {result.max_iops} IOPS is below the minimum {thresholds.min_iops} IOPS."
        )
    if thresholds.min_mbps is not None and result.max_mbps < thresholds.min_mbps:
        messages.append(
            f"CALIBRATE_IO max_mbps {result.max_mbps} MB/s is below the minimum {thresholds.min_mbps} MB/s."
        )
    if thresholds.max_latency_ms is not None and result.actual_latency_ms > thresholds.max_latency_ms:
        messages.append(
            f"CALIBRATE_IO actual_latency {result.actual_latency_ms} ms is above the maximum "
            f"{thresholds.max_latency_ms} ms."
        )
    return messages
