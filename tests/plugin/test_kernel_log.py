"""A case that fails after reaching the lab shows each host's storage kernel messages since it began, run by
pytester on this machine: the lab's hosts are this machine (local transport), and a ``dmesg`` earlier on PATH
prints what util-linux's ``dmesg --time-format iso`` prints (the line shape of tests/data/kernlog), stamped now,
so the test does not depend on this machine's own kernel log or on the right to read it."""

from __future__ import annotations

import json
import os
import stat

import pytest
from labfiles import local_lab

LAB = local_lab("localkern", "nqn.2026-11.io.fabricqa:localkern", initiators=("n1",))

DMESG = """#!/bin/sh
now=$(date +%Y-%m-%dT%H:%M:%S,%6N%:z)
echo "2020-01-01T00:00:00,000001+00:00 nvme nvme0: an old line, before the case"
echo "$now nvme nvme0: starting error recovery"
echo "$now virtio_net virtio1 eth1: renamed from fqtmp1"
"""

TESTS = """
def test_fails_on_the_lab(lab_hosts):
    assert lab_hosts["n1"].run(["true"]).ok
    assert False, "the fabric broke"


def test_passes_on_the_lab(lab_hosts):
    assert lab_hosts["n1"].run(["true"]).ok


def test_fails_without_the_lab():
    assert False, "no lab reached"
"""


def test_a_failed_case_that_reached_the_lab_shows_each_hosts_storage_lines(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _watched_run(pytester, monkeypatch, LAB, TESTS)
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    sections = [line for line in out.splitlines() if "kernel log" in line]
    # Only the case that reached the lab, and every host of the lab, each once.
    assert len(sections) == 2 and "n1" in sections[0] and "stor" in sections[1], out
    assert out.count("nvme nvme0: starting error recovery") == 2
    assert "an old line" not in out and "renamed from" not in out


WATCHED = """
import pytest
from pytest_fabricqa.report import model as rm


def _record(fabricqa_report, request, name):
    case = rm.Case(nodeid=request.node.nodeid, case_id=name, suite="performance", verdict="passed",
                   protocol="nvme-tcp", figures={"iops": 1.0})
    fabricqa_report.record(case, request)


@pytest.mark.loads_target
def test_point_passes_its_limits(lab_session, fabricqa_report, request):
    _record(fabricqa_report, request, "point")


@pytest.mark.loads_target
@pytest.mark.fabricqa_failover
def test_a_fault_case(lab_session, fabricqa_report, request):
    _record(fabricqa_report, request, "fault")


@pytest.mark.loads_target
@pytest.mark.fabricqa_kernel_expects("error recovery")
def test_provokes_it(lab_session):
    pass


def test_loads_nothing(lab_session):
    pass
"""


RDMA = """#!/bin/sh
# iproute2's `rdma statistic show` line shape (tests/data/kernlog/vstor-rdma-statistic.txt); a retransmit per call.
echo x >> "$(dirname "$0")/rdma-calls"
echo "link rxe0/1 sent_pkts 10 duplicate_request $(wc -l < "$(dirname "$0")/rdma-calls") rdma_sends 5"
"""


def _watched_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, lab: str, tests: str = WATCHED
) -> pytest.RunResult:
    """``tests`` run by pytester on ``lab``, a fake ``dmesg`` and ``rdma`` first on PATH."""
    bin_dir = pytester.path / "bin"
    bin_dir.mkdir()
    for name, text in (("dmesg", DMESG), ("rdma", RDMA)):
        tool = bin_dir / name
        tool.write_text(text)
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (pytester.path / "lab.yaml").write_text(lab)
    pytester.makepyfile(test_cases=tests)
    return pytester.runpytest_subprocess("--lab=lab.yaml", "-p", "no:cacheprovider", "--report-dir=r")


