"""The workload matrix: the seeds' workloads, lab-file overrides, test ids."""

from __future__ import annotations

import pytest

from pytest_fabricqa.core.workloads import (
    DEFAULT_SETS,
    SET_SOURCES,
    SETS,
    MatrixError,
    Workload,
    case_id,
    load_matrix,
    make_workload,
    workload_name,
)


def by_name(workloads: list[Workload]) -> dict[str, Workload]:
    return {w.name: w for w in workloads}


def test_seed_000_oracle_workloads_are_8k_random_numjobs_4_iodepth_128() -> None:
    oracle = SETS["oracle-8k"]
    assert {w.rw for w in oracle} == {"randread", "randwrite"}
    for workload in oracle:
        assert (workload.bs, workload.numjobs, workload.iodepth, workload.runtime) == ("8k", 4, 128, 60)
    assert [w.name for w in oracle] == ["randread-8k-qd128-j4", "randwrite-8k-qd128-j4"]


def test_seed_002_sweeps_4k_random_up_to_qd_256_and_1m_sequential() -> None:
    sweep = SETS["allflash-4k"]
    assert {w.rw for w in sweep} == {"randread", "randwrite"}
    assert {w.bs for w in sweep} == {"4k"}
    assert max(w.iodepth for w in sweep) == 256
    names = {w.name for w in sweep}
    # The seed's peaks: iSCSI at 1 job x QD 32, NVMe/TCP at 2 jobs x QD 256.
    assert {"randread-4k-qd32-j1", "randwrite-4k-qd32-j1", "randread-4k-qd256-j2"} <= names
    sequential = SETS["allflash-1m"]
    assert {(w.rw, w.bs) for w in sequential} == {("read", "1m"), ("write", "1m")}
    assert 4 in {w.iodepth for w in sequential}  # iSCSI's best 1 MiB read depth


def test_seed_001_runs_8k_seq_and_random_over_numjobs_1_to_8() -> None:
    softroce = SETS["softroce-8k"]
    assert {w.rw for w in softroce} == {"read", "write", "randread", "randwrite"}
    assert sorted({w.numjobs for w in softroce}) == [1, 2, 4, 6, 8]
    assert {w.bs for w in softroce} == {"8k"} and {w.size for w in softroce} == {"2g"}
    assert {w.size for w in SETS["softroce-8k-512m"]} == {"512m"}


def test_every_set_has_a_source_and_writes_are_flagged() -> None:
    assert set(SET_SOURCES) == set(SETS)
    for workloads in SETS.values():
        for workload in workloads:
            assert workload.writes == (workload.rw in {"write", "randwrite"})


def test_default_matrix_has_unique_names() -> None:
    matrix = load_matrix(None)
    names = [w.name for w in matrix]
    assert len(names) == len(set(names))
    assert len(matrix) == sum(len(SETS[s]) for s in DEFAULT_SETS)


def test_case_id_is_protocol_then_workload_name() -> None:
    assert case_id("nvme-rdma", SETS["oracle-8k"][0]) == "nvme-rdma-randread-8k-qd128-j4"
    assert case_id("iser", "randwrite-8k-qd128-j4") == "iser-randwrite-8k-qd128-j4"
    assert workload_name("read", "8k", iodepth=1, numjobs=6, size="2g") == "read-8k-qd1-j6-2g"


def test_a_writing_workload_must_say_so() -> None:
    with pytest.raises(MatrixError, match=r"rw=randwrite overwrites the device; set writes: true"):
        Workload(name="w", rw="randwrite", bs="8k")
    with pytest.raises(MatrixError, match="only reads"):
        Workload(name="r", rw="randread", bs="8k", writes=True)
    with pytest.raises(MatrixError, match="not an fio I/O pattern"):
        Workload(name="x", rw="randbogus", bs="8k")
    with pytest.raises(MatrixError, match="iodepth must be a whole number >= 1"):
        make_workload("randread", "8k", iodepth=0)


def test_extra_options_cannot_override_the_workload_or_inject_lines() -> None:
    with pytest.raises(MatrixError, match="'filename' is set by the workload itself"):
        Workload(name="r", rw="randread", bs="8k", extra=(("filename", "/dev/sda"),))
    with pytest.raises(MatrixError, match="must be one line"):
        Workload(name="r", rw="randread", bs="8k", extra=(("rwmixread", "70\nfilename=/dev/sda"),))
    with pytest.raises(MatrixError, match="without '--'"):
        Workload(name="r", rw="randread", bs="8k", extra=(("--norandommap", ""),))


def test_sets_disable_only_exclude() -> None:
    matrix = load_matrix({"sets": ["oracle-8k", "allflash-1m"], "disable": ["allflash-1m"]})
    assert [w.name for w in matrix] == ["randread-8k-qd128-j4", "randwrite-8k-qd128-j4"]

    only = load_matrix({"sets": ["allflash-4k"], "only": ["randread-*"], "exclude": ["*-qd256-*"]})
    assert only and all(w.rw == "randread" and w.iodepth != 256 for w in only)
    assert len(only) == len([w for w in SETS["allflash-4k"] if w.rw == "randread"]) - 3


