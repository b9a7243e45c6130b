"""Several paths (``targets[].paths: all``): each initiator connects to every portal from its own port in that
portal's subnet, the kernel's native multipath must make one device of a namespace's paths, and the connectivity
case names a path an initiator does not reach. Hosts scripted with sysfs listings shaped like
``nvme.SYSFS_SCRIPT``'s on the virtual lab (tests/data/targets/nvme-sysfs-tcp.txt)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from fakes import Answer, ScriptedHost

from pytest_fabricqa.core.export import Export, ExportedUnit
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.initiators import connect, dm, iscsi, nvme
from pytest_fabricqa.initiators.connect import connect_iscsi, connect_nvme, path_problems
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabError, LabModel
from pytest_fabricqa.transport.base import CommandError

LABS = Path(__file__).parents[2] / "labs"
DATA = Path(__file__).parents[1] / "data" / "targets"
NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
IQN = "iqn.2026-11.io.fabricqa:vstor"
TWO = Export(
    "nvme-tcp", "tcp", "10.10.10.19", 4420, (ExportedUnit(NQN, 1, "ram0", "/dev/ram0"),), "vstor",
    more_addresses=("10.10.20.19",),
)  # fmt: skip
DISCOVERY = json.dumps(
    {"records": [{"trtype": "tcp", "adrfam": "ipv4", "subtype": "nvme subsystem", "treq": "not specified",
                  "portid": 1, "trsvcid": "4420", "subnqn": NQN, "traddr": "10.10.10.19"}]}
)  # fmt: skip


class MultipathHost(ScriptedHost):
    """An initiator whose `nvme connect` adds a controller per call; with ``native`` one namespace device for the
    subsystem, without it one device per controller (nvme_core multipath=N)."""

    def __init__(self, native: bool = True) -> None:
        super().__init__("vnode1")
        self.native = native
        self.controllers: list[str] = []

    def answer(self, argv: tuple[str, ...]) -> str:
        if argv[:2] == ("nvme", "discover"):
            return DISCOVERY
        if argv[:2] == ("nvme", "connect"):
            address = argv[argv.index("-a") + 1]
            local = next((a.split("=", 1)[1] for a in argv if a.startswith("--host-traddr=")), "10.10.10.17")
            self.controllers.append(f"traddr={address},trsvcid=4420,src_addr={local}")
            return ""
        if argv[:2] == ("sh", "-c") and argv[2] == nvme.SYSFS_SCRIPT:
            lines = [f"C\tnvme{i}\t{NQN}\ttcp\tlive\t{a}" for i, a in enumerate(self.controllers)]
            heads = 1 if self.native else len(self.controllers)
            lines += [f"N\tnvme{i}n1\t{NQN}\t1\t1048576\t512" for i in range(heads if self.controllers else 0)]
            return "\n".join(lines) + "\n"
        return ""


def test_every_path_is_connected_from_the_initiators_port_in_its_subnet() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    host = MultipathHost()
    undo = UndoStack()
    connected = connect_nvme(lab, TWO, host, undo)
    connects = [c for c in host.commands if c[:2] == ("nvme", "connect")]
    assert [(c[c.index("-a") + 1], next(a for a in c if a.startswith("--host-traddr="))) for c in connects] == [
        ("10.10.10.19", "--host-traddr=10.10.10.17"), ("10.10.20.19", "--host-traddr=10.10.20.17"),
    ]  # fmt: skip
    assert [d.path for d in connected.devices] == ["/dev/nvme0n1"]  # one device for the namespace's two paths
    assert len(undo) == 1  # one disconnect by NQN takes every path's controller


class PolicyHost(MultipathHost):
    """A MultipathHost whose subsystem takes an iopolicy the way ``nvme.IOPOLICY_SCRIPT`` reports it (name, before,
    after), or refuses it as the kernel refuses a policy it does not have (the write fails: exit 4)."""

    def __init__(self, refuse: bool = False) -> None:
        super().__init__()
        self.refuse = refuse

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[:3] == ("sh", "-c", nvme.IOPOLICY_SCRIPT):
            if self.refuse:
                return (4, "", "sh: 4: echo: echo: I/O error")
            return f"nvme-subsys1 numa {argv[-1]}\n"
        return super().answer(argv)


def with_iopolicy(tmp_path: Path, policy: str) -> LabModel:
    """labs/vlab.yaml with nvmet's connect setting ``policy`` and no iopolicy expected by the connectivity check."""
    text = (LABS / "vlab.yaml").read_text()
    for old, new in (
        ("      connect: {keep_alive_tmo: 60}\n", f"      connect: {{keep_alive_tmo: 60, iopolicy: {policy}}}\n"),
        ("{native: true, iopolicy: numa,", "{native: true,"),
    ):
        assert old in text, old
        text = text.replace(old, new, 1)
    (tmp_path / "vlab.yaml").write_text(text)
    return load_lab(tmp_path / "vlab.yaml")


