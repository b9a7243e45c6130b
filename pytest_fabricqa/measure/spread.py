"""Samples and spread: each point run k times, reported as the mean with its relative standard deviation,
and an optional steady-state mode (fio's ``ss=`` plus SNIA PTS's 5-round rule).

One 60-second sample says nothing about how repeatable it is. pbench-fio users gate on the relative standard
deviation (RSD = sample standard deviation / mean) of several samples; this module computes it per figure and
turns a spread above the lab's ``max_rsd_pct`` into a sentence (:func:`rsd_violations`).

Steady state (SNIA Solid State Storage Performance Test Specification, PTS): the rounds of a test are steady
when, over a measurement window of 5 consecutive rounds, the range of the tracked figure (max - min) is within
20% of the window's mean, and the least-squares line through the window moves by no more than 10% of the mean
across it (its slope x (rounds - 1)). A point in steady-state mode runs rounds until the last 5 are steady, or
until ``max_rounds`` (PTS: 25), and reports the window. Each round also asks fio for its own steady-state
detection (``ss=``, ``ss_dur=``, ``ss_ramp=``): fio ends a round early once its criterion holds, and a round in
which fio never saw it is "steady state not reached" too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.fio.model import ClientServerResult, FioResult

# The figures whose spread a case reports and gates, in report order.
SPREAD_METRICS: tuple[str, ...] = ("iops", "mbps", "lat_mean_us", "lat_p99_us")
SPREAD_LABELS: dict[str, str] = {
    "iops": "IOPS",
    "mbps": "MB/s",
    "lat_mean_us": "mean latency",
    "lat_p99_us": "p99 latency",
}

PTS_WINDOW = 5
PTS_MAX_RANGE_PCT = 20.0
PTS_MAX_SLOPE_PCT = 10.0
PTS_MAX_ROUNDS = 25
DEFAULT_SS = "iops_slope:10%"


class SamplingError(UserError, ValueError):
    """The lab file's ``workloads.samples`` or ``workloads.steady_state`` is invalid; the message names the key."""


@dataclass(frozen=True)
class Spread:
    """One figure over n samples: mean, sample standard deviation (n - 1), and RSD in percent of the mean."""

    n: int
    mean: float
    stdev: float
    rsd_pct: float
    values: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON form for a case's extras."""
        return {"n": self.n, "mean": self.mean, "stdev": self.stdev, "rsd_pct": self.rsd_pct,
                "values": list(self.values)}  # fmt: skip


def spread(values: Sequence[float]) -> Spread:
    """Mean, standard deviation and RSD of ``values`` (one value: no spread, RSD 0)."""
    if not values:
        raise ValueError("spread of no values")
    n = len(values)
    mean = math.fsum(values) / n
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    rsd = stdev / abs(mean) * 100.0 if mean else (0.0 if stdev == 0 else math.inf)
    return Spread(n, mean, stdev, rsd, tuple(float(v) for v in values))


def summarise(samples: Sequence[Mapping[str, float]]) -> tuple[dict[str, float], dict[str, Spread]]:
    """The mean of every figure all samples have, and the spread of :data:`SPREAD_METRICS` among them."""
    if not samples:
        raise ValueError("no samples to summarise")
    common = [name for name in samples[0] if all(name in s for s in samples[1:])]
    means = {name: math.fsum(s[name] for s in samples) / len(samples) for name in common}
    spreads = {name: spread([s[name] for s in samples]) for name in SPREAD_METRICS if name in common}
    return means, spreads


def rsd_violations(
    spreads: Mapping[str, Spread], max_rsd_pct: float | None, *, label: str = "", basis: str = "samples"
) -> list[str]:
    """One sentence per figure whose RSD is above ``max_rsd_pct``; ``basis`` names what the values are
    (``samples``, or ``1-s windows`` of one run). With a limit but fewer than two values, one sentence saying
    the spread could not be checked (a case cannot pass a check nobody could make)."""
    if max_rsd_pct is None:
        return []
    prefix = f"{label}: " if label else ""
    if not any(s.n >= 2 for s in spreads.values()):
        return [
            f"{prefix}the spread was not measured (one sample), so the maximum of {max_rsd_pct:g}% RSD could not be "
            "checked; run 2 or more samples (workloads.samples or --fio-samples)"
        ]
    found = []
    for name in SPREAD_METRICS:
        s = spreads.get(name)
        if s is None or s.n < 2 or s.rsd_pct <= max_rsd_pct:
            continue
        found.append(
            f"{prefix}{SPREAD_LABELS[name]} varied by {s.rsd_pct:.1f}% RSD over {s.n} {basis} "
            f"(mean {s.mean:,.1f}, standard deviation {s.stdev:,.1f}), above the maximum of {max_rsd_pct:g}% RSD"
        )
    return found


