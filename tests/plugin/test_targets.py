"""Several targets per protocol (issue 12 item 4): ids, --target, usage errors, and the target in every output.

Nothing here provisions anything: the inner tests use the ``target_name`` parameter and ``lab_target`` fixture
(what the fabric depends on) and record cases through ``fabricqa_report``, as the real suites do.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAC3 = ROOT / "labs" / "rac3.yaml"

# Two targets of one host serving nvme-tcp (nvmet and SPDK take turns on it) and LIO serving iscsi.
TWO_TARGETS = """
name: two
hosts:
  stor:
    transport: local
    roles: [initiator, target]
    storage: {interface: lo, address: 127.0.0.1}
network: {link_speed_gbps: 10}
protocols: [nvme-tcp, iscsi]
targets:
  - kind: nvmet
    host: stor
    protocols: [nvme-tcp]
    devices: {d0: {path: /dev/ram0}}
    nvme: {subsystems: [{nqn: "nqn.2026-12.io.fabricqa:a", namespaces: [d0]}]}
  - name: fast
    kind: spdk
    host: stor
    protocols: [nvme-tcp]
    devices: {d0: {path: /dev/ram0}}
    nvme: {subsystems: [{nqn: "nqn.2026-12.io.fabricqa:a", namespaces: [d0]}]}
  - kind: lio
    host: stor
    protocols: [iscsi]
    devices: {d0: {path: /dev/ram1}}
    iscsi: {iqn: "iqn.2026-12.io.fabricqa:lio", luns: [d0]}
"""

INNER = """
import pytest
from pytest_fabricqa.measure.verdict import performance_case
from pytest_fabricqa.core.workloads import Workload

W = Workload("randread-8k-qd128-j4", "randread", "8k", numjobs=4, iodepth=128, runtime=3)
FIGURES = {"nvmet": 100000.0, "fast": 150000.0, "lio": 50000.0}


@pytest.mark.loads_target
def test_fio(lab, protocol, lab_target, fabricqa_report, request):
    figures = {"iops": FIGURES[lab_target.name], "mbps": 800.0, "lat_mean_us": 40.0, "lat_p99_us": 90.0,
               "target_cpu_usr_pct": 12.5, "target_cpu_sys_pct": 60.0, "target_cpu_idle_pct": 27.5}
    case = performance_case(request.node.nodeid, lab, protocol, W, figures, target=lab_target.name)
    assert not fabricqa_report.gate(case, request)


def test_lab_wide(protocol):
    pass


def test_connect(lab_target):
    pass