def test_a_point_that_met_its_limits_fails_on_storage_trouble_in_the_kernel_log(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _watched_run(pytester, monkeypatch, LAB)
    # Only the point fails: the failover case's lines are its fault's account, the other expects them, and a case
    # that loads nothing is not watched.
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert "test_point_passes_its_limits" in out.split("short test summary")[-1]
    assert (
        "n1: the kernel logged storage trouble during the case, which injected no fault: '" in out
        and "nvme nvme0: starting error recovery'" in out
        and "watch.kernel_allow" in out
    ), out
    run = json.loads((pytester.path / "r" / "results.json").read_text())
    cases = {c["case_id"]: c for c in run["cases"]}
    assert cases["point"]["verdict"] == "failed"
    assert any("storage trouble" in v for v in cases["point"]["violations"])
    assert cases["fault"]["verdict"] == "passed" and not cases["fault"]["violations"]
    # The account is kept with either case: the fault's lines are what it did.
    account = cases["fault"]["extras"]["kernel_log"]
    assert set(account) == {"n1", "stor"} and account["n1"][-2].endswith("nvme nvme0: starting error recovery")
    assert not [line for lines in account.values() for line in lines if "renamed from" in line or "old line" in line]
    # Each watched case says which RDMA counters rose: the first since the hosts booted, later ones since the
    # previous case's reading; shown, never judged (the fault case passed).
    first = cases["point"]["extras"]["kernel_log"]["n1"][-1]
    assert first.startswith("RDMA rxe0/1 counters that rose since the host booted: duplicate_request +"), first
    rose = [line for lines in account.values() for line in lines if line.startswith("RDMA rxe0/1")]
    assert rose and all("since the previous case's reading: duplicate_request +" in line for line in rose), account


def test_a_line_the_lab_allows_does_not_fail_the_point(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _watched_run(pytester, monkeypatch, LAB + "watch: {kernel_allow: ['starting error rec']}\n")
    result.assert_outcomes(passed=4)


def test_a_kernel_allow_pattern_that_is_no_regular_expression_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _watched_run(pytester, monkeypatch, LAB + "watch: {kernel_allow: ['(unclosed']}\n")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "watch.kernel_allow" in result.stderr.str() and "not a regular expression" in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


AFTER_A_FAULT = """
import pytest


@pytest.mark.loads_target
@pytest.mark.fabricqa_failover
def test_1_a_fault_case(lab_session):
    pass


@pytest.mark.loads_target
def test_2_a_point_right_after_it(lab_session):
    pass
"""


@pytest.mark.parametrize(
    ("settle", "outcomes"), [("", {"passed": 2}), ("watch: {fault_settle_s: 0}\n", {"passed": 1, "failed": 1})]
)
def test_trouble_right_after_a_fault_case_is_its_aftermath_shown_not_judged(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, settle: str, outcomes: dict[str, int]
) -> None:
    """The fake dmesg stamps its trouble line now: in the point after a fault case that is within the lab's
    watch.fault_settle_s (120 s by default) of the fault's end, so it is the fault's aftermath; with 0 it is the
    point's own and fails it."""
    bin_dir = pytester.path / "bin"
    bin_dir.mkdir()
    dmesg = bin_dir / "dmesg"
    dmesg.write_text(DMESG)
    dmesg.chmod(dmesg.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (pytester.path / "lab.yaml").write_text(LAB + settle)
    pytester.makepyfile(test_cases=AFTER_A_FAULT)
    result = pytester.runpytest_subprocess("--lab=lab.yaml", "-p", "no:cacheprovider", "--report-dir=r")
    result.assert_outcomes(**outcomes)
    if "failed" in outcomes:
        assert "test_2_a_point_right_after_it" in result.stdout.str().split("short test summary")[-1]


TWO_WORKERS = """
import json
import time

import pytest


def _stay(name, seconds):
    began = time.time()
    time.sleep(seconds)
    with open(f"{name}.json", "w") as out:
        json.dump([began, time.time()], out)


@pytest.mark.xdist_group("lab-target-place-a")  # two target places: what the plugin's groups make of a lab with two
@pytest.mark.loads_target
@pytest.mark.fabricqa_failover
def test_a_fault_case(lab_session):
    _stay("fault", 3)


@pytest.mark.xdist_group("lab-target-place-b")
@pytest.mark.loads_target
def test_a_point_of_another_place(lab_session):
    _stay("point", 3)
"""


def test_under_xdist_a_fault_case_never_runs_beside_another_workers_case_and_its_end_is_theirs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers, one case each (of two target places, so of two xdist groups), both ready at once: each stays 3 s in its body, so without the floor they overlap
    (the fault would be under the point, its lines in the point's kernel log); with it they take turns. The fake
    dmesg's trouble line, stamped now, is judged by the point only if it ran first: after the fault case it is that
    fault's aftermath, known across workers."""
    bin_dir = pytester.path / "bin"
    bin_dir.mkdir()
    dmesg = bin_dir / "dmesg"
    dmesg.write_text(DMESG)
    dmesg.chmod(dmesg.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (pytester.path / "lab.yaml").write_text(LAB)
    pytester.makepyfile(test_cases=TWO_WORKERS)
    result = pytester.runpytest_subprocess(
        "--lab=lab.yaml", "-p", "no:cacheprovider", "--report-dir=r", "-n", "2", "--dist", "loadgroup"
    )
    fault = json.loads((pytester.path / "fault.json").read_text())
    point = json.loads((pytester.path / "point.json").read_text())
    assert fault[1] <= point[0] or point[1] <= fault[0], (fault, point)
    if fault[1] <= point[0]:
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, failed=1)


APP_LOG = """
import pytest


class _Fabric:
    def __init__(self, text):
        self.text = text

    def target_log(self):
        return None if self.text is None else ("nvmf_tgt log on stor (/run/fabricqa/x.log, its newest 20 lines)", self.text)


@pytest.fixture
def fabric(request):
    return _Fabric(request.param)


@pytest.mark.parametrize("fabric", ["[2026-12-07 18:04:10.000001] ctrlr.c: keep alive timeout"], indirect=True)
def test_fails_on_spdk(lab_hosts, fabric):
    assert False, "the point stalled"


@pytest.mark.parametrize("fabric", [None], indirect=True)
def test_fails_on_a_kernel_target(lab_hosts, fabric):
    assert False, "the point stalled too"


@pytest.mark.parametrize("fabric", ["[2026-12-07 18:04:11.000001] never shown: the case passed"], indirect=True)
def test_passes_on_spdk(lab_hosts, fabric):
    pass
"""


def test_a_failed_case_on_a_target_app_the_plugin_started_shows_the_apps_log(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fabric's ``target_log`` (SPDK's nvmf_tgt log, :meth:`pytest_fabricqa.fabric.provision.Fabric.target_log`)
    is shown as a section of a failed case, after the kernel logs; a fabric without one and a passed case show none."""
    result = _watched_run(pytester, monkeypatch, LAB, APP_LOG)
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert out.count("nvmf_tgt log on stor (/run/fabricqa/x.log, its newest 20 lines)") == 1, out
    assert "ctrlr.c: keep alive timeout" in out and "never shown" not in out
    section = out.index("nvmf_tgt log on stor")
    assert out.rindex("kernel log", 0, section) < section  # after the kernel logs of the same case
