"""The database's I/O mix as fio runs it (pytest_fabricqa.oracle.profile): the job file, each node on its own
regions, fio's figures under AWR's wait event names, and the per-event limits; on a recorded run of the real fio
(tests/data/fio/oracle-profile-node0.*, see its README) and on a live one over a file."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest

from pytest_fabricqa.fio.parse import parse_fio_output
from pytest_fabricqa.lab.database import EventLimits, OracleProfile, ReadStream, RedoStream
from pytest_fabricqa.oracle import profile

DATA = Path(__file__).parents[1] / "data" / "fio"
SMALL = OracleProfile(redo=RedoStream(region_mb=8), data_mb=32, runtime_s=2)


def test_each_node_writes_its_own_redo_and_data_regions_past_the_guarded_start() -> None:
    nodes = [profile.regions(SMALL, n) for n in range(4)]
    assert nodes[0].redo_offset == profile.BASE_OFFSET
    for earlier, later in itertools.pairwise(nodes):
        assert earlier.redo_offset + earlier.redo_bytes == earlier.data_offset and earlier.end == later.redo_offset
    assert profile.span(SMALL, 4) == nodes[3].end == profile.BASE_OFFSET + 4 * 40 * profile.MiB


def test_the_job_file_has_the_four_streams_as_oracle_does_them() -> None:
    text = profile.job_file(OracleProfile(reads=ReadStream(sessions=6)), "/dev/mapper/3600140a", 1)
    sections = {s.split("]")[0]: s for s in text.split("\n[")[1:]}
    assert set(sections) == {"redo", "reads", "dbwr", "multiblock"}
    assert "rw=write\n" in sections["redo"] and "sync=dsync\n" in sections["redo"] and "iodepth=1\n" in sections["redo"]
    assert "rw=randread\nbs=8k\nioengine=psync\niodepth=1\nnumjobs=6\n" in sections["reads"]
    assert "ioengine=libaio\niodepth=16\niodepth_batch_submit=8\n" in sections["dbwr"]
    assert "rw=read\nbs=1m\n" in sections["multiblock"]
    node1 = profile.regions(OracleProfile(), 1)
    assert f"offset={node1.redo_offset}\n" in sections["redo"] and f"offset={node1.data_offset}\n" in sections["reads"]
    assert "direct=1\n" in text and "filename=/dev/mapper/3600140a\n" in text
    assert "fdatasync=1\n" in profile.job_file(OracleProfile(redo=RedoStream(sync="fdatasync")), "/dev/x", 0)


def test_a_recorded_run_reads_as_four_wait_events_with_database_iops() -> None:
    result = parse_fio_output((DATA / "oracle-profile-node0.json").read_text(), host="vnode1")
    found = {f.event: f for f in profile.figures(result, "vnode1")}
    assert list(found) == [
        "log file parallel write", "db file sequential read", "db file parallel write", "db file scattered read"
    ]  # fmt: skip
    for f in found.values():
        assert f.waits > 0 and f.avg_ms and f.p99_ms and f.max_ms and f.max_ms >= f.p99_ms >= 0, f
        assert f.waiting_share is not None and 0 < f.waiting_share <= 1.01, f
    assert found["db file sequential read"].slots == 4 and found["db file parallel write"].slots == 16
    iops = profile.database_iops(list(found.values()))
    reads = found["db file sequential read"].iops + found["db file scattered read"].iops
    assert iops["read"] == reads and iops["total"] == reads + iops["write"]


def test_a_limit_on_an_event_fails_the_node_that_breaks_it() -> None:
    result = parse_fio_output((DATA / "oracle-profile-node0.json").read_text(), host="vnode1")
    found = profile.figures(result, "vnode1")
    redo = next(f for f in found if f.stream == "redo")
    tight = {"log file parallel write": EventLimits(p99_ms=redo.p99_ms / 2 if redo.p99_ms else 0.001)}
    (problem,) = profile.judge(found, tight)
    assert problem.startswith("vnode1, 'log file parallel write': 99th percentile ") and "above the" in problem
    assert profile.judge(found, {"log file parallel write": EventLimits(p99_ms=10_000, max_ms=10_000)}) == []


def test_the_real_fio_runs_the_job_file_over_a_file(tmp_path: Path) -> None:
    device = tmp_path / "disk.img"
    with device.open("wb") as f:
        f.truncate(profile.span(SMALL, 1) + profile.MiB)
    job = tmp_path / "node0.fio"
    job.write_text(profile.job_file(SMALL, str(device), 0, runtime_s=1))
    out = subprocess.run(["fio", "--output-format=json", str(job)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    found = profile.figures(parse_fio_output(out.stdout, host="local"), "local")
    assert [f.stream for f in found] == ["redo", "reads", "dbwr", "multiblock"] and all(f.waits for f in found)


def _event(node: str, stream: str, iops: float, avg_ms: float, p99_ms: float) -> profile.EventFigures:
    event = profile.STREAMS[stream][0]
    return profile.EventFigures(node, event, stream, int(iops * 10), iops, avg_ms, p99_ms, p99_ms * 2, 0.5, 1)


def test_scaling_gives_efficiency_the_knee_and_each_events_latency_per_step() -> None:
    assert profile.steps(["a", "b", "c"], OracleProfile()) == [("a",), ("a", "b"), ("a", "b", "c")]
    assert profile.steps(["a", "b", "c"], OracleProfile(scaling=False)) == [("a", "b", "c")]
    one = [_event("a", "redo", 100, 1.0, 2.0), _event("a", "reads", 300, 0.5, 1.0)]
    two = [
        _event(n, s, i, avg, p99) for n in "ab" for s, i, avg, p99 in (("redo", 90, 2.0, 4.0), ("reads", 280, 1.0, 3.0))
    ]
    three = [*two, _event("c", "redo", 1, 9.0, 30.0), _event("c", "reads", 9, 9.0, 30.0)]  # the third adds ~nothing
    steps = profile.scaling([(("a",), one), (("a", "b"), two), (("a", "b", "c"), three)])
    assert [s.iops["total"] for s in steps] == [400, 740, 750]
    assert steps[0].efficiency == 1 and steps[1].efficiency == pytest.approx(740 / 800)
    assert [s.knee for s in steps] == [False, True, False]  # two nodes paid (+85%), the third did not (+1%)
    runs = [(s.nodes, f) for s, f in zip(steps, (one, two, three), strict=True)]
    assert [s.knee for s in profile.scaling(runs, 90)] == [True, False, False]  # the lab's gain: +85% is not 90%
    avg, p99 = steps[2].events["log file parallel write"]
    assert avg == pytest.approx((2.0 * 900 + 2.0 * 900 + 9.0 * 10) / 1810) and p99 == 30.0
    assert profile.scaling_violations(steps, None) == []
    (breach,) = profile.scaling_violations(steps, 0.7)
    assert (
        breach.startswith("oracle profile database IOPS: scaling efficiency 0.6")
        and "at 3 initiators (750 IOPS against 3 x 400)" in breach
    )
    linear = profile.scaling(
        [(("a",), one), (("a", "b"), [*one, _event("b", "redo", 100, 1, 2), _event("b", "reads", 300, 0.5, 1)])]
    )
    assert [s.knee for s in linear] == [False, False] and linear[1].efficiency == 1  # every step paid: no knee