def test_the_labs_iopolicy_is_set_on_every_subsystem_once_its_paths_are_connected(tmp_path: Path) -> None:
    lab = with_iopolicy(tmp_path, "round-robin")
    host = PolicyHost()
    connect_nvme(lab, TWO, host, UndoStack())
    sets = [c for c in host.commands if c[:3] == ("sh", "-c", nvme.IOPOLICY_SCRIPT)]
    assert [c[4:] for c in sets] == [("/sys", NQN, "round-robin")]
    assert host.commands.index(sets[0]) > max(i for i, c in enumerate(host.commands) if c[:2] == ("nvme", "connect"))
    unset = PolicyHost()
    connect_nvme(load_lab(LABS / "vlab.yaml"), TWO, unset, UndoStack())
    assert not [c for c in unset.commands if nvme.IOPOLICY_SCRIPT in c]  # the lab does not ask: nothing written


def test_a_policy_the_kernel_refuses_stops_the_connect_in_one_line(tmp_path: Path) -> None:
    lab = with_iopolicy(tmp_path, "queue-depth")
    undo = UndoStack()
    with pytest.raises(ProvisionError, match=r"^vnode1: iopolicy queue-depth could not be set on "
                       r"nqn\.2026-11\.io\.fabricqa:vlab-ram0 \(.*I/O error\); set the target's "
                       r"nvme\.connect\.iopolicy to one this kernel has"):  # fmt: skip
        connect_nvme(lab, TWO, PolicyHost(refuse=True), undo)
    assert len(undo) == 1  # the disconnect was registered before the connect: the caller's unwind takes it away


def test_the_iopolicy_script_writes_only_the_named_subsystem_and_reads_it_back(tmp_path: Path) -> None:
    """IOPOLICY_SCRIPT run for real on a /sys/class/nvme-subsystem layout (a foreign subsystem beside ours)."""
    from pytest_fabricqa.transport.local import LocalHost

    for name, nqn in (("nvme-subsys0", "nqn.2014-08.org.example:foreign"), ("nvme-subsys3", NQN)):
        folder = tmp_path / "class" / "nvme-subsystem" / name
        folder.mkdir(parents=True)
        (folder / "subsysnqn").write_text(nqn + "\n")
        (folder / "iopolicy").write_text("numa\n")
    host = LocalHost("vnode1")
    assert nvme.set_iopolicy(host, NQN, "round-robin", sysfs=str(tmp_path)) == ("nvme-subsys3", "numa")
    subsystems = tmp_path / "class" / "nvme-subsystem"
    assert (subsystems / "nvme-subsys3" / "iopolicy").read_text() == "round-robin\n"
    assert (subsystems / "nvme-subsys0" / "iopolicy").read_text() == "numa\n"
    with pytest.raises(nvme.CommandError, match=r"no NVMe subsystem nqn\.2026-11\.io\.fabricqa:other"):
        nvme.set_iopolicy(host, "nqn.2026-11.io.fabricqa:other", "round-robin", sysfs=str(tmp_path))
    (subsystems / "nvme-subsys3" / "iopolicy").unlink()
    (subsystems / "nvme-subsys3" / "iopolicy").mkdir()  # a write that fails, as the kernel's refusal does
    with pytest.raises(nvme.CommandError, match="the kernel refused iopolicy round-robin"):
        nvme.set_iopolicy(host, NQN, "round-robin", sysfs=str(tmp_path))


