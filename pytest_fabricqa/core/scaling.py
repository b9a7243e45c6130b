"""Scaling (seed 003) and the knee of a sweep (seed 002), as plain figures and sentences.

Seed 003 loaded an all-flash array from 1, 2, 3 and 4 RAC nodes and asked how close to linear it stayed. A
scaling run repeats one workload from the first n initiators (lab-file order, so every run uses the same
subsets) for n = 1..N and reports IOPS, p99 latency and the scaling efficiency IOPS(n) / (n x IOPS(1)): 1.0 is
perfectly linear, 0.5 means the second node added nothing.

Seed 002 swept jobs x queue depth and found where more outstanding I/O stopped paying (iSCSI peaked at QD 32).
:func:`knee` marks the last point of a sweep at which IOPS still rose by more than the lab's percentage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_KNEE_GAIN_PCT = 10.0


def subsets(initiators: Sequence[T]) -> list[tuple[T, ...]]:
    """The initiators of each scaling step: the first 1, the first 2, ... all of them, in the given order."""
    return [tuple(initiators[:n]) for n in range(1, len(initiators) + 1)]


@dataclass(frozen=True)
class ScalingPoint:
    """One step of a scaling run: n initiators (named), their IOPS and p99, and the efficiency against n = 1."""

    n: int
    hosts: tuple[str, ...]
    iops: float
    lat_p99_us: float | None = None
    lat_mean_us: float | None = None
    efficiency: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form for a case's extras."""
        return {"n": self.n, "hosts": list(self.hosts), "iops": self.iops, "lat_p99_us": self.lat_p99_us,
                "lat_mean_us": self.lat_mean_us, "efficiency": self.efficiency}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScalingPoint:
        """Read :meth:`to_dict`'s form."""
        return cls(int(data["n"]), tuple(str(h) for h in data.get("hosts", [])), float(data["iops"]),
                   data.get("lat_p99_us"), data.get("lat_mean_us"), data.get("efficiency"))  # fmt: skip


def scaling_efficiency(iops_n: float, n: int, iops_1: float) -> float:
    """IOPS(n) / (n x IOPS(1))."""
    if n < 1:
        raise ValueError(f"a scaling step has at least one initiator, not {n}")
    if iops_1 <= 0:
        raise ValueError(f"IOPS from one initiator must be above zero to scale against, not {iops_1!r}")
    return iops_n / (n * iops_1)


def scaling_points(steps: Sequence[tuple[Sequence[str], Mapping[str, float]]]) -> list[ScalingPoint]:
    """Points from (hosts, figures) per step, in order n = 1..N; efficiency against the first step."""
    points: list[ScalingPoint] = []
    base = steps[0][1].get("iops", 0.0) if steps else 0.0
    for hosts, figures in steps:
        n = len(hosts)
        iops = figures.get("iops", 0.0)
        efficiency = scaling_efficiency(iops, n, base) if base > 0 else None
        points.append(ScalingPoint(n, tuple(hosts), iops, figures.get("lat_p99_us"), figures.get("lat_mean_us"),
                                   efficiency))  # fmt: skip
    return points


def efficiency_violations(points: Sequence[ScalingPoint], minimum: float | None, *, label: str = "") -> list[str]:
    """One sentence per step whose efficiency is below ``minimum`` (or could not be computed)."""
    if minimum is None:
        return []
    prefix = f"{label}: " if label else ""
    found = []
    for p in points:
        if p.n == 1:
            continue
        if p.efficiency is None:
            found.append(f"{prefix}scaling efficiency at {p.n} initiators could not be computed (no IOPS from 1)")
        elif p.efficiency < minimum:
            found.append(
                f"{prefix}scaling efficiency {p.efficiency:.2f} at {p.n} initiators ({p.iops:,.0f} IOPS against "
                f"{p.n} x {points[0].iops:,.0f}) is below the minimum of {minimum:g}"
            )
    return found


def knee(iops: Sequence[float | None], min_gain_pct: float = DEFAULT_KNEE_GAIN_PCT) -> int | None:
    """Index of the knee of a sweep ordered by outstanding I/O: the last point at which IOPS still rose by more
    than ``min_gain_pct`` percent over the point before it, counting from the start while every step pays.

    The walk stops at the first step that gains ``min_gain_pct`` or less: beyond it more queue does not pay,
    whatever noise follows. None when the sweep has fewer than two measured points; 0 when the first step
    already did not pay.
    """
    known = [(i, v) for i, v in enumerate(iops) if v is not None]
    if len(known) < 2:
        return None
    knee_index = known[0][0]
    for (_, before), (index, now) in pairwise(known):
        if before > 0 and (now - before) / before * 100.0 > min_gain_pct:
            knee_index = index
        else:
            break
    return knee_index