"""


def _two(pytester: pytest.Pytester, text: str = TWO_TARGETS) -> Path:
    pytester.makepyfile(test_qualify=INNER)
    path = pytester.path / "two.yaml"
    path.write_text(text)
    return path


def test_rac3_lists_iser_on_scst_and_nvme_rdma_on_nvmet_and_spdk_offline(pytester: pytest.Pytester) -> None:
    """Seed 000's lab: SCST serving iSER, the kernel's nvmet and SPDK both serving nvme-rdma; no nvme-tcp."""
    result = pytester.runpytest_subprocess(f"--lab={RAC3}", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    ids = [line.rsplit("/", 1)[-1] for line in result.stdout.lines if "::" in line]
    for pair in ("nvme-rdma-nvmet", "nvme-rdma-spdk", "iser-scst"):
        assert f"test_performance.py::test_fio[{pair}-randread-8k-qd128-j4]" in ids
        assert f"test_connectivity.py::test_every_initiator_is_connected[{pair}]" in ids
    assert not [i for i in ids if "nvme-tcp" in i or "[iscsi" in i]


def test_each_pair_runs_as_its_own_parametrization_and_its_cases_run_together(pytester: pytest.Pytester) -> None:
    lab = _two(pytester)
    result = pytester.runpytest(f"--lab={lab}", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    ids = [line.split("::")[1] for line in result.stdout.lines if "::" in line]
    assert sorted(ids) == sorted(
        [
            "test_fio[nvme-tcp-nvmet]",
            "test_fio[nvme-tcp-fast]",
            "test_fio[iscsi-lio]",
            "test_lab_wide[nvme-tcp]",
            "test_lab_wide[iscsi]",
            "test_connect[nvme-tcp-nvmet]",
            "test_connect[nvme-tcp-fast]",
            "test_connect[iscsi-lio]",
        ]
    )
    # Each pair's cases in one stretch, the pairs in lab order.
    pairs = [i.split("[")[1].rstrip("]") for i in ids if not i.startswith("test_lab_wide")]
    assert pairs == ["nvme-tcp-nvmet"] * 2 + ["nvme-tcp-fast"] * 2 + ["iscsi-lio"] * 2


def test_target_option_picks_targets_and_narrows_the_protocols(pytester: pytest.Pytester) -> None:
    lab = _two(pytester)
    result = pytester.runpytest(f"--lab={lab}", "--target=fast", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*test_fio[[]nvme-tcp-fast[]]", "*test_lab_wide[[]nvme-tcp[]]", "*3 tests collected*"])
    result = pytester.runpytest(f"--lab={lab}", "--target=lio", "--target=nvmet", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*6 tests collected*"])
    assert "fast" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--target=tgt"],
            "ERROR: --target=tgt: lab 'two' (*two.yaml) has no such target; its targets: nvmet (nvme-tcp), "
            "fast (nvme-tcp), lio (iscsi)",
        ),
        (
            ["--target=lio", "--protocol=nvme-tcp"],
            "ERROR: --target=lio serves none of the selected protocols (nvme-tcp); pick a target serving one of "
            "them or drop --protocol",
        ),
    ],
    ids=["unknown-target", "target-serving-none-of-the-protocols"],
)
def test_a_bad_target_choice_is_a_one_line_usage_error(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    lab = _two(pytester)
    result = pytester.runpytest_subprocess(f"--lab={lab}", *args, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert len([line for line in result.stderr.lines if line.strip()]) == 1


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "  - kind: lio\n    host: stor\n    protocols: [iscsi]\n",
            "  - kind: tgt\n    host: stor\n    protocols: [nvme-tcp, iscsi]\n"
            "    nvme: {subsystems: [{nqn: 'nqn.2026-12.io.fabricqa:t', namespaces: [d0]}]}\n",
            "ERROR: *two.yaml:*: targets[[]2[]].protocols[[]0[]]: a tgt target cannot serve nvme-tcp (tgt serves "
            "iscsi, iser); serve nvme-tcp from a target of kind nvmet or spdk or external, or remove it",
        ),
        (
            "  - name: fast\n",
            "  - name: nvmet\n",
            "ERROR: *two.yaml:*: targets[[]1[]].name: target name 'nvmet' is used by targets[[]0[]] (nvmet) and "
            "targets[[]1[]] (spdk); give each target its own 'name'*",
        ),
    ],
    ids=["tgt-serving-nvme-tcp", "duplicate-name"],
)
def test_a_lab_mistake_about_targets_is_a_one_line_usage_error(
    pytester: pytest.Pytester, old: str, new: str, message: str
) -> None:
    assert old in TWO_TARGETS
    text = TWO_TARGETS.replace(old, new)
    lab = _two(pytester, text)
    result = pytester.runpytest_subprocess(f"--lab={lab}", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()
    assert len([line for line in result.stderr.lines if line.strip()]) == 1


def test_results_json_and_junit_carry_the_target_of_each_case(pytester: pytest.Pytester) -> None:
    lab = _two(pytester)
    result = pytester.runpytest_subprocess(f"--lab={lab}", "--report-dir=out", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    data = json.loads((pytester.path / "out" / "results.json").read_text())
    perf = {c["case_id"]: c for c in data["cases"] if c["suite"] == "performance"}
    assert {cid: c["target"] for cid, c in perf.items()} == {
        "nvme-tcp-nvmet-randread-8k-qd128-j4": "nvmet",
        "nvme-tcp-fast-randread-8k-qd128-j4": "fast",
        "iscsi-lio-randread-8k-qd128-j4": "lio",
    }
    assert data["targets"]["fast"] == {
        "kind": "spdk",
        "host": "stor",
        "protocols": ["nvme-tcp"],
        "reactor_cores": "0x1",  # SPDK's default mask: the lab gives none
    }
    junit = ET.parse(pytester.path / "out" / "junit.xml")
    props = {
        tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")} for tc in junit.iter("testcase")
    }
    assert props["test_fio[nvme-tcp-fast]"]["target"] == "fast"
    assert props["test_fio[nvme-tcp-fast]"]["protocol"] == "nvme-tcp"
    assert props["test_fio[iscsi-lio]"]["target"] == "lio"
    assert props["test_connect[nvme-tcp-nvmet]"] == {"target": "nvmet"}  # recorded nothing, still named
    assert "target" not in props["test_lab_wide[iscsi]"]
    fast = [
        p.get("name")
        for tc in junit.iter("testcase")
        if tc.get("name") == "test_fio[nvme-tcp-fast]"
        for p in tc.iter("property")
    ]
    assert fast.count("target") == 1  # the parameter's and the recorded case's, once


POINTS = """
import pytest


