"""A suite a user writes for their own array, in a folder of their own, using only the public API the README
documents ("Writing your own suite"), run by the installed plugin on the virtual lab: each workload runs for real
and becomes a gated, reported case (one within its limit, one over an impossible one).

It runs on the lab the other tests in tests/vlab share (the user's lab file describes that same lab, so the run
attaches to it instead of booting another).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vlab_support import STATE, lab_data

from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.report.model import load_json
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab

USER_SUITE = """
import pytest

from pytest_fabricqa.fio import figures, run_fio
from pytest_fabricqa.measure.verdict import performance_case


@pytest.mark.loads_target
def test_my_array(lab, protocol, workload, fabric, lab_hosts, write_guard, lab_environment, fabricqa_report, request):
    device = next(d for d in fabric.devices if d.load and (d.writable or not workload.writes))
    if workload.writes:
        write_guard.before_writes(protocol, fabric.devices)
    result = run_fio(lab_hosts[device.initiator], workload, [device.path])
    case = performance_case(
        request.node.nodeid, lab, protocol, workload, figures(result),
        extras={"environment": {**lab_environment, "fio_version": result.fio_version}},
    )
    problems = fabricqa_report.gate(case, request)
    assert not problems, "\\n".join(problems)
"""


def test_a_users_own_suite_gets_gated_reported_cases_on_the_virtual_lab(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], tmp_path: Path
) -> None:
    data = lab_data()
    # The user's array is served by the kernel's nvmet alone: labs/vlab.yaml's other targets name points of its own
    # sets (targets[].workloads), which this user's workload sets do not hold.
    data["targets"] = [t for t in data["targets"] if t["kind"] == "nvmet"]
    data["protocols"] = ["nvme-tcp", "nvme-rdma"]
    data["workloads"] = {
        "sets": ["allflash-4k"],
        "only": ["randread-4k-qd1-j1", "randread-4k-qd32-j1"],
        "runtime": 3,
        "ramp_time": 1,
    }
    data["thresholds"] = {"*": {"*-qd1-*": {"min_iops": 1}, "*-qd32-*": {"min_iops": 1_000_000_000}}}
    (tmp_path / "myarray.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "test_my_array.py").write_text(USER_SUITE)
    (tmp_path / "pytest.ini").write_text(f"[pytest]\nfabricqa_state_dir = {STATE}\n")
    boots_before = _boots()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--lab=myarray.yaml", "--protocol=nvme-tcp", "-p", "no:cacheprovider", "-v"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, output  # the impossible limit fails its case
    run = load_json(tmp_path / "fabricqa-report" / "results.json")
    cases = {c.case_id: c for c in run.cases}
    assert sorted(cases) == ["nvme-tcp-randread-4k-qd1-j1", "nvme-tcp-randread-4k-qd32-j1"], output
    within, over = cases["nvme-tcp-randread-4k-qd1-j1"], cases["nvme-tcp-randread-4k-qd32-j1"]
    assert within.verdict == "passed" and within.figures["iops"] > 1 and within.thresholds == {"min_iops": 1}
    assert over.verdict == "failed" and over.figures["iops"] > 1
    assert over.violations and "IOPS is below the minimum of 1,000,000,000 IOPS" in over.violations[0]
    assert "IOPS is below the minimum of 1,000,000,000 IOPS" in proc.stdout
    assert run.environment.fio_version and set(run.environment.kernels) == {"vstor", "vnode1", "vnode2"}
    assert (tmp_path / "fabricqa-report" / "report.html").is_file()
    assert (tmp_path / "fabricqa-report" / "junit.xml").is_file()
    assert _boots() == boots_before, "the user's run booted a lab instead of attaching to the running one"


def _boots() -> int:
    log = STATE / "vlab" / "vlab" / "boots.log"
    return len(log.read_text().splitlines()) if log.is_file() else 0
