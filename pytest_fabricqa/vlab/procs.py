"""Processes of a running lab, recorded so a later run (or the watchdog) can tell them apart from strangers.

A process is identified by its pid and its start time (``/proc/PID/stat`` field 22): a pid that was reused
by an unrelated process after ours died has another start time and is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

STATE_FILE = "lab.json"


@dataclass(frozen=True)
class ProcessRef:
    """A process we started: what it is (``qemu g1``), its pid and its start time in clock ticks."""

    role: str
    pid: int
    start: int


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


def is_zombie(pid: int) -> bool:
    """True when ``pid`` has exited but was not reaped yet (it holds nothing any more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def ref(role: str, pid: int) -> ProcessRef:
    """A :class:`ProcessRef` for a live ``pid``; ProcessLookupError when it is already gone."""
    start = start_time(pid)
    if start is None:
        raise ProcessLookupError(f"{role}: pid {pid} is not running")
    return ProcessRef(role, pid, start)


def alive(proc: ProcessRef | None) -> bool:
    """True when ``proc`` is still the very process we recorded and it has not exited."""
    if proc is None:
        return False
    return start_time(proc.pid) == proc.start and not is_zombie(proc.pid)


def terminate(procs: list[ProcessRef], grace_s: float = 5.0) -> list[ProcessRef]:
    """SIGTERM the live ``procs``, SIGKILL what is left after ``grace_s``; returns those that were live."""
    live = [p for p in procs if alive(p)]
    for proc in live:
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in live):
        time.sleep(0.1)
    for proc in live:
        if alive(proc):
            _signal(proc, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in live):
        time.sleep(0.05)
    return live


def _signal(proc: ProcessRef, sig: signal.Signals) -> None:
    if start_time(proc.pid) != proc.start:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)


@dataclass(frozen=True)
class LabState:
    """What ``lab.json`` in a run dir records about a running lab."""

    spec: dict[str, Any]
    owner: ProcessRef | None  # None: started by the CLI, lives until `down`
    processes: tuple[ProcessRef, ...]
    image_root: str
    sock_dir: str

    def to_json(self) -> str:
        """The state as JSON text."""
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> LabState:
        """Parse ``lab.json`` text; ValueError/KeyError/TypeError when it is not a state file."""
        data = json.loads(text)
        owner = ProcessRef(**data["owner"]) if data.get("owner") else None
        return cls(
            spec=data["spec"],
            owner=owner,
            processes=tuple(ProcessRef(**p) for p in data["processes"]),
            image_root=str(data.get("image_root", "")),
            sock_dir=str(data.get("sock_dir", "")),
        )


def read_state(run_dir: Path) -> LabState | None:
    """The lab state in ``run_dir``, or None when there is none (or it is unreadable)."""
    try:
        return LabState.from_json((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_state(run_dir: Path, state: LabState) -> None:
    """Write ``lab.json`` atomically (temp file + rename), so a reader never sees half a state."""
    tmp = run_dir / f".{STATE_FILE}.{os.getpid()}"
    tmp.write_text(state.to_json())
    os.replace(tmp, run_dir / STATE_FILE)


def cleanup_stale(run_dir: Path) -> list[str]:
    """Kill the processes of labs in ``run_dir`` (or its direct sub-folders) whose owner process is dead.

    A lab started with an owner (a pytest process) must not outlive it; a lab started without one (the CLI
    ``up``) is left alone. Returns one line per process killed, e.g. ``qemu g1 (pid 1234)``.
    """
    cleaned: list[str] = []
    run_dir = Path(run_dir)
    candidates = [run_dir / STATE_FILE, *sorted(run_dir.glob(f"*/{STATE_FILE}"))]
    for path in candidates:
        state = read_state(path.parent)
        if state is None or state.owner is None or alive(state.owner):
            continue
        for proc in terminate(list(state.processes)):
            cleaned.append(f"{proc.role} (pid {proc.pid})")
        path.unlink(missing_ok=True)
    return cleaned
