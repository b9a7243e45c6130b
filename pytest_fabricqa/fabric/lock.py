"""Locks on the lab's hosts, so that two sessions never drive the same thing at once.

- **One session per lab**: ``/run/fabricqa/session-<lab>.lock`` on every lab host, taken when the session opens the
  lab. Two sessions of one lab share its name prefix: they would clean each other's objects as "stale", connect
  the same subsystems and load the same devices.
- **One driver per target kind on a host**: ``/run/fabricqa/target-<kind>.lock`` on the target's host, taken by
  :func:`pytest_fabricqa.fabric.provision.connect_fabric` before its stale clean-up and given back at teardown.
  Two labs sharing a storage host (one on nvmet, the other on SPDK) run side by side; two that would drive the same
  kind there (one kernel nvmet tree, one iscsi-scstd, one tgtd, one SPDK socket by default) do not.
- Faults are locked apart, with their records (:mod:`pytest_fabricqa.faults.inject`): no lab arms a fault on a host
  where another lab's fault is in place.

Read-only work (collection, reports, ``--collect-only``) opens no lab and takes no lock.

A lock is a small JSON file created atomically (``set -C``: the shell's O_EXCL), naming the lab, the machine, the
user and the pid (with its start time) of the process holding it: for the session lock, the session's controller
(the xdist controller for a worker, so the workers of one session share it). A lock whose holder was on this
machine and no longer runs (SIGKILL) is taken over; a lock held by a live process, or by another machine, is
refused at once with one line saying who holds it. /run is a tmpfs: a rebooted host holds no lock.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_fabricqa.core import proc
from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.core.undo import ProvisionError
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

LOCK_PATH = "/run/fabricqa/session.lock"


def lock_path(lab_name: str) -> str:
    """The lock file of one lab on its hosts: two different labs sharing a host run side by side."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in lab_name)
    return f"/run/fabricqa/session-{safe}.lock"


# Fixed text; the holder and the path travel as arguments. Prints TAKEN, or HELD and the holder's line.
_ACQUIRE = (
    'mkdir -p "$(dirname "$2")" && if (set -C; printf %s "$1" > "$2") 2>/dev/null; '
    'then echo TAKEN; else echo HELD; cat "$2"; fi'
)
_TAKE_OVER = 'printf %s "$1" > "$2.$$" && mv -f "$2.$$" "$2"'
_READ_IF = '[ ! -e "$1" ] || cat "$1"'


class LabInUse(FabricQAError):
    """Another session holds the lab. The message is one line: which host, who holds it, what to do."""


