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
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_fabricqa.core.scaling import DEFAULT_KNEE_GAIN_PCT
from pytest_fabricqa.core.workloads import MEASURE_KEYS, Workload
from pytest_fabricqa.fio import ClientServerResult, FioServer, figures, run_fio_clients, shared_offsets, total_mismatch
from pytest_fabricqa.fio.command import log_prefix
from pytest_fabricqa.fio.logs import build_timeseries
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


def measure_plan(section: Mapping[str, Any] | None, *, samples_override: int | None = None) -> MeasurePlan:
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
    return MeasurePlan(sampling, series, tuple(scaling), float(knee))


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
    logs = None if plan.series is None else (plan.series.interval_ms, plan.series.interval_ms)
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
    series = None
    if plan.series is not None:
        host_of = {log_prefix(server): server.name for server, _ in jobs}
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
        problems=rounds.problems,
        notes=tuple(dict.fromkeys(notes)),
    )


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
