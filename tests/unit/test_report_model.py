"""The results model: JSON round trip, atomic writes, and clear errors for corrupt or foreign files."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pytest_fabricqa.core.scaling import ScalingPoint
from pytest_fabricqa.core.workloads import Workload
from pytest_fabricqa.measure.spread import Rounds, spread
from pytest_fabricqa.report.model import (
    SCHEMA,
    Case,
    Check,
    Environment,
    RegressionInfo,
    ResultsFileError,
    Run,
    load_json,
    overall_verdict,
    run_to_dict,
    write_json,
)
from pytest_fabricqa.report.series import TimeSeries, Window

DATA = Path(__file__).parent.parent / "data" / "report"


def small_run() -> Run:
    when = datetime(2024, 5, 14, 9, 0, tzinfo=UTC)
    case = Case(
        nodeid="suites/test_performance.py::test_fio[nvme-rdma-randread-8k-qd128-j4]",
        case_id="nvme-rdma-randread-8k-qd128-j4",
        suite="performance",
        verdict="failed",
        protocol="nvme-rdma",
        workload=Workload("randread-8k-qd128-j4", "randread", "8k", numjobs=4, iodepth=128, runtime=60),
        hosts={"el72h1": {"iops": 100.0, "lat_p99_us": 900.5}, "el72h2": {"iops": 110.0}},
        figures={"iops": 210.0, "lat_p99_us": 900.5, "fabric_efficiency": 0.97},
        thresholds={"min_iops": 300.0},
        violations=("iops 210 is below the minimum 300",),
        regression=RegressionInfo("nvme-rdma-randread-8k-qd128-j4", {"iops": 220.0}, {"iops": 10.0}),
        raw_fio_json="fio/nvme-rdma-randread-8k-qd128-j4.json",
        checks=(Check("namespace visible", "passed", "1 of 1"),),
        extras={"calibrate_io": {"max_iops": 1, "max_mbps": 2}},
    )
    return Run(
        lab="rac3",
        protocols=("nvme-rdma",),
        target_kind="nvmet",
        started=when,
        finished=when,
        environment=Environment(fio_version="fio-3.33", kernels={"el72h1": "6.1.0-18-amd64"}),
        cases=(case,),
        extras={"oracle_not_exercised": "the lab declares no database"},
    )


def test_round_trip_is_lossless(tmp_path: Path) -> None:
    run = small_run()
    path = write_json(run, tmp_path / "sub" / "results.json")
    assert load_json(path) == run
    assert json.loads(path.read_text())["schema"] == SCHEMA


def test_sample_files_load_and_rewrite_identically(tmp_path: Path) -> None:
    for name in ("sample_run.json", "sample_baseline.json", "seed001_iscsi.json", "seed001_softroce.json"):
        run = load_json(DATA / name)
        again = write_json(run, tmp_path / name)
        assert again.read_text() == (DATA / name).read_text(), name


def test_recent_fields_survive_the_round_trip(tmp_path: Path) -> None:
    """Per-host randseeds, queues and start offsets, and the spread, time series and scaling extras, each as
    its own producer writes it, read back equal and rewrite to the same text."""
    rounds = Rounds(
        figures=({"iops": 100.0}, {"iops": 104.0}),
        measured=({"iops": 100.0}, {"iops": 104.0}),
        means={"iops": 102.0},
        spreads={"iops": spread([100.0, 104.0])},
    )
    series = TimeSeries(
        interval_ms=1000,
        hosts={"el72h1": (Window(1.0, iops=100.0, p99_us=900.0, ios=100),)},
        cluster=(Window(1.0, iops=100.0, p99_us=900.0, ios=100),),
        files=("fio/el72h1_iops.1.log",),
    )
    points = [ScalingPoint(1, ("el72h1",), 100.0, 900.0, efficiency=1.0), ScalingPoint(2, ("el72h1", "el72h2"), 190.0)]
    case = replace(
        small_run().cases[0],
        randseeds={"el72h1": 12345, "el72h2": 12346},
        queues={"el72h1": {"nr_io_queues": 4, "queue_size": 128}},
        start_offsets_ms={"el72h1": 0.0, "el72h2": 3.5},
        extras={"spread": rounds.extras(), "timeseries": series.to_dict(), "scaling": [p.to_dict() for p in points]},
    )
    run = replace(small_run(), cases=(case,))
    path = write_json(run, tmp_path / "results.json")
    again = load_json(path)
    assert again == run and again.cases[0].start_spread_ms == 3.5
    assert TimeSeries.from_dict(again.cases[0].extras["timeseries"]) == series
    assert write_json(again, tmp_path / "again.json").read_text() == path.read_text()
    # Empty ones are not written at all, as in every file from before they were recorded.
    assert not {"randseeds", "queues", "start_offsets_ms"} & set(run_to_dict(small_run())["cases"][0])


def test_write_leaves_no_temporary_files_and_respects_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_json(small_run(), tmp_path / "results.json")
        write_json(small_run(), path)  # replacing an existing file
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
    assert path.stat().st_mode & 0o777 == 0o644


def test_verdict_folding() -> None:
    assert overall_verdict(["passed", "skipped"]) == "PASS"
    assert overall_verdict(["passed", "error"]) == "FAIL"
    assert overall_verdict(["skipped"]) == "NOT RUN"
    assert overall_verdict([]) == "NOT RUN"
    run = small_run()
    assert run.verdict() == "FAIL"
    assert run.verdict("nvme-rdma") == "FAIL"
    assert run.verdict("iser") == "NOT RUN"


def test_unknown_metric_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="unknown metric 'IOPS'"):
        replace(small_run().cases[0], figures={"IOPS": 1.0})
    with pytest.raises(ValueError, match="verdict 'ok'"):
        replace(small_run().cases[0], verdict="ok")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "not JSON"),
        (b'{"schema": "fabricqa-results/1", "lab": ', "not JSON"),
        (b"\xff\xfe garbage", "cannot read"),
        (b"[1, 2]", "not a pytest-fabricqa results file"),
        (b'{"benchmarks": []}', "not a pytest-fabricqa results file"),
        (b'{"schema": "fabricqa-results/2"}', "schema is 'fabricqa-results/2'"),
    ],
)
def test_corrupt_or_foreign_files_raise_a_typed_error(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ResultsFileError, match=why) as info:
        load_json(path)
    assert info.value.path == path
    assert str(path) in str(info.value)


def test_missing_file_raises_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsFileError, match="cannot read"):
        load_json(tmp_path / "absent.json")


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda d: d.pop("lab"), r"results: missing key 'lab'"),
        (
            lambda d: d.update(started="yesterday"),
            r"results.started: Input should be a valid datetime.*found 'yesterday'",
        ),
        (
            lambda d: d["cases"][0]["figures"].update(iops="fast"),
            r"cases\[0\].figures.iops: Input should be a valid number, found 'fast'",
        ),
        (lambda d: d["cases"][0]["figures"].update(bogus=1), r"cases\[0\]: case .* figures: unknown metric 'bogus'"),
        (lambda d: d["cases"][0]["hosts"]["el72h1"].update(x=1), r"hosts.el72h1: unknown metric 'x'"),
        (lambda d: d["cases"][0]["workload"].update(numjobs="4"), r"cases\[0\].workload.numjobs: expected an integer"),
        (lambda d: d["cases"][0]["workload"].update(numjobs=True), r"workload.numjobs: expected an integer"),
        (lambda d: d["cases"][0].update(verdict="ok"), r"cases\[0\].verdict: Input should be 'passed', .*found 'ok'"),
        (
            lambda d: d["cases"][0]["checks"][0].update(verdict="meh"),
            r"checks\[0\].verdict: Input should be .*found 'meh'",
        ),
        (lambda d: d.update(cases={}), r"results.cases: Input should be a valid tuple, found {}"),
        (
            lambda d: d["cases"][0]["figures"].update(iops=True),
            r"cases\[0\].figures.iops: Input should be a valid number",
        ),
        (lambda d: d["cases"][0]["thresholds"].update(min_iops="300"), r"thresholds.min_iops: Input should be"),
        (lambda d: d["cases"][0].update(randseeds={"el72h1": 1.5}), r"randseeds.el72h1: Input should be a valid int"),
        (
            lambda d: d["environment"]["kernels"].update(el72h1=6),
            r"kernels.el72h1: Input should be a valid string, found 6",
        ),
    ],
)
def test_malformed_fields_name_the_key(tmp_path: Path, mutate: object, why: str) -> None:
    data = run_to_dict(small_run())
    mutate(data)  # type: ignore[operator]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsFileError, match=why):
        load_json(path)
