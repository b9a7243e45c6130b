"""What one fio run measured, as frozen dataclasses (latency in microseconds, throughput in bytes/s).

These are built once, at the edge, by :mod:`pytest_fabricqa.fio.parse`; nothing else in the plugin reads
fio's JSON. The aggregate figures of a run (``FioResult.read`` / ``.write``) are fio's own when fio reported
one entry (``group_reporting``, or a single job); otherwise they are combined here, exactly where that is
possible (sums, sample-weighted means, merged json+ histograms) and left out where it is not, with the
reason in ``FioResult.missing``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

DIRECTIONS: tuple[str, str] = ("read", "write")

# The percentiles the plugin reports; fio's default percentile list contains all four.
REPORTED_PERCENTILES: tuple[float, ...] = (50.0, 99.0, 99.9, 99.99)

# fio's default percentile list, used when percentiles are computed from merged json+ histograms.
FIO_DEFAULT_PERCENTILES: tuple[float, ...] = (
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99,
)  # fmt: skip


@dataclass(frozen=True)
class LatencyHistogram:
    """fio's json+ completion-latency bins: (latency in ns, number of I/Os), sorted by latency.

    fio's bins have the same edges on every job and host, so histograms merge by adding counts, and a
    percentile from merged bins is exact in the same sense as fio's own (fio computes its percentiles
    from these very bins).
    """

    bins: tuple[tuple[int, int], ...]

    @property
    def samples(self) -> int:
        """Number of I/Os counted in the histogram."""
        return sum(count for _, count in self.bins)

    def percentile_ns(self, percent: float) -> float | None:
        """The latency (ns) at ``percent``, by fio's rule: the first bin where the running count reaches
        ``percent``/100 of all samples. None for an empty histogram."""
        total = self.samples
        if total == 0:
            return None
        target = percent / 100.0 * total
        running = 0
        for value_ns, count in self.bins:
            running += count
            if running >= target:
                return float(value_ns)
        return float(self.bins[-1][0])

    @classmethod
    def merge(cls, histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
        """Add the counts of several histograms (jobs, hosts) bin by bin."""
        counts: dict[int, int] = {}
        for histogram in histograms:
            for value_ns, count in histogram.bins:
                counts[value_ns] = counts.get(value_ns, 0) + count
        return cls(tuple(sorted(counts.items())))


@dataclass(frozen=True)
class DirectionStats:
    """One direction (read or write) of one job, one host or a whole run.

    ``lat_mean_us`` is fio's total latency (``lat``: submission + completion), the figure fio prints as
    "lat (usec): avg"; percentiles are completion latency (``clat``), fio's default percentile basis.
    """

    direction: str
    total_ios: int = 0
    io_bytes: int = 0
    runtime_ms: int = 0
    iops: float = 0.0
    bytes_per_s: float = 0.0
    samples: int = 0
    lat_mean_us: float | None = None
    clat_mean_us: float | None = None
    # (percent, latency in µs), as fio listed them (or as computed from merged bins).
    percentiles_us: tuple[tuple[float, float], ...] = ()
    histogram: LatencyHistogram | None = None
    lat_max_us: float | None = None
    """fio's longest total latency (``lat_ns.max``) of the direction, µs; None when it did no I/O."""

    @property
    def active(self) -> bool:
        """True when this direction did any I/O."""
        return self.total_ios > 0 or self.samples > 0

    @property
    def mbps(self) -> float:
        """Throughput in decimal MB/s (bytes/s / 1e6), the unit of the seed reports and of link rates."""
        return self.bytes_per_s / 1e6

    def percentile_us(self, percent: float) -> float | None:
        """Completion latency at ``percent`` in µs: fio's figure if it listed it, else from the json+
        histogram, else None."""
        for listed, value in self.percentiles_us:
            if math.isclose(listed, percent, abs_tol=1e-6):
                return value
        if self.histogram is not None:
            value_ns = self.histogram.percentile_ns(percent)
            return None if value_ns is None else value_ns / 1000.0
        return None

    @property
    def p50_us(self) -> float | None:
        """Median completion latency (µs)."""
        return self.percentile_us(50.0)

    @property
    def p99_us(self) -> float | None:
        """99th percentile completion latency (µs)."""
        return self.percentile_us(99.0)

    @property
    def p999_us(self) -> float | None:
        """99.9th percentile completion latency (µs)."""
        return self.percentile_us(99.9)

    @property
    def p9999_us(self) -> float | None:
        """99.99th percentile completion latency (µs)."""
        return self.percentile_us(99.99)


