"""fio's time-series logs: per-host IOPS and latency over time, and cluster-wide percentiles from histograms.

A case with time-series logging asks fio for three logs per job (see :func:`log_options`):

- ``write_iops_log`` + ``log_avg_msec``: ``<prefix>_iops.<job>.log``, lines ``time_ms, iops, ddir, bs, offset``
  (the value is the mean IOPS over the window);
- ``write_lat_log``: ``<prefix>_lat.<job>.log`` (mean total latency in ns per window; ``_clat``/``_slat`` too);
- ``write_hist_log`` + ``log_hist_msec``: ``<prefix>_clat_hist.<job>.log``, lines ``time_ms, ddir, bs,
  c0, ..., c1855``: the completion-latency histogram of the window in fio's 1,856 bins (29 groups of 64,
  ``FIO_IO_U_PLAT_BITS`` 6; the layout ``tools/hist/fio-histo-log-pctiles.py`` reads).

In client/server mode the *client* writes every server's logs, on the controller, under the path the job file
gave plus ``.<server address>`` (fio 3.33 ``client.c``: ``sprintf(log_pathname, "%s.%s", pdu->name,
client->hostname)``): ``vnode1_clat_hist.1.log.10.10.10.17``. Each host's job file gets its own prefix (the lab
host name), so two servers behind one address never overwrite each other.

Recorded with fio 3.33 (``tests/data/fio/series``): a histogram log that travelled through the client is not
per window: line k holds the windows k, k-2, k-4, ... added up (two interleaved running sums; the last two lines
together equal the job's I/O count in the JSON). :func:`window_counts` undoes that; a stand-alone run's lines
are per window already.

Percentiles across jobs and hosts come from summed bins, never from averaged percentiles: windows are put on one
grid (``round(time / log_hist_msec)``), their bins added, and the percentile read from the sum by fio's rule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.fio.model import LatencyHistogram
from pytest_fabricqa.report.series import DEFAULT_LOG_MSEC, TimeSeries, Window

# fio's stat.h: FIO_IO_U_PLAT_BITS 6, FIO_IO_U_PLAT_VAL 64, FIO_IO_U_PLAT_GROUP_NR 29.
PLAT_BITS = 6
PLAT_VAL = 1 << PLAT_BITS
PLAT_GROUPS = 29
PLAT_BINS = PLAT_GROUPS * PLAT_VAL  # 1856

# The percentiles a time series keeps per window.
SERIES_PERCENTILES: tuple[float, ...] = (50.0, 99.0)

# <prefix>_<kind>.<job>.log[.<server address>]
_LOG_NAME = re.compile(
    r"^(?P<prefix>.+?)_(?P<kind>iops|lat|clat|slat|bw|clat_hist)\.(?P<job>\d+)\.log(?:\.(?P<host>.+))?$"
)


class LogError(FabricQAError, ValueError):
    """A log file is not what fio writes (wrong column count, not numbers, unknown name)."""


def log_options(
    prefix: str, *, avg_msec: int = DEFAULT_LOG_MSEC, hist_msec: int | None = DEFAULT_LOG_MSEC
) -> list[tuple[str, str]]:
    """The job-file options that make fio write the IOPS, latency and histogram logs under ``prefix``; with
    ``hist_msec`` None, the IOPS log alone (what a point's stall check reads, :mod:`pytest_fabricqa.fio.stalls`)."""
    if avg_msec < 1 or (hist_msec is not None and hist_msec < 1):
        raise ValueError("log intervals must be at least 1 ms")
    if hist_msec is None:
        return [("write_iops_log", prefix), ("log_avg_msec", str(avg_msec))]
    return [
        ("write_iops_log", prefix),
        ("write_lat_log", prefix),
        ("write_hist_log", prefix),
        ("log_avg_msec", str(avg_msec)),
        ("log_hist_msec", str(hist_msec)),
    ]


def plat_idx_to_val(index: int) -> int:
    """The latency (ns) fio's bin ``index`` stands for: fio's ``plat_idx_to_val`` (the middle of the bin), the
    same value json+ uses as the bin's key."""
    if index < 0 or index >= PLAT_BINS:
        raise ValueError(f"fio has latency bins 0..{PLAT_BINS - 1}, not {index}")
    if index < (PLAT_VAL << 1):
        return index
    error_bits = (index >> PLAT_BITS) - 1
    base = 1 << (error_bits + PLAT_BITS)
    k = index % PLAT_VAL
    return int(base + (k + 0.5) * (1 << error_bits))


@dataclass(frozen=True)
class LogName:
    """What a log file's name says: ``vnode1_clat_hist.2.log.10.10.10.17``."""

    prefix: str
    kind: str
    job: int
    address: str | None = None


def parse_log_name(name: str) -> LogName | None:
    """Split a log file name (without folder); None for a file that is not one of fio's logs."""
    match = _LOG_NAME.match(name.rsplit("/", 1)[-1])
    if match is None:
        return None
    return LogName(match["prefix"], match["kind"], int(match["job"]), match["host"])


@dataclass(frozen=True)
class Sample:
    """One line of an IOPS/latency/bandwidth log: ``value`` over the window ending at ``time_ms``."""

    time_ms: int
    value: int
    ddir: int
    bs: int


@dataclass(frozen=True)
class HistRecord:
    """One line of a histogram log: the window's completion-latency counts in fio's 1,856 bins."""

    time_ms: int
    ddir: int
    bs: int
    counts: tuple[int, ...]


def _numbers(line: str, where: str) -> list[int]:
    try:
        return [int(token) for token in line.split(",")]
    except ValueError:
        raise LogError(f"{where}: not a line of comma-separated integers: {line[:60]!r}") from None


def parse_log(text: str, *, where: str = "log") -> tuple[Sample, ...]:
    """An IOPS, latency or bandwidth log (``time, value, ddir, bs[, offset[, prio]]``)."""
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        values = _numbers(line, f"{where}:{number}")
        if len(values) < 4:
            raise LogError(f"{where}:{number}: expected time, value, direction, block size; got {line!r}")
        samples.append(Sample(values[0], values[1], values[2], values[3]))
    return tuple(samples)


def parse_hist_log(text: str, *, where: str = "histogram log") -> tuple[HistRecord, ...]:
    """A histogram log (``time, ddir, bs, c0..c1855``); other column counts (log_hist_coarseness) are refused."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        values = _numbers(line, f"{where}:{number}")
        if len(values) != 3 + PLAT_BINS:
            raise LogError(
                f"{where}:{number}: {len(values) - 3} latency bins, expected {PLAT_BINS} "
                "(log_hist_coarseness must stay 0)"
            )
        if min(values) < 0:
            raise LogError(f"{where}:{number}: negative count")
        records.append(HistRecord(values[0], values[1], values[2], tuple(values[3:])))
    return tuple(records)


def window_counts(records: Sequence[HistRecord], *, through_client: bool) -> tuple[HistRecord, ...]:
    """Each record's own window. ``through_client``: fio 3.33's client writes running sums over every other
    window (see the module docstring), so a window is its line minus the line two before (per direction)."""
    if not through_client:
        return tuple(records)
    out: list[HistRecord] = []
    by_ddir: dict[int, list[HistRecord]] = {}
    for record in records:
        chain = by_ddir.setdefault(record.ddir, [])
        before = chain[-2].counts if len(chain) >= 2 else None
        chain.append(record)
        if before is None:
            out.append(record)
            continue
        # A negative difference would mean the sums are not what fio 3.33 writes; clamp rather than invent I/O.
        counts = tuple(max(now - then, 0) for now, then in zip(record.counts, before, strict=True))
        out.append(HistRecord(record.time_ms, record.ddir, record.bs, counts))
    return tuple(out)


def histogram_of(counts: Sequence[int]) -> LatencyHistogram:
    """A window's bins as a :class:`LatencyHistogram` keyed by latency in ns (as json+ keys its bins)."""
    return LatencyHistogram(tuple((plat_idx_to_val(i), c) for i, c in enumerate(counts) if c))


def _slot(time_ms: int, interval_ms: int) -> int:
    # fio writes a window a few ms after its nominal end (501, 1005, 1510): round to the grid.
    return max(1, round(time_ms / interval_ms))


def build_timeseries(
    files: Mapping[str, str],
    *,
    host_of: Mapping[str, str],
    interval_ms: int = DEFAULT_LOG_MSEC,
    through_client: bool = True,
) -> TimeSeries:
    """Turn fio's log files (file name -> text) into per-host and cluster series on one time grid.

    ``host_of`` maps a log prefix (the job file's ``write_*_log`` value, folder removed) to the lab host name.
    Per host and window: IOPS summed over its jobs (IOPS log), mean latency weighted by each job's IOPS
    (latency log), percentiles from the jobs' summed histogram bins. The cluster: IOPS summed over hosts,
    percentiles from every host's bins summed, mean latency weighted by IOPS.
    """
    iops: dict[str, dict[int, float]] = {}
    lat: dict[str, dict[int, list[tuple[float, float]]]] = {}
    bins: dict[str, dict[int, list[int]]] = {}
    notes: list[str] = []
    used: list[str] = []
    job_iops: dict[tuple[str, int], dict[int, float]] = {}
    pending_lat: list[tuple[str, int, Sequence[Sample]]] = []
    for name, text in sorted(files.items()):
        parsed = parse_log_name(name)
        if parsed is None:
            continue
        prefix = parsed.prefix.rsplit("/", 1)[-1]
        host = host_of.get(prefix)
        if host is None:
            notes.append(f"{name}: no lab host uses the log prefix {prefix!r}; left out")
            continue
        if parsed.kind == "iops":
            used.append(name)
            per_job = job_iops.setdefault((host, parsed.job), {})
            for sample in parse_log(text, where=name):
                slot = _slot(sample.time_ms, interval_ms)
                per_job[slot] = per_job.get(slot, 0.0) + sample.value
                iops.setdefault(host, {})[slot] = iops.setdefault(host, {}).get(slot, 0.0) + sample.value
        elif parsed.kind == "lat":
            used.append(name)
            pending_lat.append((host, parsed.job, parse_log(text, where=name)))
        elif parsed.kind == "clat_hist":
            used.append(name)
            records = window_counts(parse_hist_log(text, where=name), through_client=through_client)
            host_bins = bins.setdefault(host, {})
            for record in records:
                slot = _slot(record.time_ms, interval_ms)
                summed = host_bins.setdefault(slot, [0] * PLAT_BINS)
                for i, count in enumerate(record.counts):
                    if count:
                        summed[i] += count
    for host, job, samples in pending_lat:
        weights = job_iops.get((host, job), {})
        for sample in samples:
            slot = _slot(sample.time_ms, interval_ms)
            # Latency logs are in ns; a job's mean counts as much as the I/Os it did in the window.
            lat.setdefault(host, {}).setdefault(slot, []).append((sample.value / 1000.0, weights.get(slot, 1.0)))

    # A window some of a host's jobs did not log (the run's last, cut short) would read as a drop in IOPS.
    for host in list(iops):
        jobs = [per_job for (h, _), per_job in job_iops.items() if h == host]
        partial = sorted(slot for slot in iops[host] if sum(slot in per_job for per_job in jobs) < len(jobs))
        for slot in partial:
            for table in (iops, lat, bins):
                table.get(host, {}).pop(slot, None)
        # The latency log's last line (written as the job ends, past the last full window) has no IOPS beside it.
        for table in (lat, bins):
            for slot in set(table.get(host, {})) - set(iops[host]):
                table[host].pop(slot)
        if partial:
            notes.append(
                f"{host}: {len(partial)} window(s) not logged by every job left out (t = "
                + ", ".join(f"{slot * interval_ms / 1000:g} s" for slot in partial)
                + ")"
            )
    hosts = sorted(set(iops) | set(lat) | set(bins))
    series: dict[str, tuple[Window, ...]] = {}
    for host in hosts:
        slots = sorted(set(iops.get(host, {})) | set(lat.get(host, {})) | set(bins.get(host, {})))
        series[host] = tuple(
            _window(slot, interval_ms, iops.get(host, {}).get(slot), lat.get(host, {}).get(slot, []),
                    bins.get(host, {}).get(slot))
            for slot in slots
        )  # fmt: skip
    cluster_slots = sorted({slot for host in hosts for slot in _slots(iops, lat, bins, host)})
    cluster: list[Window] = []
    for slot in cluster_slots:
        # A window counts for the cluster only when every host logged it: a missing host would read as a drop.
        if not all(slot in iops.get(h, {}) or slot in bins.get(h, {}) for h in hosts):
            continue
        host_iops = [iops[h][slot] for h in hosts if slot in iops.get(h, {})]
        summed_bins: list[int] | None = None
        for h in hosts:
            counts = bins.get(h, {}).get(slot)
            if counts is not None:
                summed_bins = (
                    list(counts) if summed_bins is None else [a + b for a, b in zip(summed_bins, counts, strict=True)]
                )
        lat_pairs = [pair for h in hosts for pair in lat.get(h, {}).get(slot, [])]
        cluster.append(_window(slot, interval_ms, sum(host_iops) if host_iops else None, lat_pairs, summed_bins))
    return TimeSeries(interval_ms, series, tuple(cluster), tuple(notes), tuple(used))


def _slots(
    iops: Mapping[str, Mapping[int, float]],
    lat: Mapping[str, Mapping[int, Any]],
    bins: Mapping[str, Mapping[int, Any]],
    host: str,
) -> Iterable[int]:
    return set(iops.get(host, {})) | set(lat.get(host, {})) | set(bins.get(host, {}))


def _window(
    slot: int,
    interval_ms: int,
    iops: float | None,
    lat_pairs: Sequence[tuple[float, float]],
    counts: Sequence[int] | None,
) -> Window:
    p50 = p99 = None
    ios = 0
    if counts is not None:
        histogram = histogram_of(counts)
        ios = histogram.samples
        p50_ns, p99_ns = (histogram.percentile_ns(p) for p in SERIES_PERCENTILES)
        p50 = None if p50_ns is None else p50_ns / 1000.0
        p99 = None if p99_ns is None else p99_ns / 1000.0
    weight = sum(w for _, w in lat_pairs)
    mean = sum(v * w for v, w in lat_pairs) / weight if lat_pairs and weight > 0 else None
    if mean is not None and math.isnan(mean):
        mean = None
    return Window(slot * interval_ms / 1000.0, iops, mean, p50, p99, ios)
