"""Reservations on the virtual lab, for real: LIO fences with SCSI-3 persistent reservations (its real sg_persist
output kept), and the 6.1 kernel's nvmet really has no reservations (the capability fact is true). The verify
catching bytes changed on vstor's RAM disk, and data surviving a reconnect, are the main job's integrity cases
(suites/test_integrity.py) on every (protocol, target) of labs/vlab.yaml.

The real sg_persist and nvme-cli output is kept under ``<state>/recorded-reservations/`` for tests/data/reservations
(whose samples are written from the tools' source until these replace them).
"""

from __future__ import annotations

import json

import pytest
from vlab_support import STATE

from pytest_fabricqa import integrity as ig
from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.provision import connect_fabric
from pytest_fabricqa.reservations import ScsiReservations, fencing, reservation_key, unsupported
from pytest_fabricqa.targets.base import UndoStack
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab
RECORDED = STATE / "recorded-reservations"


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
