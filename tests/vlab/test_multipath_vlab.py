"""dm-multipath on the virtual lab, for real: the connectivity suite's map check (multipathd answering, each map
holding one active path per portal, queueing as the lab says) passes on LIO's two portals and fails, naming the
host and the map, when multipathd is stopped and a path is failed in its map. Both are put back before the test
ends (multipathd started again reinstates the path)."""

from __future__ import annotations

from typing import Any

import pytest
from vlab_support import make_lab

from pytest_fabricqa.core.undo import ProvisionError
from pytest_fabricqa.fabric.provision import connect_fabric, leftovers
from pytest_fabricqa.initiators import connect, dm
from pytest_fabricqa.initiators.dm import DM_CONF_MARK
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab


def test_the_map_check_fails_without_multipathd_and_with_a_failed_path(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    lab, hosts, _ = vlab
    fabric = connect_fabric(lab, "iscsi", hosts, target="lio")
    node = hosts["vnode1"]
    try:
        initiators = [hosts[n] for n in ("vnode1", "vnode2")]
        devices = {h.name: [d.path for d in fabric.devices_on(h.name)] for h in initiators}
        assert all(p.startswith("/dev/mapper/") for paths in devices.values() for p in paths)
        assert dm.problems_everywhere(initiators, devices, 2, True) == []

        name = devices["vnode1"][0].rsplit("/", 1)[-1]
        _, maps = dm.read_maps(node, [name])
        disk = maps[name].paths[0]
        node.run(["multipathd", "shutdown"])  # first: its path checker would reinstate the healthy path at once
        node.run(["dmsetup", "message", name, "0", f"fail_path {disk}"])
        problems = dm.problems_everywhere([node], {"vnode1": [devices["vnode1"][0]]}, 2, True)
        # multipathd's shutdown also drops the map's queueing (multipath's queue_without_daemon is "no"): the map
        # now fails I/O with no path left, which the lab does not expect either.
        assert problems == [
            "vnode1: multipathd does not answer (multipathd show daemon): no path comes back by itself",
            f"vnode1: the multipath map {name} holds 2 path(s), 1 active; the target serves 2",
            f"vnode1: the multipath map {name} fails I/O with no path left, expected it to queue "
            "(multipath.dm.queue_if_no_path; multipath.conf's no_path_retry)",
        ]
    finally:
        node.run(["sh", "-c", "multipathd show daemon >/dev/null 2>&1 || multipathd"], check=False)
        node.run(["sh", "-c", "sleep 3; multipathd show daemon"], check=False)
        fabric.teardown()


def test_a_lun_that_no_map_holds_stops_the_connect_in_one_line_and_leaves_nothing(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """multipathd stopped on vnode1: its two disks of each LUN get no map, the connect says so and undoes it all."""
    lab, hosts, _ = vlab
    node = hosts["vnode1"]
    monkeypatch.setattr(connect, "DEVICE_TIMEOUT_S", 10.0)
    node.run(["multipathd", "shutdown"])
    try:
        with pytest.raises(ProvisionError) as raised:
            connect_fabric(lab, "iscsi", hosts, target="lio")
        assert "vnode1: LUN 0 of iqn.2026-11.io.fabricqa:vstor shows as 2 disks (" in str(raised.value)
        assert "no multipath map holds them" in str(raised.value)
        assert leftovers(lab, hosts) == []
    finally:
        node.run(["sh", "-c", "multipathd show daemon >/dev/null 2>&1 || multipathd; sleep 3"], check=False)
    assert node.run(["multipathd", "show", "daemon"], check=False).ok


def test_the_labs_dm_conf_is_what_the_maps_are_made_with_and_goes_with_the_fabric(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    """``multipath.dm_conf: {overrides: {no_path_retry: fail}}``: the maps of the LUNs fail I/O with no path left
    instead of queueing as the guests' own configuration has them (no_path_retry 3); the file and that setting are
    gone after the teardown."""
    _, hosts, _ = vlab

    def failing(data: dict[str, Any]) -> None:
        data["multipath"]["dm_conf"] = {"overrides": {"no_path_retry": "fail"}}

    lab = make_lab(failing)
    fabric = connect_fabric(lab, "iscsi", hosts, target="lio")
    initiators = [hosts[n] for n in ("vnode1", "vnode2")]
    try:
        devices = {h.name: [d.path for d in fabric.devices_on(h.name)] for h in initiators}
        assert dm.problems_everywhere(initiators, devices, 2, False) == []  # no queue_if_no_path on any map
        for host in initiators:
            assert dm.has_conf(host, lab.target_for("iscsi").name_prefix, DM_CONF_MARK)
    finally:
        fabric.teardown()
    assert leftovers(lab, hosts) == []
    assert not [h.name for h in initiators if dm.has_conf(h, lab.target_for("iscsi").name_prefix, DM_CONF_MARK)]
