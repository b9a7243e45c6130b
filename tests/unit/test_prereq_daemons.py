"""The user-space daemon check for SCST and tgt targets: the script run for real on this machine, and the sentence
it leads to in every case (running, installed, missing; attach or start)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from labfiles import vlab_kernel_text_as

from pytest_fabricqa.fabric.prereq import DAEMON_SCRIPT, TargetDaemon, daemon_problem, target_daemon
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.transport.local import LocalHost

LABS = Path(__file__).parents[1] / "data" / "labs"
VLAB = Path(__file__).parents[2] / "labs" / "vlab.yaml"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(["sleep", "60"])
    yield child
    child.kill()
    child.wait()


def _report(name: str, binary: str) -> str:
    return LocalHost("here").run(["sh", "-c", DAEMON_SCRIPT, "sh", name, binary]).stdout


def test_the_script_sees_a_running_process_an_installed_binary_and_nothing(
    sleeper: subprocess.Popen[bytes],
) -> None:
    running = _report("sleep", "sleep")
    assert running.split()[0] == "running" and int(running.split()[1]) > 0
    assert _report("no-such-daemon", "sh") == "installed\n"
    assert _report("no-such-daemon", "/nonexistent/iscsi-scstd") == "missing\n"


def test_each_case_is_one_sentence_naming_host_daemon_and_key() -> None:
    attach = TargetDaemon("scst", "iscsi-scstd", "iscsi-scstd", False, "targets[1].scst")
    start = TargetDaemon("tgt", "tgtd", "/opt/tgt/sbin/tgtd", True, "targets[2].tgt")
    assert daemon_problem("el72h3", attach, "running 812\n") is None
    assert daemon_problem("el72h3", attach, "installed\n") == (
        "el72h3: iscsi-scstd is installed but not running, and the scst target needs it "
        "(targets[1].scst.daemon: attach); start it, or set targets[1].scst.daemon: start"
    )
    assert "neither running nor installed" in str(daemon_problem("el72h3", attach, "missing\n"))
    assert daemon_problem("el72h3", start, "installed\n") is None
    assert daemon_problem("el72h3", start, "") == (
        "el72h3: /opt/tgt/sbin/tgtd is not installed, and the lab has the plugin start it "
        "(targets[2].tgt.daemon: start); install it or set targets[2].tgt.binary to its path"
    )


def test_which_kinds_have_a_daemon(tmp_path: Path) -> None:
    seed = load_lab(LABS / "scst-seed000.yaml")
    assert target_daemon(seed.targets[0], 0) == TargetDaemon(
        "scst", "iscsi-scstd", "iscsi-scstd", False, "targets[0].scst"
    )
    text = vlab_kernel_text_as("  - kind: tgt\n    tgt: {daemon: start}\n")
    (tmp_path / "lab.yaml").write_text(text)
    lab = load_lab(tmp_path / "lab.yaml")
    assert target_daemon(lab.targets[1], 1) == TargetDaemon("tgt", "tgtd", "tgtd", True, "targets[1].tgt")
    assert target_daemon(lab.targets[0], 0) is None  # nvmet lives in the kernel
