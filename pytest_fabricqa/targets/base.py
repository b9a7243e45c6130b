"""What every target kind provides, and the small pieces they share: undo stacks, errors, exports.

A target kind (nvmet, lio, external; later spdk, scst, tgt) is one module with one class that satisfies
:class:`Target` structurally. The class provisions what the lab declares for one protocol, registering the undo
of every step on an :class:`UndoStack` *before* the step runs, and reports what it exported as an
:class:`Export` the initiators connect to.
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from pytest_fabricqa.errors import FabricQAError
from pytest_fabricqa.lab import LabModel, TargetModel
from pytest_fabricqa.transport.base import CommandError, Host


class ProvisionError(FabricQAError):
    """Provisioning, connecting or tearing down failed. The message is one line: host, what failed, how to fix."""

    def __init__(self, host: str, what: str, fix: str = "") -> None:
        self.host = host
        self.what = what
        self.fix = fix
        text = f"{host}: {what}"
        if fix:
            text += f"; {fix}"
        super().__init__(text)


def command_tail(exc: BaseException, lines: int = 1) -> str:
    """The last stderr (or stdout) line of a failed command, for a one-line message."""
    if isinstance(exc, CommandError):
        text = (exc.result.stderr or exc.result.stdout).strip()
        tail = " / ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())
        return tail or f"exit code {exc.result.exit_code}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@dataclass(frozen=True)
class ExportedUnit:
    """One namespace or LUN a target exports: where it lives (subsystem + NSID/LUN) and what backs it."""

    subsystem: str  # subsystem NQN or target IQN
    address: int  # NSID or LUN
    backing: str  # the lab's device name ("nvme0"); the path itself when the lab has no such device
    backing_path: str  # the block device (or file) on the target host
    writable: bool = False
    destructive_ok: bool = False


@dataclass(frozen=True)
class Export:
    """What a target exported for one protocol: the portal initiators reach and every unit behind it."""

    protocol: str
    transport: str  # "tcp" or "rdma" (NVMe trtype); "tcp" or "iser" for SCSI
    address: str  # portal address on the storage network
    port: int
    units: tuple[ExportedUnit, ...]
    target_host: str | None  # the lab host running the target (None for an external array)
    target: str | None = None  # the lab's name of the target (set by connect_fabric; drivers need not)
    more_addresses: tuple[str, ...] = ()  # further portals, same port: one more path each (``paths: all``)

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every portal address, one per path, the first first."""
        return (self.address, *self.more_addresses)

    @property
    def subsystems(self) -> tuple[str, ...]:
        """The NQNs or IQNs exported, in order, without repeats."""
        return tuple(dict.fromkeys(u.subsystem for u in self.units))


class UndoStack:
    """Undo actions in the order their steps ran; :meth:`unwind` runs them newest first, each at most once.

    Register an undo *before* running its step: the undo must cope with the step not having happened (every
    undo in this package is "remove it if it is there"), so a failure half-way through a step is covered too.
    """

    def __init__(self) -> None:
        self._actions: list[tuple[str, Callable[[], None]]] = []
        self._lock = threading.Lock()

    def push(self, what: str, action: Callable[[], None]) -> Callable[[], None]:
        """Register ``action`` (described by ``what``) to run at :meth:`unwind`.

        Returns a function that takes the registration back: call it when the step turned out to create nothing
        (the object was already there), so the undo never removes what someone else made.
        """
        entry = (what, action)
        with self._lock:
            self._actions.append(entry)

        def discard() -> None:
            with self._lock:
                if entry in self._actions:
                    self._actions.remove(entry)

        return discard

    def __len__(self) -> int:
        return len(self._actions)

    def unwind(self) -> list[str]:
        """Run every registered undo, newest first, even when some fail; return one line per failure."""
        errors: list[str] = []
        while True:
            with self._lock:
                if not self._actions:
                    break
                what, action = self._actions.pop()
            try:
                action()
            except Exception as exc:
                errors.append(f"{what}: {exc if isinstance(exc, ProvisionError) else command_tail(exc)}")
        return errors


class Target(Protocol):
    """One storage target of a lab: provisions, exports, reports its leftovers and cleans a killed run's state."""

    model: TargetModel

    def provision(self, protocol: str, undo: UndoStack) -> Export:
        """Create and export what the lab declares for ``protocol``; every step's undo goes on ``undo`` first."""
        ...

    def cleanup_stale(self) -> list[str]:
        """Remove objects carrying this plugin's mark that an earlier (killed) run left; one sentence each."""
        ...

    def leftovers(self) -> list[str]:
        """Objects carrying this plugin's mark that are still present; one sentence each."""
        ...


TargetFactory = Callable[[LabModel, TargetModel, Mapping[str, Host]], Target]


def mark_number(mark: str, what: str, low: int, high: int) -> int:
    """A number in ``[low, high)`` derived from the plugin's mark and what it numbers (an HBA, a port).

    Tools number these objects from the bottom up (targetcli's HBAs from 0, nvmetcli's ports from 1), and a number
    read as free and created a moment later can be taken in between. A number derived from the mark lies far from
    theirs and differs between two marks; a taken one is still detected at creation (``mkdir`` is atomic), and the
    caller then moves on to the next.
    """
    digest = hashlib.sha256(f"{mark}\0{what}".encode()).digest()
    return low + int.from_bytes(digest[:4], "big") % (high - low)


def target_index(lab: LabModel, model: TargetModel) -> int:
    """The index of ``model`` under the lab's ``targets`` key (for messages that name the lab key)."""
    for index, candidate in enumerate(lab.targets):
        if candidate is model:
            return index
    return lab.targets.index(model)


def portal_name(address: str, port: int) -> str:
    """An iSCSI portal as LIO's configfs, SCST and tgt name it: ADDR:PORT, or [ADDR]:PORT for IPv6."""
    try:
        v6 = ipaddress.ip_address(address).version == 6
    except ValueError:
        v6 = False
    return f"[{address}]:{port}" if v6 else f"{address}:{port}"
