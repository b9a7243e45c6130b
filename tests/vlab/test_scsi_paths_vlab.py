"""SCST and tgt serving both storage segments (``paths: all``), for real: each initiator logs in over both portals,
multipathd makes one map of each LUN's two disks, and the connectivity suite's map check passes (multipathd
answering, each map holding one active path per portal, queueing as the lab says); the teardown leaves nothing.

On the lab the main job runs SCST and tgt on one path (CI time: labs/vlab.yaml); this is where their several
paths are proven."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from vlab_support import make_lab

from pytest_fabricqa.initiators import dm
from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.provision import connect_fabric, leftovers
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab


def _both_paths(kind: str) -> Callable[[dict[str, Any]], None]:
    """labs/vlab.yaml with its nvmet target and its ``kind`` target alone, that one on every storage port."""

    def mutate(data: dict[str, Any]) -> None:
        scsi = next(t for t in data["targets"] if t["kind"] == kind)
        scsi["paths"] = "all"
        data["targets"] = [data["targets"][0], scsi]

    return mutate


# Each kind once, each transport once (CI time: a fabric over two paths costs ~1 min here): SCST over iSER, seed
# 000's pairing, and tgt over iSCSI; their other transport logs in through the same portals code.
@pytest.mark.parametrize(("kind", "protocol"), [("scst", "iser"), ("tgt", "iscsi")])
def test_each_lun_is_one_map_of_a_disk_per_portal(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], kind: str, protocol: str
) -> None:
    _, hosts, _ = vlab
    lab = make_lab(_both_paths(kind))
    fabric = connect_fabric(lab, protocol, hosts, target=kind)
    try:
        assert fabric.export.addresses == ("10.10.10.19", "10.10.20.19")
        initiators = [hosts[n] for n in ("vnode1", "vnode2")]
        devices = {h.name: [d.path for d in fabric.devices_on(h.name)] for h in initiators}
        assert all(len(paths) == 2 for paths in devices.values()), devices
        assert all(p.startswith("/dev/mapper/") for paths in devices.values() for p in paths), devices
        assert dm.problems_everywhere(initiators, devices, 2, True) == []
        sessions = hosts["vnode1"].run(["iscsiadm", "-m", "session"]).stdout
        assert "10.10.10.19:3260" in sessions and "10.10.20.19:3260" in sessions, sessions
    finally:
        fabric.teardown()
    assert leftovers(lab, hosts) == []
