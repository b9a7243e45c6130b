"""Native NVMe multipath's I/O policy set by the lab, for real: nvmet serving both storage segments, the lab's
``nvme.connect.iopolicy: round-robin`` is written to the fabric's subsystem on both initiators; reads then
complete on both paths of the namespace, where with the kernel's default (numa, written back by hand) they
complete on one. The subsystem goes with the teardown."""

from __future__ import annotations

import pytest
from vlab_support import reads_per_path

from pytest_fabricqa.core.undo import ProvisionError
from pytest_fabricqa.fabric.provision import connect_fabric, leftovers
from pytest_fabricqa.initiators import nvme
from pytest_fabricqa.initiators.paths import read_everywhere
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab


def with_iopolicy(lab: LabModel, policy: str) -> LabModel:
    nvmet = lab.targets[0]
    assert nvmet.kind == "nvmet" and nvmet.nvme is not None and nvmet.paths == "all"
    connect = nvmet.nvme.connect.model_copy(update={"iopolicy": policy})
    target = nvmet.model_copy(update={"nvme": nvmet.nvme.model_copy(update={"connect": connect})})
    return lab.model_copy(update={"targets": (target, *lab.targets[1:])})


def test_round_robin_set_by_the_lab_sends_reads_down_both_paths(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    lab, hosts, _ = vlab
    fabric = connect_fabric(with_iopolicy(lab, "round-robin"), "nvme-tcp", hosts, target="nvmet")
    initiators = [hosts[n] for n in ("vnode1", "vnode2")]
    nqn = "nqn.2026-11.io.fabricqa:vlab-ram0"
    try:
        found, problems = read_everywhere(initiators, fabric.export.subsystems)
        assert problems == []
        for host in initiators:
            policies = {s.nqn: s.values.get("iopolicy") for s in found[host.name].subsystems}
            assert policies == dict.fromkeys(fabric.export.subsystems, "round-robin"), host.name
        node = hosts["vnode1"]
        device = next(d.path for d in fabric.devices_on("vnode1") if d.subsystem == nqn)
        spread = reads_per_path(node, device)
        assert len(spread) == 2 and min(spread.values()) >= 300, spread  # ~500 each of 1,000
        nvme.set_iopolicy(node, nqn, "numa")  # the kernel's default: the nearest path takes it all
        spread = reads_per_path(node, device)
        assert sorted(spread.values())[0] <= 10 and sorted(spread.values())[1] >= 990, spread
    finally:
        fabric.teardown()
    assert leftovers(lab, hosts) == []
    left = hosts["vnode1"].run(["sh", "-c", f"grep -l {nqn} /sys/class/nvme-subsystem/*/subsysnqn"], check=False)
    assert left.stdout.strip() == ""


def test_a_policy_this_kernel_does_not_have_stops_the_connect_in_one_line_and_leaves_nothing(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    """queue-depth came with Linux 6.11; the guests' 6.1 refuses the write, and the connect says so."""
    lab, hosts, _ = vlab
    with pytest.raises(ProvisionError) as raised:
        connect_fabric(with_iopolicy(lab, "queue-depth"), "nvme-tcp", hosts, target="nvmet")
    assert "iopolicy queue-depth could not be set on nqn.2026-11.io.fabricqa:vlab-" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert leftovers(lab, hosts) == []
