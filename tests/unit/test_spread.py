"""Samples and spread: RSD per figure and its gate, SNIA PTS's steady-state rule, fio's ss= result, rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_fabricqa.fio import parse_client_server, parse_fio_output
from pytest_fabricqa.measure.spread import (
    SamplingError,
    SamplingPlan,
    SteadyStatePlan,
    fio_steady_state_problems,
    pts_steady_state,
    rsd_violations,
    run_rounds,
    sampling_plan,
    spread,
    summarise,
)

SERIES = Path(__file__).parents[1] / "data" / "fio" / "series"


def test_spread_is_sample_standard_deviation_over_the_mean() -> None:
    s = spread([100.0, 110.0, 90.0])
    assert s.mean == pytest.approx(100.0)
    assert s.stdev == pytest.approx(10.0)
    assert s.rsd_pct == pytest.approx(10.0)
    assert spread([5.0]).rsd_pct == 0.0
    with pytest.raises(ValueError):
        spread([])


def test_summarise_means_every_common_figure() -> None:
    means, spreads = summarise(
        [{"iops": 1000.0, "lat_p99_us": 50.0, "mbps": 8.0}, {"iops": 1200.0, "lat_p99_us": 70.0}]
    )
    assert means == {"iops": 1100.0, "lat_p99_us": 60.0}
    assert set(spreads) == {"iops", "lat_p99_us"}


def test_rsd_gate_fires_above_the_limit_and_names_figure_limit_and_samples() -> None:
    _, spreads = summarise([{"iops": 1000.0}, {"iops": 1400.0}, {"iops": 700.0}])
    problems = rsd_violations(spreads, 10.0, label="randread-4k-qd32-j1")
    assert len(problems) == 1
    assert problems[0].startswith("randread-4k-qd32-j1: IOPS varied by 34.0%")
    assert "over 3 samples" in problems[0] and "above the maximum of 10% RSD" in problems[0]
    assert rsd_violations(spreads, 50.0) == []
    assert rsd_violations(spreads, None) == []
    # One sample has no spread: a limit cannot be checked, and says so.
    (unchecked,) = rsd_violations(summarise([{"iops": 5.0}])[1], 10.0)
    assert "not measured (one sample)" in unchecked and "--fio-samples" in unchecked
    assert rsd_violations(summarise([{"iops": 5.0}])[1], None) == []
    assert "over 3 1-s windows" in rsd_violations(spreads, 10.0, basis="1-s windows")[0]


def test_pts_rule_accepts_a_flat_window_and_refuses_range_and_slope() -> None:
    flat = pts_steady_state([1000, 990, 1010, 1005, 995])
    assert flat.reached and flat.range_pct == pytest.approx(2.0)
    # Range 30% of the mean: not steady, though the line through it is flat.
    wide = pts_steady_state([1000, 1150, 850, 1150, 850])
    assert not wide.reached and wide.range_pct is not None and wide.range_pct > 20
    # Range 16% but a steady climb: the best-fit line moves 16% across the window (limit 10%).
    climbing = pts_steady_state([920, 960, 1000, 1040, 1080])
    assert not climbing.reached and climbing.slope_pct == pytest.approx(16.0)
    assert "not reached" in climbing.describe() and "slope excursion 16.0%" in climbing.describe()
    # Only the last five rounds count; fewer than five is "not reached".
    assert pts_steady_state([100, 5000, 1000, 990, 1010, 1005, 995]).reached
    short = pts_steady_state([1000, 1000])
    assert not short.reached and "needs 5" in short.describe()


def test_fio_steady_state_from_recorded_output() -> None:
    missed = parse_fio_output((SERIES / "steadystate-missed.json").read_text())
    problems = fio_steady_state_problems(missed)
    assert problems == [
        "steady state not reached: fio's iops_slope:0.001% not reached (measured 17.935347% over the last 2 s), "
        "job 'dev0'"
    ]
    reached = parse_fio_output((SERIES / "steadystate.json").read_text())
    assert reached.jobs[0].steadystate is not None and reached.jobs[0].steadystate.attained
    assert fio_steady_state_problems(reached) == []
    both = parse_client_server((SERIES / "clientserver.json").read_text())
    assert fio_steady_state_problems(both) == []
    assert all(j.steadystate is not None for h in both.hosts for j in h.jobs)


def test_plain_rounds_run_k_samples_and_report_their_spread() -> None:
    iops = iter([1000.0, 1100.0, 900.0])
    rounds = run_rounds(SamplingPlan(3), lambda n: ({"iops": next(iops)}, ()))
    assert len(rounds.figures) == 3 and rounds.means["iops"] == pytest.approx(1000.0)
    assert rounds.spreads["iops"].rsd_pct == pytest.approx(10.0)
    assert rounds.pts is None and rounds.problems == ()
    assert rounds.extras()["figures"]["iops"]["n"] == 3


def test_steady_state_rounds_stop_once_the_window_is_steady() -> None:
    series = iter([400.0, 700.0, 950.0, 1000.0, 990.0, 1010.0, 1005.0, 995.0, 1000.0])
    rounds = run_rounds(SamplingPlan(1, SteadyStatePlan(max_rounds=25)), lambda n: ({"iops": next(series)}, ()))
    assert len(rounds.figures) == 7  # rounds 3-7 are the first steady window (range 6%, slope 4.8%)
    assert len(rounds.measured) == 5 and rounds.pts is not None and rounds.pts.reached
    assert rounds.problems == ()


def test_steady_state_not_reached_is_a_failure_reason_of_its_own() -> None:
    climbing = iter(float(100 * n) for n in range(1, 100))
    rounds = run_rounds(SamplingPlan(1, SteadyStatePlan(max_rounds=6)), lambda n: ({"iops": next(climbing)}, ()))
    assert len(rounds.figures) == 6
    assert rounds.pts is not None and not rounds.pts.reached
    assert any(p.startswith("steady state not reached over rounds 2-6") for p in rounds.problems)
    # fio's own "not attained" in a measured round is reported too.
    flat = run_rounds(
        SamplingPlan(1, SteadyStatePlan(window=2, max_rounds=2)),
        lambda n: ({"iops": 100.0}, ["steady state not reached: fio's iops_slope:1% ..."]),
    )
    assert flat.pts is not None and flat.pts.reached
    assert flat.problems == ("steady state not reached: fio's iops_slope:1% ...",)


def test_sampling_plan_from_the_lab_file_and_the_command_line() -> None:
    assert sampling_plan(None) == SamplingPlan(1)
    assert sampling_plan({"samples": 3}).samples == 3
    assert sampling_plan({"samples": 3}, samples_override=5).samples == 5
    plan = sampling_plan({"steady_state": {"ss": "iops:5%", "ss_dur": 20, "window": 5, "max_rounds": 10}})
    assert plan.steady_state == SteadyStatePlan("iops:5%", 20, 0, 5, 10)
    assert dict(plan.steady_state.fio_options()) == {"ss": "iops:5%", "ss_dur": "20", "ss_ramp": "0"}
    assert sampling_plan({"steady_state": True}).steady_state == SteadyStatePlan()
    for bad, match in (
        ({"samples": 0}, r"workloads\.samples: expected a whole number >= 1"),
        ({"samples": "3"}, r"workloads\.samples"),
        ({"steady_state": {"ss_dur": -1}}, r"workloads\.steady_state\.ss_dur"),
        ({"steady_state": {"rounds": 5}}, r"workloads\.steady_state\.rounds: unknown key"),
        ({"steady_state": {"ss": "fast"}}, r"not an fio ss= value"),
        ({"steady_state": {"window": 5, "max_rounds": 3}}, r"fewer than the window"),
    ):
        with pytest.raises(SamplingError, match=match):
            sampling_plan(bad)