def test_a_namespace_that_shows_once_per_path_is_one_line_naming_native_multipath() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    with pytest.raises(ProvisionError, match=r"^vnode1: namespace 1 of .* shows as 2 devices \(nvme0n1, nvme1n1\), one"
                       r" per path; turn the kernel's native NVMe multipath on"):  # fmt: skip
        connect_nvme(lab, TWO, MultipathHost(native=False), UndoStack())


def test_an_initiator_without_a_port_in_a_paths_subnet_is_one_line() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    far = Export("nvme-tcp", "tcp", "10.10.10.19", 4420, TWO.units, "vstor", more_addresses=("10.10.30.19",))
    host = MultipathHost()
    with pytest.raises(ProvisionError, match=r"^vnode1: has no storage port in the subnet of the target's path "
                       r"10\.10\.30\.19; give hosts\.vnode1\.storage a port"):  # fmt: skip
        connect_nvme(lab, far, host, UndoStack())
    assert not [c for c in host.commands if c[:2] == ("nvme", "connect")]


def test_one_path_is_connected_without_a_local_address_as_before() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    one = Export("nvme-tcp", "tcp", "10.10.10.19", 4420, TWO.units, "vstor")
    host = MultipathHost()
    connect_nvme(lab, one, host, UndoStack())
    (connect,) = [c for c in host.commands if c[:2] == ("nvme", "connect")]
    assert not any(a.startswith("--host-traddr") for a in connect)


def _controller(name: str, address: str, state: str = "live") -> nvme.Controller:
    return nvme.Controller(name, NQN, "tcp", state, f"traddr={address},trsvcid=4420,src_addr=10.10.10.17 ")


def test_the_connectivity_case_names_a_path_not_reached_or_not_live() -> None:
    both = [_controller("nvme0", "10.10.10.19"), _controller("nvme1", "10.10.20.19")]
    assert path_problems("vnode1", TWO, both, []) == []
    (problem,) = path_problems("vnode1", TWO, both[:1], [])
    assert problem == (
        f"vnode1: {NQN} is reached over 1 path(s) (10.10.10.19), the lab gives 2 (10.10.10.19, 10.10.20.19): "
        "no live controller to 10.10.20.19"
    )
    (problem,) = path_problems("vnode1", TWO, [both[0], _controller("nvme1", "10.10.20.19", "connecting")], [])
    assert problem.endswith("no live controller to 10.10.20.19; not live: nvme1 (connecting)")


def test_one_iscsi_session_per_path() -> None:
    export = Export("iscsi", "tcp", "10.10.10.19", 3260, (ExportedUnit(IQN, 0, "ram0", "/dev/ram0"),), "vstor")
    session = iscsi.Session(3, "tcp", "10.10.10.19:3260", 1, IQN)
    assert path_problems("vnode1", export, [], [session]) == []
    (problem,) = path_problems("vnode1", export, [], [])
    assert "is reached over 0 path(s) (none)" in problem and problem.endswith("no session to 10.10.10.19")


def test_paths_all_is_refused_for_an_external_array_whose_ports_fabricqa_does_not_make(tmp_path: Path) -> None:
    text = (LABS / "vlab.yaml").read_text()
    path = tmp_path / "lab.yaml"
    external = (
        "  - kind: external\n    address: 10.10.10.50\n    protocols: [iscsi]\n    paths: all\n    name_prefix: array\n"
        "    iscsi: {iqn: 'iqn.2026-11.io.example:array', luns: [a]}\n    devices: {a: {path: /dev/null}}\n"
    )
    path.write_text(text.replace("\nvlab:\n", f"{external}\nvlab:\n", 1))
    with pytest.raises(
        LabError, match=r"targets\[5\]\.paths: paths: all .* \(nvmet, spdk, lio, scst, tgt\), not external; use paths"
    ):
        load_lab(path)
    scst = "    scst: {daemon: start, queued_commands: 128}\n"
    path.write_text(text.replace(scst, "    paths: all\n" + scst, 1))
    assert load_lab(path).target_addresses(load_lab(path).targets[3]) == ("10.10.10.19", "10.10.20.19")