def test_point(protocol, target_name, workload):
    pass


@pytest.mark.parametrize("bs", [4096, 8192, 1 << 20], ids=["4k", "8k", "1m"])
def test_block(protocol, target_name, bs):
    pass
"""


def test_a_targets_workloads_narrow_its_points_and_a_name_the_sets_lack_is_one_line(pytester: pytest.Pytester) -> None:
    """targets[].workloads and integrity_block_sizes: the second target of a protocol runs only the points and the
    integrity block sizes it names (seed 000's pair)."""
    narrowed = "  - name: fast\n    workloads: [randread-8k-qd128-j4]\n    integrity_block_sizes: [8k]\n"
    text = (
        TWO_TARGETS.replace("  - name: fast\n", narrowed)
        + "workloads: {sets: [oracle-8k], only: [randread-8k-qd128-j4, randwrite-8k-qd128-j4]}\n"
    )
    lab = _two(pytester, text)
    pytester.makepyfile(test_points=POINTS)
    result = pytester.runpytest(f"--lab={lab}", "--protocol=nvme-tcp", "--collect-only", "-q", "test_points.py")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    ids = sorted(line.split("::")[1] for line in result.stdout.lines if "::" in line)
    assert ids == [
        "test_block[nvme-tcp-fast-8k]",
        "test_block[nvme-tcp-nvmet-1m]",
        "test_block[nvme-tcp-nvmet-4k]",
        "test_block[nvme-tcp-nvmet-8k]",
        "test_point[nvme-tcp-fast-randread-8k-qd128-j4]",
        "test_point[nvme-tcp-nvmet-randread-8k-qd128-j4]",
        "test_point[nvme-tcp-nvmet-randwrite-8k-qd128-j4]",
    ]
    result.stdout.fnmatch_lines(["*7/10 tests collected (3 deselected)*"])

    bad = _two(pytester, text.replace("workloads: [randread-8k-qd128-j4]", "workloads: [randread-8k-qd182-j4]"))
    result = pytester.runpytest_subprocess(f"--lab={bad}", "--collect-only", "-q", "test_points.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: *two.yaml: targets[[]1[]].workloads[[]0[]]: 'randread-8k-qd182-j4' is not one of the workloads the "
         "lab's sets hold; did you mean randread-8k-qd128-j4*"]
    )  # fmt: skip
    assert len([line for line in result.stderr.lines if line.strip()]) == 1


INTEGRITY_CASES = """
import pytest


@pytest.mark.fabricqa_integrity
def test_verify(protocol, target_name):
    pass


def test_connect(protocol, target_name):
    pass
"""


def test_integrity_protocols_narrow_a_targets_integrity_cases_and_a_protocol_it_does_not_serve_is_one_line(
    pytester: pytest.Pytester,
) -> None:
    """targets[].integrity_protocols: the integrity cases (marked fabricqa_integrity) of a target run over the
    protocols it names; its other cases run over every protocol it serves."""
    text = TWO_TARGETS.replace("protocols: [nvme-tcp, iscsi]", "protocols: [nvme-tcp, nvme-rdma, iscsi]").replace(
        "    protocols: [nvme-tcp]\n    devices: {d0: {path: /dev/ram0}}\n    nvme:",
        "    protocols: [nvme-tcp, nvme-rdma]\n    integrity_protocols: [nvme-rdma]\n    devices: {d0: {path: /dev/ram0}}\n    nvme:",
        1,
    )
    assert "integrity_protocols" in text
    lab = _two(pytester, text)
    pytester.makepyfile(test_cases=INTEGRITY_CASES)
    result = pytester.runpytest(f"--lab={lab}", "--target=nvmet", "--collect-only", "-q", "test_cases.py")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    ids = sorted(line.split("::")[1] for line in result.stdout.lines if "::" in line)
    assert ids == ["test_connect[nvme-rdma-nvmet]", "test_connect[nvme-tcp-nvmet]", "test_verify[nvme-rdma-nvmet]"]

    bad = _two(pytester, text.replace("integrity_protocols: [nvme-rdma]", "integrity_protocols: [iscsi]"))
    result = pytester.runpytest_subprocess(f"--lab={bad}", "--collect-only", "-q", "test_cases.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *two.yaml:*: targets[[]0[]].integrity_protocols: names iscsi, which the target "
                                 "does not serve; it serves nvme-tcp, nvme-rdma*"])  # fmt: skip
    assert len([line for line in result.stderr.lines if line.strip()]) == 1


