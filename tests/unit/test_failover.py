"""Failover figures from recorded fio 3.33 IOPS logs (tests/data/fio/failover, see its README): stalls, first I/O,
recovery, errors, the path parity rule, and the limit checks that gate them."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_fabricqa.failover.figures import (
    ErrorCounts,
    FailoverFigures,
    count_errors,
    failover_violations,
    fault_stall,
    imbalance_violations,
    measure,
    path_imbalance_pct,
)
from pytest_fabricqa.faults.inject import Fault
from pytest_fabricqa.fio.logs import parse_log
from pytest_fabricqa.fio.parse import parse_fio_output
from pytest_fabricqa.fio.stalls import HostSeries, Stall, host_series, longest_stall, run_span_ms, stalls
from pytest_fabricqa.lab.database import OracleSettings
from pytest_fabricqa.lab.thresholds import ThresholdError, Thresholds, violations
from pytest_fabricqa.report.formatting import format_figure

DATA = Path(__file__).parent.parent / "data" / "fio" / "failover"
VERIFY = Path(__file__).parent.parent / "data" / "fio" / "verify"
WINDOW_S = 0.1  # every recording: log_avg_msec=100
RAC = OracleSettings(diskgroups=("DATA",))


def logs(name: str) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(DATA.glob(f"{name}_iops.*.log"))}


def series(name: str) -> HostSeries:
    """A recording's series on its own clock: job-relative, or Unix ms (log_unix_epoch) for the signalled runs,
    whose end is fio's report time and whose start is that less the job's runtime."""
    text = (DATA / f"{name}.json").read_text()
    start, end = run_span_ms(parse_fio_output(text, host="vnode1"))
    if (DATA / f"{name}.fault").exists():
        end_ms = json.loads(text)["timestamp_ms"]
        start, end = end_ms - end, end_ms
    return host_series("vnode1", logs(name), interval_ms=100, start_ms=start, end_ms=end)


def signalled(name: str) -> Fault:
    """The fault of a run a signal stopped: when SIGSTOP and SIGCONT were sent (Unix ms, the logs' clock)."""
    start, end = (int(t) for t in (DATA / f"{name}.fault").read_text().split())
    return Fault(name, start, end)


# The faults of the recordings: fio's own pauses (from their options) and the two signalled runs.
THINK = Fault("thinktime 2 s", 4000, 6000)  # thinktime_iotime 2s + thinktime 2s: the first pause at 4 s
THINK_TO_END = Fault("thinktime 2 s at the end", 8000, 10000)  # the second pause; the run ends in it
HALF = Fault("job paused", 4000, 8000)  # job "paused" stops after 1,000 blocks at 250 IOPS (4 s), "steady" goes on


def recorded(name: str) -> tuple[HostSeries, Fault]:
    if name == "thinktime-iotime":
        return series(name), THINK
    return series(name), signalled(name)


# -- what fio 3.33 writes ----------------------------------------------------------------------------------------


def test_fio_writes_no_line_for_an_interval_without_completions() -> None:
    """No recording has a zero: a pause, blocked I/O and a stopped fio all leave a gap in the log instead."""
    for name in ("thinktime-iotime", "sigstop", "receiver-stopped", "half-throughput"):
        for text in logs(name).values():
            samples = parse_log(text)
            assert samples and all(s.value > 0 for s in samples), name
    times = [s.time_ms for s in parse_log(logs("thinktime-iotime")["thinktime-iotime_iops.1.log"])]
    assert not [t for t in times if 4100 < t < 5900]  # the 2 s pause: no line at all
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) > 1900 and sorted(gaps)[-2] < 110


def test_after_a_stopped_fio_one_line_averages_the_whole_stop() -> None:
    """SIGSTOPped fio: the first line after it is the mean over the 2 s since the line before (20 IOPS), while
    after blocked I/O the line after the gap is one interval's (the catch-up of rate_iops, 10,010 IOPS)."""
    fault = signalled("sigstop")
    (text,) = logs("sigstop").values()
    after = next(s for s in parse_log(text) if s.time_ms > fault.start_ms)
    assert after.value < 50 and after.time_ms - fault.end_ms < 100
    (text,) = logs("receiver-stopped").values()
    after = next(s for s in parse_log(text) if s.time_ms > signalled("receiver-stopped").end_ms)
    assert after.value > 5000


