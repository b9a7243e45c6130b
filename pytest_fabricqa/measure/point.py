"""Measuring one point: a workload from every initiator at once, k rounds (or until steady), the target's CPU
sampled alongside, fio's time-series logs gathered, in as few round trips as the lab allows.

Per round: one command on the controller runs the fio client (job files and logs travel inside it, see
:func:`pytest_fabricqa.fio.command.run_fio_clients`) and, at the same time, one sampler on the target reads its
CPU every second (:func:`pytest_fabricqa.measure.cpu.sampler_argv`). A suite calls :func:`run_point` and gates the
:class:`Point` it returns; the lab file's ``workloads`` section says how (:func:`measure_plan`)::

    workloads:
      samples: 3                      # rounds per point (default 1); --fio-samples=K overrides
      steady_state: {ss: "iops_slope:10%", ss_dur: 30, ss_ramp: 5, window: 5, max_rounds: 25}   # or true
      timeseries: {interval_ms: 1000}  # or true: fio's IOPS, latency and histogram logs per host
      scaling: [randread-4k-qd32-j1]  # test_scaling runs these from 1..N initiators
      knee_gain_pct: 10               # a sweep's knee: the last step that still gained more than this

Every round also logs each host's IOPS (in the time series' windows, or in :data:`STALL_LOG_MSEC` windows when
the lab keeps no series), and a point fails when a host completed no I/O for longer than the lab's
``watch.max_point_stall_s`` (:func:`point_stalls`): a path lost and found again within the initiator's timeouts
leaves no error and may leave the figures inside their limits, but not this gap.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_fabricqa.core.scaling import DEFAULT_KNEE_GAIN_PCT
from pytest_fabricqa.core.workloads import MEASURE_KEYS, Workload
from pytest_fabricqa.fio import ClientServerResult, FioServer, figures, run_fio_clients, shared_offsets, total_mismatch
from pytest_fabricqa.fio.command import log_prefix
from pytest_fabricqa.fio.logs import build_timeseries, parse_log_name
from pytest_fabricqa.fio.stalls import Stall, host_series, longest_stall
from pytest_fabricqa.lab.thresholds import Thresholds, violations
from pytest_fabricqa.measure.cpu import ProcStatError, parse_samples, sampler_argv, window_usage
from pytest_fabricqa.measure.spread import (
    Rounds,
    SamplingError,
    SamplingPlan,
    Spread,
    fio_steady_state_problems,
    rsd_violations,
    run_rounds,
    sampling_plan,
    spread,
    summarise,
)
from pytest_fabricqa.report.series import DEFAULT_LOG_MSEC, TimeSeries
from pytest_fabricqa.transport.base import Host

_SAFE_FILE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class SeriesPlan:
    """Time-series logging: fio's IOPS/latency logs averaged, and its histogram logged, every ``interval_ms``."""

    interval_ms: int = DEFAULT_LOG_MSEC


@dataclass(frozen=True)
class MeasurePlan:
    """How the lab wants each point measured (see the module docstring for the lab-file keys)."""

    sampling: SamplingPlan = field(default_factory=SamplingPlan)
    series: SeriesPlan | None = None
    scaling: tuple[str, ...] = ()
    knee_gain_pct: float = DEFAULT_KNEE_GAIN_PCT
    max_stall_s: float | None = None
    """The longest a host may complete no I/O in a point (the lab's ``watch.max_point_stall_s``); None: not checked."""

    @property
    def stall_log_msec(self) -> int:
        """The IOPS log's window a stall is read in: the time series', or :data:`STALL_LOG_MSEC`."""
        return self.series.interval_ms if self.series is not None else STALL_LOG_MSEC


STALL_LOG_MSEC = 100
"""fio's IOPS-log window when the lab keeps no time series: a stall is read in whole windows (up to two short), so
they must be well under the 1 s default limit. Through fio's client: 10 lines a second per job."""


