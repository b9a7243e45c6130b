"""Reservations on the virtual lab, for real: the 6.1 kernel's nvmet really has no reservations (the capability
fact the integrity suite skips on is true). Fencing itself (SCSI-3 PR on LIO, SCST and tgt over iSCSI and iSER,
NVMe reservations on SPDK), the verify catching bytes changed on vstor's RAM disk, and data surviving a reconnect
are the main job's integrity cases (suites/test_integrity.py) on every (protocol, target) of labs/vlab.yaml; the
real sg_persist output in tests/data/reservations was recorded on this lab's LIO.

The real nvme-cli output is kept under ``<state>/recorded-reservations/`` for tests/data/reservations.
"""

from __future__ import annotations

import json

import pytest
from vlab_support import STATE

from pytest_fabricqa.fabric.provision import connect_fabric
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.integrity.reservations import unsupported
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab
RECORDED = STATE / "recorded-reservations"


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
