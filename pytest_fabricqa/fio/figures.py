"""The figures a case is judged and reported on, under the names the report and thresholds share."""

from __future__ import annotations

import math

from pytest_fabricqa.fio.model import ClientServerResult, FioResult

# Every figure name figures() may return; the report's columns and the threshold keys use these.
FIGURE_NAMES: tuple[str, ...] = (
    "iops",
    "mbps",
    "lat_mean_us",
    "lat_p50_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_p9999_us",
    "cpu_usr_pct",
    "cpu_sys_pct",
)

# Default tolerance of total_mismatch(): fio computes the "All clients" rate from the summed I/O count over
# the longest host runtime, so it differs from the sum of the hosts' rates by a fraction of a percent.
TOTAL_TOLERANCE = 0.01


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


def total_mismatch(result: ClientServerResult, *, rel_tol: float = TOTAL_TOLERANCE) -> str | None:
    """None when fio's "All clients" IOPS and bandwidth equal the sum of the hosts' within ``rel_tol``;
    otherwise a sentence per mismatch, with both figures and the difference.

    A mismatch means a host's figures are missing or wrong (a server that disconnected, entries grouped
    under the wrong host), so per-host figures and the total cannot both be trusted.
    """
    problems: list[str] = []
    for label, unit, total, parts, digits in (
        ("IOPS", "IOPS", result.total.read.iops + result.total.write.iops,
         [h.read.iops + h.write.iops for h in result.hosts], 0),
        ("bandwidth", "MB/s", (result.total.read.bytes_per_s + result.total.write.bytes_per_s) / 1e6,
         [(h.read.bytes_per_s + h.write.bytes_per_s) / 1e6 for h in result.hosts], 1),
    ):  # fmt: skip
        summed = sum(parts)
        if math.isclose(total, summed, rel_tol=rel_tol, abs_tol=0.5 if digits == 0 else 0.05):
            continue
        difference = abs(total - summed) / max(abs(total), abs(summed)) * 100.0
        problems.append(
            f"the all-clients {label} of {total:,.{digits}f} {unit} differs from the sum of "
            f"{len(parts)} hosts, {summed:,.{digits}f} {unit}, by {difference:.1f}% "
            f"(more than the {rel_tol * 100:g}% fio's rounding explains)"
        )
    return "; ".join(problems) if problems else None
