"""Faults take the floor: under xdist, a case that injects a fault runs while no other worker's case loads a
target, and the end of the last fault is known to every worker.

Cases of one target place run in one worker (:mod:`pytest_fabricqa.plugin.groups`), but the places of a lab share
its initiators. A fault taken on an initiator (a link down, dropped frames) or its aftermath (a reconnect, a
path failed and reinstated by dm-multipath) then shows in another worker's case as the kernel's storage trouble
(:mod:`pytest_fabricqa.fabric.kernlog`), as a stall in its fio log, or as a second fault under a failover
measurement. So every case that loads a target holds the floor shared, and a failover case holds it alone
(``flock(2)`` on one file in the folder the xdist controller names for its workers: shared and exclusive
holders, released by the kernel if a worker dies). The time the last fault ended is written beside it
(:meth:`Floor.fault_ended`), so a case of any worker tells a fault's aftermath from its own trouble.

Without xdist there is one process and its cases run one at a time: the floor is held by nobody but the case and
the fault's end is kept in memory.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = "faults-floor.lock"
ENDED_FILE = "fault-ended"


class Floor:
    """The floor of one session's workers: ``folder`` is shared by them (None: one process, nothing to share)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self._ended: float | None = None

    @contextmanager
    def held(self, *, alone: bool) -> Iterator[None]:
        """Hold the floor for one case: ``alone`` for a case that injects a fault (no other worker's case that loads
        a target runs meanwhile), shared for one that only loads a target. Waits for its turn."""
        if self.folder is None:
            yield
            return
        fd = os.open(self.folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # closing the last descriptor of the open file gives the lock back

    def fault_ended(self, when: float) -> None:
        """Say a fault's case ended at ``when`` (Unix seconds): to this process, and to every worker (atomically:
        temp file + rename)."""
        self._ended = when
        if self.folder is not None:
            tmp = self.folder / f"{ENDED_FILE}.{os.getpid()}.tmp"
            tmp.write_text(repr(when))
            os.replace(tmp, self.folder / ENDED_FILE)

    def last_fault_end(self) -> float | None:
        """When the last fault's case of any worker ended (Unix seconds), or None if none has."""
        if self.folder is None:
            return self._ended
        try:
            return float((self.folder / ENDED_FILE).read_text())
        except (OSError, ValueError):
            return self._ended
