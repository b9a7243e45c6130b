"""SCST through sysfs, on a scripted host that keeps an SCST tree in memory and answers the driver's scripts.

No machine here runs SCST (the virtual lab's image gains it separately), so the tree's layout and the management
commands follow SCST 3.10's own documentation (scst/README, iscsi-scst/README in ../shared/vendor/scst-3.10.tar.gz);
tests/vlab/test_scst_tgt_vlab.py runs the same driver against the real modules.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fakes import Answer, ScriptedHost, list_records
from labfiles import as_recorded, vlab_kernel_text_as

from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.load import load_lab as load_lab_file
from pytest_fabricqa.lab.model import LabError, LabModel
from pytest_fabricqa.targets import load_target
from pytest_fabricqa.targets.scsi import unit_serial
from pytest_fabricqa.targets.scst import (
    DAEMON_PID_FILE,
    ISCSI,
    ISER_SCRIPT,
    MGMT_SCRIPT,
    ROOT,
    SNAPSHOT_SCRIPT,
    STARTED_SCRIPT,
    ScstTarget,
    parse_snapshot,
)

LABS = Path(__file__).parents[1] / "data" / "labs"
VLAB = Path(__file__).parents[2] / "labs" / "vlab.yaml"
SEED_IQN = "iqn.2017-10.tgt1"
IQN = "iqn.2026-11.io.fabricqa:vstor"
FOREIGN = "iqn.2003-01.org.example:foreign"


class FakeScst(ScriptedHost):
    """An SCST host: modules, iscsi-scstd, the sysfs tree in memory; mgmt commands applied as SCST applies them."""

    def __init__(self, daemon: bool = True, iser_listening: bool = True) -> None:
        super().__init__("el72h3")
        self.loaded = False
        self.daemon_pid: int | None = 3030 if daemon else None
        self.iser_listening = iser_listening
        self.driver_enabled = "0"
        self.devices: dict[str, dict[str, str]] = {}
        self.targets: dict[str, dict[str, Any]] = {}
        self.files = {"/home/disk01", "/home/disk02", "/home/disk03", "/dev/nvme0n1", "/dev/ram0", "/tmp/foreign"}
        self.blocks = {"/dev/nvme0n1", "/dev/ram0"}
        self.fs: dict[str, str] = {}
        self.mgmt_log: list[tuple[str, str]] = []  # (path under ROOT, command)
        self.fail: dict[str, str] = {}  # a substring of a mgmt command -> the shell's error text
        self.started_after_marker = True  # what STARTED_SCRIPT says of a running daemon

    def add_foreign(self, iqn: str = FOREIGN, device: str = "prod_lun") -> None:
        self.devices[device] = {
            "handler": "vdisk_fileio",
            "filename": "/tmp/foreign",
            "usn": "1a2b3c4d",
            "usn_set": "set",
        }
        self.targets[iqn] = self._new_target(iqn)
        self.targets[iqn]["luns"][0] = device
        self.targets[iqn]["enabled"] = "1"

    @staticmethod
    def _new_target(iqn: str) -> dict[str, Any]:
        return {"enabled": "0", "qc": "32", "portals": {}, "luns": {}, "groups": {}, "sessions": []}

    def render(self) -> str:
        if not self.loaded:
            return "NOSCST\n"
        out = [
            f"D\t{n}\t{d['handler']}\t{d['filename']}\t{d['usn']}\t{d.get('usn_set', '')}"
            for n, d in self.devices.items()
        ]
        out.append(f"I\t{'open' if self.daemon_pid else 'closed'}\t{self.driver_enabled}")
        for iqn, t in self.targets.items():
            out.append(f"T\t{iqn}\t{t['enabled']}\t{t['qc']}")
            out += [f"P\t{iqn}\t{k}\t{v}" for k, v in t["portals"].items()]
            out += [f"L\t{iqn}\t{lun}\t{d}" for lun, d in t["luns"].items()]
            for g, group in t["groups"].items():
                out.append(f"G\t{iqn}\t{g}")
                out += [f"GL\t{iqn}\t{g}\t{lun}\t{d}" for lun, d in group["luns"].items()]
                out += [f"GI\t{iqn}\t{g}\t{i}" for i in group["initiators"]]
            out += [f"S\t{iqn}\t{s}" for s in t["sessions"]]
        return "".join(line + "\n" for line in out)

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[0] == "modprobe":
            self.loaded = True
            return ""
        if argv[0] == "iscsi-scstd":
            self.daemon_pid = 5151
            return ""
        if argv[:2] == ("kill", "-TERM"):
            if self.daemon_pid == int(argv[2]):
                self.daemon_pid = None
                self.targets.clear()  # iscsi_release: target_del_all
            return ""
        if argv[0] == "test":
            path = argv[-1]
            if argv[1] == "-b":
                return (0, "", "") if path in self.blocks else (1, "", "")
            return (0, "", "") if path in self.files else (1, "", "")
        if argv[:2] == ("rm", "-f"):
            self.fs.pop(argv[2], None)
            return ""
        if argv[0] == "ss":
            return ""
        if argv[:2] == ("sh", "-c"):
            return self.shell(argv[2], argv[4:])
        return None

    def shell(self, script: str, args: tuple[str, ...]) -> Answer:
        if script.startswith('for f in "$1"/*.json'):
            return list_records(self.fs, args[0])
        if script == SNAPSHOT_SCRIPT:
            return self.render()
        if script == 'head -n 1 "$1"' and args[0].endswith("/QueuedCommands"):
            iqn = args[0].split("/")[-2]
            return f"{self.targets[iqn]['qc']}\n" if iqn in self.targets else (1, "", "No such file")  # head's line 1
        if script == MGMT_SCRIPT:
            return self.mgmt(args[0], args[1])
        if script == STARTED_SCRIPT:
            return "STARTED\n" if self.started_after_marker else "EARLIER\n"
        if script == ISER_SCRIPT:
            return "yes\n" if self.iser_listening else "no\n"
        if "/proc/$p/comm" in script:  # scsi.PID_SCRIPT
            return f"{self.daemon_pid}\n" if self.daemon_pid and args[0] == DAEMON_PID_FILE else ""
        if "mv -f" in script:
            self.fs[args[1]] = args[0]
            return ""
        if "cat" in script and args and args[0].endswith(".json"):
            return self.fs.get(args[0], "")
        if script == 'printf %s "$1" > "$2"' and args[1] == f"{ISCSI}/enabled":  # remote.write
            self.driver_enabled = args[0]
            return ""
        if "printf 0" in script:  # disabling a target before its removal
            iqn = args[0].split("/")[-2]
            if iqn in self.targets:
                self.targets[iqn]["enabled"] = "0"
            return ""
        return None

    def mgmt(self, command: str, path: str) -> Answer:
        self.mgmt_log.append((path.removeprefix(ROOT + "/"), command))
        for needle, error in self.fail.items():
            if needle in command:
                return (1, "", error)
        words = command.split()
        if path.startswith(f"{ROOT}/handlers/"):
            handler = path.split("/")[-2]
            if words[0] == "add_device":
                if words[1] in self.devices:
                    return (1, "", "printf: write error: Invalid argument")
                filename = command.split("filename=")[1].split(";")[0]
                self.devices[words[1]] = {"handler": handler, "filename": filename, "usn": "abc123"}
            elif words[0] == "del_device":
                self.devices.pop(words[1])
                for t in self.targets.values():
                    t["luns"] = {k: v for k, v in t["luns"].items() if v != words[1]}
            return ""
        if path.startswith(f"{ROOT}/devices/") and path.endswith("/usn"):
            self.devices[path.split("/")[-2]].update(usn=command, usn_set="set")
            return ""
        if path == f"{ISCSI}/mgmt":
            if self.daemon_pid is None:
                return (1, "", "printf: write error: Invalid argument")
            if words[0] == "add_target":
                if words[1] in self.targets:
                    return (1, "", "printf: write error: Invalid argument")
                self.targets[words[1]] = self._new_target(words[1])
            elif words[0] == "del_target":
                self.targets.pop(words[1])
            elif words[0] == "add_target_attribute":
                portals = self.targets[words[1]]["portals"]
                portals[f"allowed_portal{len(portals) or ''}"] = words[3]
            return ""
        rest = path.removeprefix(f"{ISCSI}/")
        iqn, _, sub = rest.partition("/")
        target = self.targets[iqn]
        if sub == "QueuedCommands":
            target["qc"] = command
        elif sub == "enabled":
            target["enabled"] = command
        elif sub == "luns/mgmt":
            target["luns"][int(words[2])] = words[1]
        elif sub == "ini_groups/mgmt":
            target["groups"][words[1]] = {"luns": {}, "initiators": []}
        elif sub.endswith("/luns/mgmt"):
            target["groups"][sub.split("/")[1]]["luns"][int(words[2])] = words[1]
        elif sub.endswith("/initiators/mgmt"):
            target["groups"][sub.split("/")[1]]["initiators"].append(words[1])
        else:
            return None
        return ""


def _seed() -> LabModel:
    return as_recorded(load_lab_file(LABS / "scst-seed000.yaml"))


def _vlab(tmp_path: Path, scst: str = "", paths: str = "first") -> LabModel:
    """labs/vlab.yaml with its LIO target made an SCST target (and ``scst`` settings, and ``paths``)."""
    text = vlab_kernel_text_as("  - kind: scst\n").replace("    paths: first\n", f"    paths: {paths}\n", 1)
    if scst:
        text = text.replace("      luns: [ram0, nvme0]\n", f"      luns: [ram0, nvme0]\n    scst: {scst}\n")
    (tmp_path / "lab.yaml").write_text(text)
    return load_lab(tmp_path / "lab.yaml")


def _target(lab: LabModel, host: FakeScst, protocol: str = "iser") -> ScstTarget:
    model = lab.target_for(protocol)
    assert model.host is not None
    host.name = model.host
    target = load_target(lab, model, {model.host: host})  # type: ignore[dict-item]
    assert isinstance(target, ScstTarget)
    return target


def test_the_snapshot_parser_reads_every_line_kind() -> None:
    host = FakeScst()
    host.loaded = True
    host.add_foreign()
    host.targets[FOREIGN]["groups"]["ops"] = {"luns": {3: "prod_lun"}, "initiators": ["iqn.1994-05.com.redhat:x"]}
    host.targets[FOREIGN]["portals"]["allowed_portal"] = "10.10.10.19"
    host.targets[FOREIGN]["sessions"].append("iqn.1994-05.com.redhat:x")
    snap = parse_snapshot(host.render())
    assert snap.loaded and snap.iscsi and snap.open_state == "open" and snap.driver_enabled == "0"
    assert snap.devices == {
        "prod_lun": {"handler": "vdisk_fileio", "filename": "/tmp/foreign", "usn": "1a2b3c4d", "usn_set": "set"}
    }
    target = snap.targets[FOREIGN]
    assert (target.enabled, target.queued_commands, target.luns) == ("1", "32", {0: "prod_lun"})
    assert target.portals == {"allowed_portal": "10.10.10.19"}
    assert target.groups == {"ops": {"luns": {3: "prod_lun"}, "initiators": ["iqn.1994-05.com.redhat:x"]}}
    assert target.sessions == ["iqn.1994-05.com.redhat:x"] and target.devices() == ["prod_lun", "prod_lun"]
    assert not parse_snapshot("NOSCST\n").loaded and not parse_snapshot("NOISCSI\n").iscsi


def test_seed_000s_scst_conf_is_provisioned_from_its_lab_file() -> None:
    """Seed 000: vdisk_fileio with nv_cache 1 for the OCR/voting files, LUNs 0-2 of iqn.2017-10.tgt1 on portal
    10.10.10.19, QueuedCommands 128, every initiator, iSER; plus a P750 through vdisk_blockio."""
    lab = _seed()
    host = FakeScst()
    target = _target(lab, host)
    undo = UndoStack()
    export = target.provision("iser", undo)
    assert host.commands[0] == ("modprobe", "-a", "scst", "scst_vdisk", "iscsi_scst", "isert_scst")
    serial = {n: unit_serial("fabricqa", SEED_IQN, n) for n in ("file1", "file2", "file3", "p750a")}
    t = f"targets/iscsi/{SEED_IQN}"
    assert host.mgmt_log == [
        ("handlers/vdisk_fileio/mgmt", "add_device fabricqa_file1 filename=/home/disk01; nv_cache=1"),
        ("devices/fabricqa_file1/usn", serial["file1"]),
        ("handlers/vdisk_fileio/mgmt", "add_device fabricqa_file2 filename=/home/disk02; nv_cache=1"),
        ("devices/fabricqa_file2/usn", serial["file2"]),
        ("handlers/vdisk_fileio/mgmt", "add_device fabricqa_file3 filename=/home/disk03; nv_cache=1"),
        ("devices/fabricqa_file3/usn", serial["file3"]),
        ("handlers/vdisk_blockio/mgmt", "add_device fabricqa_p750a filename=/dev/nvme0n1"),
        ("devices/fabricqa_p750a/usn", serial["p750a"]),
        ("targets/iscsi/mgmt", f"add_target {SEED_IQN}"),
        (f"{t}/QueuedCommands", "128"),
        ("targets/iscsi/mgmt", f"add_target_attribute {SEED_IQN} allowed_portal 10.10.10.19"),
        (f"{t}/luns/mgmt", "add fabricqa_file1 0"),
        (f"{t}/luns/mgmt", "add fabricqa_file2 1"),
        (f"{t}/luns/mgmt", "add fabricqa_file3 2"),
        (f"{t}/luns/mgmt", "add fabricqa_p750a 3"),
        (f"{t}/enabled", "1"),
    ]
    assert host.driver_enabled == "1"
    assert (export.transport, export.address, export.port) == ("iser", "10.10.10.19", 3260)
    assert [(u.address, u.backing) for u in export.units] == [(0, "file1"), (1, "file2"), (2, "file3"), (3, "p750a")]
    state = json.loads(host.fs[target.state_file])
    assert state["targets"] == [SEED_IQN] and state["devices"] == [f"fabricqa_{n}" for n in serial]
    assert undo.unwind() == []
    assert host.devices == {} and host.targets == {} and host.driver_enabled == "0"
    assert target.leftovers() == [] and target.state_file not in host.fs


def test_initiator_iqns_become_an_ini_group_with_the_luns(tmp_path: Path) -> None:
    host = FakeScst()
    _target(_vlab(tmp_path), host, "iscsi").provision("iscsi", UndoStack())
    group = host.targets[IQN]["groups"]["fqa-vlab"]
    assert group == {
        "luns": {0: "fqa-vlab_ram0", 1: "fqa-vlab_nvme0"},
        "initiators": ["iqn.2026-11.io.fabricqa:vnode1", "iqn.2026-11.io.fabricqa:vnode2"],
    }
    assert host.targets[IQN]["luns"] == {}  # no default LUNs: other initiators see nothing
    assert host.targets[IQN]["qc"] == "32"  # SCST's default stays when the lab sets none


def test_a_failed_step_undoes_exactly_what_was_made_and_foreign_objects_stay(tmp_path: Path) -> None:
    host = FakeScst()
    host.add_foreign()
    host.driver_enabled = "1"
    host.fail["add fqa-vlab_nvme0"] = "sh: 1: printf: printf: Invalid argument"
    target = _target(_vlab(tmp_path), host, "iscsi")
    undo = UndoStack()
    with pytest.raises(ProvisionError) as info:
        target.provision("iscsi", undo)
    assert str(info.value) == (
        "vstor: cannot map fqa-vlab_nvme0 to LUN 1 of iqn.2026-11.io.fabricqa:vstor (sh: 1: printf: printf: "
        "Invalid argument); see the target's dmesg for SCST's reason"
    )
    assert undo.unwind() == []
    assert list(host.devices) == ["prod_lun"] and list(host.targets) == [FOREIGN]
    assert host.targets[FOREIGN]["luns"] == {0: "prod_lun"} and host.driver_enabled == "1"
    removals = [c for _, c in host.mgmt_log if c.startswith("del")]
    assert removals == [f"del_target {IQN}", "del_device fqa-vlab_nvme0", "del_device fqa-vlab_ram0"]


def test_the_labs_iqn_or_device_names_taken_by_others_are_one_line_and_untouched(tmp_path: Path) -> None:
    lab = _vlab(tmp_path)
    host = FakeScst()
    host.add_foreign(iqn=IQN)
    with pytest.raises(
        ProvisionError,
        match=r"^vstor: SCST iSCSI target iqn.2026-11.io.fabricqa:vstor already exists and was not created by fabricqa; remove it",
    ):
        _target(lab, host, "iscsi").provision("iscsi", UndoStack())
    host = FakeScst()
    host.add_foreign(device="fqa-vlab_ram0")  # named like ours, without our serial
    host.driver_enabled = "1"
    target = _target(lab, host, "iscsi")
    with pytest.raises(ProvisionError, match=r"^vstor: SCST device fqa-vlab_ram0 already exists and was not created"):
        target.provision("iscsi", UndoStack())
    assert target.leftovers() == [] and target.cleanup_stale() == []
    assert "fqa-vlab_ram0" in host.devices and not [c for _, c in host.mgmt_log if c.startswith("del")]


def test_a_killed_runs_objects_are_cleaned_with_or_without_the_state_file(tmp_path: Path) -> None:
    lab = _vlab(tmp_path)
    host = FakeScst()
    host.add_foreign()
    host.driver_enabled = "1"
    _target(lab, host, "iscsi").provision("iscsi", UndoStack())  # killed: never unwound
    fresh = _target(lab, host, "iscsi")
    assert fresh.leftovers() == [
        f"vstor: SCST iSCSI target {IQN} is still configured",
        "vstor: SCST device fqa-vlab_ram0 is still configured",
        "vstor: SCST device fqa-vlab_nvme0 is still configured",
        f"vstor: state file {fresh.state_file} is still there",
    ]
    assert fresh.cleanup_stale()[:3] == [
        f"vstor: removed SCST iSCSI target {IQN}",
        "vstor: removed SCST device fqa-vlab_ram0",
        "vstor: removed SCST device fqa-vlab_nvme0",
    ]
    assert list(host.targets) == [FOREIGN] and list(host.devices) == ["prod_lun"]
    # The state file lost (issue 28: ours only when recorded *and* marked): the devices still carry the lab's
    # serial, but no record lists them, so they are named and left; the target is not even named (no LUN of it is
    # marked without a record: it is left with them).
    _target(lab, host, "iscsi").provision("iscsi", UndoStack())
    host.fs.clear()
    assert fresh.cleanup_stale() == [
        f"vstor: left SCST device {name} alone: it carries this lab's unit serial but no record of this lab lists it "
        "(remove it by hand if it is yours)"
        for name in ("fqa-vlab_ram0", "fqa-vlab_nvme0")
    ]
    assert list(host.targets) == [FOREIGN, IQN] and list(host.devices) == [
        "prod_lun",
        "fqa-vlab_ram0",
        "fqa-vlab_nvme0",
    ]


def test_a_recorded_device_without_the_labs_serial_is_named_and_left_alone(tmp_path: Path) -> None:
    """Checked twice (issue 28): the record lists a device whose unit serial is not the lab's (someone made a
    device of that name since the run was killed), and the target over it: neither is removed."""
    lab = _vlab(tmp_path)
    host = FakeScst()
    host.driver_enabled = "1"
    _target(lab, host, "iscsi").provision("iscsi", UndoStack())  # killed: never unwound
    for device in host.devices.values():
        device.update(usn="someone-elses", usn_set="set")
    fresh = _target(lab, host, "iscsi")
    assert fresh.leftovers() == [f"vstor: state file {fresh.state_file} is still there"]
    lines = fresh.cleanup_stale()
    assert lines[0] == (
        "vstor: left SCST device fqa-vlab_ram0 alone: this lab's record lists it, but its unit serial is "
        "'someone-elses', set by someone else (another session or tool made it since)"
    )
    assert list(host.targets) == [IQN] and list(host.devices) == ["fqa-vlab_ram0", "fqa-vlab_nvme0"]


def test_iscsi_scstd_missing_or_deaf_to_iser_is_one_line(tmp_path: Path) -> None:
    lab = _vlab(tmp_path)
    with pytest.raises(ProvisionError) as info:
        _target(lab, FakeScst(daemon=False), "iscsi").provision("iscsi", UndoStack())
    assert str(info.value) == (
        "vstor: iscsi-scstd is not running (SCST's iscsi open_state is closed); start it (iscsi-scstd) or set "
        "targets[1].scst.daemon: start"
    )
    with pytest.raises(
        ProvisionError, match=r"^vstor: iscsi-scstd \(pid 3030\) does not serve iSER: it was started before isert_scst"
    ):
        _target(lab, FakeScst(iser_listening=False)).provision("iser", UndoStack())


def test_a_switched_off_driver_holding_foreign_targets_is_not_switched_on(tmp_path: Path) -> None:
    host = FakeScst()
    host.add_foreign()
    with pytest.raises(
        ProvisionError, match=r"SCST's iscsi driver is switched off .* holds target iqn.2003-01.org.example:foreign"
    ):
        _target(_vlab(tmp_path), host, "iscsi").provision("iscsi", UndoStack())
    assert host.driver_enabled == "0" and host.mgmt_log == []


def test_vdisk_blockio_on_a_file_says_which_key_to_change(tmp_path: Path) -> None:
    text = vlab_kernel_text_as("  - kind: scst\n").replace("/dev/ram0", "/home/disk01")
    (tmp_path / "lab.yaml").write_text(text)
    with pytest.raises(ProvisionError) as info:
        _target(load_lab(tmp_path / "lab.yaml"), FakeScst(), "iscsi").provision("iscsi", UndoStack())
    assert str(info.value) == (
        "vstor: backing device ram0 (/home/disk01) is not a block device, which vdisk_blockio needs; set "
        "targets[1].scst.devices.ram0.handler: vdisk_fileio to serve a file"
    )


def test_start_mode_starts_iscsi_scstd_on_the_portal_and_stops_it_unless_others_use_it(tmp_path: Path) -> None:
    lab = _vlab(tmp_path, scst="{daemon: start}")
    with pytest.raises(
        ProvisionError, match=r"^vstor: iscsi-scstd is already running \(pid 3030\) and fabricqa did not start it"
    ):
        _target(lab, FakeScst(), "iscsi").provision("iscsi", UndoStack())
    host = FakeScst(daemon=False)
    target = _target(lab, host, "iscsi")
    undo = UndoStack()
    target.provision("iscsi", undo)
    assert ("iscsi-scstd", "-p", "3260", "-a", "10.10.10.19") in host.commands
    assert "vstor: the iscsi-scstd fabricqa started (pid 5151) is still running" in target.leftovers()
    assert undo.unwind() == [] and host.daemon_pid is None and target.leftovers() == []
    # Someone else's target on the daemon we started: its exit would delete it, so it stays up.
    host = FakeScst(daemon=False)
    target = _target(lab, host, "iscsi")
    undo = UndoStack()
    target.provision("iscsi", undo)
    host.add_foreign()
    errors = undo.unwind()
    assert len(errors) == 1 and "still serves iqn.2003-01.org.example:foreign" in errors[0]
    assert host.daemon_pid == 5151 and FOREIGN in host.targets
    assert target.leftovers() == [
        "vstor: the iscsi-scstd fabricqa started (pid 5151) is still running",
        f"vstor: state file {target.state_file} is still there",
    ]


def test_several_paths_start_iscsi_scstd_on_each_address_and_allow_a_portal_each(tmp_path: Path) -> None:
    lab = _vlab(tmp_path, scst="{daemon: start}", paths="all")
    host = FakeScst(daemon=False)
    export = _target(lab, host, "iscsi").provision("iscsi", UndoStack())
    assert export.addresses == ("10.10.10.19", "10.10.20.19")
    assert ("iscsi-scstd", "-p", "3260", "-a", "10.10.10.19 10.10.20.19") in host.commands  # -a takes a list
    assert host.targets[IQN]["portals"] == {"allowed_portal": "10.10.10.19", "allowed_portal1": "10.10.20.19"}


def test_scst_settings_are_validated_with_file_key_and_line(tmp_path: Path) -> None:
    with pytest.raises(
        LabError,
        match=r"lab.yaml:\d+: targets\[1\].scst.handler: 'vdisk_nullio' is not allowed; allowed: 'vdisk_blockio' or 'vdisk_fileio'",
    ):
        _vlab(tmp_path, scst="{handler: vdisk_nullio}")
    with pytest.raises(
        LabError, match=r"targets\[1\].scst.queued_commands: Input should be less than or equal to 2048 \(got 4096\)"
    ):
        _vlab(tmp_path, scst="{queued_commands: 4096}")
    with pytest.raises(LabError, match=r"targets\[1\]: scst.devices names 'disk9', which is not under 'devices'"):
        _vlab(tmp_path, scst="{devices: {disk9: {nv_cache: true}}}")


def test_scst_device_names_must_be_sysfs_safe(tmp_path: Path) -> None:
    text = vlab_kernel_text_as("  - kind: scst\n    name_prefix: 'my qa'\n")
    (tmp_path / "lab.yaml").write_text(text)
    with pytest.raises(ProvisionError, match=r"^vstor: SCST device name 'my qa_ram0' .* is not valid; use letters"):
        _target(load_lab(tmp_path / "lab.yaml"), FakeScst(), "iscsi").provision("iscsi", UndoStack())


def test_mgmt_commands_travel_as_arguments_never_as_shell_text() -> None:
    host = FakeScst()
    from pytest_fabricqa.targets.scst import mgmt

    host.loaded = True
    mgmt(host, f"{ISCSI}/mgmt", "add_target iqn.2026-11.x:y;touch /tmp/pwned")
    argv = host.commands[-1]
    assert argv[:2] == ("sh", "-c") and argv[2] == MGMT_SCRIPT
    assert argv[4] == "add_target iqn.2026-11.x:y;touch /tmp/pwned" and "pwned" not in argv[2]
    assert shlex.join(argv).count("pwned") == 1


def test_the_target_reports_its_queued_commands_with_the_fabrics_queues() -> None:
    from pytest_fabricqa.fabric.queues import read_queues

    host = FakeScst()
    _target(_seed(), host).provision("iser", UndoStack())
    found = read_queues([], host, protocol="iser", subsystems=[SEED_IQN], target_kind="scst")  # type: ignore[arg-type]
    assert found == {"el72h3": {"QueuedCommands": 128}}


def test_the_sessions_clean_up_and_leftovers_gate_cover_scst() -> None:
    """provision.cleanup_stale (every connect) and provision.leftovers (the session's gate) reach SCST targets."""
    from pytest_fabricqa.fabric import provision

    lab = _seed()
    host = FakeScst()
    _target(lab, host).provision("iser", UndoStack())  # killed: never unwound
    hosts = {"el72h3": host}
    gate = provision.leftovers(lab, hosts)  # type: ignore[arg-type]
    assert f"el72h3: SCST iSCSI target {SEED_IQN} is still configured" in gate and len(gate) == 6
    assert len(provision.cleanup_stale(lab, hosts)) == 6  # type: ignore[arg-type]
    assert provision.leftovers(lab, hosts) == [] and host.targets == {} and host.devices == {}  # type: ignore[arg-type]


def test_modules_that_do_not_load_or_do_not_build_the_tree_are_one_line() -> None:
    class NoModules(FakeScst):
        def answer(self, argv: tuple[str, ...]) -> Answer:
            if argv[0] == "modprobe":
                return (1, "", "modprobe: FATAL: Module isert_scst not found in directory /lib/modules/6.1.0-27-amd64")
            return super().answer(argv)

    with pytest.raises(ProvisionError) as info:
        _target(_seed(), NoModules()).provision("iser", UndoStack())
    assert str(info.value) == (
        "el72h3: cannot load SCST's kernel modules scst, scst_vdisk, iscsi_scst, isert_scst (modprobe: FATAL: Module "
        "isert_scst not found in directory /lib/modules/6.1.0-27-amd64); build and install SCST for this kernel "
        "(make scst iscsi, with isert-scst for iSER)"
    )

    class NoTree(FakeScst):
        def answer(self, argv: tuple[str, ...]) -> Answer:
            return "" if argv[0] == "modprobe" else super().answer(argv)  # loads, yet no /sys/kernel/scst_tgt

    with pytest.raises(ProvisionError, match=r"^el72h3: /sys/kernel/scst_tgt/targets/iscsi is missing after loading"):
        _target(_seed(), NoTree()).provision("iser", UndoStack())


def test_a_missing_backing_file_says_how_seed_000_made_it(tmp_path: Path) -> None:
    host = FakeScst()
    host.files.discard("/home/disk02")
    with pytest.raises(ProvisionError) as info:
        _target(_seed(), host).provision("iser", UndoStack())
    assert str(info.value) == (
        "el72h3: backing file file2 (/home/disk02) does not exist; create it (fallocate -l 10G /home/disk02, as seed "
        "000 did) or fix targets[0].devices.file2.path"
    )
    assert host.mgmt_log == []


RECORDED = Path(__file__).parents[1] / "data" / "scst"


def _recorded(name: str, script: str) -> str:
    """The stderr line a recorded command printed (tests/data/scst/README.md says how it was recorded)."""
    text = (RECORDED / name).read_text().split("\n")
    return text[text.index(next(line for line in text if line.startswith("# ") and script in line)) + 1]


def _run_mgmt(tmp_path: Path, write_error: str | None, pending: int, result: str, wait: int = 30) -> tuple[int, str]:
    """MGMT_SCRIPT under dash, with ``printf`` and ``cat`` on PATH replaced by ones that print what coreutils printed
    for a real EAGAIN (recorded); ``pending``: how many reads of the result file answer EAGAIN first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "write-error").write_text(write_error or "")
    fakes = {
        "printf": f'[ -s {tmp_path}/write-error ] && {{ /usr/bin/cat {tmp_path}/write-error >&2; exit 1; }}; exec /usr/bin/printf "$@"',
        "cat": (
            f"n=$(/usr/bin/cat {tmp_path}/reads 2>/dev/null || echo 0); echo $((n+1)) > {tmp_path}/reads; "
            f'if [ "$n" -lt {pending} ]; then echo "cat: $1: {_recorded("eagain-cat.txt", "cat").split(": ", 2)[2]}" >&2; '
            'exit 1; fi; exec /usr/bin/cat "$@"'
        ),
        "sleep": "exit 0",
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "res").write_text(result + "\n")
    done = subprocess.run(
        [
            "dash",
            "-c",
            MGMT_SCRIPT,
            "sh",
            "add_device fqa-vlab_ram0 filename=/dev/ram0",
            str(tmp_path / "mgmt"),
            str(tmp_path / "res"),
            str(wait),
        ],
        capture_output=True,
        text=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LANG": "C"},
        check=False,
    )
    return done.returncode, done.stderr.strip()


EAGAIN_WRITE = _recorded("eagain-write.txt", "env printf")


def test_a_queued_command_is_recognised_from_what_coreutils_prints_and_waited_for(tmp_path: Path) -> None:
    assert "temporarily unavailable" in EAGAIN_WRITE
    # dash's builtin prints "I/O error" for the same EAGAIN: the reason the write goes through `env printf`.
    assert "temporarily unavailable" not in _recorded("eagain-write.txt", "'printf")
    assert "env printf" in MGMT_SCRIPT
    assert _run_mgmt(tmp_path, EAGAIN_WRITE, pending=2, result="0") == (0, "")
    assert (tmp_path / "reads").read_text().strip() == "3"  # two pending reads, then the outcome


def test_a_queued_command_that_fails_or_never_ends_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    code, err = _run_mgmt(tmp_path / "a", EAGAIN_WRITE, pending=1, result="-22")
    assert code == 1 and err == 'SCST answered -22 to "add_device fqa-vlab_ram0 filename=/dev/ram0"'
    (tmp_path / "b").mkdir()
    code, err = _run_mgmt(tmp_path / "b", EAGAIN_WRITE, pending=99, result="0", wait=3)
    assert code == 1 and err == 'SCST still busy with "add_device fqa-vlab_ram0 filename=/dev/ram0" after 3 s'


def test_another_write_error_is_passed_on_at_once(tmp_path: Path) -> None:
    code, err = _run_mgmt(tmp_path, "printf: write error: Invalid argument", pending=0, result="0")
    assert (code, err) == (1, "printf: write error: Invalid argument")
    assert not (tmp_path / "reads").exists()  # no wait for an outcome that is already known


def test_a_plain_write_lands(tmp_path: Path) -> None:
    assert _run_mgmt(tmp_path, None, pending=0, result="0") == (0, "")
    assert (tmp_path / "mgmt").read_text() == "add_device fqa-vlab_ram0 filename=/dev/ram0"


def test_a_refused_stop_keeps_the_daemons_record(tmp_path: Path) -> None:
    """Killed with a foreign target since put on our iscsi-scstd: the clean-up cannot stop it, so the record that it
    is ours stays; the leftovers gate names it and the next run uses it instead of refusing it as foreign."""
    lab = _vlab(tmp_path, scst="{daemon: start}")
    host = FakeScst(daemon=False)
    _target(lab, host, "iscsi").provision("iscsi", UndoStack())  # killed
    host.add_foreign()
    target = _target(lab, host, "iscsi")
    removed = target.cleanup_stale()
    assert removed[-1] == (
        "vstor: left the iscsi-scstd an earlier run started running: the iscsi-scstd fabricqa started (pid 5151) "
        f"still serves {FOREIGN}, not fabricqa's"
    )
    assert json.loads(host.fs[target.state_file]) == {"kind": "scst", "daemon_pid": 5151, "lab": "vlab"}
    assert "vstor: the iscsi-scstd fabricqa started (pid 5151) is still running" in target.leftovers()
    undo = UndoStack()
    target.provision("iscsi", undo)  # not "already running and fabricqa did not start it"
    assert host.daemon_pid == 5151 and IQN in host.targets


@pytest.mark.parametrize("started_after_marker", [True, False])
def test_the_starting_marker_is_honoured(tmp_path: Path, started_after_marker: bool) -> None:
    """Killed between the "daemon: starting" marker and the recorded pid: a daemon that started after the marker is
    ours (stopped by the clean-up); one that was running before it is not (left alone, and refused)."""
    lab = _vlab(tmp_path, scst="{daemon: start}")
    host = FakeScst(daemon=False)
    host.started_after_marker = started_after_marker
    target = _target(lab, host, "iscsi")
    host.fs[target.state_file] = json.dumps({"kind": "scst", "devices": [], "targets": [], "daemon": "starting"})
    host.daemon_pid = 5151
    removed = target.cleanup_stale()
    if started_after_marker:
        assert removed[0] == "vstor: stopped the iscsi-scstd an earlier run started" and host.daemon_pid is None
    else:
        assert host.daemon_pid == 5151 and not any("iscsi-scstd" in r for r in removed)
        with pytest.raises(ProvisionError, match=r"already running \(pid 5151\) and fabricqa did not start it"):
            target.provision("iscsi", UndoStack())


def test_the_started_script_compares_a_process_start_with_the_markers_time(tmp_path: Path) -> None:
    marker = tmp_path / "state.json"
    marker.write_text("{}")
    os.utime(marker, (time.time() - 3600, time.time() - 3600))
    child = subprocess.Popen(["sleep", "30"])
    try:
        run = partial(subprocess.run, capture_output=True, text=True, check=True)
        assert run(["dash", "-c", STARTED_SCRIPT, "sh", str(child.pid), str(marker)]).stdout == "STARTED\n"
        marker.write_text("{}")  # written now: the child started before it
        os.utime(marker, (time.time() + 5, time.time() + 5))
        assert run(["dash", "-c", STARTED_SCRIPT, "sh", str(child.pid), str(marker)]).stdout == "EARLIER\n"
        assert run(["dash", "-c", STARTED_SCRIPT, "sh", "999999999", str(marker)]).stdout == "EARLIER\n"
    finally:
        child.kill()
        child.wait()


def test_a_host_slow_between_the_clock_and_the_process_age_never_makes_an_older_daemon_look_started(
    tmp_path: Path,
) -> None:
    """The flake this replaces: with the clock read after ``ps``, a host that kept the script waiting 4 s between
    the two (these tests at nice 19 beside the virtual lab) made a process older than the marker look started
    after it. A ``ps`` that answers and then waits 6 s stands for that host."""
    real_ps = shutil.which("ps")
    assert real_ps is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ps").write_text(f'#!/bin/sh\n"{real_ps}" "$@"\nrc=$?\nsleep 6\nexit $rc\n')
    (bin_dir / "ps").chmod(0o755)
    marker = tmp_path / "state.json"
    child = subprocess.Popen(["sleep", "30"])
    try:
        marker.write_text("{}")  # written after the child started, by 5 s on the marker's clock
        os.utime(marker, (time.time() + 5, time.time() + 5))
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        argv = ["dash", "-c", STARTED_SCRIPT, "sh", str(child.pid), str(marker)]
        assert subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout == "EARLIER\n"
    finally:
        child.kill()
        child.wait()


def test_a_device_killed_before_its_serial_is_still_ours_and_cleaned(tmp_path: Path) -> None:
    """SCST takes the unit serial after add_device: a run killed between the two leaves a recorded device whose
    serial is still SCST's own (no "[key]" under it). Nobody's mark is on it, so it is ours and cleaned."""
    lab = _vlab(tmp_path)
    host = FakeScst()
    host.driver_enabled = "1"
    _target(lab, host, "iscsi").provision("iscsi", UndoStack())  # killed: never unwound
    host.devices["fqa-vlab_nvme0"].update(usn="5f2c0a1b", usn_set="")  # SCST's own: its serial never written
    fresh = _target(lab, host, "iscsi")
    assert "vstor: removed SCST device fqa-vlab_nvme0" in fresh.cleanup_stale()
    assert host.devices == {} and host.targets == {}


def test_the_snapshot_tells_a_serial_someone_set_from_scsts_own_on_a_real_tree(tmp_path: Path) -> None:
    """SCST's sysfs shows "[key]" under an attribute someone set (vdev_sysfs_usn_show, SCST 3.10)."""
    import subprocess

    from pytest_fabricqa.targets.scst import SNAPSHOT_SCRIPT, parse_snapshot

    for name, usn in (("set_one", "fqa1234\n[key]\n"), ("own_one", "5f2c0a1b\n")):
        device = tmp_path / "devices" / name
        device.mkdir(parents=True)
        (device / "usn").write_text(usn)
        (device / "filename").write_text("/dev/ram0\n")
    script = SNAPSHOT_SCRIPT.replace("/sys/kernel/scst_tgt", str(tmp_path))
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    devices = parse_snapshot(out).devices
    assert devices["set_one"]["usn"] == "fqa1234" and devices["set_one"]["usn_set"] == "set"
    assert devices["own_one"]["usn"] == "5f2c0a1b" and devices["own_one"]["usn_set"] == ""
