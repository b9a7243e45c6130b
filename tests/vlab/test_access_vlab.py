"""Issue 31, access control on the virtual lab: the check fails on a target left open to any host.

The connectivity suite runs as a user runs it (pytest against the session's lab, nvme-tcp on nvmet) with one change
to labs/vlab.yaml: nvmet's subsystems allow any host again (``allow_any_host: true``, nvmet's and SPDK's default).
The access check's made-up host NQN is then admitted, and the case must fail naming the identity and the target;
the controller the try made must be gone afterwards (the pair's teardown case finds nothing of ours left), and every
other connectivity case still passes. On the lab as shipped the same case passes on all ten pairs (the gate's
connectivity suite), so the check can fail and does not fail for nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vlab_support import ROOT, STATE, lab_data

from pytest_fabricqa.faults import identity
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab

CASE = "test_an_initiator_no_access_list_names_is_refused[nvme-tcp-nvmet]"


def test_a_target_open_to_any_host_fails_the_access_check_and_keeps_nothing_of_the_try(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], tmp_path: Path
) -> None:
    _, hosts, _ = vlab
    data = lab_data()
    (nvmet,) = [t for t in data["targets"] if t["kind"] == "nvmet"]
    for subsystem in nvmet["nvme"]["subsystems"]:
        subsystem["allow_any_host"] = True
    lab_file = tmp_path / "vlab.yaml"
    lab_file.write_text(yaml.safe_dump(data))
    report = tmp_path / "report"
    argv = [
        sys.executable, "-m", "pytest", f"--lab={lab_file}", "--protocol=nvme-tcp", "--target=nvmet",
        "-p", "no:cacheprovider", "-o", f"fabricqa_state_dir={STATE}", f"--report-dir={report}",
        str(ROOT / "suites" / "test_connectivity.py"),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]

    results = json.loads((report / "results.json").read_text())
    verdicts = {c["case_id"]: c["verdict"] for c in results["cases"]}
    assert verdicts.pop(CASE) == "failed", verdicts
    assert set(verdicts.values()) == {"passed"}, verdicts  # the teardown case among them: nothing of ours left
    (case,) = [c for c in results["cases"] if c["case_id"] == CASE]
    assert any(
        f"target nvmet (nvmet) admitted the host NQN {identity.UNLISTED_NQN}" in v and "vlab-ram0" in v
        for v in case["violations"]
    ), case["violations"]
    made = hosts["vnode1"].run(["sh", "-c", "cat /sys/class/nvme/nvme*/hostnqn 2>/dev/null; true"]).stdout
    assert identity.UNLISTED_NQN not in made
