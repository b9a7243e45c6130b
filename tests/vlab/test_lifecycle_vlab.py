"""The virtual lab's lifecycle under pytest, for real: a SIGKILLed pytest leaves no QEMU behind for long, and the
next run starts clean, with one boot shared by its xdist workers, stopped by its controller at the end. Two boots
in all: the kill needs a lab this test owns (the shared one may have been started by `fabricqa-vlab up`).

A small lab of two guests (one storage node, one initiator) on SSH ports 22391-22392, with its own state folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pytest_fabricqa.vlab import procs

pytestmark = pytest.mark.vlab

ROOT = Path(__file__).resolve().parents[2]


def _tiny_lab(folder: Path) -> Path:
    data = yaml.safe_load((ROOT / "labs" / "vlab.yaml").read_text())
    data["name"] = "vlabtiny"
    del data["hosts"]["vnode2"], data["vlab"]["vnode2"]
    data["hosts"]["vstor"]["port"], data["hosts"]["vnode1"]["port"] = 22391, 22392
    data["vlab"]["vstor"] = {"memory_mb": 1024, "drives": {"ram0": {"kind": "ram", "size_mb": 64}}}
    data["protocols"] = ["nvme-tcp"]
    data["targets"] = [
        {
            "kind": "nvmet",
            "host": "vstor",
            "protocols": ["nvme-tcp"],
            "devices": {"ram0": {"path": "/dev/ram0"}},
            "nvme": {"subsystems": [{"nqn": "nqn.2026-11.io.fabricqa:tiny", "namespaces": ["ram0"]}]},
        }
    ]
    path = folder / "vlabtiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _qemus(state: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "qemu-system-x86_64"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(state) in line]


def _pytest(lab: Path, state: Path, report: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "pytest", f"--lab={lab}", "-p", "no:cacheprovider", "-o", f"fabricqa_state_dir={state}",
        f"--report-dir={report}", *args,
    ]  # fmt: skip


def test_a_killed_run_leaves_no_qemu_and_the_next_run_starts_clean(tmp_path: Path) -> None:
    lab, state = _tiny_lab(tmp_path), tmp_path / "state"
    waiting = tmp_path / "test_wait.py"
    waiting.write_text(
        "import time\n"
        "def test_wait(lab_hosts):\n"
        "    lab_hosts['vnode1'].run(['true'])\n"
        "    open(__file__ + '.ready', 'w').close()\n"
        "    time.sleep(600)\n"
    )
    proc = subprocess.Popen(_pytest(lab, state, tmp_path / "r1", str(waiting), "-s"), cwd=ROOT)
    ready = Path(str(waiting) + ".ready")
    deadline = time.monotonic() + 600
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(1)
    assert ready.exists(), "the lab never came up"
    assert len(_qemus(state)) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60  # the watchdog polls every 2 s, then QEMU is signalled
    while _qemus(state) and time.monotonic() < deadline:
        time.sleep(1)
    assert _qemus(state) == [], "QEMU outlived the killed pytest by more than a minute"

    # The next run boots afresh, on two xdist workers that share that one boot, and its controller stops it.
    rerun = subprocess.run(
        _pytest(
            lab, state, tmp_path / "r2", str(ROOT / "suites" / "test_prerequisites.py"),
            "-n", "2", "--dist", "loadgroup", "-k", "storage_interface or kernel",
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-2000:]
    assert "2 workers" in rerun.stdout, rerun.stdout[-2000:]
    boots = (state / "vlab" / "vlabtiny" / "boots.log").read_text().splitlines()
    assert len(boots) == 2, boots  # the killed run's and the next run's: the workers booted nothing more
    assert _qemus(state) == []
    assert procs.read_state(state / "vlab" / "vlabtiny") is None  # stopped, state removed
