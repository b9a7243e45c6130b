"""A performance point's own stall check (issue 29, item 10): the longest time a host completed no I/O, read from
the IOPS logs fio's client returned, judged against the lab's ``watch.max_point_stall_s``.

The logs are the recorded client/server run of tests/data/fio/series (fio 3.33, two servers on loopback, two jobs
each, 500 ms windows; see its README). Where a stall is needed, lines are deleted from them: what fio writes for
windows in which nothing completed is no line at all (pytest_fabricqa/fio/stalls.py, recorded in
tests/data/fio/failover). The real thing, a fio stopped in the middle of a point, is
tests/integration/test_fio_point.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pytest_fabricqa.fio import ClientServerResult, parse_client_server
from pytest_fabricqa.fio.stalls import Stall
from pytest_fabricqa.measure.point import measure_plan, point_stalls, stall_problems, stall_rule

SERIES = Path(__file__).parents[1] / "data" / "fio" / "series"
HOSTS = {"vnode1": "vnode1", "vnode2": "vnode2"}


def _result(drop: dict[str, range] | None = None) -> ClientServerResult:
    """The recorded run, its IOPS logs with the lines of ``drop[prefix]`` (their times, ms) taken out."""
    logs: dict[str, str] = {}
    for path in sorted((SERIES / "logs").glob("vnode*_iops.*")):
        prefix = path.name.split("_", 1)[0]
        gone = (drop or {}).get(prefix, range(0))
        lines = [line for line in path.read_text().splitlines() if int(line.split(",")[0]) not in gone]
        logs[path.name] = "\n".join(lines) + "\n"
    result = parse_client_server((SERIES / "clientserver.json").read_text())
    return replace(result, logs=logs)


def test_the_recorded_point_ran_without_a_stall() -> None:
    assert point_stalls(_result(), HOSTS, 500) == {}


def test_windows_without_a_line_on_both_jobs_of_a_host_are_its_stall_and_fail_the_point() -> None:
    found = point_stalls(_result({"vnode2": range(1400, 2600)}), HOSTS, 500)  # 1501, 2001 and 2501 gone
    # Job 1's line at 1001 ends the last busy window, job 2's window ending at 2999 begins the next: 1.499 s.
    assert found == {"vnode2": Stall(1001, 2500)}
    (problem,) = stall_problems({h: (1, s) for h, s in found.items()}, 1.0, 500)
    assert problem == (
        "vnode2: no I/O completed for 1.499 s, from 1.001 s to 2.5 s into the measured run, longer than the lab's "
        "watch.max_point_stall_s of 1 s (fio's IOPS log in 500 ms windows)"
    )
    assert stall_problems({h: (1, s) for h, s in found.items()}, 1.5, 500) == []  # not longer than the limit


def test_one_job_still_completing_is_no_stall_of_its_host() -> None:
    one_job = _result()
    logs = dict(one_job.logs)
    name = "vnode2_iops.1.log.127.0.0.2"
    logs[name] = "\n".join(line for line in logs[name].splitlines() if not 1400 <= int(line.split(",")[0]) < 2600)
    assert point_stalls(replace(one_job, logs=logs), HOSTS, 500) == {}


def test_a_stall_until_the_end_counts_only_when_the_round_ran_its_whole_runtime() -> None:
    cut = _result({"vnode1": range(2400, 10_000)})  # nothing after 2.0 s
    assert point_stalls(cut, HOSTS, 500, runtime_ms=4000) == {"vnode1": Stall(2001, 3500)}
    assert point_stalls(cut, HOSTS, 500) == {}  # a steady-state round may have ended there


def test_the_lab_limit_reaches_the_plan_and_the_rule_says_the_resolution() -> None:
    plan = measure_plan({"timeseries": {"interval_ms": 500}}, max_stall_s=4.0)
    assert plan.max_stall_s == 4.0 and plan.stall_log_msec == 500
    assert measure_plan(None).stall_log_msec == 100 and measure_plan(None).max_stall_s is None
    assert stall_rule(4.0, 500) == (
        "A point fails when a host completed no I/O for longer than 4 s (watch.max_point_stall_s), read from fio's "
        "IOPS log in 500 ms windows: a window without a completion has no line, so a stall is counted in whole "
        "windows, up to 1 s short of the real one."
    )
