"""Path failover figures, per host and fault, from fio's own IOPS log (issue 13, "Measured per host").

A failover case runs fio with ``write_iops_log`` and ``log_avg_msec=100`` (:func:`pytest_fabricqa.fio.logs
.log_options`), breaks a path, and reads back per host: the fault's stall (:func:`fault_stall`: the one that
begins at the fault, gated by ``max_stall_s``) and the run's longest other gap (a figure only), the time from the
fault to the first
completion after it, the time until throughput is back to 90% of its pre-fault mean, the I/O and verify errors;
and, with every path up, the path imbalance of the Windows HLK multiport rule (the slowest path at most 10% below
the fastest).

How a stall is read from fio's IOPS log, and at what resolution: :mod:`pytest_fabricqa.fio.stalls`. The fault's times must be on the log's clock: milliseconds since the job started, or Unix milliseconds with
``log_unix_epoch=1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_fabricqa.faults.inject import Fault
from pytest_fabricqa.fio.model import FioResult
from pytest_fabricqa.fio.stalls import HostSeries, Interval, Stall, stalls
from pytest_fabricqa.fio.verify import parse_mismatches
from pytest_fabricqa.lab.database import OracleSettings
from pytest_fabricqa.lab.model import FailoverSettings
from pytest_fabricqa.lab.thresholds import Thresholds, violations
from pytest_fabricqa.report.model import Mismatch

RECOVERY_FRACTION = 0.9
"""Recovered: throughput back to this fraction of the pre-fault mean."""
RECOVERY_HOLD_MS = 1000
"""Recovered means the mean over this long from the first completion on is back, not one busy interval."""
FAULT_REACH_MS = round(FailoverSettings().fault_reach_s * 1000)
"""The lab's default ``failover.fault_reach_s`` (:class:`~pytest_fabricqa.lab.model.FailoverSettings`), in ms."""
FAULT_LEAD_INTERVALS = 2
"""A stall that begins up to this many of fio's log intervals before the fault's recorded start is still the
fault's: fio's log puts an interval's end where its helper thread woke, so a gap shows up to an interval early. The
start is the host's time just before the break's script (faults.STARTED); when it was the time just after, the gap
began 113 ms before it on one recorded run (tests/data/failover, the brief outage of nvme-tcp) and 346 and 474 ms on
another (the full run of 2e765a0, tc's three commands), outside this lead."""
PARITY_PCT = 10.0
"""The Windows HLK multiport rule: no path more than 10% slower than another (a lab's ``max_path_imbalance_pct``)."""


def fault_stall(series: HostSeries, fault: Fault, reach_ms: int = FAULT_REACH_MS) -> Stall | None:
    """The stall the fault caused: the longest (the first of equals) that begins between
    :data:`FAULT_LEAD_INTERVALS` intervals before the fault and ``reach_ms`` after it (the lab's
    ``failover.fault_reach_s``), ends after the fault's start, and is longer than every stall the
    host showed before the fault (its jitter: at a few I/Os per interval an interval without a completion happens,
    and the run's first moments are left out). None when the fault caused none: I/O moved at once.

    Not the first stall up to the fault's end: with a seamless move, a 100 ms gap of jitter 31.5 s into a 30 s
    target-port outage was taken for the fault's stall, and the case said I/O had not moved until the path came
    back (nvme-tcp on nvmet, CI 2026-12-02; tests/data/failover/nvme-tcp-port-down-vnode1)."""
    found = stalls(series)
    jitter = max(
        (s.end_ms - s.start_ms for s in found if s.start_ms > series.start_ms and s.end_ms <= fault.start_ms),
        default=0,
    )
    reach = fault.start_ms + reach_ms
    caused = [
        s
        for s in found
        if fault.start_ms - FAULT_LEAD_INTERVALS * series.interval_ms <= s.start_ms <= reach
        and s.end_ms > fault.start_ms
        and s.end_ms - s.start_ms > jitter
    ]
    return max(caused, key=lambda s: s.end_ms - s.start_ms) if caused else None


def stall_rule(interval_ms: int, reach_ms: int = FAULT_REACH_MS) -> str:
    """How the fault's stall is measured, and at what resolution, in words for the report (from the constants
    :func:`fault_stall` uses)."""
    return (
        f"The fault's stall is the longest time without a completed I/O that begins between "
        f"{FAULT_LEAD_INTERVALS * interval_ms / 1000:g} s before the fault and {reach_ms / 1000:g} s after it "
        f"and is longer than every gap before the fault, read from fio's IOPS log in {interval_ms} ms intervals (up "
        f"to {2 * interval_ms / 1000:g} s short). The run's longest other gap is shown beside it and not gated; a gap "
        "before the fault longer than the stall limit fails the case as a lab that was not quiet."
    )


