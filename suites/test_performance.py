"""Performance: the fio workloads our users run by hand (seeds 000, 001, 002), as gated cases.

Each workload runs from every initiator at once through fio's client/server mode (``fio --server`` on each
initiator, one ``--client`` per host), as seeds 000 and 003 loaded the storage from every RAC node. A case
reports each host and the total, checks the total is the sum of the hosts and that each host ran its own
random offset stream (its own fio ``randseed``, recorded per host), records the fabric's queue settings and how
far apart the hosts started (when fio reports it), measures the target's CPU during the
run and the link utilisation, and fails with every threshold it breaks. With ``workloads.samples`` (or
``--fio-samples``) a point runs k times and reports the mean and its spread, gated by ``max_rsd_pct``; with
``workloads.timeseries`` each case keeps fio's logs and a time series per host. ``test_scaling`` runs the
workloads named in ``workloads.scaling`` from 1..N initiators (seed 003). Writes go only to devices the lab marks
``writable``, and only after the data-safety guard found no ASM, filesystem, LVM or partition signature on them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pytest_fabricqa.core.scaling import efficiency_violations, scaling_points, subsets
from pytest_fabricqa.core.workloads import Workload, case_id
from pytest_fabricqa.fabric.provision import Fabric
from pytest_fabricqa.fio import FioServer, figures, run_fio, start_offsets
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.lab.thresholds import fabric_efficiency, link_utilisation, thresholds_for
from pytest_fabricqa.measure.point import MeasurePlan, Point, point_problems, run_point, write_logs
from pytest_fabricqa.measure.verdict import performance_case
from pytest_fabricqa.report import model as rm
from pytest_fabricqa.safety.guard import WriteGuard
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.loads_target


def _devices(fabric: Fabric, initiator: str, workload: Workload) -> list[str]:
    devices = [d for d in fabric.devices_on(initiator) if d.load]
    if workload.writes:
        devices = [d for d in devices if d.writable]
    return [d.path for d in devices]


def _jobs(fabric: Fabric, servers: list[FioServer], workload: Workload) -> list[tuple[FioServer, list[str]]]:
    jobs = [(server, _devices(fabric, server.name, workload)) for server in servers]
    return [(server, devices) for server, devices in jobs if devices]


def _point(
    lab: LabModel,
    lab_hosts: dict[str, Host],
    jobs: list[tuple[FioServer, list[str]]],
    workload: Workload,
    plan: MeasurePlan,
    target_host: Host | None,
    case: str,
) -> Point:
    point = run_point(lab_hosts[jobs[0][0].name], jobs, workload, plan, target=target_host, case=case)
    point.figures["link_utilisation"] = link_utilisation(point.figures["mbps"], lab.network.link_speed_gbps)
    return point


def test_fio(
    lab: LabModel,
    protocol: str,
    workload: Workload,
    fabric: Fabric,
    fio_servers: list[FioServer],
    lab_hosts: dict[str, Host],
    target_host: Host | None,
    lab_environment: dict[str, Any],
    write_guard: WriteGuard,
    fabricqa_report: Any,
    measure_plan: MeasurePlan,
    request: pytest.FixtureRequest,
) -> None:
    """One workload from every initiator at once (k samples, time series as the lab says); thresholds and the
    spread limit from the lab file; regressions against the baseline fail the case itself."""
    plan = measure_plan
    jobs = _jobs(fabric, fio_servers, workload)
    if not jobs:
        pytest.skip(f"{protocol}: the lab marks no exported device writable, so {workload.name} does not run")
    if workload.writes:
        write_guard.before_writes(protocol, fabric.devices, fabric.target)
    cid = case_id(protocol, workload, fabric.target)
    point = _point(lab, lab_hosts, jobs, workload, plan, target_host, cid)
    fabricqa_report.raw_path(cid).write_text(point.last.raw_output)
    extras: dict[str, Any] = {
        "environment": {**lab_environment, "fio_version": point.last.fio_version},
        "knee_gain_pct": plan.knee_gain_pct,
        **point.extras(),
    }
    if point.last.logs:
        kept = write_logs(fabricqa_report.raw_path(cid).with_suffix(".logs"), point.last.logs)
        extras["timeseries_files"] = [str(p.relative_to(fabricqa_report.raw_dir.parent)) for p in kept]

    limits = thresholds_for(lab.thresholds_table(), protocol, workload.name)
    case = performance_case(
        request.node.nodeid,
        lab,
        protocol,
        workload,
        point.figures,
        target=fabric.target,
        problems=point_problems(point, limits, label=workload.name),
        hosts=point.hosts,
        extras=extras,
        randseeds=point.randseeds,
        queues=fabric.queues,
        start_offsets_ms=start_offsets(point.last),
    )
    problems = fabricqa_report.gate(case, request)
    assert not problems, "\n".join(problems)


def test_scaling(
    lab: LabModel,
    protocol: str,
    scaling_workload: Workload,
    fabric: Fabric,
    fio_servers: list[FioServer],
    lab_hosts: dict[str, Host],
    target_host: Host | None,
    write_guard: WriteGuard,
    fabricqa_report: Any,
    measure_plan: MeasurePlan,
    request: pytest.FixtureRequest,
) -> None:
    """Seed 003: the workload from the first 1, 2, ... N initiators (lab-file order); IOPS, latency and the
    scaling efficiency IOPS(n) / (n x IOPS(1)) per step, gated by the lab's ``min_scaling_efficiency``."""
    workload = scaling_workload
    plan = replace(measure_plan, series=None)
    jobs = _jobs(fabric, fio_servers, workload)
    if len(jobs) < 2:
        pytest.skip(f"{protocol}: {workload.name} reaches {len(jobs)} initiator(s); scaling needs two or more")
    if workload.writes:
        write_guard.before_writes(protocol, fabric.devices, fabric.target)
    cid = case_id(protocol, workload, fabric.target)
    steps = [
        (subset, _point(lab, lab_hosts, list(subset), workload, plan, target_host, cid)) for subset in subsets(jobs)
    ]
    points = scaling_points([([s.name for s, _ in subset], point.figures) for subset, point in steps])
    limits = thresholds_for(lab.thresholds_table(), protocol, workload.name)
    problems = efficiency_violations(points, limits.min_scaling_efficiency, label=workload.name)
    for subset, point in steps:
        step_limits = limits.model_copy(update={"min_iops": None, "min_mbps": None})  # IOPS limits are for all hosts
        problems += [
            f"{len(subset)} initiator(s): {p}" for p in point_problems(point, step_limits, label=workload.name)
        ]
    last = steps[-1][1]
    figures = dict(last.figures)
    if points[-1].efficiency is not None:
        figures["scaling_efficiency"] = points[-1].efficiency
    case = performance_case(
        request.node.nodeid,
        lab,
        protocol,
        workload,
        figures,
        target=fabric.target,
        problems=problems,
        hosts=last.hosts,
        extras={"scaling": [p.to_dict() for p in points], "spread": last.extras()["spread"]},
        randseeds=last.randseeds,
    )
    problems = fabricqa_report.gate(replace(case, case_id=f"{case.case_id}-scaling"), request)
    assert not problems, "\n".join(problems)


