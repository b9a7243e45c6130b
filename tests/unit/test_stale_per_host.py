"""The clean-up before a connect touches only what belongs to the target host being connected: under xdist with
``--dist loadgroup`` another worker may have a fabric of the lab's other target host live on the same initiators,
and its controllers, sessions, node records and iface look exactly like a killed run's.

The lab is the virtual lab with a second target host (vstor2: nvmet and LIO, own NQN, IQN and name_prefix); the
initiator is a stateful scripted host whose listings are the recorded virtual-lab outputs (tests/data/targets),
with vstor2's lines made from them by changing the names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from fakes import Answer, ScriptedHost
from labfiles import vlab_kernel_text

from pytest_fabricqa.fabric import provision
from pytest_fabricqa.initiators import nvme
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.lab.rules import lab_problems

DATA = Path(__file__).parents[1] / "data" / "targets"
LABS = Path(__file__).parents[2] / "labs"
NQN_A = "nqn.2026-11.io.fabricqa:vlab-nvme0"  # vstor's nvmet
IQN_A = "iqn.2026-11.io.fabricqa:vstor"  # vstor's LIO
NQN_B = "nqn.2026-11.io.fabricqa:vstor2-ram0"
IQN_B = "iqn.2026-11.io.fabricqa:vstor2"
PORTAL_A, PORTAL_B = "10.10.10.19:3260", "10.10.10.20:3260"


def two_target_hosts(*, shared: bool = False) -> LabModel:
    """vlab.yaml plus vstor2 running an nvmet and a LIO target of its own. ``shared``: vstor2's nvmet also serves
    NQN_A and its LIO keeps the default name_prefix (so its iface names are vstor's); the lab rules refuse
    both, a lab built in code does not go through them (and a saved nvmet config's NQNs they do not read)."""
    data: dict[str, Any] = yaml.safe_load(vlab_kernel_text())
    data.pop("vlab")  # a lab of real hosts: no guests to describe
    data["hosts"]["vstor2"] = {
        "address": "127.0.0.1",
        "port": 22194,
        "roles": ["target"],
        "storage": {"interface": "eth1", "address": "10.10.10.20"},
    }
    nvmet, lio = data["targets"]
    nvmet["name_prefix"] = lio["name_prefix"] = "fabricqa"  # as the recorded listings of tests/data/targets
    subsystems = [{"nqn": NQN_B, "namespaces": ["ram0"]}]
    if shared:
        subsystems.append({"nqn": NQN_A, "namespaces": ["nvme0"]})
    prefix = {"name_prefix": "fabricqa" if shared else "fabricqa2"}
    data["targets"] += [
        dict(nvmet, name="nvmet2", host="vstor2", nvme=dict(nvmet["nvme"], subsystems=subsystems), **prefix),
        dict(lio, name="lio2", host="vstor2", iscsi=dict(lio["iscsi"], iqn=IQN_B), **prefix),
    ]
    return LabModel.model_validate(data)


class Initiator(ScriptedHost):
    """An initiator holding NVMe controllers, iSCSI sessions, node records and iface records, as nvme-cli and
    iscsiadm show and change them."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        controller = (DATA / "nvme-sysfs-tcp.txt").read_text().splitlines()[0]  # C nvme0 <NQN_A> tcp live ...
        controller_b = controller.replace(NQN_A, NQN_B).replace("\tnvme0\t", "\tnvme1\t")
        session = (DATA / "iscsiadm-session-tcp.txt").read_text().strip()  # tcp: [7] <PORTAL_A>,1 <IQN_A> ...
        record = (DATA / "iscsiadm-node.txt").read_text().strip()  # <PORTAL_A>,1 <IQN_A>
        self.controllers = {
            NQN_A: controller,
            NQN_B: controller_b.replace("10.10.10.19", "10.10.10.20"),
        }
        self.sessions = {
            IQN_A: session,
            IQN_B: session.replace("[7]", "[8]").replace(PORTAL_A, PORTAL_B).replace(IQN_A, IQN_B),
        }
        self.records = {IQN_A: record, IQN_B: record.replace(PORTAL_A, PORTAL_B).replace(IQN_A, IQN_B)}
        self.ifaces = {"fabricqa_tcp", "fabricqa_iser", "fabricqa2_tcp", "fabricqa2_iser"}

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv == ("sh", "-c", nvme.SYSFS_SCRIPT):
            return "".join(line + "\n" for line in self.controllers.values())
        if argv[:3] == ("nvme", "disconnect", "-n"):
            self.controllers.pop(argv[3], None)
            return ""
        if argv == ("sh", "-c", "command -v iscsiadm"):
            return "/usr/sbin/iscsiadm\n"
        if argv == ("iscsiadm", "-m", "session"):
            listing = "".join(line + "\n" for line in self.sessions.values())
            return listing or (21, "", "iscsiadm: No active sessions.\n")
        if argv == ("iscsiadm", "-m", "node"):
            listing = "".join(line + "\n" for line in self.records.values())
            return listing or (21, "", "iscsiadm: No records found\n")
        if argv[:4] == ("iscsiadm", "-m", "node", "-T") and argv[7:] == ("--logout",):
            self.sessions.pop(argv[4], None)
            return ""
        if argv[:4] == ("iscsiadm", "-m", "node", "-T") and argv[7:] == ("-o", "delete"):
            self.records.pop(argv[4], None)
            return ""
        if argv[:4] == ("iscsiadm", "-m", "iface", "-I") and len(argv) == 5:
            return "" if argv[4] in self.ifaces else (6, "", f"iscsiadm: Could not read iface {argv[4]} (6).\n")
        if argv[:4] == ("iscsiadm", "-m", "iface", "-I") and argv[5:] == ("-o", "delete"):
            self.ifaces.discard(argv[4])
            return ""
        if argv[:2] == ("sh", "-c") and argv[-1].endswith(("-faults.json", "-reservations.json")):
            return ""  # no fault records: no fault was left injected
        return None


def test_the_lab_of_two_target_hosts_is_a_valid_lab_and_sharing_names_across_them_is_not() -> None:
    assert list(lab_problems(two_target_hosts())) == []
    assert [key for key, _ in lab_problems(two_target_hosts(shared=True))] == [
        ("targets", "2", "nvme", "subsystems", "1", "nqn"),
        ("targets", "3", "name_prefix"),
    ]


def test_cleaning_for_one_target_host_leaves_the_other_hosts_controllers_sessions_records_and_ifaces() -> None:
    """Connecting vstor's fabric removes the stale objects of vstor's targets on every initiator; what belongs to
    vstor2's targets -- perhaps another worker's live fabric -- is not touched, not even by a command."""
    lab = two_target_hosts()
    hosts = {name: Initiator(name) for name in ("vnode1", "vnode2")}
    removed = provision.cleanup_stale(lab, hosts, target_host="vstor")
    for name, host in hosts.items():
        assert list(host.controllers) == [NQN_B] and list(host.sessions) == [IQN_B] and list(host.records) == [IQN_B]
        assert host.ifaces == {"fabricqa2_tcp", "fabricqa2_iser"}
        assert not [c for c in host.commands if any(IQN_B in a or NQN_B in a or "fabricqa2" in a for a in c)]
        assert [line for line in removed if line.startswith(f"{name}:")] == [
            f"{name}: NVMe controller(s) nvme0 to {NQN_A} disconnected",
            f"{name}: iSCSI session 7 to {IQN_A} (tcp) logged out",
            f"{name}: open-iscsi node record {IQN_A} at {PORTAL_A} removed",
            f"{name}: open-iscsi iface fabricqa_iser removed",
            f"{name}: open-iscsi iface fabricqa_tcp removed",
        ]
    # vstor2's own connect cleans vstor2's, and the lab-wide leftovers gate still sees everything until then.
    assert len(provision.leftovers(lab, hosts)) == 2 * 5
    provision.cleanup_stale(lab, hosts, target_host="vstor2")
    assert provision.leftovers(lab, hosts) == []


def test_a_name_another_target_host_also_uses_is_left_to_the_lab_wide_clean_up() -> None:
    """vstor2 serves NQN_A too and shares vstor's iface names: cleaning for vstor leaves the controller to NQN_A and
    both ifaces alone (vstor2's fabric may be using them in another worker) but still logs vstor's own IQN out; the
    leftovers gate names what stayed, and the lab-wide clean-up removes it."""
    lab = two_target_hosts(shared=True)
    hosts = {name: Initiator(name) for name in ("vnode1", "vnode2")}
    removed = provision.cleanup_stale(lab, hosts, target_host="vstor")
    assert removed == [
        line
        for name in hosts
        for line in (
            f"{name}: iSCSI session 7 to {IQN_A} (tcp) logged out",
            f"{name}: open-iscsi node record {IQN_A} at {PORTAL_A} removed",
        )
    ]
    for host in hosts.values():
        assert set(host.controllers) == {NQN_A, NQN_B} and host.ifaces >= {"fabricqa_tcp", "fabricqa_iser"}
        disconnects = [c for c in host.commands if c[:2] == ("nvme", "disconnect")]
        iface_deletes = [c for c in host.commands if c[2:3] == ("iface",) and c[-2:] == ("-o", "delete")]
        assert disconnects == [] and iface_deletes == []
    assert f"vnode1: NVMe controller(s) nvme0 to {NQN_A} still connected" in provision.leftovers(lab, hosts)
    provision.cleanup_stale(lab, hosts)
    assert provision.leftovers(lab, hosts) == []