class TargetInUse(ProvisionError):
    """Another lab's session drives the same target kind on the host (one line: who, and what to do)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: the lab's name, the machine, pid and user of the holding process, since when; ``started``
    is the process's start time (clock ticks since boot), which tells it from a later process of the same pid."""

    lab: str
    machine: str
    pid: int
    since: str
    user: str = ""
    started: int | None = None

    def line(self) -> str:
        """The holder as the lock file stores it (one JSON line)."""
        return json.dumps(
            {
                "lab": self.lab,
                "machine": self.machine,
                "pid": self.pid,
                "since": self.since,
                "user": self.user,
                "started": self.started,
            }
        )

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        """The holder a lock file names, or None when the file is torn or foreign."""
        try:
            data = json.loads(text)
            started = data.get("started")
            return cls(
                str(data["lab"]),
                str(data["machine"]),
                int(data["pid"]),
                str(data["since"]),
                str(data.get("user") or ""),
                int(started) if started is not None else None,
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def same_session(self, other: Holder) -> bool:
        """True for the same controller (xdist workers of one session)."""
        return (self.machine, self.pid) == (other.machine, other.pid)

    def who(self) -> str:
        """The holder in a sentence: 'the session of lab 'x', pid 12 of user alice on ci-7 (since ...)'."""
        user = f" of user {self.user}" if self.user else ""
        return f"the session of lab {self.lab!r}, pid {self.pid}{user} on {self.machine} (since {self.since})"


def me(lab_name: str, controller: int) -> Holder:
    """A lock holder of ``lab_name``: the process ``controller`` of this machine (the session's controlling pytest
    process, or the process driving a target), by this user, now."""
    return Holder(
        lab_name,
        socket.gethostname(),
        controller,
        time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        proc.user(),
        proc.start_ticks(controller),
    )


def holder_gone(holder: Holder, proc_root: Path = Path("/proc")) -> bool:
    """True when the holder ran on this machine and no longer runs: its pid is gone or is another process (its
    start time differs). A holder written without a start time counts as gone once its pid is no pytest."""
    if holder.machine != socket.gethostname():
        return False
    if holder.started is not None:
        return proc.start_ticks(holder.pid, proc_root) != holder.started
    try:
        cmdline = (proc_root / str(holder.pid) / "cmdline").read_bytes()
    except OSError:
        return True
    return b"pytest" not in cmdline and b"py.test" not in cmdline and b"xdist" not in cmdline


def acquire(hosts: Mapping[str, Host], holder: Holder, path: str = LOCK_PATH) -> list[str]:
    """Take the lock on every host (in parallel); the hosts where a dead session's lock was taken over.

    Raises :class:`LabInUse` naming the first host held by a live session or by another machine.
    """
    results = each(list(hosts.values()), lambda host: _acquire_one(host, holder, path), check=False)
    taken_over: list[str] = []
    for name, result in results.items():
        if isinstance(result, LabInUse):
            raise result
        if isinstance(result, BaseException):
            raise LabInUse(f"{name}: cannot take the session lock {path} ({str(result).splitlines()[0]})")
        if result:
            taken_over.append(name)
    return taken_over


def _take(host: Host, holder: Holder, path: str) -> tuple[bool, Holder | None]:
    """Take the lock file ``path`` on ``host``: (whether a gone holder's lock was taken over, the live holder that
    keeps it, or None when ``holder`` has it now)."""
    out = host.run(["sh", "-c", _ACQUIRE, "sh", holder.line(), path]).stdout
    if out.startswith("TAKEN"):
        return False, None
    other = Holder.parse(out.partition("\n")[2].strip())
    if other is not None and other.same_session(holder):
        return False, None
    if other is None or holder_gone(other):
        host.run(["sh", "-c", _TAKE_OVER, "sh", holder.line(), path])
        return True, None
    return False, other


def _give_back(host: Host, holder: Holder, path: str) -> None:
    """Remove the lock file ``path`` on ``host`` if it still names ``holder``'s process (best effort)."""
    other = Holder.parse(host.run(["sh", "-c", _READ_IF, "sh", path], check=False).stdout.strip())
    if other is not None and other.same_session(holder):
        host.run(["rm", "-f", path], check=False)


def _acquire_one(host: Host, holder: Holder, path: str) -> bool:
    taken_over, other = _take(host, holder, path)
    if other is None:
        return taken_over
    user = f" of user {other.user}" if other.user else ""
    raise LabInUse(
        f"{host.name}: lab {other.lab!r} is in use by the pytest session of pid {other.pid}{user} on "
        f"{other.machine} (since {other.since}); wait for it to finish, or if that session is gone, remove {path} on "
        f"{host.name}"
    )


def release(hosts: Mapping[str, Host], holder: Holder, path: str = LOCK_PATH) -> None:
    """Remove the lock on every host where it still names this session's controller (best effort, in parallel)."""

    each(list(hosts.values()), lambda host: _give_back(host, holder, path), check=False)


def target_lock_path(kind: str, folder: str = "/run/fabricqa") -> str:
    """The lock of one target kind on its host: two labs drive two kinds of one storage host side by side."""
    return f"{folder}/target-{kind}.lock"


def take_target(host: Host, kind: str, holder: Holder, folder: str = "/run/fabricqa") -> bool:
    """Take the lock of target kind ``kind`` on ``host`` for ``holder``; True when a gone holder's was taken over.

    Raises :class:`TargetInUse` (one line) when a live process of this machine, or a process on another machine,
    holds it; a lock the same process holds already is its own (one session's fabrics of a kind, one at a time).
    """
    path = target_lock_path(kind, folder)
    taken_over, other = _take(host, holder, path)
    if other is None:
        return taken_over
    raise TargetInUse(
        host.name,
        f"{kind} on this host is driven by {other.who()}",
        f"wait for it to finish, or qualify another target kind here meanwhile; if that session is gone, remove "
        f"{path} on {host.name}",
    )


def give_back_target(host: Host, kind: str, holder: Holder, folder: str = "/run/fabricqa") -> None:
    """Remove the lock of ``kind`` on ``host`` if it still names ``holder``'s process (best effort)."""
    _give_back(host, holder, target_lock_path(kind, folder))
