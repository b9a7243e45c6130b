"""SPDK's ANA, for real: nvmf_tgt serving both storage segments (``paths: all``) reports ANA, and the fault that
makes the listener carrying an initiator's reads inaccessible (``faults.ana_change`` on an SPDK target) moves
those reads to the other path with nothing disconnected; its restore makes the listener optimized again. And its
port taken down (``faults.target_port_down``) leaves none of the app's subsystems listening there.

On the lab the main job runs SPDK on one path (CI time: labs/vlab.yaml); this is where its ANA is proven."""

from __future__ import annotations

import time
from typing import Any

import pytest
from vlab_support import make_lab, paths_of, reads_per_path

from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.fabric.provision import connect_fabric, leftovers
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab
NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"


def _spdk_on_both_paths(data: dict[str, Any]) -> None:
    spdk = next(t for t in data["targets"] if t["kind"] == "spdk")
    spdk["paths"] = "all"
    data["targets"] = [spdk]
    data["protocols"] = spdk["protocols"]


def _wait_for_state(host: Host, device: str, traddr: str, state: str, timeout_s: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        paths = paths_of(host, device)
        if any(a == traddr and s == state for s, a, _ in paths.values()) or time.monotonic() > deadline:
            return paths
        time.sleep(0.5)


def test_an_inaccessible_listener_moves_the_reads_to_the_other_path_and_comes_back(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    _, hosts, _ = vlab
    lab = make_lab(_spdk_on_both_paths)
    fabric = connect_fabric(lab, "nvme-tcp", hosts, target="spdk")
    node = hosts["vnode1"]
    undo = UndoStack()
    try:
        device = next(d.path for d in fabric.devices_on("vnode1") if d.subsystem == NQN)
        paths = paths_of(node, device)
        assert sorted(a for _, a, _ in paths.values()) == ["10.10.10.19", "10.10.20.19"], paths
        assert {s for s, _, _ in paths.values()} == {"optimized"}, paths  # ANA reported, both optimized
        carrying = max(reads_per_path(node, device).items(), key=lambda kv: kv[1])[0]
        traddr = paths[carrying][1]

        fault = faults.ana_change(lab, hosts, "spdk", "nvme-tcp", address=traddr)
        fault.inject(undo)
        paths = _wait_for_state(node, device, traddr, "inaccessible")
        assert paths[carrying][0] == "inaccessible", paths
        moved = reads_per_path(node, device)
        assert moved[carrying] <= 10 and sum(moved.values()) >= 990, moved  # the other path took them
        fault.restore()
        paths = _wait_for_state(node, device, traddr, "optimized")
        assert {s for s, _, _ in paths.values()} == {"optimized"}, paths
    finally:
        undo.unwind()
        fabric.teardown()
    assert leftovers(lab, hosts) == []


def _listeners(fault: Any) -> dict[str, set[str]]:
    """Each of the app's subsystems (discovery left out) -> the addresses it listens on."""
    return {
        s["nqn"]: {a["traddr"] for a in s.get("listen_addresses", [])}
        for s in fault.rpc.call("nvmf_get_subsystems")
        if "discovery" not in s["nqn"]
    }


def test_a_port_taken_down_leaves_no_subsystem_listening_on_it_and_comes_back(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]],
) -> None:
    # Issue 29: the port-down removed the first subsystem's listener only; the lab's SPDK serves two (ram0, nvme0).
    _, hosts, _ = vlab
    lab = make_lab(_spdk_on_both_paths)
    fabric = connect_fabric(lab, "nvme-tcp", hosts, target="spdk")
    node = hosts["vnode1"]
    undo = UndoStack()
    try:
        device = next(d.path for d in fabric.devices_on("vnode1") if d.subsystem == NQN)
        traddr = "10.10.10.19"
        fault = faults.target_port_down(lab, hosts, "spdk", "nvme-tcp", address=traddr)
        before = _listeners(fault)
        assert len(before) == 2 and all(traddr in found for found in before.values()), before
        fault.inject(undo)
        during = _listeners(fault)
        assert all(traddr not in found for found in during.values()), during
        assert all("10.10.20.19" in found for found in during.values()), during  # the other port carries on
        assert sum(reads_per_path(node, device).values()) >= 990  # the namespace still reads, over the other path
        fault.restore()
        assert _listeners(fault) == before
    finally:
        undo.unwind()
        fabric.teardown()
    assert leftovers(lab, hosts) == []
