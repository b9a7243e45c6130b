"""Scaling efficiency (seed 003), its gate, and the knee of a QD x jobs sweep (seed 002)."""

from __future__ import annotations

import pytest

from pytest_fabricqa.core.scaling import (
    ScalingPoint,
    efficiency_violations,
    knee,
    scaling_efficiency,
    scaling_points,
    subsets,
)


def test_subsets_are_the_first_n_initiators_in_a_fixed_order() -> None:
    assert subsets(["el72h1", "el72h2", "el72h3"]) == [
        ("el72h1",),
        ("el72h1", "el72h2"),
        ("el72h1", "el72h2", "el72h3"),
    ]
    assert subsets([]) == []


def test_efficiency_is_iops_n_over_n_times_iops_1() -> None:
    assert scaling_efficiency(2000.0, 2, 1000.0) == 1.0
    assert scaling_efficiency(1500.0, 2, 1000.0) == 0.75
    with pytest.raises(ValueError):
        scaling_efficiency(1.0, 1, 0.0)
    points = scaling_points([(("a",), {"iops": 1000.0, "lat_p99_us": 80.0}), (("a", "b"), {"iops": 1800.0})])
    assert [p.efficiency for p in points] == [1.0, 0.9]
    assert points[1] == ScalingPoint.from_dict(points[1].to_dict())


def test_efficiency_gate_fires_below_the_lab_minimum() -> None:
    points = scaling_points([(("a",), {"iops": 1000.0}), (("a", "b"), {"iops": 1100.0})])
    problems = efficiency_violations(points, 0.8, label="randread-4k-qd32-j1")
    assert problems == [
        "randread-4k-qd32-j1: scaling efficiency 0.55 at 2 initiators (1,100 IOPS against 2 x 1,000) "
        "is below the minimum of 0.8"
    ]
    assert efficiency_violations(points, 0.5) == []
    assert efficiency_violations(points, None) == []
    dead = scaling_points([(("a",), {"iops": 0.0}), (("a", "b"), {"iops": 10.0})])
    assert "could not be computed" in efficiency_violations(dead, 0.5)[0]


def test_knee_is_the_last_point_where_iops_still_rose_enough() -> None:
    # Seed 002's iSCSI shape: rising to QD 32, then flat.
    assert knee([20_000, 60_000, 100_000, 103_000, 104_000], 10.0) == 2
    assert knee([20_000, 60_000, 100_000, 103_000, 104_000], 2.0) == 3
    assert knee([100, 100, 300], 10.0) == 0  # the first step did not pay
    assert knee([100, None, 300], 10.0) == 2  # unmeasured points are skipped
    assert knee([100], 10.0) is None
