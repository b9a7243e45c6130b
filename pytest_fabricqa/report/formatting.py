"""How figures are written for people: one place, so the terminal, HTML and comparisons agree."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

from pytest_fabricqa.core.metrics import BY_NAME
from pytest_fabricqa.core.workloads import Workload

RW_LABELS: dict[str, str] = {
    "read": "sequential read",
    "write": "sequential write",
    "randread": "random read",
    "randwrite": "random write",
    "rw": "sequential read/write",
    "readwrite": "sequential read/write",
    "randrw": "random read/write",
}

_RW_ORDER = ("randread", "randwrite", "randrw", "read", "write", "rw", "readwrite")
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)


def format_figure(metric: str, value: float) -> str:
    """A figure as a storage engineer writes it: ``5,543`` IOPS, ``45.4`` MB/s, ``1,234`` µs, ``0.93``."""
    unit = BY_NAME[metric].unit if metric in BY_NAME else ""
    if unit == "IOPS" or (metric in BY_NAME and BY_NAME[metric].decimals == 0):  # IOPS and counts
        return f"{value:,.0f}"
    if metric in BY_NAME and unit == "":  # a ratio
        return f"{value:.2f}"
    if unit == "%":
        return f"{value:.1f}"
    # MB/s and latency: whole numbers once they are large, a decimal or two while small.
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 10 or unit == "MB/s":
        return f"{value:,.1f}"
    return f"{value:.2f}"


def trend_pct(first: float, later: float) -> float | None:
    """Percent change of ``later`` against ``first``, rounded half-up to 2 decimals; None when first is 0.

    Decimal arithmetic on the figures as written keeps the rounding identical to a spreadsheet's, so
    5,543 -> 6,825 gives exactly 23.13 and 13,400 -> 8,457 gives -36.89.
    """
    a = Decimal(repr(float(first)))
    b = Decimal(repr(float(later)))
    if a == 0:
        return None
    change = (b - a) / a * 100
    return float(change.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def format_trend(trend: float | None) -> str:
    """``+23.13%``, ``-36.89%``, ``+0.00%``; ``n/a`` when there is nothing to compare."""
    if trend is None:
        return "n/a"
    return f"{trend:+.2f}%"


def size_bytes(text: str | None) -> int:
    """fio's size notation (``8k``, ``1m``, ``2g``, ``512MB``) in bytes, base 1024; 0 when unparsable."""
    if not text:
        return 0
    match = _SIZE_RE.match(text)
    if match is None:
        return 0
    number, unit, _ = match.groups()
    power = " kmgtp".index(unit.lower() or " ")
    return int(float(number) * 1024**power)


def workload_sort_key(workload: Workload) -> tuple[int, int, int, int, int, str]:
    """Order workloads as a report reads best: by size, access pattern, block size, jobs, queue depth."""
    rw_rank = _RW_ORDER.index(workload.rw) if workload.rw in _RW_ORDER else len(_RW_ORDER)
    return (
        size_bytes(workload.size),
        rw_rank,
        size_bytes(workload.bs),
        workload.numjobs,
        workload.iodepth or 0,
        workload.name,
    )


def rw_label(rw: str) -> str:
    """fio's ``rw`` value in words (``randread`` -> ``random read``)."""
    return RW_LABELS.get(rw, rw)
