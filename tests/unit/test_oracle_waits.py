"""Wait events from a live database, as AWR shows them (pytest_fabricqa.oracle.waits), against the FAKE connection.

No Oracle database runs here. The rows below have the columns and types of Oracle Database 19c's GV$INSTANCE,
GV$SYSTEM_EVENT and GV$EVENT_HISTOGRAM (Oracle Database Reference 19c: INST_ID, EVENT, WAIT_CLASS, TOTAL_WAITS,
TIME_WAITED_MICRO; WAIT_TIME_MILLI, WAIT_COUNT; INSTANCE_NAME, HOST_NAME, STARTUP_TIME as a datetime, as
python-oracledb returns a DATE); the numbers are made up to exercise the arithmetic, not recorded from a database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pytest_fabricqa.lab.database import EventLimits
from pytest_fabricqa.oracle import waits
from pytest_fabricqa.oracle.fake import FakeConnection, FakeResult

EVENTS = ("log file sync", "db file sequential read")
BOOT1, BOOT2 = datetime(2026, 12, 1, 8, 0, 5), datetime(2026, 12, 1, 8, 0, 9)


def _db(
    started2: datetime = BOOT2,
    sync: tuple[int, int] = (1000, 2_000_000),
    reads2: tuple[int, int] = (500, 400_000),
    sync_hist: dict[int, int] | None = None,
) -> FakeConnection:
    """Two instances (orcl1 on el72h1, orcl2 on el72h2); instance 1's log file sync and both instances' single-block
    reads as given."""
    hist = sync_hist or {1: 200, 2: 500, 4: 280, 8: 20}
    rows_events: list[tuple[Any, ...]] = [
        (1, "log file sync", "Commit", sync[0], sync[1]),
        (1, "db file sequential read", "User I/O", 10_000, 5_000_000),
        (2, "db file sequential read", "User I/O", *reads2),
    ]
    rows_hist: list[tuple[Any, ...]] = [(1, "log file sync", b, c) for b, c in hist.items()]
    rows_hist += [(1, "db file sequential read", 1, 9000), (1, "db file sequential read", 2, 1000)]
    rows_hist += [(2, "db file sequential read", 1, reads2[0])]
    return FakeConnection(
        tables={
            "FROM gv$instance": FakeResult(
                ["INST_ID", "INSTANCE_NAME", "HOST_NAME", "STARTUP_TIME"],
                [(1, "orcl1", "el72h1", BOOT1), (2, "orcl2", "el72h2", started2)],
            ),
            "FROM gv$system_event": FakeResult(
                ["INST_ID", "EVENT", "WAIT_CLASS", "TOTAL_WAITS", "TIME_WAITED_MICRO"], rows_events
            ),
            "FROM gv$event_histogram": FakeResult(["INST_ID", "EVENT", "WAIT_TIME_MILLI", "WAIT_COUNT"], rows_hist),
        }
    )


def test_the_window_gives_per_instance_figures_in_awr_terms() -> None:
    before = waits.snapshot(_db(), EVENTS)
    after_db = _db(
        sync=(2000, 4_500_000),
        reads2=(900, 700_000),
        sync_hist={1: 300, 2: 900, 4: 600, 8: 190, 16: 10},
    )
    after = waits.snapshot(after_db, EVENTS)
    result = waits.delta(before, after, EVENTS)
    assert result.restarted == [] and result.missing == []
    sync, idle = result.by_event("log file sync")
    assert idle.inst_id == 2 and idle.waits == 0 and idle.p99_ms is None  # no commit on instance 2
    assert (sync.inst_id, sync.waits, sync.time_ms) == (1, 1000, 2500.0) and sync.avg_ms == 2.5
    assert sync.histogram == {1: 100, 2: 400, 4: 320, 8: 170, 16: 10}
    assert sync.p99_ms == 8 and sync.max_ms == 16 and sync.wait_class == "Commit"  # 990 of 1000 waits < 8 ms
    reads = {f.inst_id: f for f in result.by_event("db file sequential read")}
    assert reads[1].waits == 0 and reads[1].avg_ms is None and reads[1].p99_ms is None
    assert reads[2].waits == 400 and reads[2].avg_ms == 0.75 and reads[2].p99_ms == 1 and reads[2].max_ms == 1
    rows = waits.table(result)
    assert [(r["instance"], r["event"]) for r in rows] == [(1, "log file sync"), (2, "db file sequential read")]
    assert rows[0]["p99 (ms)"] == "< 8" and rows[0]["avg wait (ms)"] == 2.5
    # The events are bound, never pasted into the SQL.
    statement = next(s for s in after_db.executed if "gv$system_event" in s)
    assert "IN (:e0, :e1)" in statement and after_db.binds[1] == {
        "e0": "log file sync",
        "e1": "db file sequential read",
    }


def test_an_instance_that_restarted_between_the_snapshots_is_said_and_not_summed() -> None:
    before = waits.snapshot(_db(), EVENTS)
    after = waits.snapshot(_db(started2=datetime(2026, 12, 4, 13, 2, 0), reads2=(30, 20_000)), EVENTS)
    result = waits.delta(before, after, EVENTS)
    assert {f.inst_id for f in result.figures} == {1}  # instance 2's figures are not there
    (said,) = result.restarted
    assert said.startswith("instance 2 (orcl2 on el72h2) restarted between the snapshots (started 2026-12-01 08:00:09")
    problems, _ = waits.judge(result, {})
    assert problems == [said]


def test_a_counter_that_went_down_without_a_restart_is_not_subtracted() -> None:
    before = waits.snapshot(_db(), EVENTS)
    after = waits.snapshot(_db(reads2=(100, 50_000)), EVENTS)  # statistics reset on instance 2
    result = waits.delta(before, after, EVENTS)
    assert {f.inst_id for f in result.figures} == {1}
    assert result.restarted[0].startswith("instance 2 (orcl2 on el72h2): a counter went down")


def test_limits_per_event_fail_a_breach_and_say_what_the_histogram_cannot_tell() -> None:
    before = waits.snapshot(_db(), EVENTS)
    slow = waits.snapshot(_db(sync=(2000, 9_000_000), sync_hist={1: 200, 2: 500, 4: 280, 8: 990, 16: 30}), EVENTS)
    result = waits.delta(before, slow, EVENTS)
    problems, notes = waits.judge(result, {"log file sync": EventLimits(avg_ms=5, p99_ms=7, max_ms=20)})
    assert problems == [
        "instance 1, 'log file sync': average 7.00 ms over 1000 waits, above the 5 ms limit",
        "instance 1, 'log file sync': 99th percentile 8-16 ms (histogram bucket < 16 ms) over 1000 waits, above the "
        "7 ms limit",
    ]
    assert notes == []  # the longest wait, < 16 ms, is within 20 ms
    straddling = waits.delta(
        before, waits.snapshot(_db(sync=(2000, 4_000_000), sync_hist={1: 200, 2: 500, 4: 280, 8: 1020}), EVENTS), EVENTS
    )
    problems, notes = waits.judge(straddling, {"log file sync": EventLimits(p99_ms=7)})
    assert problems == [] and notes == [
        "instance 1, 'log file sync': 99th percentile in the 4-8 ms bucket, which the 7 ms limit falls inside: the "
        "histogram cannot tell whether it held"
    ]
    fast = waits.delta(
        before, waits.snapshot(_db(sync=(2000, 2_500_000), sync_hist={1: 1200, 2: 500, 4: 280, 8: 20}), EVENTS), EVENTS
    )
    assert waits.judge(fast, {"log file sync": EventLimits(avg_ms=5, p99_ms=7, max_ms=8)}) == ([], [])
