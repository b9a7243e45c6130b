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
    assert lines[1].split() == ["protocol", "workload", "IOPS", "MB/s", "p99", "us", "verdict"]
    perf = [c for c in run.cases if c.suite == "performance"]
    rows = [
        line
        for line in lines
        if line.startswith("  ") and line.rstrip().split()[-1] in ("PASSED", "FAILED", "[regression]")
    ]
    assert len(rows) == len(perf)
    regressed = next(i for i, line in enumerate(lines) if "[regression]" in line)
    assert lines[regressed].split()[:10] == [
        "nvme-tcp",
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
