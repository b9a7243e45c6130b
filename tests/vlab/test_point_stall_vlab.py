"""Issue 29, item 10 on the virtual lab: a path lost for a few seconds in the middle of a performance point fails
that case, though the point still meets its figures' limits.

The performance suite runs as a user runs it (pytest against the session's lab, one 20 s random-read point over
nvme-tcp on nvmet); 4 s into its measured run every frame on the target's storage links is dropped for 10 s (the
lab's ``outage_by: drop`` fault, recorded and undone as the failover suite's are), then they flow again. Only the
point's own IOPS logs show the gap, and the case must fail naming both initiators and how long.

The fault is on the target's side, not an initiator's: the point's fio client runs on the first initiator and
reaches the other's ``fio --server`` over the storage network, and fio's client gives up on a server that answers
no command for 5 s (FIO_NET_CLIENT_TIMEOUT), so an initiator's links dropped for 10 s ended the point as "server
vnode2 ... reported no job" (vlab tests on f5fc26d) instead of a stall. The target's links carry none of that.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml
from vlab_support import ROOT, STATE, lab_data

from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab

WORKLOAD = "randread-4k-qd1-j1"
RUNTIME_S = 20
INTO_RUN_S = 4
DOWN_S = 10


def _fio_jobs(host: Host) -> int:
    """How many fio processes run on ``host``: the server alone is one; a job adds its own (and a connection's)."""
    return int(host.run(["sh", "-c", "pgrep -x fio | wc -l"], check=False).stdout.strip() or 0)


def test_a_path_lost_for_seconds_in_the_middle_of_a_point_fails_that_case(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], tmp_path: Path
) -> None:
    lab, hosts, _ = vlab
    data = lab_data()
    data["workloads"]["only"] = [WORKLOAD]
    data["workloads"]["runtime"] = RUNTIME_S
    data["workloads"].pop("scaling", None)  # the lab's scaling point is not the one selected
    data["thresholds"] = {  # a threshold pattern that matches no selected workload stops the load: keep the others
        protocol: {pattern: limits for pattern, limits in table.items() if fnmatch(WORKLOAD, pattern)}
        for protocol, table in data["thresholds"].items()
    }
    lab_file = tmp_path / "vlab.yaml"
    lab_file.write_text(yaml.safe_dump(data))
    report = tmp_path / "report"
    argv = [
        sys.executable, "-m", "pytest", f"--lab={lab_file}", "--protocol=nvme-tcp", "--target=nvmet",
        "-p", "no:cacheprovider", "-o", f"fabricqa_state_dir={STATE}", f"--report-dir={report}",
        str(ROOT / "suites" / "test_performance.py"), "-k", "test_fio",
    ]  # fmt: skip
    vnode1 = hosts["vnode1"]
    prefix = lab.target_for("nvme-tcp", "nvmet").name_prefix
    links = [faults.link_outage(lab, hosts["vstor"], prefix, p.interface) for p in lab.hosts["vstor"].storage]
    undo = UndoStack()
    dropped: dict[str, float] = {}

    ended = threading.Event()  # the run is over: a fault not yet made is never made (full run of 3844c1f: a run
    # that stopped at a usage error left this thread waiting, and it dropped vnode1's links in a later test)

    def drop_mid_point() -> None:
        deadline = time.monotonic() + 600
        idle = _fio_jobs(vnode1)
        while _fio_jobs(vnode1) <= max(idle, 1) and time.monotonic() < deadline:
            if ended.wait(0.5):  # until vnode1's fio server runs the point's job
                return
        if ended.wait(1 + INTO_RUN_S):  # its ramp, then into the measured run
            return
        for link in links:
            link.arm(undo)
        dropped["at"] = max(link.fire() for link in links)
        time.sleep(DOWN_S)
        for link in links:
            link.restore()
        dropped["for"] = DOWN_S

    faulting = threading.Thread(target=drop_mid_point, daemon=True)
    faulting.start()
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    finally:
        ended.set()
        faulting.join()  # a fault under way finishes (DOWN_S) and is restored before the unwind
        failed = undo.unwind()
    assert failed == [] and dropped.get("for") == DOWN_S, (failed, dropped, proc.stdout[-3000:], proc.stderr[-2000:])
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]

    results = json.loads((report / "results.json").read_text())
    (case,) = [c for c in results["cases"] if c["case_id"] == f"nvme-tcp-nvmet-{WORKLOAD}"]
    assert case["verdict"] == "failed"
    stalled = [v for v in case["violations"] if "no I/O completed for" in v]
    assert sorted(v.split(":")[0] for v in stalled) == ["vnode1", "vnode2"], case["violations"]
    for host in ("vnode1", "vnode2"):
        seconds = case["extras"]["stalls"]["hosts"][host]["seconds"]
        assert DOWN_S - 3 <= seconds <= DOWN_S + 10, case["extras"]["stalls"]
    # The figures' own limits did not see it: the point is what a qualification would have passed.
    assert not [v for v in case["violations"] if v not in stalled and "kernel logged" not in v], case["violations"]
