"""The SPDK target kind on the virtual lab, for real: a run SIGKILLed in the middle of provisioning cleaned by the
next run, and a subsystem and bdev made by hand in an app we attach to left untouched. (nvmf_tgt serving both
initiators over nvme-tcp and nvme-rdma is the main job's: labs/vlab.yaml's spdk target runs every connectivity,
integrity and reservation case and seed 000's two fio points.)

The lab is labs/vlab.yaml with its SPDK target alone: the nvmet target's NQNs, devices and port, nvmf_tgt started
by the plugin on one core with 512 MiB of vstor's hugepages (``core_mask: 0x1``, ``mem_size_mb: 512``; under
``--no-huge`` SPDK's RDMA transport cannot register its memory). It needs nvmf_tgt (and python3) in the guest image (issue 12, item 5); without nvmf_tgt the
module skips, saying so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vlab_support import make_lab

from pytest_fabricqa.core.undo import ProvisionError
from pytest_fabricqa.fabric.provision import cleanup_stale, connect_fabric, leftovers
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.targets import load_target
from pytest_fabricqa.targets.spdk import SpdkTarget
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab

ROOT = Path(__file__).parents[2]
RAM_NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
FOREIGN_NQN = "nqn.2014-08.org.example:foreign"
SOCK = "/var/tmp/spdk.sock"
HAND_MADE_LOG = "/var/tmp/hand-made-nvmf_tgt.log"


def spdk_lab(start: bool = True) -> LabModel:
    """labs/vlab.yaml with its SPDK target alone (the one the plugin starts, or, without ``start``, attached to an
    app already running)."""

    def only_spdk(data: dict[str, Any]) -> None:
        target = next(t for t in data["targets"] if t["kind"] == "spdk")
        if not start:
            target["spdk"] = {"start": False}
        data["targets"] = [target]
        data["protocols"] = list(target["protocols"])

    return make_lab(only_spdk)


def _driver(lab: LabModel, hosts: dict[str, Host]) -> SpdkTarget:
    target = load_target(lab, lab.targets[0], hosts)
    assert isinstance(target, SpdkTarget)
    return target


@pytest.fixture(scope="module")
def spdk_vlab(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> Iterator[tuple[dict[str, Host], dict[str, str]]]:
    """The lab's hosts, once nvmf_tgt is known to be in the image; what SPDK left is cleaned after the module."""
    _, hosts, ssh = vlab
    facts = _driver(spdk_lab(), hosts).facts()
    if facts.binary is None:
        pytest.skip("vstor has no nvmf_tgt: the virtual lab's image does not carry SPDK yet (issue 12, item 5)")
    hosts["vstor"].run(["modprobe", "-a", "virtio_blk", "ib_uverbs", "rdma_ucm"])
    yield hosts, ssh
    cleanup_stale(spdk_lab(), hosts)
    cleanup_stale(spdk_lab(start=False), hosts)


