"""The failover verdict sees a fault that changed nothing, and judges a long outage by the lab's choice, for real
on the virtual lab.

A target-side fault whose command the target ignored looks, from fio's log alone, like a perfect failover: no
stall, no error, I/O all along. The case counts the I/Os the path it took away completed in the fault's last
seconds (``outage.LATE_SAMPLE_S``); here the "fault" is one that does nothing, over nvme-tcp on nvmet's two paths,
and the verdict must say that the path still carried I/O; the same for an ALUA change that changed nothing over
iSCSI on LIO, whose path counts are a SCSI disk's commands done without error. (The real faults' cases, where that
path went quiet, are the main job's.)

A surviving path slower than the one lost shows only when the fault's I/O is not rate-capped
(``failover.rate_iops: null``): nvme-tcp on nvmet with each initiator's idle path delayed, its busy path taken away;
uncapped, throughput gets back to 90% of the pre-fault rate only once the fault is undone, while capped at 50 IOPS
the slow path still carries the cap and recovers while the fault holds.

A lab whose hosts queue with no path left (``failover.long_outage: queue``: NVMe ``fast_io_fail_tmo`` and
``ctrl_loss_tmo`` off; dm-multipath ``no_path_retry queue``) must pass the long outage with no I/O error, the I/O
waiting out the whole outage and resuming after it -- over nvme-tcp on nvmet and iSCSI on LIO under dm-multipath,
every storage link of each initiator dropped."""

from __future__ import annotations

from typing import Any

import pytest
from vlab_support import make_lab

from pytest_fabricqa.core.cases import ALUA, ANA, LONG, ONE_PATH, PORT
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.fabric.provision import Fabric, connect_fabric, leftovers
from pytest_fabricqa.failover import outage as og
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.fio.verify import Region
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.lab.thresholds import Thresholds, thresholds_for
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab


