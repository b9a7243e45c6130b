"""Oracle RAC: the database's view of the storage, before and after the I/O (seed 000).

Runs only when the lab declares a ``database`` (a live Oracle RAC); otherwise these cases are deselected and the
run says plainly that the Oracle checks were not exercised. ASM health is read with python-oracledb (thin mode by
default, thick with ``driver_mode: thick``; SYSASM) or, when the lab names ``asmcmd``, with asmcmd over SSH;
CALIBRATE_IO runs as SYSDBA. Group-0 rows of the lab's devices are read too: a member whose header the I/O
overwrote leaves its group for group 0, and that is the damage seed 000 suffered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_fabricqa.lab.database import OracleSettings
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.oracle.health import check_asm_health
from pytest_fabricqa.report import model as rm
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.oracle_live

Snapshot = dict[str, list[dict[str, Any]]]
_BEFORE: dict[str, Snapshot] = {}


@pytest.fixture(scope="session")
def oracle(lab: LabModel) -> OracleSettings:
    """The lab's ``database`` section, with python-oracledb in the driver mode it names (thin by default)."""
    assert lab.database is not None
    if lab.database.driver_mode == "thick":
        from pytest_fabricqa.oracle.sql import OracleConfigError, init_driver

        try:
            init_driver(lab.database.driver_mode, lab.database.lib_dir)
        except OracleConfigError as exc:
            pytest.fail(str(exc), pytrace=False)
    return lab.database


def _watched_paths(oracle: OracleSettings) -> list[str]:
    """The lab's devices as ASM sees them, and every member path the "before" snapshot saw."""
    before = _BEFORE.get("snapshot", {}).get("disks", [])
    members = [str(r.get("PATH") or "") for r in before if r.get("GROUP_NUMBER")]
    return list(dict.fromkeys([*oracle.disk_paths, *(p for p in members if p)]))


@pytest.fixture(scope="session")
def asm_snapshot(oracle: OracleSettings, lab_hosts: dict[str, Host]) -> Callable[[], Snapshot]:
    """A function that reads GV$ASM_DISKGROUP/DISK/OPERATION now (SQL as SYSASM, or asmcmd over SSH), with the
    group-0 rows of the lab's devices."""
    if oracle.asmcmd is not None and oracle.asm is None:
        from pytest_fabricqa.oracle.asmcmd import Asmcmd

        reader = Asmcmd(lab_hosts[oracle.asmcmd.host], oracle.asmcmd)
        return lambda: reader.snapshot(oracle.diskgroups, _watched_paths(oracle))
    from pytest_fabricqa.oracle.sql import connect, read_asm_snapshot

    assert oracle.asm is not None

    def read() -> Snapshot:
        connection = connect(oracle.asm)  # type: ignore[arg-type]
        try:
            return read_asm_snapshot(connection, _watched_paths(oracle))
        finally:
            connection.close()

    return read


@pytest.mark.fabricqa_phase("before")
def test_asm_healthy_before_io(oracle: OracleSettings, asm_snapshot: Callable[[], Snapshot]) -> None:
    """Every expected disk group is mounted on every instance with all disks online and no rebalance running,
    before any fio case (figures taken during a rebalance are no baseline)."""
    snapshot = asm_snapshot()
    _BEFORE["snapshot"] = snapshot
    verdict = check_asm_health(
        snapshot["diskgroups"],
        snapshot["disks"],
        snapshot["operations"],
        expected=oracle.diskgroups,
        instances=oracle.instances,
        lab_paths=oracle.disk_paths,
        baseline=True,
    )
    assert not verdict.failed, "\n".join(verdict.messages())


@pytest.mark.fabricqa_phase("after")
def test_asm_healthy_after_io(oracle: OracleSettings, asm_snapshot: Callable[[], Snapshot]) -> None:
    """After the fio cases: still healthy, the same disks and TOTAL_MB per group, no lab device fallen into group 0,
    and READ_ERRS/WRITE_ERRS did not grow during the run."""
    snapshot = asm_snapshot()
    before = _BEFORE.get("snapshot")
    verdict = check_asm_health(
        snapshot["diskgroups"],
        snapshot["disks"],
        snapshot["operations"],
        expected=oracle.diskgroups,
        instances=oracle.instances,
        before_disks=before["disks"] if before else None,
        before_diskgroups=before["diskgroups"] if before else None,
        lab_paths=oracle.disk_paths,
    )
    assert not verdict.failed, "\n".join(verdict.messages())


@pytest.mark.fabricqa_phase("after")
def test_calibrate_io(oracle: OracleSettings, fabricqa_report: Any, request: pytest.FixtureRequest) -> None:
    """DBMS_RESOURCE_MANAGER.CALIBRATE_IO, gated by the lab's thresholds (prerequisites checked first); its
    figures and inputs go to the report's CALIBRATE_IO table."""
    if oracle.calibrate is None or oracle.db is None:
        pytest.skip("the lab's database section has no calibrate/db entry")
    from dataclasses import asdict

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
    violations = check_thresholds(result, oracle.calibrate.thresholds)
    case = rm.Case(
        nodeid=request.node.nodeid, case_id="oracle-calibrate-io", suite="oracle", verdict="passed",
        violations=tuple(violations), extras={"calibrate_io": asdict(result)},
    )  # fmt: skip
    fabricqa_report.record(case, request)
    assert not violations, "\n".join(violations)


@pytest.mark.fabricqa_phase("after")
def test_database_waits(
    oracle: OracleSettings, lab_hosts: dict[str, Host], fabricqa_report: Any, request: pytest.FixtureRequest
) -> None:
    """The database's own wait events around a load, per instance, as AWR shows them (issue 32, item 4): every
    instance's GV$SYSTEM_EVENT and GV$EVENT_HISTOGRAM read before and after the lab's load (``database.waits``:
    its command on its host, or its window), the deltas' waits, average, 99th percentile and longest wait per
    event, gated by the lab's per-event limits, in the report's "as AWR shows it" table per instance. An instance
    that restarted in between is said and not counted."""
    if oracle.waits is None or oracle.db is None:
        pytest.skip("the lab's database section has no waits/db entry")
    import time

    from pytest_fabricqa.oracle import waits
    from pytest_fabricqa.oracle.sql import connect

    settings = oracle.waits
    connection = connect(oracle.db, mode="sysdba")
    try:
        before = waits.snapshot(connection, settings.events)
        if settings.command is not None:
            assert settings.host is not None
            lab_hosts[settings.host].run(["sh", "-c", settings.command], timeout=settings.timeout_s)
        else:
            time.sleep(settings.window_s)
        after = waits.snapshot(connection, settings.events)
    finally:
        connection.close()
    result = waits.delta(before, after, settings.events)
    problems, notes = waits.judge(result, settings.limits)
    case = rm.Case(
        nodeid=request.node.nodeid, case_id="oracle-database-waits", suite="oracle", verdict="passed",
        violations=tuple(problems),
        extras={"database_waits": waits.table(result), "database_waits_notes": notes},
    )  # fmt: skip
    fabricqa_report.record(case, request)
    assert not problems, "\n".join(problems)