# -- stalls, first I/O, recovery ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["thinktime-iotime", "sigstop", "receiver-stopped"])
def test_the_stall_is_what_the_run_did(name: str) -> None:
    """The stall is at most two intervals short (the intervals it starts and ends in had completions) and sits
    where the fault was. The stopped receiver's socket buffers took writes for 121 ms more: two intervals late."""
    run, fault = recorded(name)
    stall = longest_stall(run)
    assert stall is not None and fault_stall(run, fault) == stall
    length = (fault.end_ms - fault.start_ms) / 1000
    assert length - 2 * WINDOW_S <= stall.seconds <= length
    assert abs(stall.start_ms - fault.start_ms) <= 2 * WINDOW_S * 1000
    assert abs(stall.end_ms - fault.end_ms) <= WINDOW_S * 1000


@pytest.mark.parametrize("name", ["thinktime-iotime", "sigstop", "receiver-stopped"])
def test_first_io_and_recovery_follow_the_stall(name: str) -> None:
    """Each run came back at full rate (rate_iops catches up), so the first I/O and the recovery fall in the
    interval after the fault's end, and the pre-fault mean is the run's 500 IOPS."""
    run, fault = recorded(name)
    figures = measure(run, fault)
    length = (fault.end_ms - fault.start_ms) / 1000
    assert figures.first_io_s is not None and length <= figures.first_io_s <= length + WINDOW_S
    assert figures.recovery_s == figures.first_io_s
    assert figures.pre_fault_iops == pytest.approx(500, rel=0.03)


def test_io_that_completes_just_after_the_fault_is_not_the_first_io_after_it() -> None:
    """The stopped receiver's buffers completed 4 writes 121 ms after the stop: the first I/O is after the stall."""
    run, fault = recorded("receiver-stopped")
    early = next(i for i in run.intervals if i.start_ms >= fault.start_ms)
    assert early.end_ms - fault.start_ms < 200 and early.completions < 10
    assert (measure(run, fault).first_io_s or 0) > 2.0


def test_a_stall_that_lasts_until_fio_ends_is_seen_from_the_runs_end() -> None:
    """The thinktime run ends in its second pause: no line after 8,061 ms, only job_runtime (10,004 ms) tells."""
    run = series("thinktime-iotime")
    last = stalls(run)[-1]
    assert last.start_ms == 8061 and last.end_ms == run.end_ms - 100
    cut = host_series("vnode1", logs("thinktime-iotime"), interval_ms=100, start_ms=0, end_ms=8061)
    assert [s.start_ms for s in stalls(cut)] == [4049]


def test_a_run_that_never_recovers_says_so() -> None:
    """Faulted in its last pause, the thinktime run does no I/O again; the half-throughput host keeps doing I/O on
    its steady job, with no stall, at half its pre-fault rate: first I/O at once, no recovery."""
    ended = measure(series("thinktime-iotime"), THINK_TO_END)
    assert (ended.first_io_s, ended.recovery_s) == (None, None)
    half = measure(series("half-throughput"), HALF)
    assert half.stall is None and half.stall_s == 0.0
    assert half.first_io_s is not None and half.first_io_s <= 2 * WINDOW_S
    assert half.recovery_s is None and half.pre_fault_iops == pytest.approx(500, rel=0.03)
    assert set(half.figures()) == {"stall_s", "other_stall_s", "first_io_s", "io_errors", "verify_errors"}


def test_a_fault_window_must_be_in_order() -> None:
    with pytest.raises(ValueError, match=r"ends .* before it starts"):
        Fault("x", 2000, 1000)
    with pytest.raises(ValueError, match="before it starts"):
        host_series("vnode1", {}, interval_ms=100, start_ms=10, end_ms=0)


# -- errors ------------------------------------------------------------------------------------------------------