def measure_plan(
    section: Mapping[str, Any] | None, *, samples_override: int | None = None, max_stall_s: float | None = None
) -> MeasurePlan:
    """The lab file's ``workloads`` keys about measuring; :class:`SamplingError` names a bad key."""
    section = {key: value for key, value in (section or {}).items() if key in MEASURE_KEYS}
    sampling = sampling_plan(section, samples_override=samples_override)
    raw = section.get("timeseries")
    series: SeriesPlan | None = None
    if raw is True:
        series = SeriesPlan()
    elif isinstance(raw, Mapping):
        unknown = sorted(set(raw) - {"interval_ms"})
        if unknown:
            raise SamplingError(f"workloads.timeseries.{unknown[0]}: unknown key; allowed: interval_ms")
        interval = raw.get("interval_ms", DEFAULT_LOG_MSEC)
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 100:
            raise SamplingError(f"workloads.timeseries.interval_ms: expected a whole number >= 100, not {interval!r}")
        series = SeriesPlan(interval)
    elif raw not in (None, False):
        raise SamplingError(f"workloads.timeseries: expected true, false or {{interval_ms: 1000}}, not {raw!r}")
    scaling = section.get("scaling") or []
    if isinstance(scaling, str):
        scaling = [scaling]
    if not isinstance(scaling, list) or not all(isinstance(n, str) for n in scaling):
        raise SamplingError(f"workloads.scaling: expected a list of workload names, not {scaling!r}")
    knee = section.get("knee_gain_pct", DEFAULT_KNEE_GAIN_PCT)
    if isinstance(knee, bool) or not isinstance(knee, int | float) or not 0 <= knee < 1000:
        raise SamplingError(f"workloads.knee_gain_pct: expected a percentage such as 10, not {knee!r}")
    return MeasurePlan(sampling, series, tuple(scaling), float(knee), max_stall_s)


@dataclass(frozen=True)
class Point:
    """One measured point: mean figures (total and per host) over the reported rounds, their spread, the
    last round's fio output and time series, and every problem the rounds found (sentences)."""

    figures: dict[str, float]
    hosts: dict[str, dict[str, float]]
    rounds: Rounds
    results: tuple[ClientServerResult, ...]
    series: TimeSeries | None = None
    spread_basis: str = "samples"
    spreads: dict[str, Spread] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    stalls: dict[str, tuple[int, Stall]] = field(default_factory=dict)
    """Per host, its longest stall in any reported round: (round, 1-based; the stall on fio's clock, ms since the
    ramp ended)."""
    stall_rule: str = ""

    @property
    def randseeds(self) -> dict[str, int]:
        """The fio ``randseed`` each host ran with (the same in every round: a case repeats its offsets)."""
        return {h.host: h.randseeds[0] for h in self.last.hosts if h.randseeds}

    @property
    def last(self) -> ClientServerResult:
        """The last round's result (its raw JSON is what the report keeps)."""
        return self.results[-1]

    def extras(self) -> dict[str, Any]:
        """JSON for ``case.extras``: ``spread`` (per figure, with its basis), ``timeseries`` and notes."""
        out: dict[str, Any] = {
            "spread": {
                **self.rounds.extras(),
                "basis": self.spread_basis,
                "figures": {name: s.to_dict() for name, s in self.spreads.items()},
            }
        }
        if self.series is not None:
            out["timeseries"] = self.series.to_dict()
        if self.notes:
            out["measure_notes"] = list(self.notes)
        if self.stall_rule:
            out["stalls"] = {
                "rule": self.stall_rule,
                "hosts": {
                    host: {"round": n, "from_s": s.start_ms / 1000, "seconds": s.seconds}
                    for host, (n, s) in sorted(self.stalls.items())
                },
            }
        return out


