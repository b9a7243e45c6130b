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

from pytest_fabricqa.fabric.provision import connect_fabric, leftovers
from pytest_fabricqa.initiators import dm
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab

# $1: a map, $2: seconds. Opens the map for that long in the background; returns once device-mapper counts the
# opener (exit 1 if it never does).
HOLD_OPEN = r"""
sleep "$2" < /dev/mapper/"$1" > /dev/null 2>&1 &
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  [ "$(dmsetup info -c --noheadings -o open "$1")" -ge 1 ] 2>/dev/null && exit 0
  sleep 0.1
done
exit 1
"""


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
        # A map still open for a moment when its initiator lets go (udev's probe after a write, in CI): the
        # flush waits it out instead of failing "map in use" and leaving the fabric half gone.
        name = devices["vnode1"][0].removeprefix("/dev/mapper/")
        hosts["vnode1"].run(["sh", "-c", HOLD_OPEN, "sh", name, "3"])
        fabric.disconnect_initiators(["vnode1"])
        assert fabric.connected and fabric.devices_on("vnode1") == []
        assert not hosts["vnode1"].run(["dmsetup", "info", name], check=False).ok
    finally:
        fabric.teardown()
    assert leftovers(lab, hosts) == []
