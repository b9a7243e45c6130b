"""The metric vocabulary: one table that the results model, thresholds, tolerances and formatting all read."""

from __future__ import annotations

import pytest

from pytest_fabricqa.core.metrics import (
    BY_NAME,
    CORE_METRICS,
    DEFAULT_TOLERANCES,
    HIGHER_IS_BETTER,
    METRICS,
    THRESHOLD_KEYS,
    metric,
)
from pytest_fabricqa.fio.figures import FIGURE_NAMES
from pytest_fabricqa.lab.thresholds import Thresholds, violations
from pytest_fabricqa.report.formatting import format_figure


def test_the_threshold_schema_has_exactly_the_vocabularys_threshold_keys() -> None:
    assert list(Thresholds.model_fields) == list(THRESHOLD_KEYS)


def test_each_threshold_key_bounds_its_metric_in_the_bad_direction() -> None:
    for key, m in THRESHOLD_KEYS.items():
        assert key.startswith(f"{m.bound}_"), key
        assert (m.bound == "min") == (m.name in HIGHER_IS_BETTER)


def test_tolerances_name_known_metrics_and_fio_figures_are_the_core_metrics() -> None:
    assert set(DEFAULT_TOLERANCES) <= set(METRICS)
    assert DEFAULT_TOLERANCES == {"iops": 10.0, "mbps": 10.0, "lat_mean_us": 20.0, "lat_p99_us": 20.0}
    assert FIGURE_NAMES == CORE_METRICS
    assert len(set(METRICS)) == len(METRICS) == len(BY_NAME)


def test_units_drive_formatting_and_sentences() -> None:
    assert format_figure("iops", 5543.4) == "5,543"
    assert format_figure("mbps", 4.25) == "4.2"
    assert format_figure("cpu_sys_pct", 12.345) == "12.3"
    assert format_figure("fabric_efficiency", 0.934) == "0.93"
    assert violations({"lat_p999_us": 4000.0}, Thresholds(max_p999_us=3500)) == [
        "p99.9 latency 4,000 µs is above the maximum of 3,500 µs"
    ]


def test_an_unknown_metric_lists_the_known_ones() -> None:
    assert metric("lat_p99_us").unit == "µs"
    with pytest.raises(KeyError, match="unknown metric 'p99'; known metrics are iops, mbps"):
        metric("p99")
