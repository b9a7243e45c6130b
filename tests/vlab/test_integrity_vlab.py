"""Integrity on the virtual lab, for real: the verify catches bytes changed on vstor's RAM disk under it, data
written over the fabric survives the initiators disconnecting and connecting again, LIO fences with SCSI-3
persistent reservations, and the 6.1 kernel's nvmet really has no reservations (the capability fact is true).

The real sg_persist and nvme-cli output is kept under ``<state>/recorded-reservations/`` for tests/data/reservations
(whose samples are written from the tools' source until these replace them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from vlab_support import STATE

from pytest_fabricqa import integrity as ig
from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.provision import Fabric, connect_fabric
from pytest_fabricqa.reservations import ScsiReservations, fencing, reservation_key, unsupported
from pytest_fabricqa.targets.base import UndoStack
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab
RECORDED = STATE / "recorded-reservations"


@pytest.fixture(params=["nvme-tcp", "iscsi"])
def fabric(request: pytest.FixtureRequest, vlab: tuple[LabModel, dict[str, Host], dict[str, str]]) -> Iterator[Fabric]:
    lab, hosts, _ = vlab
    connected = connect_fabric(lab, request.param, hosts)
    try:
        yield connected
    finally:
        connected.teardown()


def test_the_verify_names_the_block_changed_on_the_target(
    fabric: Fabric, vlab: tuple[LabModel, dict[str, Host], dict[str, str]]
) -> None:
    _, hosts, _ = vlab
    device = ig.shared_devices(fabric.devices)[0]
    outcome, found = ig.corruption_detected(hosts["vnode1"], hosts["vnode2"], hosts["vstor"], device, "/dev/ram0")
    assert found is not None, outcome.problems
    assert found.host == "vnode2" and found.device == device.paths["vnode2"]
    assert found.offset == ig.BASE_OFFSET + ig.CORRUPT_BLOCK * ig.CORRUPT_BS and outcome.problems == []


def test_data_survives_the_initiators_reconnecting_and_is_the_same_on_both(
    fabric: Fabric, vlab: tuple[LabModel, dict[str, Host], dict[str, str]]
) -> None:
    _, hosts, _ = vlab
    device = ig.shared_devices(fabric.devices)[0]
    outcome, written = ig.write_before_reconnect(hosts["vnode1"], device)
    assert outcome.problems == []
    fabric.reconnect_initiators()
    again = ig.paths_now(fabric.devices, device)
    assert set(again.paths) == {"vnode1", "vnode2"}
    ig.verify_after_reconnect(outcome, [hosts["vnode1"], hosts["vnode2"]], again, written)
    assert outcome.problems == []
    done = outcome.integrity()
    assert done.bytes_written == 3 * ig.REGION_BYTES and done.bytes_verified == 9 * ig.REGION_BYTES


def test_lio_fences_with_scsi_persistent_reservations(vlab: tuple[LabModel, dict[str, Host], dict[str, str]]) -> None:
    lab, hosts, _ = vlab
    fabric = connect_fabric(lab, "iscsi", hosts)
    undo = UndoStack()
    try:
        device = ig.shared_devices(fabric.devices)[0]
        a, b = hosts["vnode1"], hosts["vnode2"]
        result = fencing(ScsiReservations(), a, b, device, undo)
        assert result.problems == [], "\n".join(result.problems)
        # Real output for tests/data/reservations: B holds the reservation now, only B's key is registered.
        RECORDED.mkdir(parents=True, exist_ok=True)
        path = device.paths["vnode2"]
        for name, argv in {
            "sg_persist-read-keys-one.txt": ["sg_persist", "--in", "--no-inquiry", "--read-keys", path],
            "sg_persist-read-reservation-held.txt": ["sg_persist", "--in", "--no-inquiry", "--read-reservation", path],
        }.items():
            (RECORDED / name).write_text(b.run(argv).stdout)
        state = ScsiReservations().report(b, path)
        assert state.holder == reservation_key(1) and state.keys == (reservation_key(1),)
    finally:
        undo.unwind()
        try:
            state = ScsiReservations().report(hosts["vnode1"], ig.shared_devices(fabric.devices)[0].paths["vnode1"])
            assert state.keys == () and state.holder is None, state.describe()
        finally:
            fabric.teardown()


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
