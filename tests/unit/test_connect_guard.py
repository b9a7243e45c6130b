"""An initiator already connected to the lab's subsystem or target before this run's own connect is someone
else's: the run stops with one line and registers no disconnect/logout of it (issue 16). Hosts scripted with the
recorded virtual-lab outputs of a connected initiator (tests/data/targets)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import ScriptedHost

from pytest_fabricqa.core.export import Export, ExportedUnit
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.initiators import nvme
from pytest_fabricqa.initiators.connect import connect_iscsi, connect_nvme
from pytest_fabricqa.lab.load import load_lab

DATA = Path(__file__).parents[1] / "data" / "targets"
LABS = Path(__file__).parents[2] / "labs"
NQN = "nqn.2026-11.io.fabricqa:vlab-nvme0"
IQN = "iqn.2026-11.io.fabricqa:vstor"


def test_an_nvme_subsystem_connected_before_our_connect_stops_the_run_untouched() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    export = Export("nvme-tcp", "tcp", "10.10.10.19", 4420, (ExportedUnit(NQN, 1, "nvme0", "/dev/nvme0n1"),), "vstor")

    def script(argv: tuple[str, ...]) -> str:
        if argv[:2] == ("nvme", "discover"):
            return (DATA / "nvme-discover-tcp.json").read_text()
        if argv[:2] == ("sh", "-c") and argv[2] == nvme.SYSFS_SCRIPT:
            return (DATA / "nvme-sysfs-tcp.txt").read_text()  # vnode1 connected to vlab-nvme0
        return ""

    host = ScriptedHost("vnode1", script)
    undo = UndoStack()
    with pytest.raises(ProvisionError, match=rf"^vnode1: {NQN} is already connected on this host, and not by"):
        connect_nvme(lab, export, host, undo)
    assert len(undo) == 0, "an undo would disconnect someone else's controller"
    assert not [c for c in host.commands if c[:2] in (("nvme", "connect"), ("nvme", "disconnect"))]


def test_an_iscsi_session_that_exists_before_our_login_stops_the_run_untouched() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    export = Export("iscsi", "tcp", "10.10.10.19", 3260, (ExportedUnit(IQN, 0, "ram0", "/dev/ram0"),), "vstor")

    def script(argv: tuple[str, ...]) -> str:
        if "discovery" in argv:
            return (DATA / "iscsiadm-discovery.txt").read_text()
        if argv[:3] == ("iscsiadm", "-m", "session"):
            return (DATA / "iscsiadm-session-tcp.txt").read_text()  # vnode1 logged in to vstor's IQN
        return ""

    host = ScriptedHost("vnode1", script)
    undo = UndoStack()
    with pytest.raises(ProvisionError, match=rf"^vnode1: a session to {IQN} already exists on this host"):
        connect_iscsi(lab, lab.target_for("iscsi"), export, host, undo)
    undo.unwind()
    assert not [c for c in host.commands if "--login" in c or "--logout" in c or "-u" in c]
