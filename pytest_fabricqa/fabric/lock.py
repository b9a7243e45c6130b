"""One session per lab at a time: a lock file on every lab host, taken when the session opens the lab.

Two sessions on one lab would clean each other's objects as "stale", connect the same subsystems and load the same
devices. The lock is a small JSON file, ``/run/fabricqa/session-<lab>.lock`` on each host, created atomically
(``set -C``: the shell's O_EXCL), naming the machine and the pid of the session's controller (the xdist controller
for a worker, so the workers of one session share it). A lock whose holder was on this machine and is no longer
running (SIGKILL) is taken over; a lock held by a live session, or by another machine, stops the second session at
once with one line saying who holds it. /run is a tmpfs: a rebooted host holds no lock.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_fabricqa.core.errors import FabricQAError
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


@dataclass(frozen=True)
class Holder:
    """Who holds a lab: the lab's name, the machine and pid of the session's controller, since when."""

    lab: str
    machine: str
    pid: int
    since: str

    def line(self) -> str:
        """The holder as the lock file stores it (one JSON line)."""
        return json.dumps({"lab": self.lab, "machine": self.machine, "pid": self.pid, "since": self.since})

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        """The holder a lock file names, or None when the file is torn or foreign."""
        try:
            data = json.loads(text)
            return cls(str(data["lab"]), str(data["machine"]), int(data["pid"]), str(data["since"]))
        except (ValueError, KeyError, TypeError):
            return None

    def same_session(self, other: Holder) -> bool:
        """True for the same controller (xdist workers of one session)."""
        return (self.machine, self.pid) == (other.machine, other.pid)


def me(lab_name: str, controller: int) -> Holder:
    """This session as a lock holder; ``controller`` is the pid of its controlling pytest process."""
    return Holder(lab_name, socket.gethostname(), controller, time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def holder_gone(holder: Holder, proc: Path = Path("/proc")) -> bool:
    """True when the holder ran on this machine and its controller is no longer a running pytest."""
    if holder.machine != socket.gethostname():
        return False
    try:
        cmdline = (proc / str(holder.pid) / "cmdline").read_bytes()
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


def _acquire_one(host: Host, holder: Holder, path: str) -> bool:
    out = host.run(["sh", "-c", _ACQUIRE, "sh", holder.line(), path]).stdout
    if out.startswith("TAKEN"):
        return False
    other = Holder.parse(out.partition("\n")[2].strip())
    if other is not None and other.same_session(holder):
        return False
    if other is None or holder_gone(other):
        host.run(["sh", "-c", _TAKE_OVER, "sh", holder.line(), path])
        return True
    raise LabInUse(
        f"{host.name}: lab {other.lab!r} is in use by the pytest session of pid {other.pid} on {other.machine} "
        f"(since {other.since}); wait for it to finish, or if that session is gone, remove {path} on "
        f"{host.name}"
    )


def release(hosts: Mapping[str, Host], holder: Holder, path: str = LOCK_PATH) -> None:
    """Remove the lock on every host where it still names this session's controller (best effort, in parallel)."""

    def release_one(host: Host) -> None:
        other = Holder.parse(host.run(["sh", "-c", _READ_IF, "sh", path], check=False).stdout.strip())
        if other is not None and other.same_session(holder):
            host.run(["rm", "-f", path], check=False)

    each(list(hosts.values()), release_one, check=False)
