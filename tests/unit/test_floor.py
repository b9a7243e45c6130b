"""The floor a fault case holds alone (pytest_fabricqa.fabric.floor): shared holders run together, one alone waits
for them, and the end of a fault is seen by every worker of the session. Run for real with flock(2) between two
processes; ordering is read from marker files, not timed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from pytest_fabricqa.fabric.floor import Floor

HOLD = """
import sys, time
from pathlib import Path
from pytest_fabricqa.fabric.floor import Floor
folder = Path(sys.argv[1])
with Floor(folder).held(alone=sys.argv[2] == "alone"):
    (folder / "held").write_text("")
    time.sleep(2)
    (folder / "released").write_text("")
"""


def _holder(folder: Path, how: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), how])
    while not (folder / "held").exists():
        assert child.poll() is None, "the holder ended before it held the floor"
        time.sleep(0.05)
    return child


def test_a_fault_case_waits_for_a_case_that_shares_the_floor(tmp_path: Path) -> None:
    child = _holder(tmp_path, "shared")
    with Floor(tmp_path).held(alone=True):
        assert (tmp_path / "released").exists()
    assert child.wait(timeout=60) == 0


def test_cases_that_only_load_a_target_share_the_floor_and_wait_for_a_fault(tmp_path: Path) -> None:
    child = _holder(tmp_path, "shared")
    with Floor(tmp_path).held(alone=False):
        assert not (tmp_path / "released").exists()  # not waited for: it still holds
    assert child.wait(timeout=60) == 0
    (tmp_path / "held").unlink()
    (tmp_path / "released").unlink()
    child = _holder(tmp_path, "alone")
    with Floor(tmp_path).held(alone=False):
        assert (tmp_path / "released").exists()
    assert child.wait(timeout=60) == 0


def test_the_end_of_a_fault_reaches_every_worker_and_one_process_keeps_its_own(tmp_path: Path) -> None:
    assert Floor(tmp_path).last_fault_end() is None
    Floor(tmp_path).fault_ended(1796490770.25)
    assert Floor(tmp_path).last_fault_end() == 1796490770.25
    alone = Floor()
    with alone.held(alone=True):
        alone.fault_ended(12.5)
    assert alone.last_fault_end() == 12.5 and Floor().last_fault_end() is None
