"""Who a process is, as an owner of locks and records: the machine it runs on, its user, its pid and when it
started; and whether such a process still runs.

A pid alone is not an identity: pids are reused. The start time (``/proc/PID/stat`` field 22, clock ticks since
boot) tells a reused pid from the process that wrote a lock or a record.
"""

from __future__ import annotations

import getpass
import os
import socket
from pathlib import Path


def start_ticks(pid: int, proc: Path = Path("/proc")) -> int | None:
    """When process ``pid`` started (clock ticks since boot); None where /proc cannot tell (it is gone)."""
    try:
        text = (proc / str(pid) / "stat").read_text()
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def machine() -> str:
    """This machine's name, as locks and records store it."""
    return socket.gethostname()


def user() -> str:
    """The user running this process ('' when the system cannot say)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def running(pid: int, started: int | None) -> bool:
    """Whether process ``pid`` on this machine runs and is the one that started at ``started`` (any process of
    that pid when ``started`` is None)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user
    return started is None or start_ticks(pid) in (None, started)
