"""The prerequisite suite from suites/, run by pytester on a lab whose single host is this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "test_prerequisites.py"
LOCAL_LAB = ROOT / "tests" / "data" / "labs" / "local.yaml"


def _run(pytester: pytest.Pytester, lab: Path, *args: str) -> pytest.RunResult:
    report = pytester.path / "report"  # not the repository's own fabricqa-report/ (the suite's rootdir)
    # Nor the repository's own .fabricqa/: a lab of local hosts keeps its session lock there, and two of these runs
    # on two xdist workers (one lab name, one rootdir) would refuse each other.
    state = pytester.path / "state"
    return pytester.runpytest_subprocess(
        f"--lab={lab}",
        str(SUITE),
        "-p",
        "no:cacheprovider",
        "-rA",
        f"--report-dir={report}",
        "-o",
        f"fabricqa_state_dir={state}",
        *args,
    )


def test_loopback_lab_passes_its_interface_and_tool_checks(pytester: pytest.Pytester) -> None:
    """lo carries 127.0.0.1 with MTU 65536, and fio and nvme-cli are installed."""
    result = _run(pytester, LOCAL_LAB, "-k", "storage_interface or initiator_tools")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["PASSED *test_initiator_tools[[]nvme-tcp-localhost[]]*", "PASSED *test_storage_interface[[]localhost[]]*"]
    )


def _modinfo_path(pytester: pytest.Pytester, exit_code: int) -> str:
    """A PATH whose modinfo answers ``exit_code`` for every module (the rest of PATH as it is)."""
    bin_dir = pytester.mkdir(f"modinfo{exit_code}")
    (bin_dir / "modinfo").write_text(f"#!/bin/sh\nexit {exit_code}\n")
    (bin_dir / "modinfo").chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def test_kernel_check_asks_for_the_modules_not_the_version(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel check passes when modinfo finds nvme_fabrics and nvme_tcp, and names them when it does not."""
    if any(Path(f"/sys/module/{m}").exists() for m in ("nvme_fabrics", "nvme_tcp")):
        pytest.skip("this kernel has the NVMe/TCP modules loaded; the failing half cannot be shown here")
    monkeypatch.setenv("PATH", _modinfo_path(pytester, 0))
    _run(pytester, LOCAL_LAB, "-k", "initiator_kernel").assert_outcomes(passed=1)
    monkeypatch.setenv("PATH", _modinfo_path(pytester, 1))
    result = _run(pytester, LOCAL_LAB, "-k", "initiator_kernel")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*localhost: kernel * cannot run an NVMe/TCP initiator: module(s) nvme_fabrics, nvme_tcp*"]
    )


def test_wrong_mtu_and_address_fail_with_the_figures(pytester: pytest.Pytester) -> None:
    lab = pytester.path / "jumbo.yaml"
    text = LOCAL_LAB.read_text().replace("mtu: 65536", "mtu: 9000").replace("address: 127.0.0.1", "address: 127.0.0.9")
    lab.write_text(text)
    result = _run(pytester, lab, "-k", "storage_interface")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*localhost: lo does not carry 127.0.0.9 (it has 127.0.0.1, ::1)*; localhost: lo MTU is 65536, "
            "the lab expects 9000*"
        ]
    )


def test_missing_tool_is_named(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """With PATH narrowed so that nvme-cli cannot be found, the tools check names it."""
    bin_dir = pytester.mkdir("bin")
    for tool in ("fio", "sh", "which", "command"):
        real = Path("/usr/bin") / tool
        if real.exists():
            (bin_dir / tool).symlink_to(real)
    monkeypatch.setenv("PATH", f"{bin_dir}:/bin" if not Path("/bin/nvme").exists() else str(bin_dir))
    result = _run(pytester, LOCAL_LAB, "-k", "initiator_tools")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*localhost: missing nvme (install it for nvme-tcp)*"])


def _spdk_lab(pytester: pytest.Pytester, spdk: str) -> Path:
    """The local lab with an SPDK target instead of nvmet, its ``spdk`` section as given."""
    lab = pytester.path / "spdk.yaml"
    text = LOCAL_LAB.read_text().replace("kind: nvmet", "kind: spdk") + f"    spdk: {spdk}\n"
    lab.write_text(text)
    return lab


def test_spdk_target_names_what_is_missing_on_which_host(pytester: pytest.Pytester) -> None:
    """SPDK's own prerequisites fire: a binary that is not there, no hugepages (start mode), no RPC socket (attach)."""
    hugepages = next(
        (int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if "HugePages_Free" in line), 0
    )
    result = _run(pytester, _spdk_lab(pytester, "{binary: /nonexistent/nvmf_tgt}"), "-k", "target_daemon")
    result.assert_outcomes(failed=1)
    lines = ["*localhost: SPDK's nvmf_tgt not found at /nonexistent/nvmf_tgt (targets[[]0].spdk.binary); install*"]
    if hugepages == 0:
        lines.append(
            "*; localhost: no free hugepages for nvmf_tgt (HugePages_Total *, HugePages_Free 0); *no_huge: true*"
        )
    result.stdout.fnmatch_lines(lines)
    sock = pytester.path / "none.sock"
    result = _run(pytester, _spdk_lab(pytester, f"{{start: false, rpc_socket: {sock}}}"), "-k", "target_daemon")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*localhost: no SPDK RPC socket at {sock} (targets[[]0].spdk.start is false, so an app must be running)*"]
    )