def test_runtime_precedence_command_line_then_per_workload_then_lab() -> None:
    overrides = {
        "sets": ["oracle-8k"],
        "runtime": 30,
        "ramp_time": 2,
        "workloads": {"randread-8k-qd128-j4": {"runtime": 120}},
    }
    matrix = by_name(load_matrix(overrides))
    assert matrix["randread-8k-qd128-j4"].runtime == 120
    assert matrix["randwrite-8k-qd128-j4"].runtime == 30
    assert {w.ramp_time for w in matrix.values()} == {2}

    smoke = load_matrix(overrides, runtime_override=5)
    assert {w.runtime for w in smoke} == {5}


def test_extra_workloads_are_validated_and_appended() -> None:
    matrix = load_matrix(
        {
            "sets": ["oracle-8k"],
            "extra": [
                {"name": "randrw-8k-70-qd32-j4", "rw": "randrw", "bs": "8k", "numjobs": 4, "iodepth": 32,
                 "writes": True, "options": {"rwmixread": 70, "norandommap": True, "zero_buffers": False}},
            ],
        }
    )  # fmt: skip
    extra = matrix[-1]
    assert extra.name == "randrw-8k-70-qd32-j4" and extra.writes
    assert extra.extra == (("rwmixread", "70"), ("norandommap", ""))
    assert extra.options["rwmixread"] == "70"

    with pytest.raises(MatrixError, match=r"extra\[0\]: .*set writes: true"):
        load_matrix({"extra": [{"name": "w", "rw": "randwrite", "bs": "8k"}]})
    with pytest.raises(MatrixError, match=r"extra\[0\]: a workload named 'randread-8k-qd128-j4' already exists"):
        load_matrix({"extra": [{"name": "randread-8k-qd128-j4", "rw": "randread", "bs": "8k"}]})
    with pytest.raises(MatrixError, match=r"extra\[0\]\.bs: required"):
        load_matrix({"extra": [{"name": "x", "rw": "randread"}]})


def test_override_mistakes_name_the_key() -> None:
    with pytest.raises(MatrixError, match=r"^sets\[1\]: unknown set 'alflash-4k'; known sets: oracle-8k"):
        load_matrix({"sets": ["oracle-8k", "alflash-4k"]})
    with pytest.raises(MatrixError, match=r"^runtimes: unknown key"):
        load_matrix({"runtimes": 30})
    with pytest.raises(MatrixError, match=r"^runtime: expected a whole number >= 1, not 0"):
        load_matrix({"runtime": 0})
    with pytest.raises(MatrixError, match=r"^workloads\.randread-8k-qd12-j4: no workload has this name"):
        load_matrix({"workloads": {"randread-8k-qd12-j4": {"runtime": 5}}})
    with pytest.raises(MatrixError, match=r"^workloads\.randread-8k-qd128-j4\.iodepth: unknown key"):
        load_matrix({"workloads": {"randread-8k-qd128-j4": {"iodepth": 5}}})


def test_per_workload_override_of_a_disabled_set_is_accepted_silently() -> None:
    matrix = load_matrix({"sets": ["oracle-8k"], "workloads": {"read-1m-qd4-j1": {"runtime": 5}}})
    assert "read-1m-qd4-j1" not in by_name(matrix)


def test_one_workload_class_round_trips_through_the_results_form() -> None:
    from pytest_fabricqa.report.model import Case, case_from_dict, case_to_dict

    extra = load_matrix(
        {"sets": ["oracle-8k"], "extra": [{"name": "randrw-8k-qd4-j1", "rw": "randrw", "bs": "8k", "iodepth": 4,
                                            "writes": True, "ramp_time": 2, "options": {"rwmixread": 70}}]}
    )[-1]  # fmt: skip
    case = Case(nodeid="n", case_id="c", suite="performance", verdict="passed", workload=extra)
    again = case_from_dict(case_to_dict(case)).workload
    assert again == extra and again.writes and again.outstanding == 4
    # Schema-1 files (seed 001 transcriptions) state neither runtime nor queue depth: they load, but cannot run.
    old = Workload.from_dict({"name": "read-8k-2g-j6", "rw": "read", "bs": "8k", "numjobs": 6, "iodepth": None,
                              "runtime_s": None, "size": "2g"})  # fmt: skip
    assert old.iodepth is None and old.outstanding is None and not old.writes
    with pytest.raises(MatrixError, match="cannot run"):
        _ = old.options
    with pytest.raises(TypeError):
        Workload("x", "read", "8k", 4, 32)  # type: ignore[misc]  # after bs every field is a keyword