FAILOVER_CASES = """
import pytest

pytestmark = pytest.mark.fabricqa_failover


@pytest.mark.parametrize("outage", ["brief"])
def test_outage(protocol, target_name, outage):
    pass


def test_one_path(protocol, target_name):
    pass
"""


def test_failover_cases_run_only_on_the_targets_the_failover_section_names_with_or_without_an_outage_parameter(
    pytester: pytest.Pytester,
) -> None:
    """failover.targets: every case marked fabricqa_failover runs on those targets only; the one-path, target-side
    and parity cases have no ``outage`` parameter and once ran on SPDK too (the CI log showed an SPDK one-path case
    the lab had left out)."""
    lab = _two(pytester, TWO_TARGETS + "failover: {targets: [nvmet]}\n")
    pytester.makepyfile(test_cases=FAILOVER_CASES)
    result = pytester.runpytest(f"--lab={lab}", "--protocol=nvme-tcp", "--collect-only", "-q", "test_cases.py")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    ids = sorted(line.split("::")[1] for line in result.stdout.lines if "::" in line)
    assert ids == ["test_one_path[nvme-tcp-nvmet]", "test_outage[nvme-tcp-nvmet-brief]"]


TEARDOWN_CONFTEST = """
import pytest


class StandIn:
    '''Stands in for a Fabric (connected, teardown, reconnect), counting reconnects.'''

    def __init__(self, pair):
        self.pair, self.connected, self.reconnects = pair, True, 0

    def teardown(self):
        self.connected = False

    def reconnect(self):
        self.connected, self.reconnects = True, self.reconnects + 1


@pytest.fixture(scope="session")
def fabricqa_session_fabric(protocol, target_name):
    return StandIn(f"{protocol}-{target_name}")
"""

TEARDOWN_CASES = """
import pytest

RAN = []


@pytest.mark.fabricqa_last_in_pair
def test_tear_down(fabric):
    RAN.append(("tear", fabric.pair, fabric.reconnects))
    fabric.teardown()


def test_use(fabric):
    RAN.append(("use", fabric.pair, fabric.reconnects))
    assert fabric.connected


def test_zz_report():
    print("RAN", RAN)
"""


def test_a_case_that_tears_the_fabric_down_runs_last_in_its_pair_and_a_later_user_gets_it_back(
    pytester: pytest.Pytester,
) -> None:
    lab = _two(pytester)
    pytester.makeconftest(TEARDOWN_CONFTEST)
    pytester.makepyfile(test_teardown=TEARDOWN_CASES)
    result = pytester.runpytest(f"--lab={lab}", "--protocol=nvme-tcp", "-s", "test_teardown.py")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    ran = "RAN [" + next(line for line in result.stdout.lines if "RAN [" in line).split("RAN [", 1)[1]
    # Marked last in its pair: every other case of the pair before it, and no reconnect at all.
    assert ran == (
        "RAN [('use', 'nvme-tcp-nvmet', 0), ('tear', 'nvme-tcp-nvmet', 0), "
        "('use', 'nvme-tcp-fast', 0), ('tear', 'nvme-tcp-fast', 0)]"
    )
    # Without the mark the case runs in file order, and the next user of the pair finds it connected again.
    pytester.makepyfile(test_teardown=TEARDOWN_CASES.replace("@pytest.mark.fabricqa_last_in_pair\n", ""))
    result = pytester.runpytest(f"--lab={lab}", "--protocol=nvme-tcp", "--target=nvmet", "-s", "test_teardown.py")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    ran = "RAN [" + next(line for line in result.stdout.lines if "RAN [" in line).split("RAN [", 1)[1]
    assert ran == "RAN [('tear', 'nvme-tcp-nvmet', 0), ('use', 'nvme-tcp-nvmet', 1)]"
