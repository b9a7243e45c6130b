"""Path flapping under I/O (issue 29, item 4): the path carrying the I/O lost and given back ``failover.flap_cycles``
times in a row (3 by default, as SPDK's ``test/nvmf/host/failover.sh`` fails over three times) under one fio run
that writes and verifies, with its failback in between.

Each cycle is the one-path outage of :mod:`pytest_fabricqa.failover.outage` on every initiator at once: the path
that carries the I/O *now* (the one the last failback brought it to) is found, its link goes down (the lab's
``outage_by``) until the I/O has settled on the remaining paths or ``one_path_down_s`` ran out, comes back, and is
watched for its failback (:func:`~pytest_fabricqa.failover.outage.watch_failback`: where it shared the I/O before,
it must carry I/O again within ``failback_wait_s``) before the next cycle begins. Each cycle is judged as a one-path
outage is (:func:`~pytest_fabricqa.failover.outage.outage_problems`: the I/O moved while the path was down, the path
quiet at the fault's end, the failback, the lab's limits under this case's key), its figures measured on the part
of the run between the previous cycle's restore and the next cycle's fault; the run's I/O and verify errors are
judged once, over every cycle: none is allowed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from pytest_fabricqa.core.cases import FLAPPING, ONE_PATH
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.failover.figures import FailoverFigures, count_errors, measure, throughput_points
from pytest_fabricqa.failover.outage import (
    FIO_END,
    LATE_SAMPLE_S,
    RUNTIME_MARGIN_S,
    HostRun,
    OutageResult,
    _hold_counting,
    _settled,
    active_port,
    apply_timeouts,
    collect_fio,
    count_before,
    outage_problems,
    series_of,
    start_all,
    watch_failback,
)
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.faults.inject import Fault
from pytest_fabricqa.fio.parse import FioOutputError, fio_messages, parse_fio_output
from pytest_fabricqa.fio.stalls import HostSeries
from pytest_fabricqa.fio.verify import Region
from pytest_fabricqa.lab.database import OracleSettings
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.lab.thresholds import Thresholds
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

CYCLE_SLACK_S = 20
"""Seconds a cycle may take beyond its hold and failback watch (the samples and commands around them, under
emulation), for fio's runtime bound only: fio is ended once the last cycle is done."""


def path_flapping(
    lab: LabModel,
    hosts: Sequence[Host],
    devices: Mapping[str, str],
    regions: Mapping[str, Region],
    *,
    name_prefix: str,
    subsystems: tuple[str, ...],
    family: str,
    undo: UndoStack,
) -> OutageResult:
    """``failover.flap_cycles`` one-path outages in a row on every host under one fio run (see the module); the
    result's :attr:`~OutageResult.cycles` are the cycles, its figures each host's worst (the longest stall)."""
    settings = lab.failover
    count = settings.flap_cycles
    result = OutageResult(FLAPPING, settings.one_path_down_s)
    began = time.monotonic()
    per_cycle = settings.one_path_down_s + settings.failback_wait_s + 2 * LATE_SAMPLE_S + CYCLE_SLACK_S
    runtime_s = math.ceil(settings.before_s + count * per_cycle + settings.after_s) + RUNTIME_MARGIN_S
    result.timeouts = apply_timeouts(lab, hosts, name_prefix, subsystems, family, undo)
    folders = start_all(hosts, devices, regions, runtime_s, settings.rate_iops, undo)
    time.sleep(settings.before_s)
    windows: dict[str, list[tuple[float, float] | None]] = {h.name: [] for h in hosts}
    watched: list[Mapping[str, object]] = []
    for number in range(1, count + 1):
        cycle, down, up, seen = _one_cycle(lab, hosts, devices, name_prefix, undo)
        watched.append(seen)
        for host in hosts:
            went, came = down[host.name], up[host.name]
            for what, outcome in (("down", went), ("up", came)):
                if isinstance(outcome, BaseException):
                    result.problems.append(
                        f"{host.name}: cycle {number} of {count}: the storage link could not be brought {what}: "
                        f"{outcome}"
                    )
            windows[host.name].append((went, came) if isinstance(went, float) and isinstance(came, float) else None)
        result.cycles.append(cycle)
    time.sleep(settings.after_s)
    each(hosts, lambda h: h.run(["sh", "-c", FIO_END, "sh", folders[h.name]]), check=False)
    runs = each(hosts, lambda h: collect_fio(h, folders[h.name], runtime_s + 120), check=False)
    reach_ms = round(settings.fault_reach_s * 1000)
    addresses = ", ".join(sorted({a for c in result.cycles for a in c.faulted.values()}))
    for host in hosts:
        run = runs[host.name]
        if isinstance(run, BaseException):
            result.problems.append(f"{host.name}: fio's output could not be read: {run}")
            continue
        result.runs[host.name] = run
        measured = _cycle_figures(run, windows[host.name], count, reach_ms)
        if isinstance(measured, str):
            result.problems.append(measured)
            continue
        figures, errors, series = measured
        for index, figure in enumerate(figures):
            if figure is None:
                continue
            watch = watched[index].get(host.name)
            if isinstance(watch, BaseException):
                result.problems.append(
                    f"{host.name}: cycle {index + 1} of {count}: the faulted path could not be watched for its "
                    f"failback: {watch}"
                )
            elif isinstance(watch, tuple):
                due = result.cycles[index].shared_before.get(host.name, False)
                figure = replace(figure, failback_s=watch[0], failback=watch[1], failback_due=due)
            result.cycles[index].figures[host.name] = figure
        done = [f for f in figures if f is not None]
        if done:
            worst = max(done, key=lambda f: f.stall_s)
            result.figures[host.name] = replace(worst, io_errors=errors[0], verify_errors=errors[1])
            span = Fault(
                f"{count} failovers of the active path ({addresses})", done[0].fault.start_ms, done[-1].fault.end_ms
            )
            result.series[host.name] = throughput_points(series, span)
    result.down_s = max((c.down_s for c in result.cycles), default=0.0)
    result.wall_s = time.monotonic() - began
    return result