@dataclass(frozen=True)
class PtsVerdict:
    """SNIA PTS's steady-state test over the last ``window`` rounds of one figure."""

    reached: bool
    rounds: int
    window: int
    range_pct: float | None = None
    slope_pct: float | None = None

    def describe(self, what: str = "IOPS") -> str:
        """A sentence with the measured excursions and the limits."""
        if self.range_pct is None or self.slope_pct is None:
            return f"steady state not reached: {self.rounds} round(s), the PTS window needs {self.window}"
        state = "reached" if self.reached else "not reached"
        return (
            f"steady state {state} over rounds {self.rounds - self.window + 1}-{self.rounds}: {what} range "
            f"{self.range_pct:.1f}% of the mean (PTS maximum {PTS_MAX_RANGE_PCT:g}%), best-fit slope excursion "
            f"{self.slope_pct:.1f}% (maximum {PTS_MAX_SLOPE_PCT:g}%)"
        )


def pts_steady_state(
    values: Sequence[float],
    *,
    window: int = PTS_WINDOW,
    max_range_pct: float = PTS_MAX_RANGE_PCT,
    max_slope_pct: float = PTS_MAX_SLOPE_PCT,
) -> PtsVerdict:
    """PTS's rule on the last ``window`` values: range within ``max_range_pct`` of their mean and the
    least-squares line's excursion across the window (|slope| x (window - 1)) within ``max_slope_pct``."""
    if len(values) < window:
        return PtsVerdict(False, len(values), window)
    last = [float(v) for v in values[-window:]]
    mean = math.fsum(last) / window
    if mean <= 0:
        return PtsVerdict(False, len(values), window, math.inf, math.inf)
    xs = range(window)
    x_mean = (window - 1) / 2
    slope = math.fsum((x - x_mean) * (y - mean) for x, y in zip(xs, last, strict=True)) / math.fsum(
        (x - x_mean) ** 2 for x in xs
    )
    range_pct = (max(last) - min(last)) / mean * 100.0
    slope_pct = abs(slope) * (window - 1) / mean * 100.0
    return PtsVerdict(
        range_pct <= max_range_pct and slope_pct <= max_slope_pct, len(values), window, range_pct, slope_pct
    )


def fio_steady_state_problems(result: FioResult | ClientServerResult) -> list[str]:
    """One sentence per job fio ran with ``ss=`` that ended without reaching its steady state."""
    hosts = result.hosts if isinstance(result, ClientServerResult) else (result,)
    found = []
    for host in hosts:
        for job in host.jobs:
            ss = job.steadystate
            if ss is not None and not ss.attained:
                where = f" on {host.host}" if host.host else ""
                found.append(f"steady state not reached: fio's {ss.describe()}{where}, job {job.name!r}")
    return found


@dataclass(frozen=True)
class SteadyStatePlan:
    """Steady-state mode: fio's ``ss``/``ss_dur``/``ss_ramp`` per round, and PTS's window over rounds."""

    ss: str = DEFAULT_SS
    ss_dur: int = 30
    ss_ramp: int = 0
    window: int = PTS_WINDOW
    max_rounds: int = PTS_MAX_ROUNDS

    def fio_options(self) -> list[tuple[str, str]]:
        """Job-file options that make fio detect steady state within each round."""
        return [("ss", self.ss), ("ss_dur", str(self.ss_dur)), ("ss_ramp", str(self.ss_ramp))]


