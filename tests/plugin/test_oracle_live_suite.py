"""The live-database cases of suites/test_oracle.py (CALIBRATE_IO and the wait events around a load), run by
pytester against the FAKE connection (pytest_fabricqa.oracle.fake: no Oracle database runs here), through to the
results file and the HTML report: per instance the waits' deltas with their histogram buckets in an "as AWR shows
it" table, an instance that restarted between the snapshots said and not summed, and CALIBRATE_IO's figures in
their table. The rows have the columns and types of Oracle Database 19c's GV$INSTANCE, GV$SYSTEM_EVENT and
GV$EVENT_HISTOGRAM (as tests/unit/test_oracle_waits.py); the numbers are made up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labfiles import local_lab

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "test_oracle.py"

DATABASE = """
database:
  diskgroups: [DATA]
  asm: {host: 127.0.0.1, service_name: "+ASM"}
  db: {host: 127.0.0.1, service_name: orcl}
  calibrate: {num_physical_disks: 2, max_latency_ms: 20, thresholds: {min_iops: 1000}}
  waits:
    window_s: 0
    events: [log file sync, db file sequential read]
    limits:
      log file sync: {max_ms: 10}
"""

CONFTEST = """
from datetime import datetime

import pytest

from pytest_fabricqa.oracle import calibrate, sql
from pytest_fabricqa.oracle.fake import FakeConnection, FakeResult

RESTART = @RESTART@
BOOT = datetime(2026, 12, 1, 8, 0, 5)


def tables(after):
    started2 = datetime(2026, 12, 4, 13, 2, 0) if after and RESTART else BOOT
    sync = (2000, 4_500_000) if after else (1000, 2_000_000)
    reads2 = (900, 700_000) if after else (500, 400_000)
    hist = {1: 300, 2: 900, 4: 600, 8: 190, 16: 10} if after else {1: 200, 2: 500, 4: 280, 8: 20}
    if after and RESTART:
        reads2 = (30, 20_000)
    events = [(1, "log file sync", "Commit", *sync), (2, "db file sequential read", "User I/O", *reads2)]
    histogram = [(1, "log file sync", b, c) for b, c in hist.items()] + [(2, "db file sequential read", 1, reads2[0])]
    return {
        "FROM gv$instance": FakeResult(
            ["INST_ID", "INSTANCE_NAME", "HOST_NAME", "STARTUP_TIME"],
            [(1, "orcl1", "el72h1", BOOT), (2, "orcl2", "el72h2", started2)],
        ),
        "FROM gv$system_event": FakeResult(["INST_ID", "EVENT", "WAIT_CLASS", "TOTAL_WAITS", "TIME_WAITED_MICRO"], events),
        "FROM gv$event_histogram": FakeResult(["INST_ID", "EVENT", "WAIT_TIME_MILLI", "WAIT_COUNT"], histogram),
        "FROM V$PARAMETER": FakeResult(
            ["NAME", "VALUE"],
            [("timed_statistics", "TRUE"), ("disk_asynch_io", "TRUE"), ("filesystemio_options", "setall")],
        ),
        "FROM V$DATAFILE F, V$IOSTAT_FILE I": FakeResult(["NAME", "ASYNCH_IO"], [("+DATA/ORCL/f1.dbf", "ASYNC_ON")]),
        "FROM V$IO_CALIBRATION_STATUS": FakeResult(["STATUS"], [("READY",)]),
    }


class Snapshots(FakeConnection):
    # The first GV$INSTANCE read answers "before"; every later one "after".
    def answer(self, statement):
        if "GV$INSTANCE" in statement.upper():
            self.reads = getattr(self, "reads", 0) + 1
        self.tables = tables(after=getattr(self, "reads", 0) > 1)
        return super().answer(statement)


@pytest.fixture(autouse=True)
def fake_database(monkeypatch):
    def connect(settings, mode=None):
        return Snapshots(procedures={calibrate.PROCEDURE: lambda inputs: (135540, 4200, 1)})

    monkeypatch.setattr(sql, "connect", connect)
"""


@pytest.mark.parametrize("restart", [False, True], ids=["quiet", "instance-2-restarted"])
def test_waits_and_calibrate_io_reach_the_results_and_the_report_per_instance(
    pytester: pytest.Pytester, restart: bool
) -> None:
    lab = local_lab("localdb", "nqn.2026-11.io.fabricqa:localdb")
    (pytester.path / "lab.yaml").write_text(lab + DATABASE)
    pytester.makeconftest(CONFTEST.replace("@RESTART@", str(restart)))
    (pytester.path / "test_oracle.py").write_text(SUITE.read_text())
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess(
        "--lab=lab.yaml", "-p", "no:cacheprovider", f"--report-dir={report}", "-k", "calibrate or waits"
    )
    result.assert_outcomes(passed=1 if restart else 2, failed=1 if restart else 0)
    cases = {c["case_id"]: c for c in json.loads((report / "results.json").read_text())["cases"]}
    calibration = cases["oracle-calibrate-io"]
    assert calibration["extras"]["calibrate_io"] == {
        "max_iops": 135540, "max_mbps": 4200, "actual_latency_ms": 1, "num_physical_disks": 2, "max_latency_ms": 20
    }  # fmt: skip
    waits = cases["oracle-database-waits"]
    rows = waits["extras"]["database_waits"]
    html = (report / "report.html").read_text()
    assert "DBMS_RESOURCE_MANAGER.CALIBRATE_IO" in html and "<td>135,540</td>" in html
    assert "As AWR shows it: the live database" in html
    # Instance 1's log file sync over the window: 1,000 waits, 2.5 ms on average, 99% under 8 ms, the longest under 16.
    assert rows[0] == {
        "instance": 1, "event": "log file sync", "wait class": "Commit", "waits": 1000,
        "total wait time (ms)": 2500.0, "avg wait (ms)": 2.5, "p99 (ms)": "< 8", "max (ms)": "< 16",
    }  # fmt: skip
    assert (
        "<td>1</td><td>log file sync</td><td>Commit</td><td>1,000</td><td>2,500.0</td><td>2.5</td><td>&lt; 8</td>"
        in html
    )
    if restart:
        assert [r["instance"] for r in rows] == [1]  # instance 2's counters began again: not summed
        (said,) = waits["violations"]
        assert said.startswith("instance 2 (orcl2 on el72h2) restarted between the snapshots") and said in html
        assert waits["verdict"] == "failed"
    else:
        assert [(r["instance"], r["event"], r["waits"]) for r in rows] == [
            (1, "log file sync", 1000), (2, "db file sequential read", 400)
        ]  # fmt: skip
        assert waits["violations"] == [] and waits["verdict"] == "passed"
        # The longest wait is in the 8-16 ms bucket, which the 10 ms limit falls inside: said, neither passed nor failed.
        (note,) = waits["extras"]["database_waits_notes"]
        assert (
            note.startswith("instance 1, 'log file sync': longest wait in the 8-16 ms bucket")
            and note.replace("'", "&#39;") in html
        )