def _errors(folder: Path, name: str, out: str = "json") -> ErrorCounts:
    stdout = (folder / f"{name}.{out}").read_text()
    return count_errors(parse_fio_output(stdout, host="vnode1"), (folder / f"{name}.stderr").read_text() + stdout)


def test_error_counts_are_read_from_fio() -> None:
    """/dev/full: one failed write (fio ends the job at ENOSPC whatever continue_on_error says); the verify runs
    of tests/data/fio/verify: two bad blocks with and without continue_on_error, none in the clean one."""
    assert _errors(DATA, "io-error-enospc") == ErrorCounts(1, 0)
    counted = _errors(VERIFY, "verify-only-corrupt-8k", "out")
    assert (counted.io_errors, counted.verify_errors) == (0, 2)
    assert [m.offset for m in counted.mismatches] == [1089536, 1122304]
    stopped = _errors(VERIFY, "verify-only-corrupt-8k-stops", "out")
    assert (stopped.io_errors, stopped.verify_errors) == (0, 2)
    assert _errors(VERIFY, "write-verify-8k", "out") == ErrorCounts(0, 0)
    assert _errors(DATA, "sigstop") == ErrorCounts(0, 0)


# -- limits ------------------------------------------------------------------------------------------------------


def _thinktime(errors: ErrorCounts | None = None) -> FailoverFigures:
    return measure(series("thinktime-iotime"), THINK, errors)


IMPOSSIBLE = {
    "max_stall_s": (0.5, "vnode1, fault thinktime 2 s: the fault's stall 1.9 s is above the maximum of 0.5 s"),
    "max_first_io_s": (
        1.0,
        "vnode1, fault thinktime 2 s: first I/O after the fault at 2.1 s is above the maximum of 1 s",
    ),
    "max_recovery_s": (
        2.0,
        "vnode1, fault thinktime 2 s: recovery to 90% of the pre-fault throughput at 2.1 s is above the maximum of 2 s",
    ),
    "max_io_errors": (0, "vnode1, fault thinktime 2 s: 1 I/O errors is above the maximum of 0 I/O errors"),
    "max_verify_errors": (1, "vnode1, fault thinktime 2 s: 2 verify errors is above the maximum of 1 verify errors"),
}


@pytest.mark.parametrize("key", list(IMPOSSIBLE))
def test_each_failover_limit_fires_with_an_impossible_limit(key: str) -> None:
    limit, sentence = IMPOSSIBLE[key]
    figures = _thinktime(ErrorCounts(1, 2))
    assert failover_violations(figures, Thresholds.from_mapping({key: limit})) == [sentence]


def test_limits_the_run_meets_stay_quiet() -> None:
    generous = Thresholds(
        max_stall_s=3,
        max_first_io_s=3,
        max_recovery_s=3,
        max_io_errors=0,
        max_verify_errors=0,
        max_path_imbalance_pct=1,
    )
    assert failover_violations(_thinktime(), generous) == []
    assert failover_violations(_thinktime(), Thresholds()) == []


def test_no_io_after_the_fault_and_no_recovery_are_violations_in_words() -> None:
    ended = measure(series("thinktime-iotime"), THINK_TO_END)
    found = failover_violations(ended, Thresholds(max_first_io_s=5, max_recovery_s=5))
    assert found == [
        "vnode1, fault thinktime 2 s at the end: no I/O completed after the fault within the run "
        "(the maximum to the first I/O is 5 s)",
        "vnode1, fault thinktime 2 s at the end: throughput never came back to 90% of its pre-fault mean within the "
        "run (the maximum to recovery is 5 s)",
    ]


def test_the_rac_budget_appears_only_with_a_database() -> None:
    figures = _thinktime()
    limits = Thresholds(max_stall_s=1)
    without = failover_violations(figures, limits)
    assert len(without) == 1 and "CSS" not in without[0]
    with_db = failover_violations(figures, limits, database=RAC)
    assert with_db == [
        *without,
        "vnode1, fault thinktime 2 s: a 1.9 s stall is within Oracle CSS misscount (30 s) and disktimeout (200 s)",
    ]
    assert failover_violations(figures, Thresholds(max_stall_s=3), database=RAC) == []


