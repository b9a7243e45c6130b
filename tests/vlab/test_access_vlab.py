"""Issue 31, access control on the virtual lab: the check fails on a target left open to any host, and a run killed
after such a target admitted the try has the try's controller removed by the next run's start.

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
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from vlab_support import ROOT, STATE, killed_once_down, lab_data, make_lab

from pytest_fabricqa.fabric.provision import connect_fabric, leftovers
from pytest_fabricqa.faults import identity
from pytest_fabricqa.faults.inject import records_path
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
    # The teardown case among them: nothing of ours left. The CHAP cases do not apply (no CHAP on NVMe).
    assert {v for k, v in verdicts.items() if "chap" not in k} == {"passed"}, verdicts
    assert {v for k, v in verdicts.items() if "chap" in k} == {"skipped"}, verdicts
    (case,) = [c for c in results["cases"] if c["case_id"] == CASE]
    assert any(
        f"target nvmet (nvmet) admitted the host NQN {identity.UNLISTED_NQN}" in v and "vlab-ram0" in v
        for v in case["violations"]
    ), case["violations"]
    made = hosts["vnode1"].run(["sh", "-c", "cat /sys/class/nvme/nvme*/hostnqn 2>/dev/null; true"]).stdout
    assert identity.UNLISTED_NQN not in made


# Connects nvme-tcp on nvmet (the lab's subsystems opened to any host again, so the try is admitted), makes the access
# check's try from vnode1, says DOWN with the made-up host NQN, and waits to be killed: its controller is left.
ADMITTED_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pytest_fabricqa.core.undo import UndoStack
    from pytest_fabricqa.fabric.provision import connect_fabric
    from pytest_fabricqa.faults import identity
    from pytest_fabricqa.lab.model import LabModel
    from pytest_fabricqa.plugin.session import make_hosts

    args = json.loads(sys.argv[1])
    lab = LabModel.model_validate(args["lab"])
    hosts = make_hosts(lab, key=args["key"], known_hosts=args["known_hosts"])
    fabric = connect_fabric(lab, "nvme-tcp", hosts, target="nvmet")
    model = lab.target_for("nvme-tcp", "nvmet")
    made_up, host_id = identity.made_up_identity("nvme")
    tried = identity.UnlistedIdentity(lab, hosts["vnode1"], model.name_prefix, fabric.export, "nvme",
                                      fabric.export.subsystems[0], made_up, host_id)
    tried.arm(UndoStack())
    tried.fire()
    print("DOWN", made_up, "admitted" if tried.attempt.admitted else "refused", flush=True)
    time.sleep(600)
    """
)


def _open(data: dict[str, Any]) -> None:
    for target in data["targets"]:
        if target["kind"] == "nvmet":
            for subsystem in target["nvme"]["subsystems"]:
                subsystem["allow_any_host"] = True


def _controllers_of(host: Host, nqn: str) -> list[str]:
    out = host.run(["sh", "-c", 'for c in /sys/class/nvme/nvme*; do echo "${c##*/} $(cat "$c/hostnqn")"; done; true'])
    return [line.split()[0] for line in out.stdout.splitlines() if line.endswith(f" {nqn}")]


def test_a_run_killed_after_a_target_admitted_the_try_has_its_controller_removed_when_the_next_run_starts(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    _, hosts, ssh = vlab
    lab = make_lab(_open)
    made_up, outcome = killed_once_down(ADMITTED_CHILD, lab, ssh)
    vnode1 = hosts["vnode1"]
    prefix = lab.target_for("nvme-tcp", "nvmet").name_prefix
    try:
        assert outcome == "admitted" and _controllers_of(vnode1, made_up), "the open target made no controller"
        left = [line for line in leftovers(lab, hosts) if made_up in line]
        assert left, leftovers(lab, hosts)  # the leftovers gate sees the try's record

        fabric = connect_fabric(lab, "nvme-tcp", hosts, target="nvmet")  # the next run's start, nothing by hand
        try:
            restored = [line for line in fabric.stale_removed if "restored" in line and made_up in line]
            assert len(restored) == 1, fabric.stale_removed
            assert _controllers_of(vnode1, made_up) == []
        finally:
            fabric.teardown()
        assert leftovers(lab, hosts) == []
    finally:  # never leave the shared lab with the try's controller or record
        vnode1.run(["sh", "-c", identity.NVME_UNDO, "sh", made_up], check=False)
        vnode1.run(["rm", "-f", records_path(prefix)], check=False)
