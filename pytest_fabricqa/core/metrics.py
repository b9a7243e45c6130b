"""The metric vocabulary: every figure a case can carry, defined once.

Each :class:`Metric` says its name (the key in results.json and in ``--tolerance``), how people read it (label,
unit, the phrase used in a sentence), which direction is better, the lab file's threshold key that limits it
(``min_iops``, ``max_p99_us``) and its default regression tolerance. The results model, the report's formatting,
the threshold checks, the regression gate and fio's figure extraction all read this table; none of them names a
metric on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Metric:
    """One figure: what it is called, its unit, which way is better and which lab keys refer to it."""

    name: str
    label: str
    """Column heading: ``p99 latency (µs)``."""
    unit: str
    """``IOPS``, ``MB/s``, ``µs``, ``%`` or empty for a ratio."""
    higher_is_better: bool
    core: bool
    """True when every performance case carries it (fio reports it); False when only some runs can measure it."""
    phrase: str = ""
    """How a sentence names it before the value (``p99 latency ``); empty when the unit after it says enough."""
    decimals: int = 1
    """Decimals in threshold sentences."""
    threshold_key: str | None = None
    """The lab file's limit on it (``thresholds: ... {max_p99_us: 2000}``); None when it cannot be limited."""
    default_tolerance_pct: float | None = None
    """Percent it may move in its bad direction against a baseline before the case fails; None: not gated."""
    gate: Literal["figure", "spread", "scaling", "failover"] = "figure"
    """Who checks its threshold: ``figure``, the per-case limit check (:func:`thresholds.violations`);
    ``spread``, the samples check over every spread figure (:func:`spread.rsd_violations`); ``scaling``, the
    scaling run per step (:func:`scaling.efficiency_violations`); ``failover``, the per-host check of a fault
    case (:func:`failover.failover_violations`)."""
    zero_limit: bool = False
    """True when 0 is a limit that makes sense: a count of events (``max_io_errors: 0`` allows none)."""

    @property
    def tolerance_key(self) -> str:
        """The key of its tolerance in the lab file's ``tolerances`` and in ``--tolerance``: its name."""
        return self.name

    @property
    def bound(self) -> Literal["min", "max"]:
        """Which kind of limit makes sense: a minimum for a figure that is better higher, else a maximum."""
        return "min" if self.higher_is_better else "max"