def test_a_stall_at_misscount_threatens_the_cluster_even_without_a_stall_limit() -> None:
    tight = OracleSettings(diskgroups=("DATA",), misscount=1, disktimeout=200)
    (sentence,) = failover_violations(_thinktime(), Thresholds(), database=tight)
    assert sentence.startswith("vnode1, fault thinktime 2 s: a 1.9 s stall is at or above Oracle CSS misscount (1 s)")
    long = FailoverFigures("vnode2", THINK, Stall(0, 210_000), None, None, 500.0)
    (sentence,) = failover_violations(long, Thresholds(), database=RAC)
    assert (
        "at or above Oracle CSS disktimeout (200 s): a RAC node whose voting disks stall this long is evicted"
        in sentence
    )


def test_failover_limits_are_not_checked_on_performance_cases() -> None:
    """A lab's "*" entry with max_stall_s must not fail every performance case as "not measured"."""
    assert violations({"iops": 5000.0}, Thresholds(max_stall_s=1, max_io_errors=0)) == []
    assert violations({}, Thresholds(max_stall_s=1), gate="failover") == [
        "the fault's stall was not measured, so the maximum of 1 s could not be checked"
    ]


def test_a_count_may_be_limited_to_zero_and_nothing_else_may() -> None:
    assert Thresholds.from_mapping({"max_io_errors": 0, "max_verify_errors": 0}).limits() == {
        "max_io_errors": 0.0,
        "max_verify_errors": 0.0,
    }
    with pytest.raises(ThresholdError, match="max_io_errors: a limit on a count must be zero or more"):
        Thresholds.from_mapping({"max_io_errors": -1})
    with pytest.raises(ThresholdError, match="max_stall_s: a limit must be above zero"):
        Thresholds.from_mapping({"max_stall_s": 0})
    assert format_figure("io_errors", 3.0) == "3" and format_figure("stall_s", 1.906) == "1.91"


# -- path parity (Windows HLK multiport: no path more than 10% slower) ------------------------------------------


def test_path_imbalance_is_the_slowest_below_the_fastest() -> None:
    assert path_imbalance_pct({"10.10.10.17": 1000.0, "10.10.20.17": 850.0}) == pytest.approx(15.0)
    assert path_imbalance_pct({"a": 500.0, "b": 500.0, "c": 450.0}) == pytest.approx(10.0)
    assert path_imbalance_pct({"a": 500.0, "b": 0.0}) == 100.0
    with pytest.raises(ValueError, match="at least two paths"):
        path_imbalance_pct({"a": 1.0})
    with pytest.raises(ValueError, match="no path carried any I/O"):
        path_imbalance_pct({"a": 0.0, "b": 0.0})


def test_the_parity_rule_fires_and_names_both_paths() -> None:
    paths = {"10.10.10.17": 1000.0, "10.10.20.17": 850.0}
    assert imbalance_violations(paths, Thresholds(max_path_imbalance_pct=10), host="vnode1") == [
        "vnode1, path 10.10.20.17 against 10.10.10.17 with every path up: path imbalance 15 % is above the "
        "maximum of 10 %"
    ]
    assert imbalance_violations(paths, Thresholds(max_path_imbalance_pct=15), host="vnode1") == []
    assert imbalance_violations(paths, Thresholds(), host="vnode1") == []


def test_the_virtual_labs_parity_limit_fails_a_path_that_carries_next_to_nothing_and_passes_what_it_measured() -> None:
    """labs/vlab.yaml sets path-parity's limit (none was set, so the parity case could not fail in CI; issue 29):
    a path reading a twentieth of the other fails it on every protocol; the widest spread a full run measured
    (47.9%, nvme-rdma on nvmet) passes."""
    from pytest_fabricqa.failover.parity import PARITY
    from pytest_fabricqa.lab.load import load_lab
    from pytest_fabricqa.lab.thresholds import thresholds_for

    lab = load_lab(Path(__file__).parent.parent.parent / "labs" / "vlab.yaml")
    for protocol in lab.protocols:
        limits = thresholds_for(lab.thresholds_table(), protocol, PARITY)
        assert limits.max_path_imbalance_pct is not None, protocol
        dead = imbalance_violations({"10.10.10.19": 1000.0, "10.10.20.19": 50.0}, limits, host="vnode1")
        assert len(dead) == 1 and "95" in dead[0], (protocol, dead)
        assert imbalance_violations({"10.10.10.19": 1000.0, "10.10.20.19": 521.0}, limits, host="vnode1") == []


