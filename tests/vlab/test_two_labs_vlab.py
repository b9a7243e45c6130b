"""Two labs, one storage host, at once (issue 28), on the virtual lab's own guests.

Lab A is the test lab (labs/vlab.yaml); lab B is another team's lab file naming the same guests: its own name (so
its own default ``name_prefix``), its own NQN, IQN and NVMe port, and its own backing file on vstor. While A's
nvmet fabric is up and its initiators read from it, B provisions, connects and tears down a target of another
kind (SPDK; SCST and tgt in the full run). A's objects and A's record stay exactly as they were, and A's reads
never fail. Then B is SIGKILLed with its fabric up: A's next run names B's record, leaves B's app and objects
alone, and B's own next clean-up removes them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from vlab_support import make_lab

from pytest_fabricqa.fabric.provision import cleanup_stale, connect_fabric, leftovers
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.targets import remote
from pytest_fabricqa.targets.nvmet import SNAPSHOT_SCRIPT as NVMET_SNAPSHOT
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab

ROOT = Path(__file__).parents[2]
B_FILE = "/var/tmp/fqa-team-b.img"  # lab B's backing store: a file, so A's RAM disk and NVMe drive stay A's alone
B_NQN = "nqn.2026-11.io.fabricqa:team-b-img0"
B_IQN = "iqn.2026-11.io.fabricqa:team-b"
PROTOCOL = {"spdk": "nvme-tcp", "scst": "iscsi", "tgt": "iscsi", "nvmet": "nvme-tcp"}

# Lab B's session in a process of its own: connect, say UP, then (cycle) tear down and say DOWN, or (hold) wait to
# be killed.
B_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pytest_fabricqa.fabric.provision import connect_fabric
    from pytest_fabricqa.lab.model import LabModel
    from pytest_fabricqa.plugin.session import make_hosts

    args = json.loads(sys.argv[1])
    lab = LabModel.model_validate(args["lab"])
    hosts = make_hosts(lab, key=args["key"], known_hosts=args["known_hosts"])
    fabric = connect_fabric(lab, args["protocol"], hosts, target=args["kind"])
    print("UP", len(fabric.devices), flush=True)
    if args["mode"] == "hold":
        time.sleep(900)
    fabric.teardown()
    print("DOWN", flush=True)
    """
)


def team_b(kind: str) -> LabModel:
    """Another team's lab on the same guests, with one target of ``kind`` over a file of its own."""

    def mutate(data: dict[str, Any]) -> None:
        data["name"] = f"{data['name']}-b"
        target = next(t for t in data["targets"] if t["kind"] == kind)
        target.update(
            devices={"img0": {"path": B_FILE, "writable": True}},
            paths="first",
            workloads=["randread-8k-qd128-j4"],
        )
        target.pop("integrity_block_sizes", None)
        if "nvme" in target:
            target["nvme"] = {"port": 4421, "subsystems": [{"nqn": B_NQN, "namespaces": ["img0"]}]}
        if "iscsi" in target:
            target["iscsi"] = {"iqn": B_IQN, "port": 3260, "luns": ["img0"]}
        if kind == "scst":
            target["scst"] = {**target.get("scst", {}), "handler": "vdisk_fileio"}
        data["targets"] = [target]
        data["protocols"] = [PROTOCOL[kind]]
        data.pop("failover", None)
        data.pop("integrity", None)

    return make_lab(mutate)


