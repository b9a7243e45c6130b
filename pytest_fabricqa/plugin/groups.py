"""xdist groups, the one place that decides them: which cases may run at the same time and in which order
(cases that load one target host share one group; the cases of one (protocol, target) run one after another), and
how those groups reach xdist's scheduler.

Cases that load one target host stay on one xdist worker, whatever pytest and xdist do with node ids.

xdist's ``loadgroup`` learns a case's group from an ``@group`` suffix its worker writes into the case's node id.
pytest 9.2 no longer lets a plugin change a node id (pytest-dev/pytest-xdist#1386): the suffix silently vanishes,
the cases of one group spread over the workers, and two workers provision one target at once. So the groups
travel beside the node ids instead: every worker writes the ``xdist_group`` of each case it collected to a file in
a folder its controller named, before it reports its collection; the controller's scheduler (xdist's own
``LoadScopeScheduling``, with the scope of a case taken from those files) then sends each group to one worker as
one unit and spreads every other case like ``load``. Registered only under ``-n N --dist loadgroup`` with a lab.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_fabricqa.lab.model import LabModel

WORKERINPUT_KEY = "fabricqa_groups_dir"

T = TypeVar("T")


def load_group(lab: LabModel, protocol: str | None, target: str | None = None) -> str:
    """The xdist group of a case that loads the target ``target`` (or the first one) serving ``protocol``.

    Grouped per target *host* (or external portal), not per target kind or name: nvmet and SPDK (or LIO and
    SCST) on one storage node share its devices, CPUs and portals, so they must take turns.
    """
    if protocol is None:
        targets = {t.host or t.address or "" for t in lab.targets}
        return f"{lab.name}-target-" + "+".join(sorted(targets))
    model = lab.target_for(protocol, target)
    return f"{lab.name}-target-{model.host or model.address}"


def runs_together(
    items: Sequence[T],
    *,
    phase: Callable[[T], int],
    key: Callable[[T], Hashable | None],
    last: Callable[[T], int] = lambda _: 0,
) -> list[T]:
    """``items`` ordered by phase (stable), and within a phase every item of one key (a (protocol, target)
    pair) moved up to the first item of that key, so each key's items run in one stretch, ordered by ``last``
    (stable: 0 first, then 1, ...; True counts as 1) at the end of its stretch; items without a key keep their
    place relative to each other."""
    out: list[T] = []
    for current in sorted({phase(i) for i in items}):
        in_phase = [i for i in items if phase(i) == current]
        blocks: dict[Hashable, list[T]] = {}
        for item in in_phase:
            k = key(item)
            if k is not None:
                blocks.setdefault(k, []).append(item)
        for item in in_phase:
            k = key(item)
            if k is None:
                out.append(item)
            elif k in blocks:
                block = blocks.pop(k)
                out.extend(sorted(block, key=lambda i: int(last(i))))
    return out


def item_group(item: pytest.Item) -> str | None:
    """The xdist group of a case (the name of its closest ``xdist_group`` mark), or None."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def write_groups(folder: Path, worker: str, groups: dict[str, str]) -> None:
    """One worker's node id -> group map, written atomically (temp file + rename)."""
    path = folder / f"{worker}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups, sort_keys=True))
    os.replace(tmp, path)


def read_groups(folder: Path) -> dict[str, str]:
    """Every worker's map, merged (workers collect the same cases, so the maps agree)."""
    merged: dict[str, str] = {}
    for path in sorted(folder.glob("*.json")):
        merged.update(json.loads(path.read_text()))
    return merged


class WorkerGroups:
    """Worker side: record the group of every collected case before xdist reports the collection."""

    def __init__(self, folder: Path, worker: str) -> None:
        self.folder = folder
        self.worker = worker

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Write node id -> group for every grouped case (runs before xdist sends ``collectionfinish``)."""
        groups = {item.nodeid: group for item in session.items if (group := item_group(item)) is not None}
        write_groups(self.folder, self.worker, groups)


class ControllerGroups:
    """Controller side: name the folder for the workers and schedule by the groups they wrote."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="fabricqa-xdist-groups-"))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Tell each worker where to write its groups."""
        node.workerinput[WORKERINPUT_KEY] = str(self.folder)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """xdist's scope scheduler with each case's scope taken from the workers' group files."""
        from xdist.scheduler import LoadScopeScheduling

        folder = self.folder

        class TargetGroupScheduling(LoadScopeScheduling):
            """One work unit per xdist group (one per target host); every other case is a unit of its own."""

            _groups: dict[str, str] | None = None

            def _split_scope(self, nodeid: str) -> str:
                if self._groups is None:
                    self._groups = read_groups(folder)
                group = self._groups.get(nodeid)
                return f"group:{group}" if group is not None else nodeid

        return TargetGroupScheduling(config, log)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Remove the folder of group files."""
        shutil.rmtree(self.folder, ignore_errors=True)


def register(config: pytest.Config) -> None:
    """Register the side that this process plays, when xdist distributes with ``--dist loadgroup``."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        folder = workerinput.get(WORKERINPUT_KEY)
        if folder:
            config.pluginmanager.register(
                WorkerGroups(Path(folder), str(workerinput.get("workerid", "gw"))), "fabricqa-xdist-groups"
            )
        return
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") == "loadgroup":
        config.pluginmanager.register(ControllerGroups(), "fabricqa-xdist-groups")