def test_fabric_efficiency(
    lab_target: TargetModel,
    protocol: str,
    fabric: Fabric,
    lab_hosts: dict[str, Host],
    target_host: Host | None,
    fabricqa_report: Any,
    lab_workloads: list[Workload],
    request: pytest.FixtureRequest,
) -> None:
    """The first read workload on the target's own device and through the fabric, as a ratio (seed 000 found
    NVMe-oF at local-device speed). Recorded as a figure; a ratio above 1.05 means the measurement is wrong."""
    if target_host is None:
        pytest.skip(f"{protocol}: an external target has no local device to compare with")
    workload = next(w for w in lab_workloads if not w.writes)
    device = fabric.devices[0]
    local_path = lab_target.devices[device.backing].path
    local = run_fio(target_host, workload, [local_path])
    remote = run_fio(lab_hosts[device.initiator], workload, [device.path])
    fabric_figures, local_figures = figures(remote), figures(local)
    ratio = fabric_efficiency(fabric_figures["iops"], local_figures["iops"])
    problems = []
    if not 0 < ratio < 1.05:
        problems.append(
            f"fabric/local IOPS ratio {ratio:.2f} is not plausible (local {local_figures['iops']:,.0f} IOPS)"
        )
    case = rm.Case(
        nodeid=request.node.nodeid,
        case_id=f"{case_id(protocol, workload, fabric.target)}-fabric-efficiency",
        suite="performance",
        verdict="passed",
        protocol=protocol,
        target=fabric.target,
        workload=workload,
        figures={**fabric_figures, "fabric_efficiency": ratio},
        hosts={device.initiator: fabric_figures, f"{target_host.name} (local)": local_figures},
        violations=tuple(problems),
    )
    fabricqa_report.record(case, request)
    assert not problems, problems[0]
