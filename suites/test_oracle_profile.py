"""The database's own I/O mix from every node at once, judged by wait event as AWR would show it (issue 32).

``test_oracle_profile`` runs the lab's ``oracle_profile`` (:mod:`pytest_fabricqa.oracle.profile`): on every
initiator at once, each on regions of the shared device that are its own, LGWR's redo writes, foreground sessions'
single-block reads, DBWR's batched writes and multiblock reads, together, for ``runtime_s``. Per node and event it
reports the waits, database-style IOPS, average, 99th percentile and longest wait, and the share of the time the
sessions waited; the lab's per-event limits (``oracle_profile.limits``) fail the case. It writes, so it runs on a
device the lab marks writable, after the data-safety guard, and only where the device holds every node's regions.
With ``oracle_profile.scaling`` (the default) it runs from the first 1, 2, ... N initiators before all of them
(seed 003's 1 to 4 nodes; lab-file order) and reports per step database IOPS, efficiency against linear
(IOPS(n) / (n x IOPS(1)), gated by ``min_scaling_efficiency`` when the lab sets one), the knee (at the lab's
``workloads.knee_gain_pct``) and each event's average and worst 99th percentile; every step is held to the per-event limits. No database is needed: this is the
database's I/O, not the database.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_fabricqa.fabric.provision import Fabric
from pytest_fabricqa.fio.parse import FioOutputError, parse_fio_output
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.measure.point import MeasurePlan
from pytest_fabricqa.oracle import profile
from pytest_fabricqa.report import model as rm
from pytest_fabricqa.safety.guard import WriteGuard
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

pytestmark = pytest.mark.loads_target


def test_oracle_profile(
    lab: LabModel, fabric: Fabric, protocol: str, lab_hosts: dict[str, Host], write_guard: WriteGuard,
    measure_plan: MeasurePlan, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """The oracle profile from every initiator at once (and, scaling, from the first 1..N-1 before), per node and
    wait event against the lab's limits."""
    settings = lab.oracle_profile
    if settings.targets and fabric.target not in settings.targets:
        pytest.skip(f"{protocol}: oracle_profile.targets names {', '.join(settings.targets)}, not {fabric.target}")
    shared = ig.shared_devices(fabric.devices)  # writable and carrying load, with each initiator's path
    if not shared:
        pytest.skip(f"{protocol}: the lab marks no device writable (targets[].devices.NAME.writable: true)")
    device = shared[0]
    nodes = [name for name in lab.hosts if name in device.paths]  # lab-file order: every run scales the same way
    needed = profile.span(settings, len(nodes))
    if needed > device.size_bytes:
        pytest.fail(
            f"{protocol}: {device.label} holds {device.size_bytes >> 20} MiB, the oracle profile needs {needed >> 20} MiB "
            f"for {len(nodes)} nodes; lower oracle_profile.data_mb or redo.region_mb in the lab file",
            pytrace=False,
        )
    write_guard.before_writes(
        protocol, [d for d in fabric.devices if d.path == device.paths.get(d.initiator)], target=fabric.target
    )
    timeout = settings.runtime_s + 180

    def run(host: Host) -> Any:
        job = profile.job_file(settings, device.paths[host.name], nodes.index(host.name))
        return host.run(["fio", "--output-format=json", "-"], stdin=job, check=False, timeout=timeout)

    problems: list[str] = []
    runs: list[tuple[tuple[str, ...], list[profile.EventFigures]]] = []
    for subset in profile.steps(nodes, settings):
        results = each([lab_hosts[name] for name in subset], run, check=False)
        step = f"{len(subset)} of {len(nodes)} nodes: " if len(subset) < len(nodes) else ""
        found: list[profile.EventFigures] = []
        for name in subset:
            outcome = results[name]
            if isinstance(outcome, BaseException):
                problems.append(f"{step}{name}: fio could not run: {outcome}")
                continue
            try:
                parsed = parse_fio_output(outcome.stdout, host=name)
            except FioOutputError as exc:
                problems.append(f"{step}{name}: fio exited {outcome.exit_code} without a report ({exc})")
                continue
            problems += [f"{step}{name}: {error}" for error in parsed.errors]
            found += profile.figures(parsed, name)
        problems += [f"{step}{p}" for p in profile.judge(found, settings.limits)]
        runs.append((subset, found))
    found = runs[-1][1]
    iops = profile.database_iops(found)
    figures: dict[str, float] = {"iops": round(iops["total"], 1)}
    extras: dict[str, Any] = {"oracle_profile": [_row(f) for f in found], "nodes": nodes}
    if len(runs) > 1:
        scaled = profile.scaling(runs, measure_plan.knee_gain_pct)
        problems += profile.scaling_violations(scaled, settings.min_scaling_efficiency)
        extras["oracle_scaling"] = [s.to_dict() for s in scaled]
        if scaled[-1].efficiency is not None:
            figures["scaling_efficiency"] = round(scaled[-1].efficiency, 3)
    case = rm.Case(
        nodeid=request.node.nodeid,
        case_id=f"{protocol}-{fabric.target}-oracle-profile",
        suite="oracle",
        verdict="passed",
        protocol=protocol,
        target=fabric.target,
        figures=figures,
        violations=tuple(problems),
        extras=extras,
    )
    fabricqa_report.record(case, request)
    assert not problems, "\n".join(problems)


def _row(f: profile.EventFigures) -> dict[str, object]:
    """One node's event as AWR would show it."""
    return {
        "node": f.node, "event": f.event, "waits": f.waits, "iops": round(f.iops, 1),
        "avg_ms": None if f.avg_ms is None else round(f.avg_ms, 3),
        "p99_ms": None if f.p99_ms is None else round(f.p99_ms, 3),
        "max_ms": None if f.max_ms is None else round(f.max_ms, 3),
        "waiting_pct": None if f.waiting_share is None else round(100 * f.waiting_share, 1),
    }  # fmt: skip
