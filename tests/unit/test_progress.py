"""How far a run is and how long is left (pytest_fabricqa.report.progress), without pytest."""

from __future__ import annotations

import pytest

from pytest_fabricqa.report.progress import Case, Progress, duration

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
        "running: test_fio[nvme-tcp-nvmet-randwrite]; about 2 min left"
    )
    assert progress.durations() == {FAIL: 100.0, CONN: 2.0, PERF.format("randread"): 30.0}


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0 s"), (89, "89 s"), (90, "2 min"), (3599, "1 h 00 min"), (3900, "1 h 05 min")]
)
def test_durations_read_as_a_person_reads_a_time_left(seconds: float, text: str) -> None:
    assert duration(seconds) == text