_ALL: tuple[Metric, ...] = (
    Metric("iops", "IOPS", "IOPS", True, True, decimals=0, threshold_key="min_iops", default_tolerance_pct=10.0),
    Metric("mbps", "MB/s", "MB/s", True, True, threshold_key="min_mbps", default_tolerance_pct=10.0),
    Metric(
        "lat_mean_us",
        "mean latency (µs)",
        "µs",
        False,
        True,
        phrase="mean latency ",
        threshold_key="max_lat_mean_us",
        default_tolerance_pct=20.0,
    ),
    Metric("lat_p50_us", "p50 latency (µs)", "µs", False, True, phrase="p50 latency "),
    Metric(
        "lat_p99_us",
        "p99 latency (µs)",
        "µs",
        False,
        True,
        phrase="p99 latency ",
        threshold_key="max_p99_us",
        default_tolerance_pct=20.0,
    ),
    Metric(
        "lat_p999_us", "p99.9 latency (µs)", "µs", False, True, phrase="p99.9 latency ", threshold_key="max_p999_us"
    ),
    Metric("lat_p9999_us", "p99.99 latency (µs)", "µs", False, True, phrase="p99.99 latency "),
    Metric("cpu_usr_pct", "initiator CPU usr (%)", "%", False, True, phrase="initiator CPU usr "),
    Metric("cpu_sys_pct", "initiator CPU sys (%)", "%", False, True, phrase="initiator CPU sys "),
    Metric("target_cpu_usr_pct", "target CPU usr (%)", "%", False, False, phrase="target CPU usr "),
    Metric("target_cpu_sys_pct", "target CPU sys (%)", "%", False, False, phrase="target CPU sys "),
    # Seed 000 compared targets by this split: SPDK ~50% usr with 45-50% idle, nvmet ~80% sys with 15-20% idle.
    # usr + sys + idle is 100 less the host's iowait and steal (cpu.CpuUsage): the report shows the rest.
    Metric("target_cpu_idle_pct", "target CPU idle (%)", "%", True, False, phrase="target CPU idle "),
    Metric("fabric_efficiency", "fabric / local IOPS", "", True, False, phrase="fabric/local IOPS ", decimals=2),
    Metric("link_utilisation", "link utilisation", "", True, False, phrase="link utilisation ", decimals=2),
    # The relative standard deviation of IOPS across a point's samples (or, with one sample, across its
    # time-series windows); max_rsd_pct limits the RSD of every spread figure (spread.SPREAD_METRICS).
    Metric(
        "iops_rsd_pct",
        "IOPS spread (RSD %)",
        "%",
        False,
        False,
        phrase="IOPS spread ",
        threshold_key="max_rsd_pct",
        gate="spread",
    ),
    # IOPS(n) / (n x IOPS(1)) at the largest n of a scaling run (seed 003).
    Metric(
        "scaling_efficiency",
        "scaling efficiency",
        "",
        True,
        False,
        phrase="scaling efficiency ",
        decimals=2,
        threshold_key="min_scaling_efficiency",
        gate="scaling",
    ),
    # Path failover (issue 13), per host and fault, from fio's IOPS log at log_avg_msec 100 (failover.py).
    # The fault's stall: the gap that begins at the fault (within FAULT_REACH_MS), gated; the run's longest other
    # gap, reported beside it and never gated (a gap before the fault longer than max_stall_s fails the case as a
    # lab that was not quiet, figures.failover_violations).
    Metric(
        "stall_s",
        "fault's stall (s)",
        "s",
        False,
        False,
        phrase="the fault's stall ",
        threshold_key="max_stall_s",
        gate="failover",
    ),
    Metric(
        "other_stall_s",
        "longest other gap (s)",
        "s",
        False,
        False,
        phrase="the longest other gap ",
        gate="failover",
    ),
    Metric(
        "first_io_s",
        "first I/O after fault (s)",
        "s",
        False,
        False,
        phrase="first I/O after the fault at ",
        threshold_key="max_first_io_s",
        gate="failover",
    ),
    Metric(
        "recovery_s",
        "recovery to 90% (s)",
        "s",
        False,
        False,
        phrase="recovery to 90% of the pre-fault throughput at ",
        threshold_key="max_recovery_s",
        gate="failover",
    ),
    Metric(
        "failback_s",
        "failback (s)",
        "s",
        False,
        False,
        phrase="the faulted path carried I/O again at ",
        threshold_key="max_failback_s",
        gate="failover",
    ),
    Metric(
        "io_errors",
        "I/O errors",
        "I/O errors",
        False,
        False,
        decimals=0,
        threshold_key="max_io_errors",
        gate="failover",
        zero_limit=True,
    ),
    Metric(
        "verify_errors",
        "verify errors",
        "verify errors",
        False,
        False,
        decimals=0,
        threshold_key="max_verify_errors",
        gate="failover",
        zero_limit=True,
    ),
    # The Windows HLK multiport rule: with every path up, the slowest path at most 10% below the fastest.
    Metric(
        "path_imbalance_pct",
        "path imbalance (%)",
        "%",
        False,
        False,
        phrase="path imbalance ",
        threshold_key="max_path_imbalance_pct",
        gate="failover",
    ),
)

#: Every metric by name, in report order.
BY_NAME: Mapping[str, Metric] = {m.name: m for m in _ALL}

#: Metrics every performance case carries (when fio reported them).
CORE_METRICS: tuple[str, ...] = tuple(m.name for m in _ALL if m.core)
#: Metrics only some runs can measure (target CPU needs a target host, efficiency needs a local run).
OPTIONAL_METRICS: tuple[str, ...] = tuple(m.name for m in _ALL if not m.core)
METRICS: tuple[str, ...] = CORE_METRICS + OPTIONAL_METRICS

#: Metrics where a larger value is better; every other metric (latency, CPU) is better smaller.
HIGHER_IS_BETTER: frozenset[str] = frozenset(m.name for m in _ALL if m.higher_is_better)

METRIC_LABELS: Mapping[str, str] = {m.name: m.label for m in _ALL}

#: The lab file's threshold keys, each with the metric it limits, in report order.
THRESHOLD_KEYS: Mapping[str, Metric] = {m.threshold_key: m for m in _ALL if m.threshold_key is not None}

#: Percent a figure may move in its bad direction before the case fails.
DEFAULT_TOLERANCES: Mapping[str, float] = {
    m.tolerance_key: m.default_tolerance_pct for m in _ALL if m.default_tolerance_pct is not None
}


def metric(name: str) -> Metric:
    """The metric called ``name``; ``KeyError`` naming the known metrics when there is none."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known metrics are {', '.join(METRICS)}") from None