def _one_cycle(
    lab: LabModel, hosts: Sequence[Host], devices: Mapping[str, str], name_prefix: str, undo: UndoStack
) -> tuple[OutageResult, dict[str, object], dict[str, object], dict[str, object]]:
    """One one-path outage on every host while fio runs: the path carrying the I/O now found, counted for a sample,
    its link down until the I/O settled elsewhere (or ``one_path_down_s``), back, and watched for its failback. The
    cycle's result (faulted paths, samples), each host's fault start and end (host Unix s, or the exception), and
    each host's failback watch."""
    settings = lab.failover
    cycle = OutageResult(ONE_PATH, settings.one_path_down_s)
    chosen = _settled(each(hosts, lambda h: active_port(lab, h, devices[h.name])))
    links = {h.name: faults.link_outage(lab, h, name_prefix, chosen[h.name][0]) for h in hosts}
    cycle.faulted = {name: traddr for name, (_, traddr) in chosen.items()}
    _settled(each(hosts, lambda h: links[h.name].arm(undo)))
    before = count_before(cycle, hosts, devices)
    down = each(hosts, lambda h: links[h.name].fire(), check=False)
    cycle.late_ios, cycle.down_s, cycle.samples = _hold_counting(
        hosts, devices, cycle.faulted, settings.one_path_down_s, before, settings.settled_share
    )
    up = each(hosts, lambda h: links[h.name].restore(), check=False)
    seen = each(
        hosts,
        lambda h: watch_failback(
            h,
            devices[h.name],
            cycle.faulted[h.name],
            due=cycle.shared_before.get(h.name, False),
            wait_s=settings.failback_wait_s,
        ),
        check=False,
    )
    return cycle, dict(down), dict(up), dict(seen)


def _cycle_figures(
    run: HostRun, windows: Sequence[tuple[float, float] | None], count: int, reach_ms: int
) -> tuple[list[FailoverFigures | None], tuple[int, int], HostSeries] | str:
    """Each cycle's figures on its own part of the run (from the previous cycle's restore to the next cycle's
    fault), without errors (the run's are judged once: the second item); the whole series. A sentence when fio left
    no report."""
    try:
        parsed = parse_fio_output(run.stdout, host=run.host)
    except FioOutputError:
        said = "; ".join(fio_messages((), run.logs.get("fio.err", ""))[:3]) or "no output"
        return f"{run.host}: fio exited {run.exit_code} without a report ({said})"
    runtime_ms = max((job.runtime_ms for job in parsed.jobs), default=0)
    errors = count_errors(parsed, run.logs.get("fio.err", "") + "\n" + run.stdout)
    series = series_of(run, runtime_ms)
    faults_ms = [
        None if w is None else faults.fault_window(f"cycle {i + 1} of {count}: the active path's link down", *w)
        for i, w in enumerate(windows)
    ]
    figures: list[FailoverFigures | None] = []
    for index, fault in enumerate(faults_ms):
        if fault is None:
            figures.append(None)
            continue
        earlier = [f.end_ms for f in faults_ms[:index] if f is not None]
        later = [f.start_ms for f in faults_ms[index + 1 :] if f is not None]
        start = earlier[-1] if earlier else series.start_ms
        end = later[0] if later else series.end_ms
        part = HostSeries(
            series.host,
            series.interval_ms,
            tuple(i for i in series.intervals if i.start_ms >= start and i.end_ms <= end),
            start,
            end,
        )
        figures.append(measure(part, fault, reach_ms=reach_ms))
    return figures, (errors.io_errors, errors.verify_errors), series


def flapping_problems(
    result: OutageResult, limits: Thresholds, hosts: Sequence[str], *, database: OracleSettings | None = None
) -> list[str]:
    """Every reason the flapping case fails: each cycle judged as a one-path outage (its figures name the cycle),
    then the run's I/O and verify errors, none allowed."""
    problems = list(result.problems)
    for cycle in result.cycles:
        problems.extend(outage_problems(cycle, limits, hosts, database=database))
    for host in hosts:
        figures = result.figures.get(host)
        if figures is not None and (figures.io_errors or figures.verify_errors):
            problems.append(
                f"{host}: {figures.io_errors} I/O error(s) and {figures.verify_errors} verify error(s) over the "
                f"{len(result.cycles)} failovers: losing one path while others remain must cost none"
            )
    return problems
