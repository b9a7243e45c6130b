"""The figures a case is judged and reported on, under the names the report and thresholds share."""

from __future__ import annotations

import math

from pytest_fabricqa.core.metrics import CORE_METRICS
from pytest_fabricqa.fio.model import ClientServerResult, FioResult

# Every figure name figures() may return: the vocabulary's core metrics, so the results file, the report's columns
# and the threshold keys share one list.
FIGURE_NAMES: tuple[str, ...] = CORE_METRICS


def figures(result: FioResult, direction: str | None = None) -> dict[str, float]:
    """The run's figures by name (see :data:`FIGURE_NAMES`).

    - ``iops`` and ``mbps`` (decimal MB/s) are read + write summed.
    - Latency figures (µs) are those of ``direction`` when given, else of the dominant direction (the one
      with more I/Os; read on a tie), so a 70/30 randrw reports its read latency. ``lat_mean_us`` is the
      total latency (submission + completion); percentiles are completion latency.
    - ``cpu_usr_pct``/``cpu_sys_pct`` are fio's CPU use on the host that ran fio (percent of one CPU).

    A figure fio did not give and that cannot be computed (percentiles of several jobs without json+
    histograms; latency of a direction without I/O) is left out rather than invented: the keys are always
    a subset of FIGURE_NAMES, and ``result.missing`` says why one is absent.
    """
    chosen = result.direction(direction or result.dominant_direction)
    values: dict[str, float | None] = {
        "iops": result.read.iops + result.write.iops,
        "mbps": (result.read.bytes_per_s + result.write.bytes_per_s) / 1e6,
        "lat_mean_us": chosen.lat_mean_us if chosen.active else None,
        "lat_p50_us": chosen.p50_us,
        "lat_p99_us": chosen.p99_us,
        "lat_p999_us": chosen.p999_us,
        "lat_p9999_us": chosen.p9999_us,
        "cpu_usr_pct": result.usr_cpu_pct,
        "cpu_sys_pct": result.sys_cpu_pct,
    }
    return {name: value for name, value in values.items() if value is not None and not math.isnan(value)}


def total_mismatch(result: ClientServerResult) -> str | None:
    """None when fio's "All clients" entry did exactly the I/O of the hosts together; otherwise a sentence per
    mismatch (I/O count, bytes), with both figures.

    Counts are compared, not rates: "All clients" divides by the longest host's runtime, so on short runs whose
    hosts finish a few hundred milliseconds apart (seen at 4 s on the virtual lab: 7.7% apart in IOPS, equal in
    I/Os) its IOPS sit below the hosts' sum while every I/O is accounted for. A count mismatch means a host's
    figures are missing or wrong (a server that disconnected, entries grouped under the wrong host).
    """
    problems: list[str] = []
    for label, unit, total, parts in (
        ("I/O count", "I/Os", result.total.read.total_ios + result.total.write.total_ios,
         [h.read.total_ios + h.write.total_ios for h in result.hosts]),
        ("bytes", "bytes", result.total.read.io_bytes + result.total.write.io_bytes,
         [h.read.io_bytes + h.write.io_bytes for h in result.hosts]),
    ):  # fmt: skip
        summed = sum(parts)
        if total != summed:
            problems.append(
                f"the all-clients {label} of {total:,} {unit} differs from the sum of {len(parts)} hosts, "
                f"{summed:,} {unit}"
            )
    return "; ".join(problems) if problems else None


def shared_offsets(result: ClientServerResult) -> str | None:
    """None when every host reported a ``randseed`` of its own; otherwise a sentence naming the hosts that ran
    fio's default seed or shared one (their random offsets were then the same stream, which a caching array
    serves from cache)."""
    if len(result.hosts) < 2:
        return None
    unseeded = [h.host for h in result.hosts if not h.randseeds]
    if unseeded:
        return (
            f"host{'s' if len(unseeded) > 1 else ''} {', '.join(unseeded)} reported no randseed: fio's default seed "
            "sends every host the same random offsets"
        )
    by_seed: dict[int, list[str]] = {}
    for host in result.hosts:
        for seed in host.randseeds:
            by_seed.setdefault(seed, []).append(host.host)
    shared = [f"{', '.join(hosts)} (randseed {seed})" for seed, hosts in by_seed.items() if len(hosts) > 1]
    return f"hosts shared a random offset stream: {'; '.join(shared)}" if shared else None


def start_offsets(result: ClientServerResult) -> dict[str, float]:
    """How long after the first host each host's jobs started, in ms, from fio's per-job ``job_start``.

    Empty when fewer than two hosts ran or any host's fio did not report ``job_start`` (added in fio 3.36; fio
    3.33, Debian 12's, does not): a partial answer would hide the host that started late. The hosts' clocks are
    compared as they are, so clock skew between hosts (NTP keeps it to milliseconds) is part of the figure.
    """
    starts = {host.host: host.start_ms for host in result.hosts}
    if len(starts) < 2 or any(start is None for start in starts.values()):
        return {}
    first = min(start for start in starts.values() if start is not None)
    return {host: float(start - first) for host, start in starts.items() if start is not None}
