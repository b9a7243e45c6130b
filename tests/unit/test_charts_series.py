"""Time-series, scaling and knee charts render as inline SVG with page-unique ids."""

from __future__ import annotations

import pytest

from pytest_fabricqa.report import charts


def test_timeseries_chart_draws_hosts_and_the_cluster() -> None:
    hosts = {"vnode1": [(1.0, 500.0, 80.0), (2.0, 520.0, 90.0)], "vnode2": [(1.0, 480.0, 85.0), (2.0, None, None)]}
    svg = charts.timeseries_chart(hosts, [(1.0, 980.0, 84.0), (2.0, 1000.0, 88.0)], chart_id="ts1")
    assert svg is not None and svg.startswith('<svg class="chart"')
    for text in ("IOPS over time", "p99 latency", "vnode1", "vnode2", "all hosts"):
        assert text in svg
    assert 'id="ts1-' in svg
    assert charts.timeseries_chart({}, [], chart_id="ts2") is None


def test_scaling_chart_shows_linear_ideal_and_the_minimum() -> None:
    svg = charts.scaling_chart([(1, 1000.0, 80.0, 1.0), (2, 1700.0, 95.0, 0.85)], min_efficiency=0.8, chart_id="s1")
    for text in ("scaling efficiency", "linear", "minimum 0.8", "initiators"):
        assert text in svg
    with pytest.raises(ValueError):
        charts.scaling_chart([], chart_id="s2")


def test_sweep_chart_marks_the_knee() -> None:
    points = tuple(
        charts.Point(float(x), iops, 100.0) for x, iops in ((1, 100.0), (8, 500.0), (32, 900.0), (128, 910.0))
    )
    with_knee = charts.sweep_chart([charts.Series("1 job", points, knee=32.0)], x_label="QD", chart_id="k1")
    without = charts.sweep_chart([charts.Series("1 job", points)], x_label="QD", chart_id="k2")
    assert "knee" in with_knee and "knee" not in without
