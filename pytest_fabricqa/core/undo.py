"""The undo stack every provisioning step registers its undo on first, and the one-line error those steps raise."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pytest_fabricqa.core.commands import command_tail
from pytest_fabricqa.core.errors import FabricQAError


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