def test_the_lab_names_every_path_and_each_initiators_port_on_it() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    assert lab.target_addresses(lab.target_for("nvme-tcp", "nvmet")) == ("10.10.10.19", "10.10.20.19")
    assert lab.target_addresses(lab.target_for("nvme-tcp", "spdk")) == ("10.10.10.19",)  # paths: first here
    assert lab.target_addresses(lab.target_for("iscsi", "lio")) == ("10.10.10.19", "10.10.20.19")
    assert lab.target_addresses(lab.target_for("iscsi", "tgt")) == ("10.10.10.19",)
    assert lab.local_port("vnode2", "10.10.20.19") == "10.10.20.18"
    assert lab.local_port("vnode2", "10.10.30.19") is None


def test_the_recorded_two_path_connection_passes_the_path_check_and_one_path_less_fails() -> None:
    """vnode1 as the virtual lab showed it with nvmet serving both segments (tests/data/targets)."""
    controllers, namespaces = nvme.parse_sysfs((DATA / "nvme-sysfs-tcp-two-paths.txt").read_text())
    assert sorted(d.name for d in namespaces) == ["nvme0n1", "nvme2n1"]  # one device per namespace, two paths each
    two = Export(
        "nvme-tcp", "tcp", "10.10.10.19", 4420,
        (ExportedUnit(NQN, 1, "ram0", "/dev/ram0"), ExportedUnit(NQN.replace("ram0", "nvme0"), 1, "nvme0", "/dev/x")),
        "vstor", more_addresses=("10.10.20.19",),
    )  # fmt: skip
    assert path_problems("vnode1", two, controllers, []) == []
    (problem,) = path_problems("vnode1", two, [c for c in controllers if c.name != "nvme3"], [])
    assert "vlab-nvme0 is reached over 1 path(s) (10.10.10.19)" in problem


# -- iSCSI over several portals: dm-multipath ---------------------------------------------------------------------

WWID = "36001405e1c2a0b5d9a34cdd8e0f1a2b3"
SCSI_TWO = Export(
    "iscsi", "tcp", "10.10.10.19", 3260, (ExportedUnit(IQN, 0, "ram0", "/dev/ram0"),), "vstor",
    more_addresses=("10.10.20.19",),
)  # fmt: skip


class ScsiMultipathHost(ScriptedHost):
    """An initiator whose logins add a session (and a disk of LUN 0) per portal, and whose multipathd makes a map
    of the disks once there are two (``mapped``), as vnode1 showed it on 2026-12-02: sda and sdb held by dm-0."""

    def __init__(self, mapped: bool = True, remembered: str = "") -> None:
        super().__init__("vnode1")
        self.mapped = mapped
        self.remembered = remembered
        self.portals: list[str] = []

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[:3] == ("iscsiadm", "-m", "discovery"):
            return f"{argv[argv.index('-p') + 1]},1 {IQN}\n"
        if argv[:3] == ("iscsiadm", "-m", "session"):
            if not self.portals:
                return (21, "", "iscsiadm: No active sessions.")
            return "".join(f"tcp: [{4 + i}] {p},1 {IQN} (non-flash)\n" for i, p in enumerate(self.portals))
        if argv[:3] == ("iscsiadm", "-m", "node") and "--login" in argv:
            self.portals.append(argv[argv.index("-p") + 1])
            return ""
        if argv[:2] == ("sh", "-c") and argv[2] == iscsi.SYSFS_SCRIPT:
            return "".join(
                f"S\t{4 + i}\t{IQN}\tLOGGED_IN\nD\t{4 + i}\t{i}:0:0:0\tsd{'ab'[i]}\t1048576\t512\n"
                for i in range(len(self.portals))
            )
        if argv[:2] == ("sh", "-c") and argv[2] == dm.HOLDERS_SCRIPT:
            if not self.mapped or len(self.portals) < 2:
                return ""
            return "".join(f"{disk}\tdm-0\t{WWID}\n" for disk in argv[4:])
        if argv[:2] == ("sh", "-c") and dm.WWIDS_FILE in argv[2]:
            return self.remembered
        if argv == ("cat", "/sys/block/dm-0/dm/uuid"):
            return f"mpath-{WWID}\n"
        return ""


