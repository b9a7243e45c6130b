"""What every target kind provides (:class:`Target`), and the small pieces the kinds share: numbers derived from
the mark, the lab key a message names. The undo stack, the provisioning error and the export are in ``core``.

A target kind (nvmet, lio, external; later spdk, scst, tgt) is one module with one class that satisfies
:class:`Target` structurally. The class provisions what the lab declares for one protocol, registering the undo
of every step on an :class:`UndoStack` *before* the step runs, and reports what it exported as an
:class:`Export` the initiators connect to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Protocol

from pytest_fabricqa.core.export import Export
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.transport.base import Host


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


# END
