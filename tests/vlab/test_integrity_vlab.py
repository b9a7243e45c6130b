"""Reservations on the virtual lab, for real: the 6.1 kernel's nvmet really has no reservations (the capability
fact the integrity suite skips on is true). Fencing itself (SCSI-3 PR on LIO, SCST and tgt over iSCSI and iSER,
NVMe reservations on SPDK), the verify catching bytes changed on vstor's RAM disk, and data surviving a reconnect
are the main job's integrity cases (suites/test_integrity.py) on every (protocol, target) of labs/vlab.yaml; the
real sg_persist output in tests/data/reservations was recorded on this lab's LIO.

The real nvme-cli output is kept under ``<state>/recorded-reservations/`` for tests/data/reservations.

A lost write, for real (issue 30): vnode1 writes a region, vnode2 writes it again, and one block of vnode1's write
is put back on vstor's RAM disk behind the target -- what a target that acknowledged vnode2's write and lost it
would return. vnode1's read-back must name that block as vnode1's earlier write, not vnode2's, over nvme-tcp on
nvmet and over iSCSI on LIO, where it comes back torn (fio's crc32c passed such a block).
"""

from __future__ import annotations

import base64
import json

import pytest
from vlab_support import STATE

from pytest_fabricqa.fabric.provision import connect_fabric
from pytest_fabricqa.fio.verify import read_blocks
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.integrity.reservations import unsupported
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab
RECORDED = STATE / "recorded-reservations"


def test_the_6_1_nvmet_has_no_reservations_as_the_capability_fact_says(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    lab, hosts, _ = vlab
    assert unsupported("nvmet") is not None
    fabric = connect_fabric(lab, "nvme-tcp", hosts)
    try:
        device = ig.shared_devices(fabric.devices)[0]
        host = hosts["vnode1"]
        result = host.run(
            ["nvme", "resv-report", device.paths["vnode1"], f"--namespace-id={device.address}", "--eds",
             "--output-format=json"],
            check=False,
        )  # fmt: skip
        RECORDED.mkdir(parents=True, exist_ok=True)
        (RECORDED / "nvme-resv-report-nvmet-6.1.txt").write_text(
            f"exit {result.exit_code}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
        )
        oncs = host.run(["nvme", "id-ctrl", device.paths["vnode1"], "--output-format=json"]).stdout
        assert not json.loads(oncs)["oncs"] & (1 << 5), "nvmet reports reservations in ONCS: the fact is stale"
        assert not result.ok, result.stdout
    finally:
        fabric.teardown()


# Over iSCSI on LIO the block put back came back half old, half new (a 4 KiB page of the newer write survived
# somewhere the put-back did not reach): a torn block, named with the earlier write it partly holds. On nvmet the whole block is the earlier write.
@pytest.mark.parametrize(("protocol", "target"), [("nvme-tcp", "nvmet"), ("iscsi", "lio")])
def test_a_block_of_an_earlier_write_put_back_behind_the_target_is_named_a_lost_write(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], protocol: str, target: str
) -> None:
    lab, hosts, _ = vlab
    model = lab.target_for(protocol, target)
    fabric = connect_fabric(lab, protocol, hosts, target=target)
    try:
        device = ig.shared_devices(fabric.devices)[0]
        backing = model.devices[device.backing].path
        one, two, vstor = hosts["vnode1"], hosts["vnode2"], hosts["vstor"]
        written = ig.region(0, 8192, 1 << 20)
        byte = written.offset + 3 * written.bs
        outcome = ig.Outcome()
        ig._write(outcome, one, device, [written])
        earlier = read_blocks(vstor, backing, [byte], written.bs)[0]
        ig._write(outcome, two, device, [written])
        assert outcome.problems == []
        put = 'base64 -d | dd of="$1" bs=8192 seek="$2" count=1 oflag=direct conv=notrunc status=none && sync'
        vstor.run(["sh", "-c", put, "sh", backing, str(byte // written.bs)], stdin=base64.b64encode(earlier).decode())
        for host in (one, vstor):
            host.run(["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"])
        ig._verify_on(outcome, [one], device, [written])
    finally:
        fabric.teardown()
    (problem,) = outcome.problems
    first, last = sorted(outcome.generations.written)
    assert problem.startswith(f"vnode1: {device.paths['vnode1']} byte offset {byte} (8192-byte block): pattern: ")
    held = f"it holds vnode1's write 1 of the region at {written.offset} (generation 0x{first:08x})"
    wanted = f"the later vnode2's write 2 of the region at {written.offset} (generation 0x{last:08x})"
    assert held in problem and wanted in problem, problem
    assert "a lost write or a stale read" in problem, problem