@dataclass(frozen=True)
class SteadyStateStats:
    """fio's ``steadystate`` block of a job run with ``ss=`` (fio stops the job once the criterion holds).

    ``criterion`` is the figure fio measured, in the unit of ``limit`` (a slope or deviation, percent when the
    ``ss=`` limit had ``%``); ``iops`` are the per-second IOPS of the last ``ss_dur`` seconds fio judged.
    """

    spec: str
    attained: bool
    duration_s: int
    criterion: str
    iops_mean: float = 0.0
    iops: tuple[float, ...] = ()

    def describe(self) -> str:
        """``iops_slope:20% not reached (measured 17.9% over the last 2 s)``."""
        state = "reached" if self.attained else "not reached"
        return f"{self.spec} {state} (measured {self.criterion} over the last {self.duration_s} s)"


@dataclass(frozen=True)
class JobStats:
    """One entry of fio's ``jobs`` (or ``client_stats``) list.

    ``usr_cpu_pct``/``sys_cpu_pct`` are fio's: percent of one CPU used by the job's processes on the
    host that ran fio (the initiator), not the target's CPU.
    """

    name: str
    read: DirectionStats
    write: DirectionStats
    error: int = 0
    usr_cpu_pct: float = 0.0
    sys_cpu_pct: float = 0.0
    runtime_ms: int = 0
    options: tuple[tuple[str, str], ...] = ()
    # Set only in client/server output: the server this entry came from.
    hostname: str | None = None
    port: int | None = None
    start_ms: int | None = None
    """fio's ``job_start`` (fio >= 3.36): when the job started, ms since the epoch on its host's clock
    (``job_start_clock_id``, CLOCK_REALTIME by default); None from older fio."""
    steadystate: SteadyStateStats | None = None
    total_err: int = 0
    """fio's ``total_err``: errors the job went on after (``continue_on_error``), e.g. failed verifies."""

    def direction(self, name: str) -> DirectionStats:
        """``read`` or ``write``."""
        return _pick_direction(self.read, self.write, name)


@dataclass(frozen=True)
class FioResult:
    """One fio run on one host (or one server's share of a client/server run, or its total).

    ``read``/``write`` and the CPU figures are for the whole run; ``jobs`` keeps fio's entries as they
    were. ``missing`` names every aggregate figure that could not be computed, and why.
    """

    fio_version: str
    host: str
    jobs: tuple[JobStats, ...]
    read: DirectionStats
    write: DirectionStats
    usr_cpu_pct: float
    sys_cpu_pct: float
    global_options: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    timestamp: int | None = None
    # fio's own output as it was printed, kept so reports can attach the raw JSON.
    raw_output: str = field(default="", repr=False, compare=False)

    def direction(self, name: str) -> DirectionStats:
        """``read`` or ``write``."""
        return _pick_direction(self.read, self.write, name)

    @property
    def errors(self) -> tuple[str, ...]:
        """One sentence per job that ended with a non-zero ``error`` (fio's errno)."""
        return tuple(
            f"job {job.name!r}{_where(job)} ended with error {job.error} ({os_strerror(job.error)})"
            for job in self.jobs
            if job.error
        )

    @property
    def start_ms(self) -> int | None:
        """When the first of its jobs started (fio's ``job_start``, ms since the epoch), or None if not reported."""
        starts = [job.start_ms for job in self.jobs if job.start_ms]
        return min(starts) if starts else None

    @property
    def randseeds(self) -> tuple[int, ...]:
        """The ``randseed`` values fio reports in its jobs' options (job sections), each once, in order."""
        seeds: list[int] = []
        for job in self.jobs:
            value = dict(job.options).get("randseed")
            if value is not None and value.isdigit() and int(value) not in seeds:
                seeds.append(int(value))
        return tuple(seeds)

    @property
    def options(self) -> dict[str, str]:
        """fio's global options, then the first job's own options over them."""
        merged = dict(self.global_options)
        if self.jobs:
            merged.update(self.jobs[0].options)
        return merged

    @property
    def dominant_direction(self) -> str:
        """The direction with more I/Os (read on a tie): the one whose latency represents the run."""
        return "write" if self.write.total_ios > self.read.total_ios else "read"


@dataclass(frozen=True)
class FioServer:
    """A lab host running ``fio --server``: its lab name, the address the client connects to, the port."""

    name: str
    address: str
    port: int = 8765

    @property
    def connect_string(self) -> str:
        """fio's ``type:host,port`` form (``ip6:`` for an IPv6 address, since its colons are ambiguous)."""
        kind = "ip6" if ":" in self.address else "ip"
        return f"{kind}:{self.address},{self.port}"


@dataclass(frozen=True)
class ClientServerResult:
    """A client/server run (one fio client driving ``fio --server`` on several hosts at once).

    ``hosts`` holds each server's figures as a :class:`FioResult` named after the host; ``total`` is
    fio's "All clients" entry, with completion-latency percentiles filled in from the hosts' merged json+
    histograms when fio left them out (it always does); what could not be filled is in ``total.missing``.
    """

    fio_version: str
    hosts: tuple[FioResult, ...]
    total: FioResult
    notes: tuple[str, ...] = field(default=())
    raw_output: str = field(default="", repr=False, compare=False)
    # The time-series logs fio's client wrote (file name -> text), when the run asked for them.
    logs: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def host(self, name: str) -> FioResult:
        """The figures of the server called ``name`` (KeyError naming the known hosts if absent)."""
        for result in self.hosts:
            if result.host == name:
                return result
        known = ", ".join(result.host for result in self.hosts) or "none"
        raise KeyError(f"no fio server {name!r} in this client/server result (hosts: {known})")


