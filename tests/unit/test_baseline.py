"""Regression gate: baseline lookup, tolerance parsing, regression sentences, environment mismatch."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from factories import T0, make_run, perf_case

from pytest_fabricqa.core.workloads import Workload
from pytest_fabricqa.report.baseline import (
    DEFAULT_TOLERANCES,
    BaselineWarning,
    ToleranceError,
    baseline_case,
    compare_case,
    environment_mismatch,
    find_baseline,
    parse_tolerances,
    regressions,
    save_baseline,
)
from pytest_fabricqa.report.model import Environment, ResultsFileError, Run, TargetInfo, load_json


def run(
    lab: str = "rac3", protocols: tuple[str, ...] = ("nvme-rdma",), started: datetime = T0, iops: float = 3000
) -> Run:
    cases = [perf_case(p, nodeid=f"t::{p}", figures={"iops": iops, "lat_p99_us": 1000.0}) for p in protocols]
    return make_run(*cases, lab=lab, protocols=protocols, started=started, finished=started + timedelta(minutes=5))


# --- regressions ------------------------------------------------------------------------------------------


def test_the_brief_example_sentence() -> None:
    assert regressions({"iops": 2310}, {"iops": 3000}, {"iops": 10}) == [
        "iops 2,310 is 23.0% below the baseline's 3,000 (tolerance 10%)"
    ]


def test_latency_and_cpu_regress_upwards_throughput_downwards() -> None:
    now = {"iops": 3500, "mbps": 20.0, "lat_p99_us": 1520, "lat_mean_us": 80, "cpu_sys_pct": 40.0}
    before = {"iops": 3000, "mbps": 25.0, "lat_p99_us": 1000, "lat_mean_us": 100, "cpu_sys_pct": 20.0}
    tol = {"iops": 10, "mbps": 10, "lat_p99_us": 20, "lat_mean_us": 20, "cpu_sys_pct": 50}
    assert regressions(now, before, tol) == [
        "mbps 20.0 is 20.0% below the baseline's 25.0 (tolerance 10%)",
        "lat_p99_us 1,520 is 52.0% above the baseline's 1,000 (tolerance 20%)",
        "cpu_sys_pct 40.0 is 100.0% above the baseline's 20.0 (tolerance 50%)",
    ]


def test_a_change_of_exactly_the_tolerance_passes_and_just_beyond_fails() -> None:
    assert regressions({"iops": 2700}, {"iops": 3000}, {"iops": 10}) == []
    assert regressions({"lat_p99_us": 1200}, {"lat_p99_us": 1000}, {"lat_p99_us": 20}) == []
    assert len(regressions({"iops": 2699.9}, {"iops": 3000}, {"iops": 10})) == 1
    assert len(regressions({"lat_p99_us": 1200.1}, {"lat_p99_us": 1000}, {"lat_p99_us": 20})) == 1


def test_missing_metrics_and_zero_baselines_are_not_compared() -> None:
    assert regressions({"iops": 1}, {"mbps": 100}, {"iops": 10, "mbps": 10}) == []
    assert regressions({"iops": 1}, {"iops": 0}, {"iops": 10}) == []


def test_fabric_efficiency_is_higher_is_better() -> None:
    (message,) = regressions({"fabric_efficiency": 0.80}, {"fabric_efficiency": 0.97}, {"fabric_efficiency": 5})
    assert message == "fabric_efficiency 0.80 is 17.5% below the baseline's 0.97 (tolerance 5%)"


def test_compare_case_matches_by_case_id_then_by_workload() -> None:
    base = run()
    now = replace(run(iops=2000).cases[0], case_id="renamed")
    info = compare_case(now, base, DEFAULT_TOLERANCES)
    assert info is not None
    assert info.baseline_case_id == "nvme-rdma-randread-8k-qd32-j4"
    assert info.messages == ("iops 2,000 is 33.3% below the baseline's 3,000 (tolerance 10%)",)
    other = replace(now, workload=Workload("x", "randread", "8k", numjobs=4, iodepth=64))
    assert baseline_case(base, other) is None
    assert compare_case(other, base, DEFAULT_TOLERANCES) is None


# --- tolerances -------------------------------------------------------------------------------------------


def test_parse_tolerances_merges_over_the_defaults() -> None:
    assert parse_tolerances("iops=5, lat_p999_us = 30%") == {**DEFAULT_TOLERANCES, "iops": 5.0, "lat_p999_us": 30.0}
    assert parse_tolerances("", base={}) == {}
    assert parse_tolerances("mbps=12.5", base={}) == {"mbps": 12.5}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("iops", "is not METRIC=PERCENT"),
        ("iops=", "is not METRIC=PERCENT"),
        ("=10", "is not METRIC=PERCENT"),
        ("IOPS=10", "unknown metric 'IOPS'"),
        ("iops=ten", "'ten' is not a number"),
        ("iops=-5", "must be 0 or more"),
        ("iops=nan", "must be 0 or more"),
        ("iops=inf", "must be 0 or more"),
    ],
)
def test_parse_tolerances_rejects_mistakes_with_the_item(text: str, why: str) -> None:
    with pytest.raises(ToleranceError, match=why):
        parse_tolerances(f"mbps=10,{text}")


# --- environment ------------------------------------------------------------------------------------------


def test_environment_mismatch_names_each_difference() -> None:
    base = Environment(
        fio_version="fio-3.33",
        kernels={"h1": "6.1.0-17-amd64", "h2": "6.1.0-17-amd64", "old": "5.10.0"},
        device_model="INTEL SSDPEDMW012T4",
        device_firmware="8EV10171",
    )
    now = Environment(
        fio_version="fio-3.36",
        kernels={"h1": "6.1.0-18-amd64", "h2": "6.1.0-17-amd64", "new": "6.1.0"},
        device_model="INTEL SSDPEDMW012T4",
        device_firmware="8EV10174",
        python_version="3.12",  # not a figure-moving difference
    )
    assert environment_mismatch(now, base) == [
        "baseline used fio-3.33, this run fio-3.36",
        "host h1: baseline used kernel 6.1.0-17-amd64, this run kernel 6.1.0-18-amd64",
        "host new is not in the baseline (this run kernel 6.1.0)",
        "host old was in the baseline (kernel 5.10.0) but not in this run",
        "baseline used firmware 8EV10171, this run firmware 8EV10174",
    ]
    assert environment_mismatch(now, now) == []


def test_environment_mismatch_unrecorded_values_and_fio_spelling() -> None:
    assert environment_mismatch(Environment(fio_version="3.33"), Environment(fio_version="fio-3.33")) == []
    assert environment_mismatch(Environment(device_firmware="X1"), Environment()) == [
        "baseline does not record the device firmware, this run firmware X1"
    ]
    assert environment_mismatch(Environment(), Environment(device_model="P750")) == [
        "baseline used P750, this run does not record the device model"
    ]


# --- finding and saving -----------------------------------------------------------------------------------


def test_save_then_find_the_newest_for_lab_and_protocol(tmp_path: Path) -> None:
    older = save_baseline(run(started=T0, iops=1), tmp_path)
    newer = save_baseline(run(started=T0 + timedelta(days=1), iops=2), tmp_path)
    save_baseline(run(lab="other", started=T0 + timedelta(days=9), iops=3), tmp_path)
    save_baseline(run(protocols=("iser",), started=T0 + timedelta(days=9), iops=4), tmp_path)
    assert older.name == "0001_rac3_nvme-rdma_20240501T080000Z.json"
    assert newer.name.startswith("0002_rac3_nvme-rdma_20240502")
    found = find_baseline(tmp_path, "rac3", "nvme-rdma")
    assert found is not None and found.cases[0].figures["iops"] == 2
    found = find_baseline(tmp_path, "rac3", "iser")
    assert found is not None and found.cases[0].figures["iops"] == 4
    assert find_baseline(tmp_path, "rac3", "nvme-tcp") is None
    assert find_baseline(tmp_path / "absent", "rac3", "nvme-rdma") is None


def test_save_never_overwrites_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    first = save_baseline(run(), tmp_path)
    second = save_baseline(run(), tmp_path)  # same lab, protocol and start time
    assert first != second and first.exists() and second.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, second.name])
    assert load_json(second) == run()


def test_multi_protocol_runs_get_a_readable_name(tmp_path: Path) -> None:
    path = save_baseline(run(lab="RAC 3/lab", protocols=("nvme-rdma", "iser")), tmp_path)
    assert path.name == "0001_rac-3-lab_nvme-rdma-iser_20240501T080000Z.json"


def test_corrupt_and_foreign_files_in_the_folder_warn_and_are_skipped(tmp_path: Path) -> None:
    save_baseline(run(iops=7), tmp_path)
    (tmp_path / "0009_truncated.json").write_text('{"schema": "fabricqa-results/1", "lab"')
    (tmp_path / "0010_benchmark.json").write_text(json.dumps({"machine_info": {}, "benchmarks": []}))
    (tmp_path / "0011_future.json").write_text(json.dumps({"schema": "fabricqa-results/9"}))
    with pytest.warns(BaselineWarning) as record:
        found = find_baseline(tmp_path, "rac3", "nvme-rdma")
    assert found is not None and found.cases[0].figures["iops"] == 7
    messages = sorted(str(w.message) for w in record)
    assert len(messages) == 3
    assert "0009_truncated.json: not JSON" in messages[0]
    assert "0010_benchmark.json: not a pytest-fabricqa results file" in messages[1]
    assert "0011_future.json: schema is 'fabricqa-results/9'" in messages[2]
    # The next save numbers after the highest file, readable or not.
    assert save_baseline(run(), tmp_path).name.startswith("0012_")


def test_an_explicit_file_is_used_as_given(tmp_path: Path) -> None:
    path = save_baseline(run(lab="oldlab"), tmp_path)
    with pytest.warns(BaselineWarning, match="is from lab 'oldlab', this run is lab 'rac3'; comparing anyway"):
        assert find_baseline(path, "rac3", "nvme-rdma") is not None
    with pytest.warns(BaselineWarning, match="has no iser results"):
        assert find_baseline(path, "oldlab", "iser") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert find_baseline(path, "oldlab", "nvme-rdma") == run(lab="oldlab")
    path.write_text("not json")
    with pytest.raises(ResultsFileError, match="not JSON"):
        find_baseline(path, "oldlab", "nvme-rdma")


# --- targets ------------------------------------------------------------------------------------------------

SAMPLE_BASELINE = Path(__file__).parents[1] / "data" / "report" / "sample_baseline.json"


def test_a_results_file_from_before_targets_had_names_loads_and_maps_to_the_single_target() -> None:
    """sample_baseline.json predates target names: its cases belong to the kind that served their protocol."""
    old = load_json(SAMPLE_BASELINE)
    assert old.targets == {} and all(c.target is None for c in old.cases)
    assert {p: t for p, t in old.pairs()} == {"nvme-rdma": "nvmet", "nvme-tcp": "nvmet", "iser": "scst"}
    case = next(c for c in old.cases if c.case_id == "nvme-rdma-randread-8k-qd128-j4")
    now = replace(case, case_id="nvme-rdma-nvmet-randread-8k-qd128-j4", target="nvmet", regression=None)
    assert baseline_case(old, now) is case
    assert baseline_case(old, replace(now, case_id="nvme-rdma-spdk-randread-8k-qd128-j4", target="spdk")) is None
    assert find_baseline(SAMPLE_BASELINE, "rac3", "nvme-rdma", "nvmet") is not None
    with pytest.warns(BaselineWarning, match=r"has no nvme-rdma results of target spdk \(it holds nvmet\)"):
        assert find_baseline(SAMPLE_BASELINE, "rac3", "nvme-rdma", "spdk") is None


def test_the_baseline_of_each_target_is_the_newest_run_holding_that_target(tmp_path: Path) -> None:
    def targeted(target: str, started: datetime, iops: float) -> Run:
        case = perf_case(
            "nvme-rdma",
            "randread-8k-qd128-j4",
            case_id=f"nvme-rdma-{target}-randread-8k-qd128-j4",
            target=target,
            figures={"iops": iops},
        )
        return make_run(case, started=started, target_kind=target, targets={target: TargetInfo(target)})

    save_baseline(targeted("nvmet", T0, 1000), tmp_path)
    save_baseline(targeted("spdk", T0 + timedelta(days=1), 2000), tmp_path)
    nvmet = find_baseline(tmp_path, "rac3", "nvme-rdma", "nvmet")
    spdk = find_baseline(tmp_path, "rac3", "nvme-rdma", "spdk")
    assert nvmet is not None and nvmet.cases[0].figures == {"iops": 1000}
    assert spdk is not None and spdk.cases[0].figures == {"iops": 2000}
    # A case recorded with its target compares only with the same target's case.
    now = replace(spdk.cases[0], figures={"iops": 1500})
    info = compare_case(now, nvmet, {"iops": 10})
    assert info is None
    info = compare_case(now, spdk, {"iops": 10})
    assert info is not None and info.messages == ("iops 1,500 is 25.0% below the baseline's 2,000 (tolerance 10%)",)
