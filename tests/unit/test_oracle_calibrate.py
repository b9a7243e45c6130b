"""CALIBRATE_IO: prerequisites named one by one, the call's OUT parameters and timeout, and the gates.

Runs against FakeConnection (no Oracle database can run here); the live call needs a lab database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from pytest_fabricqa.lab.database import CalibrateThresholds
from pytest_fabricqa.oracle import calibrate
from pytest_fabricqa.oracle.calibrate import (
    CalibrationPrerequisiteError,
    CalibrationResult,
    calibrate_io,
    check_prerequisites,
    check_thresholds,
)
from pytest_fabricqa.oracle.fake import FakeConnection, FakeResult


def _database(
    timed: str = "TRUE",
    disk_asynch: str = "TRUE",
    filesystemio: str = "none",
    asynch_io: Sequence[str] = ("ASYNC_ON", "ASYNC_ON"),
    status: str = "READY",
    measured: tuple[int, int, int] = (135540, 4200, 0),
) -> FakeConnection:
    seen: dict[str, Any] = {}

    def procedure(inputs: Sequence[Any]) -> Sequence[Any]:
        seen["inputs"] = tuple(inputs)
        return measured

    connection = FakeConnection(
        tables={
            "FROM V$PARAMETER": FakeResult(
                ["NAME", "VALUE"],
                [("timed_statistics", timed), ("disk_asynch_io", disk_asynch), ("filesystemio_options", filesystemio)],
            ),
            "FROM V$DATAFILE F, V$IOSTAT_FILE I": FakeResult(
                ["NAME", "ASYNCH_IO"], [(f"+NVME/ORCL/DATAFILE/f{n}.dbf", a) for n, a in enumerate(asynch_io)]
            ),
            "FROM V$IO_CALIBRATION_STATUS": FakeResult(["STATUS"], [(status,)]),
        },
        procedures={calibrate.PROCEDURE: procedure},
    )
    return connection


def test_all_prerequisites_met() -> None:
    assert check_prerequisites(_database()) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"timed": "FALSE"}, "TIMED_STATISTICS is FALSE"),
        ({"disk_asynch": "FALSE"}, "DISK_ASYNCH_IO is FALSE"),
        ({"asynch_io": ("ASYNC_ON", "ASYNC_OFF"), "filesystemio": "none"}, "FILESYSTEMIO_OPTIONS is NONE"),
        ({"asynch_io": ()}, "lists no data files"),
        ({"status": "IN PROGRESS"}, "already in progress"),
    ],
)
def test_each_missing_prerequisite_is_named(change: dict[str, Any], named: str) -> None:
    (message,) = check_prerequisites(_database(**change))
    assert named in message


def test_several_missing_prerequisites_are_all_listed_and_nothing_runs() -> None:
    connection = _database(timed="FALSE", status="IN PROGRESS")
    with pytest.raises(CalibrationPrerequisiteError) as error:
        calibrate_io(connection, num_physical_disks=2, max_latency_ms=20)
    assert len(error.value.missing) == 2
    assert connection.calls == []


def test_calibrate_io_passes_inputs_reads_out_parameters_and_restores_the_timeout() -> None:
    connection = _database(measured=(135540, 4200, 1))
    connection.call_timeout = 5000
    result = calibrate_io(connection, num_physical_disks=2, max_latency_ms=10, timeout_s=1800)
    assert result == CalibrationResult(
        max_iops=135540, max_mbps=4200, actual_latency_ms=1, num_physical_disks=2, max_latency_ms=10
    )
    # The procedure ran with a 30-minute call timeout, and the connection got its own back.
    assert connection.calls == [(calibrate.PROCEDURE, (2, 10), 1_800_000)]
    assert connection.call_timeout == 5000


def test_the_timeout_is_restored_when_the_call_fails() -> None:
    connection = _database()

    def failing(inputs: Sequence[Any]) -> Sequence[Any]:
        raise RuntimeError("ORA-56708: Could not find any datafiles with asynchronous i/o capability")

    connection.procedures = {calibrate.PROCEDURE: failing}
    with pytest.raises(RuntimeError, match="ORA-56708"):
        calibrate_io(connection, num_physical_disks=1, max_latency_ms=20, check=False)
    assert connection.call_timeout == 0


@pytest.mark.parametrize(
    ("thresholds", "messages"),
    [
        (CalibrateThresholds(), []),
        (CalibrateThresholds(min_iops=100000, min_mbps=4000, max_latency_ms=2), []),
        (
            CalibrateThresholds(min_iops=200000),
            ["CALIBRATE_IO max_iops 135540 IOPS is below the minimum 200000 IOPS."],
        ),
        (
            CalibrateThresholds(min_mbps=4500, max_latency_ms=0),
            [
                "CALIBRATE_IO max_mbps 4200 MB/s is below the minimum 4500 MB/s.",
                "CALIBRATE_IO actual_latency 1 ms is above the maximum 0 ms.",
            ],
        ),
    ],
)
def test_thresholds(thresholds: CalibrateThresholds, messages: list[str]) -> None:
    result = CalibrationResult(135540, 4200, 1, num_physical_disks=2, max_latency_ms=20)
    assert check_thresholds(result, thresholds) == messages