KILL_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pytest_fabricqa.lab.model import LabModel
    from pytest_fabricqa.plugin.session import make_hosts
    from pytest_fabricqa.fabric.provision import connect_fabric
    from pytest_fabricqa.targets.spdk import driver

    args = json.loads(sys.argv[1])
    lab = LabModel.model_validate(args["lab"])
    hosts = make_hosts(lab, key=args["key"], known_hosts=args["known_hosts"])
    original = driver.SpdkTarget._step_rpc

    def stall(self, rpc, method, params, fix):  # subsystems and bdevs made, before the first listener
        if method == "nvmf_subsystem_add_listener":
            print("HALF-MADE", flush=True)
            time.sleep(600)
        return original(self, rpc, method, params, fix)

    driver.SpdkTarget._step_rpc = stall
    connect_fabric(lab, args["protocol"], hosts)
    print("FINISHED", flush=True)
    """
)


def _kill_half_made(lab: LabModel, ssh: dict[str, str], protocol: str) -> None:
    args = {"lab": lab.model_dump(mode="json"), "protocol": protocol, **ssh}
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_CHILD, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    if line.strip() != "HALF-MADE":
        pytest.fail(f"child said {line!r}; stderr: {child.stderr.read() if child.stderr else ''}")


def test_a_run_killed_mid_provisioning_is_cleaned_by_the_next_run(
    spdk_vlab: tuple[dict[str, Host], dict[str, str]],
) -> None:
    hosts, ssh = spdk_vlab
    lab = spdk_lab()
    _kill_half_made(lab, ssh, "nvme-tcp")
    half_made = leftovers(lab, hosts)
    assert any("nvmf_tgt pid" in line for line in half_made), half_made  # it outlived the killed run
    assert any(f"SPDK subsystem {RAM_NQN}" in line for line in half_made), half_made

    fabric = connect_fabric(lab, "nvme-tcp", hosts)  # no manual clean-up in between
    try:
        assert any("stopped nvmf_tgt" in line for line in fabric.stale_removed), fabric.stale_removed
        assert len(fabric.devices) == 4
    finally:
        fabric.teardown()
    assert leftovers(lab, hosts) == []


# An nvmf_tgt started by hand (not by the plugin), with a bdev on the scratch disk and a subsystem listening on
# another port: someone else's app that the lab attaches to.
HAND_MADE_START = r"""
setsid "$1" -m 0x1 -r "$2" -s 512 -u "--env-context=--no-huge --legacy-mem" > "$3" 2>&1 < /dev/null &
echo $!
"""


def _hand_made_app(hosts: dict[str, Host], binary: str) -> int:
    vstor = hosts["vstor"]
    pid = int(vstor.run(["sh", "-c", HAND_MADE_START, "sh", binary, SOCK, HAND_MADE_LOG]).stdout.strip())
    rpc = _driver(spdk_lab(start=False), hosts).rpc()
    rpc.batch([("framework_wait_init", None)], wait=120, pid=pid)
    rpc.call("nvmf_create_transport", {"trtype": "TCP"})
    rpc.call("bdev_aio_create", {"name": "foreign_scratch", "filename": "/dev/vda"})
    rpc.call("nvmf_create_subsystem", {"nqn": FOREIGN_NQN, "allow_any_host": True})
    rpc.call("nvmf_subsystem_add_ns", {"nqn": FOREIGN_NQN, "namespace": {"bdev_name": "foreign_scratch"}})
    listen = {"trtype": "TCP", "adrfam": "IPv4", "traddr": "10.10.10.19", "trsvcid": "4477"}
    rpc.call("nvmf_subsystem_add_listener", {"nqn": FOREIGN_NQN, "listen_address": listen})
    return pid


def test_a_hand_made_subsystem_survives_a_kill_and_the_next_run(
    spdk_vlab: tuple[dict[str, Host], dict[str, str]],
) -> None:
    hosts, ssh = spdk_vlab
    vstor = hosts["vstor"]
    binary = _driver(spdk_lab(), hosts).facts().binary
    assert binary is not None
    pid = _hand_made_app(hosts, binary)
    try:
        lab = spdk_lab(start=False)
        target = _driver(lab, hosts)
        before = target.snapshot()
        assert set(before.subsystems) == {FOREIGN_NQN} and set(before.bdevs) == {"foreign_scratch"}

        # The plugin, told to start its own nvmf_tgt, refuses an app it did not start: one line, and it stays.
        with pytest.raises(ProvisionError) as info:
            connect_fabric(spdk_lab(), "nvme-tcp", hosts)
        assert "an SPDK app already answers on /var/tmp/spdk.sock and was not started by fabricqa" in str(info.value)
        assert "\n" not in str(info.value)

        _kill_half_made(lab, ssh, "nvme-tcp")  # attached: our subsystems and bdevs half-made in their app
        assert any(f"SPDK subsystem {RAM_NQN}" in line for line in leftovers(lab, hosts))
        fabric = connect_fabric(lab, "nvme-tcp", hosts)
        try:
            assert any(f"removed SPDK subsystem {RAM_NQN}" in line for line in fabric.stale_removed)
            assert len(fabric.devices) == 4
        finally:
            fabric.teardown()
        assert leftovers(lab, hosts) == [] and cleanup_stale(lab, hosts) == []
        after = target.snapshot()
        assert after.subsystems == before.subsystems and after.bdevs == before.bdevs
        assert vstor.run(["kill", "-0", str(pid)], check=False).ok  # their app still runs
    finally:
        vstor.run(["sh", "-c", 'kill "$1"; sleep 2; kill -9 "$1" 2>/dev/null; true', "sh", str(pid)])