class NothingChanged:
    """A fault on ``host`` that breaks nothing: its inject and restore only read the host's clock."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.name = f"{host.name} nothing changed"
        self.key = "nothing"

    def arm(self, undo: UndoStack) -> None:
        pass

    def fire(self) -> float:
        return float(self.host.run(["sh", "-c", faults.CLOCK]).stdout.split()[-1])

    def inject(self, undo: UndoStack) -> float:
        return self.fire()

    def restore(self) -> float:
        return self.fire()


def _regions(lab: LabModel, fabric: Fabric) -> tuple[ig.SharedDevice, list[str], dict[str, Region]]:
    """The fabric's first device every initiator shares, its initiators, and a region of it for each (as the
    failover suite lays them out)."""
    device = ig.shared_devices(fabric.devices)[0]
    names = [n for n in lab.hosts_with("initiator") if n in device.paths]
    size = lab.failover.region_mb << 20
    bs = ig.BLOCK_SIZES[lab.failover.block_size]
    return device, names, {n: Region(ig.BASE_OFFSET + slot * size, size, bs) for slot, n in enumerate(names)}


def _target_side_outage(
    lab: LabModel, hosts: dict[str, Host], protocol: str, target: str, outage: str, fault: Any
) -> tuple[og.OutageResult, list[str], list[str]]:
    """``outage`` made by ``fault(address)`` under verified I/O on ``protocol``'s fabric of ``target``, everything
    undone and torn down after: (the result, the initiators, what the unwind could not undo)."""
    fabric = connect_fabric(lab, protocol, hosts, target=target)
    undo = UndoStack()
    try:
        device, names, regions = _regions(lab, fabric)
        result = og.path_outage(
            lab, [hosts[n] for n in names], device.paths, regions,
            name_prefix=lab.target_for(protocol, target).name_prefix, subsystems=fabric.export.subsystems,
            family="nvme" if protocol.startswith("nvme") else "scsi", outage=outage, undo=undo, target_fault=fault,
        )  # fmt: skip
    finally:
        failed = undo.unwind()
        fabric.teardown()
    return result, names, failed


def _short(data: dict[str, Any]) -> None:
    data["failover"]["one_path_down_s"] = 8


@pytest.mark.parametrize(("protocol", "target", "outage"), [("nvme-tcp", "nvmet", ANA), ("iscsi", "lio", ALUA)])
def test_a_fault_that_changed_nothing_fails_the_case_for_the_path_that_still_carried_io(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], protocol: str, target: str, outage: str
) -> None:
    _, hosts, _ = vlab
    lab = make_lab(_short)
    result, names, failed = _target_side_outage(
        lab, hosts, protocol, target, outage, lambda address: NothingChanged(hosts["vstor"])
    )
    assert failed == []
    first = names[0]  # the fault's address is the path carrying this host's I/O
    assert result.late_ios[first], result.late_ios
    problems = og.outage_problems(result, Thresholds(), names)
    said = f"the path to {result.faulted[first]} still completed {result.late_ios[first]} I/Os"
    assert any(p.startswith(f"{first}, fault vstor nothing changed") and said in p for p in problems), problems
    assert leftovers(lab, hosts) == []


def _queue(data: dict[str, Any]) -> None:
    data["failover"]["long_outage"] = "queue"
    # Longer than each family's path timeout: NVMe's 5 s I/O timeout; iSCSI's nop-out (5 + 5 s) and recovery_tmo
    # (5 s), after which dm-multipath holds the I/O.
    data["failover"]["long_down_s"] = 24
    data["failover"]["nvme"] = {"io_timeout_s": 5, "fast_io_fail_tmo_s": -1, "reconnect_delay_s": 1,
                                "ctrl_loss_tmo_s": -1}  # fmt: skip
    data.setdefault("multipath", {})["dm_conf"] = {"overrides": {"no_path_retry": "queue"}}


@pytest.mark.parametrize(("protocol", "target", "family"), [("nvme-tcp", "nvmet", "nvme"), ("iscsi", "lio", "scsi")])
def test_a_long_outage_on_hosts_that_queue_waits_resumes_and_verifies(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], protocol: str, target: str, family: str
) -> None:
    _, hosts, _ = vlab
    lab = make_lab(_queue)
    fabric = connect_fabric(lab, protocol, hosts, target=target)
    undo = UndoStack()
    try:
        device, names, regions = _regions(lab, fabric)
        chosen = [hosts[n] for n in names]
        try:
            result = og.path_outage(
                lab, chosen, device.paths, regions, name_prefix=lab.target_for(protocol, target).name_prefix,
                subsystems=fabric.export.subsystems, family=family, outage=LONG, undo=undo,
            )  # fmt: skip
        finally:
            failed = undo.unwind()
        limits = thresholds_for(lab.thresholds_table(), protocol, LONG)  # the lab's own, as the suite's case
        problems = og.outage_problems(result, limits, names)
        problems += og.verified_after(chosen, device.paths, regions)
    finally:
        fabric.teardown()
    assert failed == []
    assert result.queued and problems == [], problems
    for name in names:
        figures = result.figures[name]
        assert figures.io_errors == 0 and figures.first_io_s is not None
        # The I/O waited out the outage: it stopped for most of it (a fault that took nothing away would not).
        assert figures.stall_s >= og.TAKEN_SHARE * result.down_s, (name, figures.stall_s, result.down_s)
        if family == "nvme":
            assert {e["fast_io_fail_tmo"] for e in result.in_force[name].values()} == {"off"}
    assert leftovers(lab, hosts) == []


class RestoredLate:
    """A target-side fault whose restore in the case does nothing: the path stays away until the test's own unwind
    puts it back, as a target whose port never came back would. ``fault`` is the real one (recorded, undone by the
    undo stack it is armed with)."""

    def __init__(self, fault: faults.FaultInjector, clock: Host) -> None:
        self.fault, self.clock = fault, clock
        self.host, self.name, self.key = fault.host, fault.name, fault.key

    def arm(self, undo: UndoStack) -> None:
        self.fault.arm(undo)

    def fire(self) -> float:
        return self.fault.fire()

    def inject(self, undo: UndoStack) -> float:
        self.arm(undo)
        return self.fire()

    def restore(self) -> float:
        return float(self.clock.run(["sh", "-c", faults.CLOCK]).stdout.split()[-1])


def _quick_failback(data: dict[str, Any]) -> None:
    data["failover"]["one_path_down_s"] = 8
    data["failover"]["failback_wait_s"] = 6


def test_a_path_that_never_carries_io_again_after_the_fault_fails_the_case_as_no_failback(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    """iSCSI on LIO under dm-multipath spreads each host's I/O over both paths, so once a fault is undone the path
    it took must carry I/O again within ``failover.failback_wait_s``. Here the target's port stays away after the
    case's restore (the real restore comes with the test's unwind): the verdict must say "no failback" for each host
    whose I/O that path shared."""
    _, hosts, _ = vlab
    lab = make_lab(_quick_failback)
    result, names, failed = _target_side_outage(
        lab, hosts, "iscsi", "lio", PORT,
        lambda address: RestoredLate(faults.target_port_down(lab, hosts, "lio", "iscsi", address=address), hosts["vstor"]),
    )  # fmt: skip
    assert failed == []
    problems = og.outage_problems(result, thresholds_for(lab.thresholds_table(), "iscsi", PORT), names)
    missing = [p for p in problems if p.endswith(": no failback")]
    shared = [n for n in names if result.shared_before.get(n)]
    assert shared, result.shared_before  # round-robin over both paths: the premise of the check
    seen = {n: (f.first_io_s, f.failback) for n, f in result.figures.items()}  # what each host's watch said
    assert sorted(p.split(",")[0] for p in missing) == sorted(shared), (problems, seen, result.samples)
    assert all("carried none within 6 s of the fault being undone" in p for p in missing), missing
    assert leftovers(lab, hosts) == []


SLOWED_BY_MS = 40
"""The delay every frame an initiator sends on its idle storage link gets (tc netem) in the degraded-path test: at
fio's queue depth of 4, at most 100 I/Os a second over it."""

