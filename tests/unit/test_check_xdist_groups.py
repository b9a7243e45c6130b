"""scripts/check_xdist_groups.py, the CI check that target-loading cases ran on one xdist worker, on -v log lines in
the form pytest-xdist prints them: it passes one worker, and fails two (the issue-16 bug) or none."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "check_xdist_groups.py"
_spec = importlib.util.spec_from_file_location("check_xdist_groups", SCRIPT)
assert _spec is not None and _spec.loader is not None
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

GROUPED = """\
[gw1] [  4%] PASSED suites/test_prerequisites.py::test_initiator_tools[iscsi-vnode1]
[gw0] [ 50%] PASSED suites/test_connectivity.py::test_discovery_shows_the_exported_subsystems[iscsi]
[gw0] [ 72%] PASSED suites/test_performance.py::test_fio[iscsi-randread-8k-qd128-j4]
"""


def test_one_worker_passes_two_fail_none_fails(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text(GROUPED)
    assert check.main(["check", str(log)]) == 0
    log.write_text(
        GROUPED + "[gw1] [ 90%] ERROR suites/test_connectivity.py::test_every_initiator_is_connected[iscsi]\n"
    )
    assert check.main(["check", str(log)]) == 1
    log.write_text("[gw1] [  4%] PASSED suites/test_prerequisites.py::test_initiator_tools[iscsi-vnode1]\n")
    assert check.main(["check", str(log)]) == 1
