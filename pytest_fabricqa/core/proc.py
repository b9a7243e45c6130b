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


def _stat(pid: int, proc: Path) -> tuple[str, int] | None:
    """Process ``pid``'s state letter and start time, or None when /proc has no such process."""
    try:
        fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def start_ticks(pid: int, proc: Path = Path("/proc")) -> int | None:
    """When process ``pid`` started (clock ticks since boot); None when it is gone, a zombie included (a killed
    child its parent has not reaped yet still has a /proc entry, and runs no more)."""
    stat = _stat(pid, proc)
    return None if stat is None or stat[0] in ("Z", "X") else stat[1]


def machine() -> str:
    """This machine's name, as locks and records store it."""
    return socket.gethostname()


def user() -> str:
    """The user running this process ('' when the system cannot say)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def running(pid: int, started: int | None, proc: Path = Path("/proc")) -> bool:
    """Whether process ``pid`` on this machine runs (not a zombie) and is the one that started at ``started`` (any
    process of that pid when ``started`` is None)."""
    if pid <= 0:
        return False
    ticks = start_ticks(pid, proc)
    return ticks is not None and (started is None or ticks == started)
