"""What the configfs target kinds (nvmet, LIO) share: the host, the lab key for messages, one-line failures, atomic
creation, and the ownership state file on the target host (:mod:`pytest_fabricqa.targets.remote`).

A subclass names its ``kind``, reads its tree with :meth:`snapshot` and says which objects of a snapshot are its
own with :meth:`_ours` (the lists of objects, then whether a state file exists).

Every record names the lab that wrote it (``lab``). A record of another lab is never read as this lab's, cleaned,
or written over: two labs whose targets share a host and a ``name_prefix`` share the record's file name, so the
first of them to meet the other's record stops with one line (:class:`ForeignRecord`) that says to give one of them
its own prefix. A record without ``lab`` (written before records named their lab) counts as this lab's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_fabricqa.core.commands import command_tail
from pytest_fabricqa.core.undo import ProvisionError
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.targets import remote
from pytest_fabricqa.targets.base import target_index
from pytest_fabricqa.transport.base import CommandError, Host


class ForeignRecord(ProvisionError):
    """This lab's record file on a target host holds another lab's record: the two labs share a ``name_prefix``."""


class ConfigfsTarget:
    """Base of the drivers that build a target out of configfs directories on one lab host."""

    kind = "configfs"

    def __init__(self, lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> None:
        assert model.host is not None
        self.lab = lab
        self.model = model
        self.host = hosts[model.host]
        self.where = f"targets[{target_index(lab, model)}]"
        self.state_file = remote.state_path(model.name_prefix, self.kind)
        self._claimed = False  # this driver has written its record once (so it holds no other lab's)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.host.name})"

    def _fail(self, what: str, fix: str) -> ProvisionError:
        return ProvisionError(self.host.name, what, fix)

    def _step(self, what: str, action: Callable[..., object], fix: str = "") -> None:
        """Run one provisioning step; a failed command becomes a one-line :class:`ProvisionError`."""
        try:
            action()
        except CommandError as exc:
            raise self._fail(f"{what} ({command_tail(exc)})", fix or "see the target's dmesg") from None

    def _refuse_busy_port(self, port: int, key: str, who: str = "") -> None:
        """Refuse a TCP port another process listens on, naming it and the lab key (``nvme.port``) to change."""
        busy = remote.listening_processes(self.host, port)
        if busy:
            raise self._fail(
                f"TCP port {port} is taken by a process ({busy[0]})",
                f"stop that process{who} or set {self.where}.{key} to a free port",
            )

    def _create(self, what: str, path: str, fix: str = "") -> bool:
        """``mkdir`` one configfs object: True when this step made it, False when it was already there."""
        try:
            return remote.create_dir(self.host, path)
        except CommandError as exc:
            raise self._fail(f"{what} ({command_tail(exc)})", fix or "see the target's dmesg") from None

    def _forget(self, state: dict[str, Any], key: str, value: Any) -> None:
        """Drop an object that turned out not to be ours from the state file, so no later run removes it."""
        state[key] = [v for v in state[key] if v != value]
        self._write_state(state)

    def _read_state(self) -> dict[str, Any] | None:
        """This lab's record on the target host, or None when there is none; :class:`ForeignRecord` when the file
        holds another lab's record."""
        state = remote.read_state(self.host, self.state_file)
        owner = (state or {}).get("lab")
        if state is not None and owner is not None and owner != self.lab.name:
            raise ForeignRecord(
                self.host.name,
                f"{self.state_file} is the record of lab {owner!r} ({state.get('owner', '?')}), and lab "
                f"{self.lab.name!r} would use the same file: both labs give this target host's {self.kind} objects the "
                f"name_prefix {self.model.name_prefix!r}",
                f"give {self.where}.name_prefix another value in one of the labs (or drop it: each lab then gets its "
                "own), and leave the other lab's objects to it",
            )
        return state

    def _write_state(self, state: dict[str, Any]) -> None:
        """Replace this lab's record (atomically), naming the lab; the first write of a driver first makes sure the
        file holds no other lab's record."""
        if not self._claimed:
            self._read_state()
            self._claimed = True
        remote.write_state(self.host, self.state_file, {**state, "lab": self.lab.name})

    def snapshot(self) -> Any:
        """The target's tree, read in one command (the subclass's parser)."""
        raise NotImplementedError

    def _ours(self, snap: Any) -> tuple[Any, ...]:
        """The objects of ``snap`` that are ours (lists), then whether the state file exists."""
        raise NotImplementedError

    def _owned_now(self) -> Sequence[Sequence[Any]]:
        snap = self.snapshot()
        return self._ours(snap)[:-1] if snap.loaded else ()

    def _drop_stale_state(self, has_state: bool) -> list[str]:
        """The end of a stale clean-up: remove a killed run's state file, if there is one; one sentence if so."""
        if not has_state:
            return []
        remote.remove_state(self.host, self.state_file)
        return [f"{self.host.name}: removed the stale state file {self.state_file}"]

    def _remove_state_if_clean(self) -> None:
        """The last undo: drop the state file, unless objects it lists survived the teardown (the leftovers gate
        reports them, and the next run needs the file to know they are ours)."""
        try:
            owned = self._owned_now()
        except ForeignRecord:
            return  # another lab's record: this run wrote none, and theirs stays
        if not any(owned):
            remote.remove_state(self.host, self.state_file)
