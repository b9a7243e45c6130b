"""A step's undo removes only what that step created (issue 16): an object someone else made between our snapshot
and our ``mkdir`` is neither removed at teardown nor listed in the state file the next run cleans up from.

The host here is scripted: every command succeeds except the ``mkdir`` of the paths another session "took".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fakes import Answer, ScriptedHost

from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.targets import remote
from pytest_fabricqa.targets.base import mark_number
from pytest_fabricqa.targets.lio import HBA_INDEXES, LioTarget
from pytest_fabricqa.targets.nvmet import PORT_IDS, NvmetTarget

LABS = Path(__file__).parents[2] / "labs"


class TakenPathsHost(ScriptedHost):
    """Empty configfs trees; ``mkdir`` of a path in ``taken`` fails as the kernel says when it already exists."""

    def __init__(self, taken: Sequence[str] = ()) -> None:
        super().__init__("vstor")
        self.taken = set(taken)
        self.states: list[dict[str, Any]] = []

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[0] == "mkdir" and argv[-1] in self.taken:
            return 1, "", f"mkdir: cannot create directory '{argv[-1]}': File exists\n"
        if argv[:2] == ("sh", "-c") and "mv -f" in argv[2]:
            self.states.append(json.loads(argv[4]))
        return ""

    def removed(self, path: str) -> bool:
        return any(path in c and ("rmdir" in " ".join(c)) for c in self.commands)


def test_create_dir_says_whether_this_step_made_the_object() -> None:
    host = TakenPathsHost(taken=["/sys/kernel/config/x"])
    assert remote.create_dir(host, "/sys/kernel/config/y") is True
    assert remote.create_dir(host, "/sys/kernel/config/x") is False


def test_an_undo_taken_back_never_runs() -> None:
    ran: list[str] = []
    undo = UndoStack()
    undo.push("a", lambda: ran.append("a"))
    discard = undo.push("b", lambda: ran.append("b"))
    discard()
    assert undo.unwind() == [] and ran == ["a"]


def test_an_hba_taken_between_snapshot_and_mkdir_is_skipped_and_never_removed() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    model = lab.target_for("iscsi")
    first = mark_number(model.name_prefix, f"{model.name_prefix}_ram0", *HBA_INDEXES)
    foreign = f"/sys/kernel/config/target/core/iblock_{first}"
    host = TakenPathsHost(taken=[foreign])
    target = LioTarget(lab, model, {"vstor": host})
    undo = UndoStack()
    target.provision("iscsi", undo)
    assert undo.unwind() == []
    assert not host.removed(foreign), "the undo removed an HBA another session made"
    assert f"iblock_{first}" not in host.states[-1]["hbas"]  # the next run's cleanup will not touch it either
    assert any(c[0] == "mkdir" and c[-1] == f"{foreign[: -len(str(first))]}{first + 1}" for c in host.commands)


def test_an_iscsi_target_that_appears_meanwhile_stops_the_run_and_stays() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    model = lab.target_for("iscsi")
    foreign = f"/sys/kernel/config/target/iscsi/{model.iscsi.iqn}"  # type: ignore[union-attr]
    host = TakenPathsHost(taken=[foreign])
    undo = UndoStack()
    with pytest.raises(ProvisionError, match=r"^vstor: iSCSI target .* appeared while fabricqa was creating it"):
        LioTarget(lab, model, {"vstor": host}).provision("iscsi", undo)
    undo.unwind()
    assert not any(c[:2] == ("sh", "-c") and c[-1] == model.iscsi.iqn for c in host.commands)  # type: ignore[union-attr]
    assert host.states[-1]["targets"] == []


def test_nvmet_port_host_entry_and_subsystem_made_by_others_are_never_removed() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    model = lab.target_for("nvme-tcp")
    address = lab.target_address(model)
    first = mark_number(model.name_prefix, f"tcp:{address}:4420", *PORT_IDS)
    port = f"/sys/kernel/config/nvmet/ports/{first}"
    entry = "/sys/kernel/config/nvmet/hosts/nqn.2026-11.io.fabricqa:vnode1"
    host = TakenPathsHost(taken=[port, entry])
    undo = UndoStack()
    NvmetTarget(lab, model, {"vstor": host}).provision("nvme-tcp", undo)
    undo.unwind()
    assert not any(c[-1] == str(first) for c in host.commands if c[:2] == ("sh", "-c")), "removed a foreign port"
    assert not host.removed(entry)
    # One port per path (vlab's nvmet serves both segments), the foreign one's ID not among them.
    assert first not in host.states[-1]["ports"] and len(host.states[-1]["ports"]) == len(lab.target_addresses(model))
    assert "nqn.2026-11.io.fabricqa:vnode1" not in host.states[-1]["hosts"]

    subsystem = "/sys/kernel/config/nvmet/subsystems/nqn.2026-11.io.fabricqa:vlab-ram0"
    host = TakenPathsHost(taken=[subsystem])
    undo = UndoStack()
    with pytest.raises(ProvisionError, match="appeared while fabricqa was creating it"):
        NvmetTarget(lab, model, {"vstor": host}).provision("nvme-tcp", undo)
    undo.unwind()
    assert not any(c[-1] == "nqn.2026-11.io.fabricqa:vlab-ram0" for c in host.commands if c[:2] == ("sh", "-c"))
    assert "nqn.2026-11.io.fabricqa:vlab-ram0" not in host.states[-1]["subsystems"]


def test_derived_numbers_differ_between_marks_and_stay_in_range() -> None:
    a = mark_number("fabricqa", "tcp:10.10.10.19:4420", *PORT_IDS)
    b = mark_number("teamb", "tcp:10.10.10.19:4420", *PORT_IDS)
    assert a != b and all(PORT_IDS[0] <= n < PORT_IDS[1] for n in (a, b))
    assert a == mark_number("fabricqa", "tcp:10.10.10.19:4420", *PORT_IDS)  # stable across runs
