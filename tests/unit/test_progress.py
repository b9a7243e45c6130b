"""How far a run is and how long is left (pytest_fabricqa.report.progress), without pytest."""

from __future__ import annotations

import time

import pytest

from pytest_fabricqa.report.progress import KEPT, PACE_AFTER_S, PACE_LIMITS, Case, Progress, duration

PERF = "suites/test_performance.py::test_fio[nvme-tcp-nvmet-{}]"
FAIL = "suites/test_failover.py::test_one_path_down[nvme-tcp-nvmet]"
CONN = "suites/test_connectivity.py::test_every_initiator_is_connected[nvme-tcp-nvmet]"


def cases() -> list[Case]:
    pair = ("nvme-tcp", "nvmet")
    return [
        Case(CONN, False, pair),
        Case(PERF.format("randread"), True, pair),
        Case(PERF.format("randwrite"), True, pair),
        Case(FAIL, True, pair),
    ]


def test_the_time_left_is_unknown_until_a_case_ended_or_was_seen_before() -> None:
    assert Progress(cases()).left_s() is None
    assert Progress(cases(), last={c.nodeid: 10.0 for c in cases()}).left_s() == 40.0


def test_the_time_left_takes_the_last_runs_figure_else_this_runs_mean_of_the_suite_else_of_every_case() -> None:
    progress = Progress(cases(), last={FAIL: 100.0})
    progress.finish(CONN, 2.0)
    # randread and randwrite: no figure and no finished performance case yet -> the mean of all finished (2 s)
    assert progress.left_s() == pytest.approx(2.0 + 2.0 + 100.0)
    progress.finish(PERF.format("randread"), 30.0)
    assert progress.left_s() == pytest.approx(30.0 + 100.0)  # randwrite now at the performance suite's mean


def test_a_points_line_says_how_far_the_run_is_where_what_else_runs_and_the_time_left() -> None:
    progress = Progress(cases(), last={FAIL: 100.0})
    progress.start(CONN)
    progress.finish(CONN, 2.0)
    progress.start(PERF.format("randread"))
    progress.start(PERF.format("randwrite"))  # on another xdist worker
    progress.finish(PERF.format("randread"), 30.0)
    assert progress.line(PERF.format("randread"), "passed", 30.0) == (
        "fabricqa: point 1 of 3 (nvme-tcp nvmet): test_fio[nvme-tcp-nvmet-randread] passed in 30 s; "
        "running: test_fio[nvme-tcp-nvmet-randwrite]; about 2 min 10 s left"
    )
    assert progress.durations() == {FAIL: [100.0], CONN: [2.0], PERF.format("randread"): [30.0]}


def test_the_cache_keeps_each_cases_last_runs_and_the_estimate_takes_their_median() -> None:
    # An entry from before the cache kept several runs is a lone number: one run.
    progress = Progress(cases(), last={CONN: 2.0, FAIL: [100.0, 40.0, 50.0, 45.0], PERF.format("randread"): "junk"})
    assert progress.expected_s(FAIL) == 45.0  # the last KEPT runs (40, 50, 45): one slow run does not move it
    assert progress.expected_s(CONN) == 2.0
    assert progress.expected_s(PERF.format("randread")) is None  # what is not a figure is not a run
    progress.finish(FAIL, 60.0)
    assert progress.durations()[FAIL] == [50.0, 45.0, 60.0]
    assert len(progress.durations()[FAIL]) == KEPT


def test_this_runs_pace_against_the_earlier_runs_scales_what_they_say_is_left() -> None:
    many = [Case(PERF.format(f"p{n}"), True, ("nvme-tcp", "nvmet")) for n in range(10)]
    progress = Progress(many, last={c.nodeid: [30.0] for c in many})
    assert progress.left_s() == pytest.approx(300.0)
    progress.finish(many[0].nodeid, 45.0)
    assert progress.pace() == 1.0  # 30 s of earlier-seen cases: too little to trust (PACE_AFTER_S)
    assert PACE_AFTER_S > 30.0
    progress.finish(many[1].nodeid, 45.0)
    assert progress.pace() == pytest.approx(1.5)  # 90 s where the earlier runs took 60 s
    assert progress.left_s() == pytest.approx(8 * 30.0 * 1.5)
    for case in many[2:5]:
        progress.finish(case.nodeid, 300.0)  # a machine far slower than before: held at the limit
    assert progress.pace() == PACE_LIMITS[1]


def test_the_live_status_names_points_done_the_time_left_and_each_workers_case_pair_phase_and_since_when() -> None:
    mine = [*cases(), Case("suites/test_mine.py::test_my_check", True, ("iscsi", "lio"))]
    progress = Progress(mine, last={c.nodeid: 10.0 for c in mine})
    started = time.mktime((2026, 12, 6, 10, 42, 13, 0, 0, -1))
    progress.start(CONN, now=started)
    progress.reported(CONN, "setup", "gw0")
    progress.start(PERF.format("randread"), now=started + 5)
    progress.start(mine[-1].nodeid, now=started + 6)
    assert progress.status() == (
        "fabricqa 0/4 points, about 50 s left"
        " | gw0 test_every_initiator_is_connected[nvme-tcp-nvmet] running since 10:42:13"
        " | test_fio[nvme-tcp-nvmet-randread] setting up since 10:42:18"
        " | iscsi lio test_my_check setting up since 10:42:19"  # a name without its pair gets it
    )
    progress.finish(mine[-1].nodeid, 10.0)
    progress.reported(CONN, "call", "gw0")
    assert " tearing down since 10:42:13" in progress.status()
    progress.reported(CONN, "teardown", "gw0")
    progress.finish(CONN, 3.0)
    assert progress.status().startswith("fabricqa 1/4 points, about 30 s left | test_fio[")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "0 s"),
        (89, "89 s"),
        (90, "1 min 30 s"),
        (133, "2 min 13 s"),
        (599.4, "9 min 59 s"),
        (600, "10 min"),
        (3599, "1 h 00 min"),
        (3900, "1 h 05 min"),
    ],
)
def test_durations_read_as_a_person_reads_a_time_left(seconds: float, text: str) -> None:
    assert duration(seconds) == text
