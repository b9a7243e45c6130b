"""Oracle RAC: the database's view of the storage, before and after the I/O (seed 000).

Runs only when the lab declares a ``database`` (a live Oracle RAC); otherwise these cases are deselected and the
run says plainly that the Oracle checks were not exercised. ASM health is read with python-oracledb (thin mode,
SYSASM) or, when the lab names ``asmcmd``, with asmcmd over SSH; CALIBRATE_IO runs as SYSDBA.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.oracle.health import check_asm_health
from pytest_fabricqa.oracle.settings import OracleSettings
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.oracle_live

Snapshot = dict[str, list[dict[str, Any]]]
_BEFORE: dict[str, Snapshot] = {}


@pytest.fixture(scope="session")
def oracle(lab: LabModel) -> OracleSettings:
    """The lab's ``database`` section."""
    assert lab.database is not None
    return lab.database


@pytest.fixture(scope="session")
def asm_snapshot(oracle: OracleSettings, lab_hosts: dict[str, Host]) -> Callable[[], Snapshot]:
    """A function that reads GV$ASM_DISKGROUP/DISK/OPERATION now (SQL as SYSASM, or asmcmd over SSH)."""
    if oracle.asmcmd is not None and oracle.asm is None:
        from pytest_fabricqa.oracle.asmcmd import Asmcmd

        reader = Asmcmd(lab_hosts[oracle.asmcmd.host], oracle.asmcmd)
        return lambda: reader.snapshot(oracle.diskgroups)
    from pytest_fabricqa.oracle.sql import connect, read_asm_snapshot

    assert oracle.asm is not None

    def read() -> Snapshot:
        connection = connect(oracle.asm)  # type: ignore[arg-type]
        try:
            return read_asm_snapshot(connection)
        finally:
            connection.close()

    return read


@pytest.mark.fabricqa_phase("before")
def test_asm_healthy_before_io(oracle: OracleSettings, asm_snapshot: Callable[[], Snapshot]) -> None:
    """Every expected disk group is mounted on every instance with all disks online, before any fio case."""
    snapshot = asm_snapshot()
    _BEFORE["snapshot"] = snapshot
    verdict = check_asm_health(
        snapshot["diskgroups"],
        snapshot["disks"],
        snapshot["operations"],
        expected=oracle.diskgroups,
        instances=oracle.instances,
    )
    assert not verdict.failed, "\n".join(verdict.messages())


@pytest.mark.fabricqa_phase("after")
def test_asm_healthy_after_io(oracle: OracleSettings, asm_snapshot: Callable[[], Snapshot]) -> None:
    """After the fio cases: still healthy, and READ_ERRS/WRITE_ERRS did not grow during the run."""
    snapshot = asm_snapshot()
    before = _BEFORE.get("snapshot")
    verdict = check_asm_health(
        snapshot["diskgroups"],
        snapshot["disks"],
        snapshot["operations"],
        expected=oracle.diskgroups,
        instances=oracle.instances,
        before_disks=before["disks"] if before else None,
    )
    assert not verdict.failed, "\n".join(verdict.messages())


@pytest.mark.fabricqa_phase("after")
def test_calibrate_io(oracle: OracleSettings, record_property: Callable[[str, object], None]) -> None:
    """DBMS_RESOURCE_MANAGER.CALIBRATE_IO, gated by the lab's thresholds (prerequisites checked first)."""
    if oracle.calibrate is None or oracle.db is None:
        pytest.skip("the lab's database section has no calibrate/db entry")
    from pytest_fabricqa.oracle.calibrate import calibrate_io, check_prerequisites, check_thresholds
    from pytest_fabricqa.oracle.sql import connect

    connection = connect(oracle.db, mode="sysdba")
    try:
        missing = check_prerequisites(connection)
        assert not missing, "CALIBRATE_IO prerequisites missing: " + "; ".join(missing)
        result = calibrate_io(
            connection,
            num_physical_disks=oracle.calibrate.num_physical_disks,
            max_latency_ms=oracle.calibrate.max_latency_ms,
            timeout_s=oracle.calibrate.timeout_s,
        )
    finally:
        connection.close()
    record_property("calibrate_max_iops", result.max_iops)
    record_property("calibrate_max_mbps", result.max_mbps)
    record_property("calibrate_actual_latency_ms", result.actual_latency_ms)
    violations = check_thresholds(result, oracle.calibrate.thresholds)
    assert not violations, "\n".join(violations)