# A read of $1 for 5 s in the background, so the path carrying I/O can be told (numa keeps every I/O on one path).
READ_A_WHILE = 'setsid timeout 5 dd if="$1" of=/dev/null bs=4096 iflag=direct </dev/null >/dev/null 2>&1 &'


def _unslow(host: Host, interface: str) -> None:
    host.run(["sh", "-c", f"tc qdisc del dev {interface} root 2>/dev/null || true"])


@pytest.mark.parametrize("rate_iops", [None, 50])
def test_a_slower_surviving_path_shows_in_the_recovery_only_when_the_fault_io_is_not_capped(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], rate_iops: int | None
) -> None:
    """nvme-tcp on nvmet's two paths, native multipath's numa policy keeping each initiator's I/O on one of them:
    the other, idle link sends every frame :data:`SLOWED_BY_MS` ms late, and the one-path outage takes the busy one
    away. The I/O moves to the slow path. Uncapped (``failover.rate_iops: null``), throughput gets back to 90% of the
    pre-fault rate only once the fault is undone (or never), so a recovery limit shorter than the fault fails the
    case. Capped at 50 IOPS, the slow path still carries the cap and recovers while the fault holds: a lab that wants
    a degraded surviving path seen runs uncapped."""
    _, hosts, _ = vlab

    def settings(data: dict[str, Any]) -> None:
        data["failover"]["rate_iops"] = rate_iops
        data["failover"]["one_path_down_s"] = 14  # NVMe moves the I/O after its 5 s I/O timeout
        # Uncapped fio keeps the guests busy and the drop command slow: the stall began 3.2 s after the fault's
        # start was read (2026-12-07), past the default 3 s reach, and was taken for another gap.
        data["failover"]["fault_reach_s"] = 8

    lab = make_lab(settings)
    fabric = connect_fabric(lab, "nvme-tcp", hosts, target="nvmet")
    undo = UndoStack()
    slowed: dict[str, str] = {}
    try:
        device, names, regions = _regions(lab, fabric)
        chosen = [hosts[n] for n in names]
        for host in chosen:
            host.run(["sh", "-c", READ_A_WHILE, "sh", device.paths[host.name]])
            busy, _ = og.active_port(lab, host, device.paths[host.name])
            idle = next(p.interface for p in lab.hosts[host.name].storage if p.interface != busy)
            undo.push(f"{host.name}: {idle} no longer delayed", lambda h=host, i=idle: _unslow(h, i))
            host.run(["tc", "qdisc", "add", "dev", idle, "root", "netem", "delay", f"{SLOWED_BY_MS}ms"])
            slowed[host.name] = idle
        result = og.path_outage(
            lab, chosen, device.paths, regions, name_prefix=lab.target_for("nvme-tcp", "nvmet").name_prefix,
            subsystems=fabric.export.subsystems, family="nvme", outage=ONE_PATH, undo=undo,
        )  # fmt: skip
    finally:
        failed = undo.unwind()
        fabric.teardown()
    assert failed == []
    assert len(slowed) == len(names) >= 2
    seen = {n: (f.pre_fault_iops, f.first_io_s, f.recovery_s, f.io_errors) for n, f in result.figures.items()}
    for name in names:
        figures = result.figures[name]
        assert figures.io_errors == 0 and figures.first_io_s is not None, (seen, slowed, result.faulted)
        # Uncapped: back to 90% only once the fault was undone and the fast path carried the I/O again, or never.
        # Capped: on the slow path, while the fault held (``down_s``: from the break to the restore's start; the
        # fault's end is read after the restore's command, which takes a second or more here).
        during = figures.recovery_s is not None and figures.recovery_s < result.down_s
        assert during is (rate_iops is not None), (name, result.down_s, seen, slowed, result.faulted)
    problems = og.outage_problems(result, Thresholds(max_recovery_s=12), names)
    late = [p for p in problems if "90%" in p]
    assert sorted(p.split(",")[0] for p in late) == (sorted(names) if rate_iops is None else []), (problems, seen)
    assert leftovers(lab, hosts) == []