# -- the fault's own stall (issue 29, item 1) -----------------------------------------------------------------------


def _with_gaps(*gaps: tuple[int, int]) -> HostSeries:
    """A 20 s run at 50 I/Os per 100 ms interval, with no line in each ``(start_ms, end_ms)`` gap."""
    from pytest_fabricqa.fio.stalls import Interval

    ends = [t for t in range(100, 20_001, 100) if not any(a < t <= b for a, b in gaps)]
    return HostSeries("vnode1", 100, tuple(Interval(t - 100, t, 50.0) for t in ends), 0, 20_000)


def test_a_pause_before_the_fault_is_not_the_faults_stall() -> None:
    """A starved guest's 3 s pause at 4 s, then a fault at 10 s that the fabric rides through: the fault's stall is
    0 and the pause is reported as the run's other gap (the longest stall of the run was reported, and gated, before)."""
    figures = measure(_with_gaps((4_000, 7_000)), Fault("port down", 10_000, 12_000))
    assert figures.stall_s == 0.0 and figures.other_stall_s == pytest.approx(3.0, abs=0.1)
    assert failover_violations(figures, Thresholds(max_stall_s=5)) == []
    assert figures.figures()["other_stall_s"] == pytest.approx(3.0, abs=0.1)


def test_a_faults_stall_shorter_than_an_earlier_hiccup_is_still_judged() -> None:
    """A 1 s hiccup at 4 s, then a 2 s stall at the fault: the fault's stall is the 2 s one, gated; the hiccup is the
    other gap."""
    figures = measure(_with_gaps((4_000, 5_000), (10_000, 12_000)), Fault("port down", 10_000, 11_000))
    assert figures.stall_s == pytest.approx(2.0, abs=0.1) and figures.other_stall_s == pytest.approx(1.0, abs=0.1)
    assert failover_violations(figures, Thresholds(max_stall_s=1.5)) == [
        "vnode1, fault port down: the fault's stall 2 s is above the maximum of 1.5 s"
    ]


def test_a_pause_before_the_fault_longer_than_the_limit_fails_as_a_lab_that_was_not_quiet() -> None:
    """After a 3 s pause, a fault's stall of up to 3 s could not be told from jitter: the case fails, naming the
    lab, not the fabric."""
    figures = measure(_with_gaps((4_000, 7_000)), Fault("port down", 10_000, 12_000))
    assert failover_violations(figures, Thresholds(max_stall_s=2)) == [
        "vnode1, fault port down: the lab was not quiet before the fault: no I/O completed for 3.0 s, 3.0 s before "
        "the fault began (more than the maximum stall, 2 s), so the fault's own stall cannot be told from it"
    ]


def test_a_missing_failback_fails_the_case_only_where_the_path_shared_the_io_and_a_slow_one_breaks_its_limit() -> None:
    seen = "the path at 10.10.10.19, which shared the I/O with another path before the fault, carried none within 30 s"
    missing = replace(_thinktime(), failback=seen, failback_due=True)
    assert failover_violations(missing, Thresholds(max_failback_s=10)) == [
        f"vnode1, fault thinktime 2 s: {seen}: no failback"
    ]
    alone = replace(_thinktime(), failback="the multipath policy kept the I/O on the path it moved to")
    assert failover_violations(alone, Thresholds(max_failback_s=10)) == []
    slow = replace(_thinktime(), failback_s=12.5, failback="...", failback_due=True)
    assert slow.figures()["failback_s"] == 12.5
    assert failover_violations(slow, Thresholds(max_failback_s=10)) == [
        "vnode1, fault thinktime 2 s: the faulted path carried I/O again at 12.5 s is above the maximum of 10 s"
    ]
