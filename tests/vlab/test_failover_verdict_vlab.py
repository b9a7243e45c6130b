"""The failover verdict sees a fault that changed nothing, for real on the virtual lab.

A target-side fault whose command the target ignored looks, from fio's log alone, like a perfect failover: no
stall, no error, I/O all along. The case counts the I/Os the path it took away completed in the fault's last
seconds (``outage.LATE_SAMPLE_S``); here the "fault" is one that does nothing, over nvme-tcp on nvmet's two paths,
and the verdict must say that the path still carried I/O. (The real faults' cases, where that path went quiet,
are the main job's.)"""

from __future__ import annotations

from typing import Any

import pytest
from vlab_support import make_lab

from pytest_fabricqa.core.cases import ANA
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.fabric.provision import connect_fabric, leftovers
from pytest_fabricqa.failover import outage as og
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.fio.verify import Region
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.lab.thresholds import Thresholds
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
