"""A run killed while it holds a reservation, on the virtual lab's real targets (issue 30, item 6), once per protocol
family: SCSI-3 PR on LIO over iSCSI (mpathpersist on the dm-multipath map) and NVMe reservations on SPDK over
NVMe/TCP.

A child run connects the fabric, registers vnode1's key (recorded on vnode1 first, as the integrity suite's fencing
does) and takes Write Exclusive, then is SIGKILLed. A person registers a key of their own (0x111) by hand on vnode2.
The write guard refuses the device, naming the killed run's key; the leftovers gate names our record; the next
start's sweep (the first thing ``connect_fabric``'s clean-up does,
before the target is cleaned and made again) unregisters our key through vnode1, so the reservation goes with it,
and leaves 0x111 registered; the next run then connects and tears down green, and nothing is left.

On these targets the next run's clean-up also makes the LUN or namespace again, which drops every registration
with it; on an external array nothing does, which is why the sweep is what is checked here, as the start runs it.
The real nvme-cli output read from SPDK is kept under ``<state>/recorded-reservations/`` for tests/data.
"""

from __future__ import annotations

import textwrap

import pytest
from vlab_support import STATE, killed_once_down

from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.fabric.provision import connect_fabric, leftovers
from pytest_fabricqa.faults import registrations
from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.initiators.reservations import driver_for
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.safety.guard import DeviceReserved, WriteGuard
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab
FOREIGN = 0x111
RECORDED = STATE / "recorded-reservations"

# Connects the fabric, records and registers vnode1's key, takes Write Exclusive (registrants only on a map), says
# DOWN with the device and the key, and waits to be killed.
HOLDING_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pytest_fabricqa.core.protocols import protocol as protocol_spec
    from pytest_fabricqa.fabric.provision import connect_fabric
    from pytest_fabricqa.faults.registrations import KeyLedger
    from pytest_fabricqa.initiators.reservations import driver_for, reservation_key, run_token
    from pytest_fabricqa.integrity import checks as ig
    from pytest_fabricqa.lab.model import LabModel
    from pytest_fabricqa.plugin.session import make_hosts

    args = json.loads(sys.argv[1])
    lab = LabModel.model_validate(args["lab"])
    hosts = make_hosts(lab, key=args["key"], known_hosts=args["known_hosts"])
    protocol, kind = args["protocol"], args["kind"]
    fabric = connect_fabric(lab, protocol, hosts, target=kind)
    device = ig.shared_devices(fabric.devices)[0]
    family = protocol_spec(protocol).family
    driver = driver_for(family, device.address)
    target = lab.target_for(protocol, kind)
    ledger = KeyLedger(lab.name, target.name_prefix, target.name, family, device.address)
    host, path = hosts["vnode1"], device.paths["vnode1"]
    key = reservation_key(0, run_token())
    driver.forget_stale_prkey(host, path)  # as the fencing case does: multipathd may hold an earlier run's key
    ledger.add(host, path, key)
    driver.register(host, path, key)
    driver.reserve(host, path, key, driver.fencing_type(path)[0])
    print("DOWN", path, device.paths["vnode2"], hex(key), device.address, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize(("protocol", "kind"), [("iscsi", "lio"), ("nvme-tcp", "spdk")])
def test_a_run_killed_holding_a_reservation_is_swept_at_the_next_start_and_a_foreign_key_stays(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], protocol: str, kind: str
) -> None:
    lab, hosts, ssh = vlab
    vnode2 = hosts["vnode2"]
    path1, path2, said_key, nsid = killed_once_down(HOLDING_CHILD, lab, ssh, protocol=protocol, kind=kind)
    ours = int(said_key, 16)
    driver = driver_for(protocol_spec(protocol).family, int(nsid))
    try:
        held = driver.report(vnode2, path2)
        assert held.holder == ours and ours in held.keys, held.describe()  # the killed run's hold, still there
        driver.forget_stale_prkey(vnode2, path2)
        driver.register(vnode2, path2, FOREIGN)  # a person's own registration
        if kind == "spdk":
            RECORDED.mkdir(parents=True, exist_ok=True)
            report = vnode2.run(
                ["nvme", "resv-report", path2, f"--namespace-id={nsid}", "--eds", "--output-format=json"]
            )
            (RECORDED / "nvme-resv-report-eds-spdk-23.01-held.json").write_text(report.stdout)
        # The write guard refuses the device while the killed run's reservation holds, naming its key as ours.
        seen = FabricDevice("vnode2", path2, "ram0", "held", int(nsid), 1 << 20, 512, True, False)
        with pytest.raises(
            DeviceReserved, match=rf"holder {ours:#x} .*a key of a run of this plugin's that was killed"
        ):
            WriteGuard(lab, hosts).before_writes(protocol, [seen], target=kind)
        left = [line for line in leftovers(lab, hosts) if "reservation key" in line]
        assert len(left) == 1 and left[0].startswith(f"vnode1: reservation key {ours:#x} on {path1} by lab "), left

        swept = registrations.sweep_stale(lab, hosts, target_host="vstor")  # what the next start does first
        assert swept == [line for line in swept if line.startswith(f"vnode1: unregistered reservation key {ours:#x}")]
        assert len(swept) == 1, swept
        after = driver.report(vnode2, path2)
        assert after.keys == (FOREIGN,) and after.holder is None, after.describe()  # ours gone, the reservation too
        if kind == "spdk":
            report = vnode2.run(
                ["nvme", "resv-report", path2, f"--namespace-id={nsid}", "--eds", "--output-format=json"]
            )
            (RECORDED / "nvme-resv-report-eds-spdk-23.01-foreign.json").write_text(report.stdout)
        assert registrations.leftover_keys(lab, hosts) == []
    finally:  # the person's key, taken away by the person
        if FOREIGN in driver.report(vnode2, path2).keys:
            driver.unregister(vnode2, path2, FOREIGN)

    fabric = connect_fabric(lab, protocol, hosts, target=kind)  # the next run: green
    try:
        assert len(ig.shared_devices(fabric.devices)) >= 1
    finally:
        fabric.teardown()
    assert leftovers(lab, hosts) == []
