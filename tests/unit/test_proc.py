"""Who a process is (core/proc.py): a live process runs, a reused pid (another start time) does not, and neither
does a killed child its parent has not reaped (a zombie still has a /proc entry). Real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_fabricqa.core import proc


def test_a_live_process_runs_and_a_reused_pid_does_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = proc.start_ticks(child.pid)
        assert started is not None
        assert proc.running(child.pid, started) and proc.running(child.pid, None)
        assert not proc.running(child.pid, started + 1)  # the pid, but not the process that was recorded
    finally:
        child.kill()
        child.wait()
    assert not proc.running(child.pid, started) and proc.start_ticks(child.pid) is None


def test_a_killed_child_not_yet_reaped_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = proc.start_ticks(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    for _ in range(100):  # until the kernel has made it a zombie
        if Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.05)
    try:
        assert proc.start_ticks(child.pid) is None
        assert not proc.running(child.pid, started) and not proc.running(child.pid, None)
    finally:
        child.wait()


def test_this_process_is_someone() -> None:
    assert proc.running(os.getpid(), proc.start_ticks(os.getpid()))
    assert proc.machine() and proc.user()