def other_stall(series: HostSeries, fault: Fault, reach_ms: int = FAULT_REACH_MS) -> Stall | None:
    """The run's longest gap that is not the fault's stall (the first of equals); None when there is none."""
    own = fault_stall(series, fault, reach_ms)
    others = [s for s in stalls(series) if s != own]
    return max(others, key=lambda s: s.end_ms - s.start_ms) if others else None


def quiet_before(series: HostSeries, fault: Fault) -> Stall | None:
    """The longest gap that ended before the fault began, leaving out the run's first moments (a gap from the
    run's start is fio starting, not the lab pausing); None when I/O flowed without one."""
    before = [s for s in stalls(series) if s.start_ms > series.start_ms and s.end_ms <= fault.start_ms]
    return max(before, key=lambda s: s.end_ms - s.start_ms) if before else None


def pre_fault_iops(series: HostSeries, fault: Fault) -> float | None:
    """The host's mean IOPS from the run's start to its last interval that ended before the fault; None when
    none did."""
    before = [i for i in series.intervals if i.end_ms <= fault.start_ms]
    if not before:
        return None
    span_ms = max(i.end_ms for i in before) - series.start_ms
    return sum(i.completions for i in before) * 1000.0 / span_ms if span_ms > 0 else None


def _first_interval_after(series: HostSeries, fault: Fault, reach_ms: int) -> Interval | None:
    # After the fault's stall if it caused one (I/O already on its way may complete just after the fault, as the
    # recorded receiver-stopped run shows); without a stall, the first interval begun after the fault.
    stall = fault_stall(series, fault, reach_ms)
    after = stall.end_ms - series.interval_ms / 2 if stall is not None else fault.start_ms
    return next((i for i in series.intervals if i.start_ms >= after), None)


def first_io_after(series: HostSeries, fault: Fault, reach_ms: int = FAULT_REACH_MS) -> float | None:
    """Seconds from the fault's start to the end of the first interval with completions after it (after the stall
    it caused, if any); None when no I/O completed after the fault within the run."""
    first = _first_interval_after(series, fault, reach_ms)
    return None if first is None else (first.end_ms - fault.start_ms) / 1000.0


def recovery_after(
    series: HostSeries,
    fault: Fault,
    *,
    fraction: float = RECOVERY_FRACTION,
    hold_ms: int = RECOVERY_HOLD_MS,
    reach_ms: int = FAULT_REACH_MS,
) -> float | None:
    """Seconds from the fault's start until throughput is back to ``fraction`` of the pre-fault mean: the end of
    the first interval (from the first I/O after the fault on) from which the mean over ``hold_ms`` reaches it.
    None when it never does while ``hold_ms`` of the run is left, or there was no I/O before the fault."""
    before = pre_fault_iops(series, fault)
    first = _first_interval_after(series, fault, reach_ms)
    if before is None or before <= 0 or first is None:
        return None
    wanted = fraction * before * hold_ms / 1000.0
    for interval in series.intervals:
        if interval.start_ms < first.start_ms:
            continue
        if interval.start_ms + hold_ms > series.end_ms:
            return None
        if series.completions(interval.start_ms, interval.start_ms + hold_ms) >= wanted:
            return (interval.end_ms - fault.start_ms) / 1000.0
    return None


@dataclass(frozen=True)
class ErrorCounts:
    """The errors fio reported in a run: failed I/Os and blocks that failed their verify."""

    io_errors: int
    verify_errors: int
    mismatches: tuple[Mismatch, ...] = ()


def count_errors(result: FioResult, messages: str) -> ErrorCounts:
    """Read a run's errors: ``messages`` is fio's stderr and stdout (where it names each failed verify).

    fio's ``total_err`` (only written with ``continue_on_error``) counts every error a job went on after, failed
    verifies included; a job that stopped at an error without it has ``error`` set and no ``total_err``, so it
    counts as one. Verify errors are the blocks fio's messages name (:func:`fio.verify.parse_mismatches`); I/O
    errors are the rest."""
    mismatches = parse_mismatches(messages, host=result.host)
    total = sum(max(job.total_err, 1 if job.error else 0) for job in result.jobs)
    return ErrorCounts(max(total - len(mismatches), 0), len(mismatches), mismatches)


