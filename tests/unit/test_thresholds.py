"""Threshold parsing, lookup precedence, violation sentences, efficiency and link helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_fabricqa.fio import figures, parse_fio_output
from pytest_fabricqa.lab.thresholds import (
    ThresholdError,
    Thresholds,
    fabric_efficiency,
    link_utilisation,
    thresholds_for,
    validate_table,
    violations,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "fio"

# The example of the module docstring.
TABLE = {
    "*": {
        "*": {"max_p999_us": 20000},
        "rand*-8k-*": {"max_p99_us": 2000},
        "randread-8k-qd128-j4": {"min_iops": 3000},
    },
    "nvme-rdma": {
        "*": {"max_lat_mean_us": 1000},
        "randread-8k-qd128-j4": {"min_iops": 100000, "max_p99_us": None},
    },
}


def test_the_briefs_sentence() -> None:
    found = violations({"iops": 2310.4}, Thresholds(min_iops=3000), label="randread-8k")
    assert found == ["randread-8k: 2,310 IOPS is below the minimum of 3,000 IOPS"]


def test_every_broken_limit_is_listed_at_once_with_figure_limit_and_unit() -> None:
    figs = {"iops": 2310.0, "mbps": 18.9, "lat_mean_us": 512.34, "lat_p99_us": 812.4, "lat_p999_us": 4000.0}
    limits = Thresholds(min_iops=3000, min_mbps=24.5, max_lat_mean_us=500, max_p99_us=800, max_p999_us=3500)
    assert violations(figs, limits) == [
        "2,310 IOPS is below the minimum of 3,000 IOPS",
        "18.9 MB/s is below the minimum of 24.5 MB/s",
        "mean latency 512.3 µs is above the maximum of 500 µs",
        "p99 latency 812.4 µs is above the maximum of 800 µs",
        "p99.9 latency 4,000 µs is above the maximum of 3,500 µs",
    ]


def test_a_figure_on_the_limit_passes_and_no_limits_pass_everything() -> None:
    assert violations({"iops": 3000.0, "lat_p99_us": 800.0}, Thresholds(min_iops=3000, max_p99_us=800)) == []
    assert violations({}, Thresholds()) == []
    assert Thresholds().empty and not Thresholds(min_iops=1).empty


def test_a_limit_on_a_figure_that_was_not_measured_is_a_violation() -> None:
    found = violations({"iops": 5000.0}, Thresholds(min_iops=3000, max_p99_us=500), label="nvme-tcp-x")
    assert found == ["nvme-tcp-x: p99 latency was not measured, so the maximum of 500 µs could not be checked"]
    assert violations({}, Thresholds(min_iops=3000)) == [
        "IOPS was not measured, so the minimum of 3,000 IOPS could not be checked"
    ]


def test_limits_against_real_figures() -> None:
    """Limits set around a recorded run's figures: just above its IOPS fails, just below passes."""
    text = (DATA / "randread-8k-grouped.out").read_text()
    figs = figures(parse_fio_output(text))
    failing = Thresholds(min_iops=figs["iops"] * 1.01, max_p99_us=figs["lat_p99_us"] * 0.99)
    passing = Thresholds(min_iops=figs["iops"] * 0.99, max_p99_us=figs["lat_p99_us"] * 1.01)
    found = violations(figs, failing, label="randread-8k-qd16-j2")
    assert len(found) == 2
    assert found[0].startswith(f"randread-8k-qd16-j2: {figs['iops']:,.0f} IOPS is below the minimum of ")
    assert violations(figs, passing) == []


def test_precedence_protocol_first_then_workload_and_null_lifts_a_limit() -> None:
    assert thresholds_for(TABLE, "nvme-rdma", "randread-8k-qd128-j4") == Thresholds(
        min_iops=100000, max_lat_mean_us=1000, max_p99_us=None, max_p999_us=20000
    )
    # Another protocol only sees the "*" section: the exact workload beats the pattern beats "*".
    assert thresholds_for(TABLE, "iscsi", "randread-8k-qd128-j4") == Thresholds(
        min_iops=3000, max_p99_us=2000, max_p999_us=20000
    )
    assert thresholds_for(TABLE, "iscsi", "randwrite-8k-qd128-j4") == Thresholds(max_p99_us=2000, max_p999_us=20000)
    assert thresholds_for(TABLE, "iscsi", "read-1m-qd4-j1") == Thresholds(max_p999_us=20000)
    assert thresholds_for(None, "iscsi", "read-1m-qd4-j1") == Thresholds()


def test_an_exact_protocol_beats_a_protocol_pattern_and_longer_patterns_beat_shorter() -> None:
    table = {
        "nvme-*": {"*": {"min_iops": 1}, "rand*": {"min_iops": 2}, "randread-*": {"min_iops": 3}},
        "nvme-tcp": {"*": {"min_mbps": 10}},
        "*": {"randread-4k-qd1-j1": {"min_iops": 4, "min_mbps": 5}},
    }
    assert thresholds_for(table, "nvme-rdma", "randread-4k-qd1-j1") == Thresholds(min_iops=3, min_mbps=5)
    assert thresholds_for(table, "nvme-tcp", "randread-4k-qd1-j1") == Thresholds(min_iops=3, min_mbps=10)
    assert thresholds_for(table, "nvme-tcp", "randwrite-4k-qd1-j1") == Thresholds(min_iops=2, min_mbps=10)
    assert thresholds_for(table, "iser", "randread-4k-qd1-j1") == Thresholds(min_iops=4, min_mbps=5)


def test_table_mistakes_name_the_key() -> None:
    with pytest.raises(ThresholdError, match=r"^thresholds\.nvme-tcp\.\*\.min_iop: unknown limit"):
        validate_table({"nvme-tcp": {"*": {"min_iop": 3}}})
    with pytest.raises(ThresholdError, match=r"^thresholds\.\*\.\*\.max_p99_us: expected a number, not '1ms'"):
        thresholds_for({"*": {"*": {"max_p99_us": "1ms"}}}, "iscsi", "x")
    with pytest.raises(ThresholdError, match="above zero"):
        Thresholds.from_mapping({"min_iops": 0})
    with pytest.raises(ThresholdError, match=r"^thresholds\.iscsi: expected a mapping"):
        validate_table({"iscsi": [1, 2]})
    validate_table(TABLE)


def test_fabric_efficiency_and_link_utilisation() -> None:
    assert fabric_efficiency(95_000, 100_000) == pytest.approx(0.95)
    with pytest.raises(ValueError, match="above zero"):
        fabric_efficiency(1, 0)
    # Seed 000: 4.2 GB/s over 40 GbE (5,000 MB/s line rate).
    assert link_utilisation(4200, 40) == pytest.approx(0.84)
    assert link_utilisation(12_500, 100) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="Gb/s"):
        link_utilisation(1, 0)
