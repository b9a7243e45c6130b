"""The failover verdict sees a fault that changed nothing, and judges a long outage by the lab's choice, for real
on the virtual lab.

A target-side fault whose command the target ignored looks, from fio's log alone, like a perfect failover: no
stall, no error, I/O all along. The case counts the I/Os the path it took away completed in the fault's last
seconds (``outage.LATE_SAMPLE_S``); here the "fault" is one that does nothing, over nvme-tcp on nvmet's two paths,
and the verdict must say that the path still carried I/O. (The real faults' cases, where that path went quiet,
are the main job's.)

A lab whose hosts queue with no path left (``failover.long_outage: queue``: NVMe ``fast_io_fail_tmo`` and
``ctrl_loss_tmo`` off; dm-multipath ``no_path_retry queue``) must pass the long outage with no I/O error, the I/O
waiting out the whole outage and resuming after it -- over nvme-tcp on nvmet and iSCSI on LIO under dm-multipath,
every storage link of each initiator dropped."""

from __future__ import annotations

from typing import Any

import pytest
from vlab_support import make_lab

from pytest_fabricqa.core.cases import ANA, LONG
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.fabric.provision import connect_fabric, leftovers
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


def _short(data: dict[str, Any]) -> None:
    data["failover"]["one_path_down_s"] = 8


def test_a_fault_that_changed_nothing_fails_the_case_for_the_path_that_still_carried_io(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    _, hosts, _ = vlab
    lab = make_lab(_short)
    fabric = connect_fabric(lab, "nvme-tcp", hosts, target="nvmet")
    undo = UndoStack()
    try:
        device = ig.shared_devices(fabric.devices)[0]
        names = [n for n in lab.hosts_with("initiator") if n in device.paths]
        size = lab.failover.region_mb << 20
        bs = ig.BLOCK_SIZES[lab.failover.block_size]
        regions = {n: Region(ig.BASE_OFFSET + slot * size, size, bs) for slot, n in enumerate(names)}
        result = og.path_outage(
            lab, [hosts[n] for n in names], device.paths, regions, name_prefix=lab.target_for("nvme-tcp").name_prefix,
            subsystems=fabric.export.subsystems, family="nvme", outage=ANA, undo=undo,
            target_fault=lambda address: NothingChanged(hosts["vstor"]),
        )  # fmt: skip
    finally:
        failed = undo.unwind()
        fabric.teardown()
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
        device = ig.shared_devices(fabric.devices)[0]
        names = [n for n in lab.hosts_with("initiator") if n in device.paths]
        size = lab.failover.region_mb << 20
        bs = ig.BLOCK_SIZES[lab.failover.block_size]
        regions = {n: Region(ig.BASE_OFFSET + slot * size, size, bs) for slot, n in enumerate(names)}
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