@dataclass(frozen=True)
class FailoverFigures:
    """What one host saw of one fault."""

    host: str
    fault: Fault
    stall: Stall | None
    """The fault's stall (:func:`fault_stall`); None when I/O moved at once."""
    first_io_s: float | None
    """None: no I/O completed after the fault within the run."""
    recovery_s: float | None
    """None: throughput never came back to 90% of its pre-fault mean within the run."""
    pre_fault_iops: float | None
    io_errors: int = 0
    verify_errors: int = 0
    other_stall: Stall | None = None
    """The run's longest gap that is not the fault's stall, anywhere in the run (:func:`other_stall`)."""
    before_fault: Stall | None = None
    """The longest gap wholly before the fault, the run's first moments left out (:func:`quiet_before`)."""
    failback_s: float | None = None
    """Seconds from the fault's undoing to the end of the first sample in which the faulted path completed I/O
    (1 s samples, each a command's time apart); None: not seen within the watch, or not watched."""
    failback: str | None = None
    """What the failback watch found, a clause after the host: ``None`` when it was not watched (a fault of every
    path), else how it ended (:func:`pytest_fabricqa.failover.outage.watch_failback`)."""
    failback_due: bool = False
    """The faulted path shared the host's I/O with another path before the fault, so it must carry I/O again."""

    @property
    def stall_s(self) -> float:
        """The fault's stall in seconds (0 when the fault caused none: I/O moved at once)."""
        return self.stall.seconds if self.stall is not None else 0.0

    @property
    def other_stall_s(self) -> float:
        """The run's longest other gap in seconds (0 when there was none)."""
        return self.other_stall.seconds if self.other_stall is not None else 0.0

    def figures(self) -> dict[str, float]:
        """Metric name -> value, as a case records them; a figure that could not be measured is absent."""
        found: dict[str, float] = {
            "stall_s": self.stall_s,
            "other_stall_s": self.other_stall_s,
            "io_errors": float(self.io_errors),
            "verify_errors": float(self.verify_errors),
        }
        if self.first_io_s is not None:
            found["first_io_s"] = self.first_io_s
        if self.recovery_s is not None:
            found["recovery_s"] = self.recovery_s
        if self.failback_s is not None:
            found["failback_s"] = self.failback_s
        return found


def throughput_points(series: HostSeries, fault: Fault) -> dict[str, list[float]]:
    """The host's IOPS over time for the report's chart: ``t_s`` (each interval's end, seconds since the run's
    first logged interval), ``iops``, and ``fault_s`` (the fault's start and end on the same axis). A window fio
    logged no line for (no completion; a gap of a whole window or more) is drawn as zero: a point at zero after
    the last line before the gap and before the first line after it."""
    origin = series.start_ms
    interval = series.interval_ms
    t_s: list[float] = []
    iops: list[float] = []

    def add(ms: float, value: float) -> None:
        t_s.append(round((ms - origin) / 1000, 3))
        iops.append(round(value, 1))

    previous: Interval | None = None
    for item in series.intervals:
        if previous is not None and item.start_ms - previous.end_ms >= interval:
            add(previous.end_ms + interval / 2, 0.0)
            add(item.start_ms - interval / 2, 0.0)
        add(item.end_ms, item.completions * 1000 / max(item.end_ms - item.start_ms, 1))
        previous = item
    if previous is not None and series.end_ms - previous.end_ms > interval:
        add(previous.end_ms + interval / 2, 0.0)
        add(series.end_ms, 0.0)
    return {"t_s": t_s, "iops": iops, "fault_s": [round((fault.start_ms - origin) / 1000, 3),
                                                  round((fault.end_ms - origin) / 1000, 3)]}  # fmt: skip


def measure(
    series: HostSeries, fault: Fault, errors: ErrorCounts | None = None, *, reach_ms: int = FAULT_REACH_MS
) -> FailoverFigures:
    """Every failover figure of one host for one fault: the stall is the fault's own (:func:`fault_stall`), the
    run's other gaps a figure of their own (:func:`other_stall`, :func:`quiet_before`)."""
    errors = errors or ErrorCounts(0, 0)
    return FailoverFigures(
        series.host,
        fault,
        fault_stall(series, fault, reach_ms),
        first_io_after(series, fault, reach_ms),
        recovery_after(series, fault, reach_ms=reach_ms),
        pre_fault_iops(series, fault),
        errors.io_errors,
        errors.verify_errors,
        other_stall(series, fault, reach_ms),
        quiet_before(series, fault),
    )