def test_a_lun_over_two_portals_is_used_through_the_map_multipathd_made_of_its_two_disks() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    host, undo = ScsiMultipathHost(), UndoStack()
    (device,) = connect_iscsi(lab, lab.target_for("iscsi", "lio"), SCSI_TWO, host, undo).devices
    assert host.portals == ["10.10.10.19:3260", "10.10.20.19:3260"]
    assert device.path == f"/dev/mapper/{WWID}" and device.size_bytes == 1048576 * 512
    # Undone in this order: the map, the WWID multipathd remembered for it (it was not there before), the logins.
    host.remembered = f"/{WWID}/\n"
    ran = len(host.commands)
    assert undo.unwind() == []
    undone = [c for c in host.commands[ran:] if c[0] == "multipath" or "--logout" in c]
    assert undone == [
        ("multipath", "-f", WWID), ("multipath", "-w", WWID),
        ("iscsiadm", "-m", "node", "-T", IQN, "-p", "10.10.20.19:3260", "--logout"),
        ("iscsiadm", "-m", "node", "-T", IQN, "-p", "10.10.10.19:3260", "--logout"),
    ]  # fmt: skip


def with_dm_lines(tmp_path: Path, lines: str) -> LabModel:
    """labs/vlab.yaml with its ``multipath.dm`` line replaced by ``lines``."""
    (tmp_path / "vlab.yaml").write_text(
        (LABS / "vlab.yaml").read_text().replace("  dm: {queue_if_no_path: true}", lines)
    )
    return load_lab(tmp_path / "vlab.yaml")


def test_the_labs_dm_conf_is_written_before_the_logins_and_removed_after_the_logouts(tmp_path: Path) -> None:
    lab = with_dm_lines(tmp_path, "  dm: {queue_if_no_path: false}\n  dm_conf: {overrides: {no_path_retry: fail}}")
    host, undo = ScsiMultipathHost(), UndoStack()
    connect_iscsi(lab, lab.target_for("iscsi", "lio"), SCSI_TWO, host, undo)
    written = next(i for i, c in enumerate(host.commands) if c[:3] == ("sh", "-c", dm.WRITE_CONF))
    first_login = next(i for i, c in enumerate(host.commands) if "--login" in c)
    assert written < first_login
    assert host.commands[written][4:] == (
        "/etc/multipath/conf.d/fqa-vlab.conf",
        "# written by pytest-fabricqa (name_prefix fqa-vlab): removed when its fabric is torn down\n"
        "overrides {\n\tno_path_retry fail\n}\n",
        "written by pytest-fabricqa",
    )
    ran = len(host.commands)
    assert undo.unwind() == []
    undone = [c for c in host.commands[ran:] if "--logout" in c or c[:3] == ("sh", "-c", dm.REMOVE_CONF)]
    assert [c[2] == dm.REMOVE_CONF for c in undone] == [False, False, True]  # the file goes after the logouts
    plain = ScsiMultipathHost()
    connect_iscsi(load_lab(LABS / "vlab.yaml"), lab.target_for("iscsi", "lio"), SCSI_TWO, plain, UndoStack())
    assert not [c for c in plain.commands if dm.WRITE_CONF in c]  # the lab asks for nothing: nothing written