@dataclass(frozen=True)
class SamplingPlan:
    """How often a point runs: ``samples`` rounds, or in steady-state mode until PTS's window is steady."""

    samples: int = 1
    steady_state: SteadyStatePlan | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the report."""
        out: dict[str, Any] = {"samples": self.samples}
        if self.steady_state is not None:
            s = self.steady_state
            out["steady_state"] = {"ss": s.ss, "ss_dur": s.ss_dur, "ss_ramp": s.ss_ramp, "window": s.window,
                                   "max_rounds": s.max_rounds}  # fmt: skip
        return out


_SS_KEYS = ("ss", "ss_dur", "ss_ramp", "window", "max_rounds")


def _whole(value: Any, key: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SamplingError(f"{key}: expected a whole number >= {least}, not {value!r}")
    return value


def sampling_plan(workloads: Mapping[str, Any] | None, *, samples_override: int | None = None) -> SamplingPlan:
    """The plan from a lab file's ``workloads`` section (``samples``, ``steady_state``) and ``--fio-samples``.

    ``steady_state: true`` takes the defaults; a mapping may set ``ss`` (fio's ``ss=`` value, e.g.
    ``iops_slope:10%``), ``ss_dur``, ``ss_ramp`` (seconds), ``window`` (PTS rounds, 5) and ``max_rounds`` (25).
    """
    section = dict(workloads or {})
    samples = 1 if section.get("samples") is None else _whole(section["samples"], "workloads.samples", 1)
    if samples_override is not None:
        samples = _whole(samples_override, "--fio-samples", 1)
    raw = section.get("steady_state")
    if raw is None or raw is False:
        return SamplingPlan(samples)
    if raw is True:
        raw = {}
    if not isinstance(raw, Mapping):
        raise SamplingError(f"workloads.steady_state: expected true or a mapping with {', '.join(_SS_KEYS)}")
    unknown = sorted(set(raw) - set(_SS_KEYS))
    if unknown:
        raise SamplingError(f"workloads.steady_state.{unknown[0]}: unknown key; allowed: {', '.join(_SS_KEYS)}")
    ss = str(raw.get("ss", DEFAULT_SS))
    if ":" not in ss or any(c.isspace() for c in ss):
        raise SamplingError(
            f"workloads.steady_state.ss: {ss!r} is not an fio ss= value such as iops_slope:10% or iops:5%"
        )
    plan = SteadyStatePlan(
        ss=ss,
        ss_dur=_whole(raw.get("ss_dur", 30), "workloads.steady_state.ss_dur", 1),
        ss_ramp=_whole(raw.get("ss_ramp", 0), "workloads.steady_state.ss_ramp", 0),
        window=_whole(raw.get("window", PTS_WINDOW), "workloads.steady_state.window", 2),
        max_rounds=_whole(raw.get("max_rounds", PTS_MAX_ROUNDS), "workloads.steady_state.max_rounds", 2),
    )
    if plan.max_rounds < plan.window:
        raise SamplingError(
            f"workloads.steady_state.max_rounds: {plan.max_rounds} is fewer than the window of {plan.window} rounds"
        )
    return SamplingPlan(samples, plan)


@dataclass(frozen=True)
class Rounds:
    """What the rounds of one point measured: every round's figures, the ones reported, and why it failed."""

    figures: tuple[dict[str, float], ...]
    measured: tuple[dict[str, float], ...]
    means: dict[str, float]
    spreads: dict[str, Spread]
    pts: PtsVerdict | None = None
    problems: tuple[str, ...] = field(default=())

    def extras(self) -> dict[str, Any]:
        """JSON form for ``case.extras["spread"]``."""
        out: dict[str, Any] = {
            "basis": "samples",
            "rounds": len(self.figures),
            "measured": len(self.measured),
            "figures": {name: s.to_dict() for name, s in self.spreads.items()},
        }
        if self.pts is not None:
            out["steady_state"] = {"reached": self.pts.reached, "window": self.pts.window,
                                   "range_pct": self.pts.range_pct, "slope_pct": self.pts.slope_pct,
                                   "detail": self.pts.describe()}  # fmt: skip
        return out


def run_rounds(plan: SamplingPlan, run_once: Callable[[int], tuple[dict[str, float], Sequence[str]]]) -> Rounds:
    """Run a point's rounds: ``run_once(round)`` returns the round's figures and its problems (fio's own
    steady-state failures). Plain mode: ``plan.samples`` rounds, all reported. Steady-state mode: rounds until
    PTS's window holds (at least ``window``, at most ``max_rounds``); the window is reported."""
    figures: list[dict[str, float]] = []
    problems: list[str] = []
    steady = plan.steady_state
    if steady is None:
        for number in range(plan.samples):
            result, said = run_once(number)
            figures.append(result)
            problems.extend(said)
        means, spreads = summarise(figures)
        return Rounds(tuple(figures), tuple(figures), means, spreads, None, tuple(dict.fromkeys(problems)))
    verdict = PtsVerdict(False, 0, steady.window)
    round_problems: list[Sequence[str]] = []
    for number in range(steady.max_rounds):
        result, said = run_once(number)
        figures.append(result)
        round_problems.append(said)
        verdict = pts_steady_state([f.get("iops", 0.0) for f in figures], window=steady.window)
        if verdict.reached:
            break
    measured = figures[-steady.window :]
    for said in round_problems[-steady.window :]:
        problems.extend(said)
    if not verdict.reached:
        problems.append(verdict.describe())
    means, spreads = summarise(measured)
    return Rounds(tuple(figures), tuple(measured), means, spreads, verdict, tuple(dict.fromkeys(problems)))