def run_point(
    controller: Host,
    jobs: Sequence[tuple[FioServer, Sequence[str]]],
    workload: Workload,
    plan: MeasurePlan,
    *,
    target: Host | None = None,
    workdir: str = "/tmp",
    case: str | None = None,
) -> Point:
    """Run one point as ``plan`` says; see the module docstring. fio failures raise (FioError); a CPU sampler
    that failed only leaves the target's CPU out, with a note."""
    results: list[ClientServerResult] = []
    notes: list[str] = []
    steady = plan.sampling.steady_state
    options = steady.fio_options() if steady is not None else []
    # The IOPS log always (a stall is read from it); latency and histograms only for a lab's time series.
    logs = (STALL_LOG_MSEC, None) if plan.series is None else (plan.series.interval_ms, plan.series.interval_ms)
    sample_cpu = target is not None and steady is None
    if target is not None and steady is not None:
        notes.append("target CPU not sampled: in steady-state mode fio ends a round early, the sampler would not")

    def once(_round: int) -> tuple[dict[str, float], list[str]]:
        seconds = workload.ramp_time + (workload.runtime or 0)
        with ThreadPoolExecutor(max_workers=1) as pool:
            sampler = (
                pool.submit(target.run, sampler_argv(max(seconds, 1)), check=False) if sample_cpu and target else None
            )
            result = run_fio_clients(controller, jobs, workload, workdir=workdir, options=options, logs=logs, case=case)
            sampled = sampler.result() if sampler is not None else None
        results.append(result)
        total = figures(result.total)
        if sampled is not None:
            try:
                usage = window_usage(parse_samples(sampled.stdout), workload.ramp_time, seconds)
            except ProcStatError as exc:
                notes.append(f"target CPU not measured: {exc}")
            else:
                total["target_cpu_usr_pct"] = usage.usr_pct
                total["target_cpu_sys_pct"] = usage.sys_pct
                total["target_cpu_idle_pct"] = usage.idle_pct
        problems = fio_steady_state_problems(result)
        problems += [p for p in (total_mismatch(result), shared_offsets(result)) if p]
        return total, problems

    rounds = run_rounds(plan.sampling, once)
    measured = results[-len(rounds.measured) :]
    hosts: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(h.host for r in measured for h in r.hosts):
        per_round = [figures(r.host(name)) for r in measured if any(h.host == name for h in r.hosts)]
        hosts[name] = summarise(per_round)[0]
    host_of = {log_prefix(server): server.name for server, _ in jobs}
    worst: dict[str, tuple[int, Stall]] = {}
    for n, result in enumerate(measured, start=1):
        runtime_ms = None if steady is not None or workload.runtime is None else workload.runtime * 1000
        for host, stall in point_stalls(result, host_of, plan.stall_log_msec, runtime_ms).items():
            if host not in worst or stall.seconds > worst[host][1].seconds:
                worst[host] = (n, stall)
    problems = list(rounds.problems)
    if plan.max_stall_s is not None:
        problems += stall_problems(worst, plan.max_stall_s, plan.stall_log_msec, rounds=len(measured))
    series = None
    if plan.series is not None:
        series = build_timeseries(results[-1].logs, host_of=host_of, interval_ms=plan.series.interval_ms)
        notes.extend(series.notes)
        if not series.cluster:
            notes.append("time series: fio's client returned no complete window of logs")
    figures_out = dict(rounds.means)
    spreads = dict(rounds.spreads)
    basis = "samples"
    if len(rounds.measured) == 1 and series is not None:
        # One sample has no spread of its own; the run's windows show how steady it was inside.
        window_iops = [w.iops for w in series.cluster if w.iops is not None]
        if len(window_iops) >= 2:
            spreads = {"iops": spread(window_iops)}
            basis = f"{series.interval_ms / 1000:g}-s windows"
    if "iops" in spreads and (spreads["iops"].n >= 2) and math.isfinite(spreads["iops"].rsd_pct):
        figures_out["iops_rsd_pct"] = spreads["iops"].rsd_pct
    return Point(
        figures=figures_out,
        hosts=hosts,
        rounds=rounds,
        results=tuple(results),
        series=series,
        spread_basis=basis,
        spreads=spreads,
        problems=tuple(problems),
        notes=tuple(dict.fromkeys(notes)),
        stalls=worst,
        stall_rule=stall_rule(plan.max_stall_s, plan.stall_log_msec) if plan.max_stall_s is not None else "",
    )


