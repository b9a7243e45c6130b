"""WWIDs as multipath sees them: recorded on the virtual lab (tests/data/wwid/README.md), and the check that fails
when a unit shows none, a different one per initiator, or one another unit shows too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fakes import ScriptedHost

from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.initiators.wwid import WWID_SCRIPT, parse_wwids, read_wwids, wwid_problems

DATA = Path(__file__).parents[1] / "data" / "wwid"
RAM_NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
NVME_NQN = "nqn.2026-11.io.fabricqa:vlab-nvme0"
IQN = "iqn.2026-11.io.fabricqa:vstor"


def _device(initiator: str, path: str, subsystem: str, address: int, backing: str) -> FabricDevice:
    return FabricDevice(initiator, path, backing, subsystem, address, 1 << 30, 512, True, False)


def _recorded(pair: str) -> dict[str, dict[str, str]]:
    return {host: parse_wwids((DATA / f"{pair}.{host}.txt").read_text()) for host in ("vnode1", "vnode2")}


NVME_DEVICES = [
    _device(host, path, nqn, 1, backing)
    for host in ("vnode1", "vnode2")
    for path, nqn, backing in (("/dev/nvme0n1", RAM_NQN, "ram0"), ("/dev/nvme1n1", NVME_NQN, "nvme0"))
]
SCSI_DEVICES = [
    _device(host, path, IQN, lun, backing)
    for host in ("vnode1", "vnode2")
    for path, lun, backing in (("/dev/sda", 0, "ram0"), ("/dev/sdb", 1, "nvme0"))
]


def test_nvmets_namespaces_each_show_their_own_uuid_on_both_initiators() -> None:
    wwids = _recorded("nvme-tcp-nvmet")
    assert wwids["vnode1"]["/dev/nvme0n1"].startswith("uuid.")
    assert wwid_problems(NVME_DEVICES, wwids) == []


def test_lios_luns_without_a_unit_serial_show_no_wwid_and_fail() -> None:
    wwids = _recorded("iser-lio-no-serial")
    assert wwids["vnode1"] == {"/dev/sda": "", "/dev/sdb": ""} == wwids["vnode2"]
    # vnode1 named LUN 0 sdb and LUN 1 sda (lsscsi at the time): paths are mapped by LUN, never by name
    devices = [replace(d, path={"/dev/sda": "/dev/sdb", "/dev/sdb": "/dev/sda"}[d.path]) if d.initiator == "vnode1"
               else d for d in SCSI_DEVICES]  # fmt: skip
    problems = wwid_problems(devices, wwids)
    assert len(problems) == 4
    assert problems[0] == (
        f"vnode1: /dev/sdb, {IQN} LUN 0 (ram0), shows no WWID: multipath would leave it out (does the target report a "
        "unit serial or namespace ID?)"
    )


def test_lios_luns_with_the_unit_serial_the_plugin_sets_pass() -> None:
    wwids = _recorded("iscsi-lio")
    assert all(w.startswith("naa.") for w in wwids["vnode1"].values())
    assert wwid_problems(SCSI_DEVICES, wwids) == []


def test_tgts_luns_pass() -> None:
    devices = [replace(d, address=d.address + 1) for d in SCSI_DEVICES]  # tgt's LUN 0 is its controller
    assert wwid_problems(devices, _recorded("iscsi-tgt")) == []


def test_two_units_that_show_one_wwid_fail() -> None:
    wwids = _recorded("iscsi-tgt")
    for host in wwids.values():
        host["/dev/sdb"] = host["/dev/sda"]
    assert wwid_problems(SCSI_DEVICES, wwids) == [
        f"{IQN} LUN 0 (ram0) and {IQN} LUN 1 (nvme0) share the WWID {wwids['vnode1']['/dev/sda']}: multipath would "
        "take them for one unit"
    ]


def test_a_unit_with_another_wwid_on_one_initiator_or_none_at_all_fails() -> None:
    wwids = _recorded("nvme-tcp-nvmet")
    wwids["vnode2"]["/dev/nvme0n1"] = "uuid.00000000-0000-0000-0000-000000000001"
    wwids["vnode2"]["/dev/nvme1n1"] = ""
    problems = wwid_problems(NVME_DEVICES, wwids)
    assert problems == [
        f"vnode2: /dev/nvme1n1, {NVME_NQN} namespace 1 (nvme0), shows no WWID: multipath would leave it out (does the "
        "target report a unit serial or namespace ID?)",
        f"{RAM_NQN} namespace 1 (ram0) shows a different WWID on each initiator (vnode1 "
        f"{wwids['vnode1']['/dev/nvme0n1']}; vnode2 uuid.00000000-0000-0000-0000-000000000001): multipath would not "
        "group its paths",
    ]


def test_the_script_reads_every_device_in_one_command() -> None:
    recorded = (DATA / "nvme-tcp-nvmet.vnode1.txt").read_text()
    host = ScriptedHost("vnode1", lambda argv: recorded)
    found = read_wwids(host, ["/dev/nvme0n1", "/dev/nvme1n1"])  # type: ignore[arg-type]
    assert host.commands == [("sh", "-c", WWID_SCRIPT, "sh", "/dev/nvme0n1", "/dev/nvme1n1")]
    assert set(found) == {"/dev/nvme0n1", "/dev/nvme1n1"}
    assert read_wwids(host, []) == {} and len(host.commands) == 1  # type: ignore[arg-type]