def path_imbalance_pct(throughput: Mapping[str, float]) -> float:
    """Percent by which the slowest path is below the fastest, from each path's throughput (IOPS or MB/s) with
    every path up: 0 when they are equal, 100 when one path carried nothing."""
    if len(throughput) < 2:
        raise ValueError(f"path imbalance needs at least two paths, got {len(throughput)}")
    if any(value < 0 for value in throughput.values()):
        raise ValueError(f"a path's throughput cannot be negative: {dict(throughput)}")
    fastest = max(throughput.values())
    if fastest <= 0:
        raise ValueError("no path carried any I/O; the imbalance cannot be computed")
    return (fastest - min(throughput.values())) / fastest * 100.0


def imbalance_violations(throughput: Mapping[str, float], limits: Thresholds, *, host: str) -> list[str]:
    """The parity rule as messages: the imbalance against ``max_path_imbalance_pct``, naming both paths."""
    limit = limits.max_path_imbalance_pct
    if limit is None:
        return []
    imbalance = path_imbalance_pct(throughput)
    if imbalance <= limit:
        return []
    slow = min(throughput, key=lambda p: throughput[p])
    fast = max(throughput, key=lambda p: throughput[p])
    return violations(
        {"path_imbalance_pct": imbalance},
        Thresholds(max_path_imbalance_pct=limit),
        label=f"{host}, path {slow} against {fast} with every path up",
        gate="failover",
    )


def failover_violations(
    figures: FailoverFigures, limits: Thresholds, *, database: OracleSettings | None = None
) -> list[str]:
    """Every failover limit one host's figures break, each one sentence naming the host, the fault and the
    figure against its limit; with a lab ``database``, also the Oracle CSS budget the stall threatens (when the
    stall limit is broken, or the stall reached ``misscount`` whatever the limits say)."""
    label = f"{figures.host}, fault {figures.fault.name}"
    found: list[str] = []
    lifted: dict[str, None] = {"max_path_imbalance_pct": None}  # a property of the paths, not of a fault
    if limits.max_first_io_s is not None and figures.first_io_s is None:
        found.append(
            f"{label}: no I/O completed after the fault within the run "
            f"(the maximum to the first I/O is {limits.max_first_io_s:g} s)"
        )
        lifted["max_first_io_s"] = None
    if limits.max_recovery_s is not None and figures.recovery_s is None:
        found.append(
            f"{label}: throughput never came back to {RECOVERY_FRACTION:.0%} of its pre-fault mean within the run "
            f"(the maximum to recovery is {limits.max_recovery_s:g} s)"
        )
        lifted["max_recovery_s"] = None
    if figures.failback_s is None:
        # Not watched (a fault of every path), or a path that carried the I/O alone and the policy kept it off:
        # no figure to hold to a limit. A path that shared the I/O and carried none again is the failback missing.
        lifted["max_failback_s"] = None
        if figures.failback_due:
            seen = figures.failback or "the faulted path carried no I/O again after the fault was undone"
            found.append(f"{label}: {seen}: no failback")
    found.extend(violations(figures.figures(), limits.model_copy(update=lifted), label=label, gate="failover"))
    before = figures.before_fault
    if before is not None and limits.max_stall_s is not None and before.seconds > limits.max_stall_s:
        # A fault's stall is told from jitter by being longer than every gap before it (fault_stall): after a gap
        # longer than the limit, a fault's stall beyond the limit could hide. The lab, not the fabric, failed.
        found.append(
            f"{label}: the lab was not quiet before the fault: no I/O completed for {before.seconds:.1f} s, "
            f"{(figures.fault.start_ms - before.end_ms) / 1000:.1f} s before the fault began (more than the maximum "
            f"stall, {limits.max_stall_s:g} s), so the fault's own stall cannot be told from it"
        )
    if database is not None:
        stall_broken = limits.max_stall_s is not None and figures.stall_s > limits.max_stall_s
        if stall_broken or figures.stall_s >= database.misscount:
            found.append(f"{label}: {rac_budget(figures.stall_s, database)}")
    return found


def rac_budget(stall_s: float, database: OracleSettings) -> str:
    """What a stall of ``stall_s`` seconds means for the lab's RAC cluster, against CSS misscount and
    disktimeout (a clause: the caller prefixes the host and fault)."""
    misscount, disktimeout = database.misscount, database.disktimeout
    stall = f"a {stall_s:.1f} s stall"
    if stall_s >= disktimeout:
        return (
            f"{stall} is at or above Oracle CSS disktimeout ({disktimeout} s): a RAC node whose voting disks stall "
            "this long is evicted"
        )
    if stall_s >= misscount:
        return (
            f"{stall} is at or above Oracle CSS misscount ({misscount} s): within disktimeout ({disktimeout} s), "
            "but a node whose voting disks stall this long while the cluster reconfigures is evicted"
        )
    return f"{stall} is within Oracle CSS misscount ({misscount} s) and disktimeout ({disktimeout} s)"
