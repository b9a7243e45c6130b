"""Acknowledged data across a target restart: the flush before it, the restart's own failures and a device that
never reads again each a problem (the writes before it and the verify after it are the integrity suite's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes import ScriptedHost

from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.failover import survival
from pytest_fabricqa.faults.inject import FaultError
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.lab.load import load_lab

LABS = Path(__file__).resolve().parents[2] / "labs"


class Restart:
    """A target restart that records what was done to it; ``fails`` names the step that raises."""

    def __init__(self, fails: str = "") -> None:
        self.name = "vstor LIO target iqn.x disabled and enabled"
        self.fails = fails
        self.done: list[str] = []

    def inject(self, undo: UndoStack) -> float:
        undo.push("restore it", lambda: self.done.append("unwound"))
        self.done.append("down")
        if self.fails == "inject":
            raise FaultError("vstor", "cannot inject it (exit 1)", "see the record")
        return 0.0

    def restore(self) -> float:
        self.done.append("up")
        if self.fails == "restore":
            raise FaultError("vstor", "cannot restore it (exit 1)", "restore it by hand")
        return 0.0


@pytest.fixture
def lab() -> Any:
    model = load_lab(LABS / "vlab.yaml")
    return model.model_copy(
        update={"failover": model.failover.model_copy(update={"brief_down_s": 0, "recover_s": 1.0})}
    )


def test_the_flush_after_the_writes_is_the_devices_fsync_and_a_failed_one_is_a_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    regions = [ig.region(slot, bs, 2 << 20) for slot, bs in enumerate(ig.BLOCK_SIZES.values())]
    monkeypatch.setattr(ig, "write_before_reconnect", lambda host, device, size: (ig.Outcome(), regions))
    device = ig.SharedDevice("ram0", "nqn.x", 1, 512 << 20, {"vnode1": "/dev/dm-0"})
    clean = ScriptedHost("vnode1", lambda argv: "")
    outcome, written = ig.write_and_flush(clean, device, 2 << 20)
    assert written == regions and outcome.problems == []
    assert clean.commands == [("sh", "-c", ig.FLUSH, "sh", "/dev/dm-0")] and ig.FLUSH.startswith("sync -- ")
    failing = ScriptedHost("vnode1", lambda argv: (1, "", "sync: error syncing '/dev/dm-0': Input/output error\n"))
    outcome, _ = ig.write_and_flush(failing, device, 2 << 20)
    assert outcome.problems == [
        "vnode1: the cache flush of /dev/dm-0 failed (sync: error syncing '/dev/dm-0': Input/output error), so "
        "nothing is proven stable"
    ]
    monkeypatch.setattr(
        ig, "write_before_reconnect", lambda host, device, size: (ig.Outcome(problems=["a mismatch"]), regions)
    )
    unwritten = ScriptedHost("vnode1", lambda argv: "")
    assert ig.write_and_flush(unwritten, device, 2 << 20)[0].problems == ["a mismatch"]
    assert unwritten.commands == []  # a write that failed is not flushed as if it had not


@pytest.mark.parametrize("fails", ["inject", "restore"])
def test_a_restart_that_cannot_be_made_or_undone_is_a_problem_and_is_still_unwound(
    lab: Any, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    fault = Restart(fails)
    monkeypatch.setattr(survival.restart, "target_restart", lambda *args: fault)
    reader = ScriptedHost("vnode1", lambda argv: "")
    problems = survival.restarted(lab, {}, "lio", "iscsi", [([reader], {"vnode1": "/dev/dm-0"})])
    assert len(problems) == 1 and problems[0].startswith(f"the target restart ({fault.name}) failed: ")
    assert fault.done[-1] == "unwound" and reader.commands == []  # nothing read on a target not restarted


def test_a_device_that_never_reads_again_after_the_restart_is_named(lab: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fault = Restart()
    monkeypatch.setattr(survival.restart, "target_restart", lambda *args: fault)
    back = ScriptedHost("vnode1", lambda argv: "")
    gone = ScriptedHost("vnode2", lambda argv: (1, "", "dd: error reading '/dev/dm-1': Input/output error\n"))
    problems = survival.restarted(
        lab, {}, "lio", "iscsi", [([back, gone], {"vnode1": "/dev/dm-0", "vnode2": "/dev/dm-1"})]
    )
    assert fault.done == ["down", "up", "unwound"]
    assert problems == [
        "vnode2: /dev/dm-1 still cannot be read 1 s after the fault was undone (dd: error reading '/dev/dm-1': "
        "Input/output error)"
    ]
