"""Stalls in fio's IOPS log: the times in which none of a host's jobs completed an I/O.

Read by the failover suite (the fault's stall, :mod:`pytest_fabricqa.failover.figures`) and by every performance
point (:func:`pytest_fabricqa.measure.point.point_stalls`).

What fio 3.33 writes when nothing completes (recorded in ``tests/data/fio/failover``):

- **No line at all.** fio's ``stat.c`` skips an interval with no new I/O (``if (!delta) continue; /* No entries
  for interval */``), whether fio is pausing (``thinktime``) or its I/O is blocked in the kernel (a stopped
  receiver): a window without a line had zero completions. A zero is never written.
- The line after such a gap covers one interval again (the helper thread kept the window clock going).
- **fio itself stopped** (SIGSTOP): no lines while it is stopped, then one line whose value is the mean over the
  whole stop (``spent`` is the time since the last line): small but not zero (``20`` IOPS after 2 s at 500).
  Read as one interval with completions, it ends the stall at the start of its interval: off by at most one.

So each log line stands for the interval of ``log_avg_msec`` that ends at its time, with ``value x interval``
completions, and every moment no line covers had none. A stall measured that way is at most two intervals short
of the real one (the intervals it starts and ends in hold completions, so they count as busy); the first I/O and
the recovery are reported at the end of their interval (at most one interval late). The fault's times and the
run's start and end must be on the log's clock: milliseconds since the job started, or Unix milliseconds with
``log_unix_epoch=1``. A stall that lasts until fio ends leaves no trace in the log but the run's end: that is
why the end is a required input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_fabricqa.fio.logs import parse_log, parse_log_name
from pytest_fabricqa.fio.model import FioResult


@dataclass(frozen=True)
class Interval:
    """One line of fio's IOPS log: ``completions`` I/Os in the interval that ends at ``end_ms``."""

    start_ms: int
    end_ms: int
    completions: float


@dataclass(frozen=True)
class HostSeries:
    """One host's fio IOPS logs (all its jobs, both directions) as intervals on one clock."""

    host: str
    interval_ms: int
    intervals: tuple[Interval, ...]
    """Every logged interval with completions, ordered by its end; fio writes none for an interval without."""
    start_ms: int
    end_ms: int
    """When the run started and ended on the log's clock (a stall can run until the end and leave no line)."""

    def completions(self, start_ms: float, end_ms: float) -> float:
        """I/Os completed in the intervals that lie within ``start_ms``..``end_ms`` (half an interval of slack:
        fio writes a line a few ms after its interval's nominal end)."""
        slack = self.interval_ms / 2
        return sum(
            i.completions for i in self.intervals if i.start_ms >= start_ms - slack and i.end_ms <= end_ms + slack
        )


def host_series(host: str, logs: Mapping[str, str], *, interval_ms: int, start_ms: int, end_ms: int) -> HostSeries:
    """A host's series from its fio IOPS logs (file name -> text; latency and histogram logs are ignored).

    ``interval_ms`` is the run's ``log_avg_msec``. ``start_ms``/``end_ms``: the run's start and end on the logs'
    clock (0 and the longest ``job_runtime`` for fio's default clock, see :func:`run_span_ms`)."""
    if interval_ms < 1:
        raise ValueError("the log interval must be at least 1 ms")
    if end_ms < start_ms:
        raise ValueError(f"{host}: the run ends ({end_ms} ms) before it starts ({start_ms} ms)")
    intervals: list[Interval] = []
    for name, text in sorted(logs.items()):
        parsed = parse_log_name(name)
        if parsed is None or parsed.kind != "iops":
            continue
        for sample in parse_log(text, where=name):
            if sample.value > 0:
                completions = sample.value * interval_ms / 1000.0
                intervals.append(Interval(sample.time_ms - interval_ms, sample.time_ms, completions))
    intervals.sort(key=lambda i: (i.end_ms, i.start_ms))
    return HostSeries(host, interval_ms, tuple(intervals), start_ms, end_ms)


def run_span_ms(result: FioResult) -> tuple[int, int]:
    """The run's start and end on fio's default log clock (ms since the job started): 0 and the longest
    ``job_runtime``. With ``log_unix_epoch=1`` the caller gives Unix times instead."""
    return 0, max((job.runtime_ms for job in result.jobs), default=0)


@dataclass(frozen=True)
class Stall:
    """A time in which none of a host's jobs completed an I/O."""

    start_ms: int
    end_ms: int

    @property
    def seconds(self) -> float:
        """Its length in seconds."""
        return (self.end_ms - self.start_ms) / 1000.0


def stalls(series: HostSeries) -> tuple[Stall, ...]:
    """Every gap between the host's intervals with completions, in order, from the run's start to its end. A gap
    counts when it is longer than half an interval (consecutive lines of fio are an interval apart, give or take
    a ms). The run's last interval is never logged (fio writes no line for a partial one), so the run is taken to
    end an interval early."""
    found: list[Stall] = []
    busy_until = series.start_ms
    tail = series.end_ms - series.interval_ms
    edges = [(i.start_ms, i.end_ms) for i in series.intervals] + [(tail, tail)]
    for start, end in edges:
        if start - busy_until > series.interval_ms / 2:
            found.append(Stall(busy_until, start))
        busy_until = max(busy_until, end)
    return tuple(found)


def longest_stall(series: HostSeries) -> Stall | None:
    """The longest stall of the run (the first of equals); None when I/O never paused."""
    found = stalls(series)
    return max(found, key=lambda s: s.end_ms - s.start_ms) if found else None