def _start_b(lab: LabModel, ssh: dict[str, str], kind: str, mode: str) -> subprocess.Popen[str]:
    args = {"lab": lab.model_dump(mode="json"), "kind": kind, "protocol": PROTOCOL[kind], "mode": mode, **ssh}
    return subprocess.Popen(
        [sys.executable, "-c", B_CHILD, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _a_state(lab: LabModel, vstor: Host) -> tuple[str, str]:
    """A's nvmet tree and A's nvmet record, as text."""
    record = remote.state_path(lab.target_for("nvme-tcp", "nvmet").name_prefix, "nvmet")
    tree = vstor.run(["sh", "-c", NVMET_SNAPSHOT]).stdout
    return tree, vstor.run(["sh", "-c", '[ ! -e "$1" ] || cat "$1"', "sh", record]).stdout


class Reader(threading.Thread):
    """Lab A's initiator reading its device (fio, read-only, 5 s runs) until told to stop; every run's outcome."""

    def __init__(self, host: Host, device: str) -> None:
        super().__init__(daemon=True)
        self.host, self.device = host, device
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.runs = 0

    def run(self) -> None:
        argv = [
            "fio", "--name=a", f"--filename={self.device}", "--readonly", "--rw=randread", "--bs=8k", "--direct=1",
            "--ioengine=libaio", "--iodepth=8", "--time_based", "--runtime=5", "--output-format=json",
        ]  # fmt: skip
        while not self.stop.is_set():
            result = self.host.run(argv, check=False, timeout=120)
            self.runs += 1
            if not result.ok:
                self.failures.append(result.stderr.strip() or f"exit {result.exit_code}")
                continue
            job = json.loads(result.stdout[result.stdout.index("{") :])["jobs"][0]
            if job["error"] or not job["read"]["io_bytes"]:
                self.failures.append(f"fio error {job['error']}, {job['read']['io_bytes']} bytes read")


@pytest.mark.parametrize("kind", ["spdk", "scst", "tgt"])
def test_two_labs_on_one_storage_host_leave_each_other_alone(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], kind: str
) -> None:
    lab_a, hosts, ssh = vlab
    lab_b = team_b(kind)
    vstor = hosts["vstor"]
    prefix_b = lab_b.targets[0].name_prefix
    assert prefix_b != lab_a.target_for("nvme-tcp", "nvmet").name_prefix
    vstor.run(["sh", "-c", 'rm -f "$1" && truncate -s 64M "$1"', "sh", B_FILE])
    child: subprocess.Popen[str] | None = None
    try:
        fabric = connect_fabric(lab_a, "nvme-tcp", hosts, target="nvmet")
        try:
            before = _a_state(lab_a, vstor)
            reader = Reader(hosts["vnode1"], fabric.devices_on("vnode1")[0].path)
            reader.start()
            child = _start_b(lab_b, ssh, kind, "cycle")
            out, err = child.communicate(timeout=900)
            reader.stop.set()
            reader.join(timeout=180)
            assert child.returncode == 0 and out.split()[:2] == ["UP", "2"] and "DOWN" in out, err
            assert reader.runs >= 1 and reader.failures == []
            assert _a_state(lab_a, vstor) == before, "lab B changed lab A's nvmet objects or record"
            assert leftovers(lab_b, hosts) == []
        finally:
            fabric.teardown()
        assert leftovers(lab_a, hosts) == []

        # B killed with its fabric up: A's next run names B's record and touches nothing of B's.
        child = _start_b(lab_b, ssh, kind, "hold")
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("UP"), child.stderr.read() if child.stderr else line
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        left_b = leftovers(lab_b, hosts)
        assert left_b
        fabric = connect_fabric(lab_a, "nvme-tcp", hosts, target="nvmet")
        try:
            named = [s for s in fabric.stale_removed if "left lab" in s]
            assert named and all(f"{lab_b.name!r}" in s for s in named), fabric.stale_removed
            assert not [s for s in fabric.stale_removed if prefix_b in s and "left lab" not in s]
        finally:
            fabric.teardown()
        assert leftovers(lab_b, hosts) == left_b, "lab A's run changed lab B's leftovers"
        assert leftovers(lab_a, hosts) == []
        assert cleanup_stale(lab_b, hosts)  # B's own next start cleans what B left
        assert leftovers(lab_b, hosts) == []
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        cleanup_stale(lab_b, hosts)
        vstor.run(["rm", "-f", B_FILE], check=False)


def test_a_second_lab_that_would_drive_the_same_kind_on_the_host_is_refused_in_one_line(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    """The lock per target kind (issue 28, item 2): while lab A's nvmet fabric is up, lab B's nvmet fabric on the
    same vstor stops before its stale clean-up, with one line naming A's session; A's objects and record stay."""
    lab_a, hosts, ssh = vlab
    lab_b = team_b("nvmet")
    vstor = hosts["vstor"]
    fabric = connect_fabric(lab_a, "nvme-tcp", hosts, target="nvmet")
    try:
        before = _a_state(lab_a, vstor)
        child = _start_b(lab_b, ssh, "nvmet", "cycle")
        out, err = child.communicate(timeout=300)
        assert child.returncode != 0 and "UP" not in out
        last = err.strip().splitlines()[-1]
        assert f"vstor: nvmet on this host is driven by the session of lab {lab_a.name!r}, pid {os.getpid()}" in last
        assert _a_state(lab_a, vstor) == before, "lab B changed lab A's nvmet objects or record"
        assert leftovers(lab_b, hosts) == []
    finally:
        fabric.teardown()
    assert leftovers(lab_a, hosts) == []
    assert vstor.run(["test", "-e", "/run/fabricqa/target-nvmet.lock"], check=False).exit_code == 1, "lock kept"