def _pick_direction(read: DirectionStats, write: DirectionStats, name: str) -> DirectionStats:
    if name == "read":
        return read
    if name == "write":
        return write
    raise ValueError(f"direction must be 'read' or 'write', not {name!r}")


def _where(job: JobStats) -> str:
    if job.hostname is None:
        return ""
    return f" on {job.hostname}" + (f":{job.port}" if job.port is not None else "")


def os_strerror(errno: int) -> str:
    """The C library's text for an errno fio reported (fio's ``error`` field is an errno)."""
    try:
        return os.strerror(errno)
    except ValueError:
        return "unknown error"


def combine_directions(direction: str, parts: Sequence[DirectionStats]) -> tuple[DirectionStats, tuple[str, ...]]:
    """Combine one direction of several jobs or hosts into one, and say what could not be combined.

    IOPS, bytes/s, I/O counts add up; mean latencies are weighted by sample count; percentiles come from
    the one active part as it is, or from merged json+ histograms; without histograms they are missing.
    """
    active = [part for part in parts if part.active]
    if not active:
        return DirectionStats(direction), ()
    if len(active) == 1:
        only = active[0]
        summed = DirectionStats(
            direction,
            total_ios=sum(p.total_ios for p in parts),
            io_bytes=sum(p.io_bytes for p in parts),
            runtime_ms=max(p.runtime_ms for p in parts),
            iops=sum(p.iops for p in parts),
            bytes_per_s=sum(p.bytes_per_s for p in parts),
            samples=only.samples,
            lat_mean_us=only.lat_mean_us,
            clat_mean_us=only.clat_mean_us,
            percentiles_us=only.percentiles_us,
            histogram=only.histogram,
        )
        return summed, ()
    missing: list[str] = []
    histogram: LatencyHistogram | None = None
    percentiles: tuple[tuple[float, float], ...] = ()
    histograms = [part.histogram for part in active if part.histogram is not None]
    if len(histograms) == len(active):
        histogram = LatencyHistogram.merge(histograms)
        computed = [(p, histogram.percentile_ns(p)) for p in FIO_DEFAULT_PERCENTILES]
        percentiles = tuple((p, v / 1000.0) for p, v in computed if v is not None)
    else:
        missing.append(
            f"{direction} latency percentiles: fio reported {len(active)} separate parts and percentiles "
            "do not add up; only json+ output carries the histograms that combine exactly"
        )
    return (
        DirectionStats(
            direction,
            total_ios=sum(p.total_ios for p in parts),
            io_bytes=sum(p.io_bytes for p in parts),
            runtime_ms=max(p.runtime_ms for p in parts),
            iops=sum(p.iops for p in parts),
            bytes_per_s=sum(p.bytes_per_s for p in parts),
            samples=sum(p.samples for p in active),
            lat_mean_us=_weighted_mean([(p.lat_mean_us, p.samples) for p in active]),
            clat_mean_us=_weighted_mean([(p.clat_mean_us, p.samples) for p in active]),
            percentiles_us=percentiles,
            histogram=histogram,
        ),
        tuple(missing),
    )


def _weighted_mean(pairs: Sequence[tuple[float | None, int]]) -> float | None:
    known = [(value, weight) for value, weight in pairs if value is not None and weight > 0]
    weight = sum(w for _, w in known)
    if not known or weight == 0:
        return None
    return sum(value * w for value, w in known) / weight


def cpu_mean(jobs: Sequence[JobStats]) -> tuple[float, float]:
    """usr/sys CPU of several jobs as fio's group_reporting computes it: the mean per job, weighted by
    each job's runtime (fio sums CPU time and runtime over the group's jobs)."""
    weight = sum(job.runtime_ms for job in jobs)
    if not jobs:
        return 0.0, 0.0
    if weight == 0:
        return (
            sum(job.usr_cpu_pct for job in jobs) / len(jobs),
            sum(job.sys_cpu_pct for job in jobs) / len(jobs),
        )
    return (
        sum(job.usr_cpu_pct * job.runtime_ms for job in jobs) / weight,
        sum(job.sys_cpu_pct * job.runtime_ms for job in jobs) / weight,
    )


def options_tuple(options: Mapping[str, object] | None) -> tuple[tuple[str, str], ...]:
    """fio's option mapping as hashable (name, value) pairs, values as strings."""
    if not options:
        return ()
    return tuple((str(name), str(value)) for name, value in options.items())