def test_the_conf_scripts_write_ours_refuse_anothers_and_remove_only_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WRITE_CONF and REMOVE_CONF run for real on a folder, with a multipathd on PATH that logs what it is asked."""
    from pytest_fabricqa.transport.local import LocalHost

    bin_dir, log = tmp_path / "bin", tmp_path / "multipathd.log"
    bin_dir.mkdir()
    (bin_dir / "multipathd").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "multipathd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    host, folder, mark = LocalHost("vnode1"), str(tmp_path / "conf.d"), "written by pytest-fabricqa"
    text = f"# {mark} (name_prefix fqa-vlab)\noverrides {{\n\tno_path_retry fail\n}}\n"
    dm.write_conf(host, "fqa-vlab", text, mark, folder)
    assert (tmp_path / "conf.d" / "fqa-vlab.conf").read_text() == text and log.read_text() == "reconfigure\n"
    assert dm.has_conf(host, "fqa-vlab", mark, folder)
    (tmp_path / "conf.d" / "admin.conf").write_text("defaults {\n\tpolling_interval 10\n}\n")
    with pytest.raises(CommandError, match="exists and was not written by fabricqa"):
        dm.write_conf(host, "admin", text, mark, folder)
    dm.remove_conf(host, "admin", mark, folder)  # not ours: stays
    dm.remove_conf(host, "fqa-vlab", mark, folder)
    dm.remove_conf(host, "fqa-vlab", mark, folder)  # gone already: nothing to do
    assert sorted(p.name for p in (tmp_path / "conf.d").iterdir()) == ["admin.conf"]
    assert log.read_text() == "reconfigure\nreconfigure\n" and not dm.has_conf(host, "fqa-vlab", mark, folder)


def test_a_dm_conf_keyword_or_value_that_is_not_one_word_is_refused_at_load(tmp_path: Path) -> None:
    text = (LABS / "vlab.yaml").read_text()
    for bad, said in (
        ("{overrides: {'no_path_retry; x': 3}}", "'no_path_retry; x' is not a multipath.conf keyword"),
        ("{defaults: {polling_interval: '2 }'}}", "polling_interval: '2 }' is not one multipath.conf value"),
    ):
        (tmp_path / "lab.yaml").write_text(text.replace("  dm: {queue_if_no_path: true}", f"  dm_conf: {bad}"))
        with pytest.raises(LabError, match=re.escape(said)):
            load_lab(tmp_path / "lab.yaml")


def test_a_wwid_multipath_remembered_before_the_login_is_left_remembered() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    host, undo = ScsiMultipathHost(remembered=f"# Valid WWIDs:\n/{WWID}/\n"), UndoStack()
    connect_iscsi(lab, lab.target_for("iscsi", "lio"), SCSI_TWO, host, undo)
    undo.unwind()
    assert ("multipath", "-f", WWID) in host.commands and ("multipath", "-w", WWID) not in host.commands


def test_two_disks_of_one_lun_that_no_map_holds_stop_the_connect_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connect, "DEVICE_TIMEOUT_S", 0.0)
    lab = load_lab(LABS / "vlab.yaml")
    with pytest.raises(ProvisionError, match=r"LUN 0 of .* shows as 2 disks \(sda, sdb\), one per path, and no "
                       r"multipath map holds them") as raised:  # fmt: skip
        connect_iscsi(lab, lab.target_for("iscsi", "lio"), SCSI_TWO, ScsiMultipathHost(mapped=False), UndoStack())
    assert "run multipathd (multipath-tools)" in str(raised.value)


def test_the_holders_listing_names_a_map_only_when_it_holds_every_disk() -> None:
    holders = dm.parse_holders(f"sda\tdm-0\t{WWID}\nsdb\tdm-0\t{WWID}\nsdc\tdm-1\tother\n")
    assert dm.map_of(holders, ["sda", "sdb"]) == dm.Map("dm-0", WWID, ("sda", "sdb"))
    assert dm.map_of(holders, ["sda", "sdc"]) is None  # held apart
    assert dm.map_of(holders, ["sda", "sdd"]) is None  # one not held yet
    assert dm.parse_wwids_file(f"# Valid WWIDs:\n/{WWID}/\n#/{'3' * 10}/\n") == {WWID}


# -- the maps as the connectivity suite checks them ---------------------------------------------------------------

# The table multipath loaded on vnode1 for LIO's LUN over two portals (its -v2 "addmap" line, 2026-12-02), and a
# status of that shape (dm-mpath's: per group its state, per path its device, A or F, fail count, selector args).
TABLE = "0 1048576 multipath 1 queue_if_no_path 1 alua 1 1 service-time 0 2 1 8:0 1 8:16 1"
STATUS = "0 1048576 multipath 2 0 0 0 1 1 A 0 2 2 8:0 A 0 0 1 8:16 {b} 1 0 1"


def test_a_maps_table_gives_its_features_and_every_path_of_every_group() -> None:
    assert dm.parse_table(TABLE) == (("queue_if_no_path",), ("8:0", "8:16"))
    two_groups = "0 2048 multipath 0 0 2 1 round-robin 0 1 1 8:0 1 round-robin 0 1 1 8:16 1"
    assert dm.parse_table(two_groups) == ((), ("8:0", "8:16"))


def test_a_healthy_map_passes_and_each_broken_thing_is_named() -> None:
    daemon, maps = dm.parse_maps(f"daemon\tpid 198 idle\nmap\t{WWID}\t{TABLE}\t{STATUS.format(b='A')}\n")
    assert maps[WWID].active == ("8:0", "8:16")
    assert dm.map_problems("vnode1", daemon, maps, [WWID], 2, True) == []
    _, failed = dm.parse_maps(f"map\t{WWID}\t{TABLE}\t{STATUS.format(b='F')}\n")
    assert dm.map_problems("vnode1", "", failed, [WWID, "gone"], 2, False) == [
        "vnode1: multipathd does not answer (multipathd show daemon): no path comes back by itself",
        f"vnode1: the multipath map {WWID} holds 2 path(s), 1 active; the target serves 2",
        f"vnode1: the multipath map {WWID} queues I/O with no path left, expected it to fail "
        "(multipath.dm.queue_if_no_path; multipath.conf's no_path_retry)",
        "vnode1: the multipath map gone is not there",
    ]


def test_a_killed_runs_dm_conf_is_a_leftover_and_its_clean_up_removes_it(tmp_path: Path) -> None:
    lab = with_dm_lines(tmp_path, "  dm: {queue_if_no_path: true}\n  dm_conf: {overrides: {no_path_retry: 3}}")

    def answer(argv: tuple[str, ...]) -> Answer:
        if argv[:2] == ("sh", "-c") and "head -n 1" in argv[2]:
            return (0, "", "")
        if argv[:2] == ("sh", "-c") and argv[2] == "command -v iscsiadm":
            return (1, "", "")
        return ""

    host = ScriptedHost("vnode1", answer)
    ((sentence, remove),) = connect.initiator_objects(lab, host)
    assert sentence == (
        "vnode1: multipath configuration /etc/multipath/conf.d/fqa-vlab.conf (the lab's dm_conf) still there"
    )
    remove()
    assert host.commands[-1][:5] == ("sh", "-c", dm.REMOVE_CONF, "sh", "/etc/multipath/conf.d/fqa-vlab.conf")
    assert connect.initiator_objects(lab, host, target_host="vstor") != []  # its target host's clean-up takes it
    assert connect.initiator_objects(load_lab(LABS / "vlab.yaml"), host) == []  # a lab without dm_conf: not looked for


class FlushHost(ScriptedHost):
    """An initiator whose map ``36001405x`` is in use for the first ``busy`` tries of ``multipath -f``."""

    def __init__(self, busy: int, other: str = "") -> None:
        super().__init__("vnode1")
        self.busy, self.other = busy, other

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[:2] in (("dmsetup", "info"), ("udevadm", "settle")):
            return ""
        if argv[:2] == ("multipath", "-f"):
            if self.other:
                return (1, "", self.other)
            if self.busy:
                self.busy -= 1
                # multipath-tools 0.9.4's answer on the virtual lab's initiator (CI log, 2026-12-03)
                return (1, "1522.252980 | 36001405x: map in use\n", "")
            return ""
        return None


def test_a_map_in_use_for_a_moment_is_flushed_once_udev_let_go() -> None:
    host = FlushHost(busy=2)
    dm.flush(host, "36001405x", tries=3, pause_s=0)
    assert host.commands[:2] == [("dmsetup", "info", "36001405x"), ("udevadm", "settle", "--timeout=10")]
    assert host.commands.count(("multipath", "-f", "36001405x")) == 3


def test_a_map_still_in_use_after_every_try_or_any_other_failure_raises_with_multipaths_answer() -> None:
    host = FlushHost(busy=5)
    with pytest.raises(CommandError, match=r"still in use after 3 tries 0 s apart.*\n.*map in use"):
        dm.flush(host, "36001405x", tries=3, pause_s=0)
    assert host.commands.count(("multipath", "-f", "36001405x")) == 3
    other = FlushHost(busy=0, other="36001405x: no such map")
    with pytest.raises(CommandError, match="no such map"):
        dm.flush(other, "36001405x", tries=3, pause_s=0)
    assert other.commands.count(("multipath", "-f", "36001405x")) == 1
