"""The end-of-run terminal summary."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pytest_fabricqa.report.model import Case, Check, load_json
from pytest_fabricqa.report.terminal import summary_lines, workload_label

DATA = Path(__file__).parent.parent / "data" / "report"


def test_summary_of_the_sample_run() -> None:
    run = load_json(DATA / "sample_run.json")
    lines = summary_lines(run)
    assert lines[0] == "fabricqa: lab rac3: FAIL (nvme-rdma PASS, nvme-tcp FAIL, iser FAIL)"
    assert lines[1].split() == ["protocol", "target", "workload", "IOPS", "MB/s", "p99", "us", "verdict"]
    perf = [c for c in run.cases if c.suite == "performance"]
    rows = [
        line
        for line in lines
        if line.startswith("  ") and line.rstrip().split()[-1] in ("PASSED", "FAILED", "[regression]")
    ]
    assert len(rows) == len(perf)
    regressed = next(i for i, line in enumerate(lines) if "[regression]" in line)
    assert lines[regressed].split()[:11] == [
        "nvme-tcp",
        "nvmet",
        "randwrite",
        "8k",
        "j4",
        "qd32",
        "2",
        "hosts",
        "115,375",
        "945.2",
        "2,008",
    ]
    assert lines[regressed + 1].strip() == "- iops 115,375 is 18.0% below the baseline's 140,702 (tolerance 10%)"
    iser = next(
        line for line in lines if line.startswith("  iser") and "qd128" in line and "randwrite" in line and "j4" in line
    )
    assert iser.endswith("FAILED")
    assert "- lat_p99_us 13,787 µs is above the maximum 12,000 µs" in lines[lines.index(iser) + 1]
    assert "environment differs from the baseline: baseline used fio-3.33, this run fio-3.35" in lines[-3]
    assert lines[-4].endswith("1 case beyond tolerance")
    assert lines[-1].startswith("fabricqa: FAIL: 2 failed")


def test_columns_line_up() -> None:
    lines = summary_lines(load_json(DATA / "sample_run.json"))
    rows = [line for line in lines if line.endswith(("PASSED", "FAILED"))]
    ends = {line.index("PASSED") if "PASSED" in line else line.index("FAILED") for line in rows}
    assert len(ends) == 1


def test_failed_prerequisite_is_listed_with_its_check() -> None:
    run = load_json(DATA / "sample_run.json")
    bad = Case(
        nodeid="suites/test_prerequisites.py::test_module[el72h1-nvme_rdma]",
        case_id="prereq-module-nvme_rdma-el72h1",
        suite="prerequisite",
        verdict="error",
        checks=(Check("kernel module nvme_rdma loaded", "failed", "modprobe: FATAL: Module nvme_rdma not found"),),
    )
    lines = summary_lines(replace(run, cases=(*run.cases, bad), baseline=None))
    at = lines.index("  lab prerequisite prereq-module-nvme_rdma-el72h1: ERROR")
    assert lines[at + 1] == "      - kernel module nvme_rdma loaded: modprobe: FATAL: Module nvme_rdma not found"
    assert not any(line.startswith("baseline:") for line in lines)


def test_transcribed_run_without_latency_shows_a_dash() -> None:
    lines = summary_lines(load_json(DATA / "seed001_iscsi.json"))
    assert lines[0] == "fabricqa: lab seed001-vmware: PASS (iscsi PASS)"
    row = next(line for line in lines if "randread 8k j1 size 2g" in line)
    assert row.split()[-4:] == ["5,543", "45.4", "-", "PASSED"]
    assert lines[-1] == "fabricqa: PASS: 24 passed of 24 cases"


def test_workload_label() -> None:
    run = load_json(DATA / "sample_run.json")
    case = next(c for c in run.cases if c.case_id == "iser-read-1m-qd4-j1")
    assert workload_label(case) == "read 1m j1 qd4 2 hosts"
    assert workload_label(replace(case, workload=None)) == "iser-read-1m-qd4-j1"
    efficiency = replace(case, figures={**case.figures, "fabric_efficiency": 0.93})
    assert workload_label(efficiency) == "read 1m j1 qd4 fabric vs local"


def test_every_row_names_its_target_and_a_protocol_served_by_several_targets_is_grouped_by_target() -> None:
    """Three targets serving iSCSI run the same workload: without the target column their rows read alike (issue 33,
    seen in a virtual-lab main job's summary)."""
    run = load_json(DATA / "sample_run.json")
    iser = [c for c in run.cases if c.protocol == "iser" and c.suite == "performance" and c.workload is not None]
    assert iser, "the sample run has iSER performance cases"
    kinds = ("lio", "scst", "tgt")
    # The same workloads once per target, interleaved as a run with xdist or reordering could record them.
    copies = [replace(c, nodeid=f"{c.nodeid}-{t}", case_id=f"{c.case_id}-{t}", target=t) for c in iser for t in kinds]
    others = tuple(c for c in run.cases if c not in iser)
    lines = summary_lines(replace(run, cases=(*others, *copies), baseline=None))
    rows = [line.split() for line in lines if line.startswith("  iser ")]
    assert len(rows) == len(copies)
    assert [r[1] for r in rows] == [t for t in kinds for _ in iser]  # each target's rows together, lio first
    for target in kinds:
        labels = [" ".join(r[2:-4]) for r in rows if r[1] == target]
        assert sorted(labels) == sorted(workload_label(c) for c in iser)
    prereq = Case(
        nodeid="suites/test_connectivity.py::test_every_initiator_is_connected[iser-scst]",
        case_id="iser-scst",
        suite="connectivity",
        protocol="iser",
        target="scst",
        verdict="failed",
        violations=("vnode1 is not connected",),
    )
    lines = summary_lines(replace(run, cases=(*others, *copies, prereq), baseline=None))
    assert "  iser scst connectivity iser-scst: FAILED" in lines