def point_stalls(
    result: ClientServerResult, host_of: Mapping[str, str], interval_ms: int, runtime_ms: int | None = None
) -> dict[str, Stall]:
    """Per host with one, the round's longest time in which none of its jobs completed an I/O
    (:func:`pytest_fabricqa.fio.stalls.longest_stall`), from its IOPS logs (``host_of``: log prefix -> lab host) on
    fio's clock (ms since the ramp ended). The run ends at ``runtime_ms`` (a time-based round that ran its whole
    runtime), so a stall until the end counts; None (a steady-state round fio may end early): at the host's last
    log line, and a stall until the end is not seen. fio's JSON cannot say: with group_reporting a host's
    ``job_runtime`` is its jobs' runtimes added up. A host without an IOPS log is left out."""
    logs: dict[str, dict[str, str]] = {}
    for name, text in result.logs.items():
        parsed = parse_log_name(name)
        host = None if parsed is None or parsed.kind != "iops" else host_of.get(parsed.prefix.rsplit("/", 1)[-1])
        if host is not None:
            logs.setdefault(host, {})[name] = text
    found: dict[str, Stall] = {}
    for host, files in logs.items():
        series = host_series(host, files, interval_ms=interval_ms, start_ms=0, end_ms=0)
        last = max((i.end_ms for i in series.intervals), default=0)
        end_ms = max(last, runtime_ms) if runtime_ms is not None else last + interval_ms
        stall = longest_stall(replace(series, end_ms=end_ms))
        if stall is not None:
            found[host] = stall
    return found


def stall_rule(max_stall_s: float, interval_ms: int) -> str:
    """How a point's stall is measured and judged, in words for the report."""
    return (
        f"A point fails when a host completed no I/O for longer than {max_stall_s:g} s (watch.max_point_stall_s), "
        f"read from fio's IOPS log in {interval_ms} ms windows: a window without a completion has no line, so a "
        f"stall is counted in whole windows, up to {2 * interval_ms / 1000:g} s short of the real one."
    )


def stall_problems(
    worst: Mapping[str, tuple[int, Stall]], max_stall_s: float, interval_ms: int, *, rounds: int = 1
) -> list[str]:
    """One sentence per host whose longest stall is beyond ``max_stall_s``: how long, when in the run, the limit."""
    problems: list[str] = []
    for host, (n, stall) in sorted(worst.items()):
        if stall.seconds > max_stall_s:
            which = f" of round {n}" if rounds > 1 else ""
            problems.append(
                f"{host}: no I/O completed for {stall.seconds:g} s, from {stall.start_ms / 1000:g} s to "
                f"{stall.end_ms / 1000:g} s into the measured run{which}, longer than the lab's "
                f"watch.max_point_stall_s of {max_stall_s:g} s (fio's IOPS log in {interval_ms} ms windows)"
            )
    return problems


def point_problems(point: Point, limits: Thresholds, *, label: str = "") -> list[str]:
    """Every reason a point fails, as sentences: the lab's limits on its figures, its spread above
    ``max_rsd_pct``, and what its rounds found (steady state not reached, hosts that do not add up)."""
    problems = violations(point.figures, limits, label=label)
    problems += rsd_violations(point.spreads, limits.max_rsd_pct, label=label, basis=point.spread_basis)
    problems += [p for p in point.problems if p not in problems]
    return problems


def write_logs(folder: Path, logs: Mapping[str, str]) -> list[Path]:
    """Keep fio's log files in the report folder (``folder`` created; names made safe)."""
    written: list[Path] = []
    if not logs:
        return written
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in sorted(logs.items()):
        path = folder / (_SAFE_FILE.sub("_", name).strip("._") or "log")
        path.write_text(text)
        written.append(path)
    return written
