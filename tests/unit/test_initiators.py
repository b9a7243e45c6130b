"""nvme-cli and open-iscsi parsers on outputs recorded on the virtual lab (tests/data/targets/README.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fakes import Answer, ScriptedHost

from pytest_fabricqa.initiators import iscsi, nvme
from pytest_fabricqa.transport.base import CommandError

DATA = Path(__file__).parents[1] / "data" / "targets"
NQN = "nqn.2026-11.io.fabricqa:vlab-nvme0"
IQN = "iqn.2026-11.io.fabricqa:vstor"


def test_nvme_discover_json_lists_the_subsystem_not_the_discovery_controller() -> None:
    for name, trtype in (("nvme-discover-tcp.json", "tcp"), ("nvme-discover-rdma.json", "rdma")):
        (record,) = nvme.parse_discovery((DATA / name).read_text())
        assert (record.subnqn, record.trtype, record.traddr, record.trsvcid, record.portid) == (
            NQN,
            trtype,
            "10.10.10.19",
            "4420",
            1,
        )


def test_nvme_discover_with_nothing_exported() -> None:
    assert nvme.parse_discovery('{"genctr": 1, "records": []}') == []
    assert nvme.parse_discovery("") == []


def test_nvme_sysfs_maps_nqn_and_nsid_to_the_block_device() -> None:
    controllers, namespaces = nvme.parse_sysfs((DATA / "nvme-sysfs-tcp.txt").read_text())
    assert [(c.name, c.subsysnqn, c.transport, c.state) for c in controllers] == [("nvme0", NQN, "tcp", "live")]
    assert "traddr=10.10.10.19" in controllers[0].address
    (ns,) = namespaces
    assert (ns.path, ns.subsysnqn, ns.nsid, ns.size_bytes, ns.logical_block_size) == (
        "/dev/nvme0n1",
        NQN,
        1,
        1024**3,
        512,
    )
    rdma_controllers, _ = nvme.parse_sysfs((DATA / "nvme-sysfs-rdma.txt").read_text())
    assert rdma_controllers[0].transport == "rdma"


def test_nvme_sysfs_on_the_target_shows_its_local_drive_and_nothing_after_disconnect() -> None:
    controllers, namespaces = nvme.parse_sysfs((DATA / "nvme-sysfs-target-local.txt").read_text())
    assert [c.transport for c in controllers] == ["pcie"] and namespaces[0].subsysnqn != NQN
    assert nvme.parse_sysfs((DATA / "nvme-sysfs-none.txt").read_text()) == ([], [])


def test_nvme_sysfs_with_a_second_path_keeps_one_head_device() -> None:
    # Native multipath: two controllers (tcp + rdma) share one head nvme0n1; path devices nvme0c0n1 are not listed.
    text = (
        f"C\tnvme0\t{NQN}\ttcp\tlive\ttraddr=10.10.10.19,trsvcid=4420 \n"
        f"C\tnvme1\t{NQN}\trdma\tlive\ttraddr=10.10.10.19,trsvcid=4420 \n"
        f"N\tnvme0n1\t{NQN}\t1\t2097152\t512\n"
    )
    controllers, namespaces = nvme.parse_sysfs(text)
    assert len(controllers) == 2 and [n.name for n in namespaces] == ["nvme0n1"]


def test_iscsiadm_discovery_and_node_listing() -> None:
    (target,) = iscsi.parse_discovery((DATA / "iscsiadm-discovery.txt").read_text())
    assert (target.portal, target.tpgt, target.iqn) == ("10.10.10.19:3260", 1, IQN)
    assert iscsi.parse_discovery((DATA / "iscsiadm-node.txt").read_text()) == [target]


def test_iscsiadm_session_shows_the_transport() -> None:
    (tcp,) = iscsi.parse_sessions((DATA / "iscsiadm-session-tcp.txt").read_text())
    (iser,) = iscsi.parse_sessions((DATA / "iscsiadm-session-iser.txt").read_text())
    assert (tcp.transport, tcp.iqn, tcp.portal, tcp.tpgt) == ("tcp", IQN, "10.10.10.19:3260", 1)
    assert iser.transport == "iser"
    assert iscsi.parse_sessions((DATA / "iscsiadm-session-none.txt").read_text()) == []


def test_iscsi_sysfs_gives_each_lun_its_disk() -> None:
    for name in ("iscsi-sysfs-tcp.txt", "iscsi-sysfs-iser.txt"):
        (disk,) = iscsi.parse_sysfs((DATA / name).read_text())
        assert disk.iqn == IQN and disk.lun == 0 and disk.path.startswith("/dev/sd")
        assert (disk.size_bytes, disk.logical_block_size) == (1024**3, 512)


def test_iscsi_sysfs_with_two_luns_and_a_foreign_session() -> None:
    text = (
        f"S\t1\t{IQN}\tLOGGED_IN\nD\t1\t2:0:0:0\tsda\t2097152\t512\nD\t1\t2:0:0:1\tsdb\t4194304\t4096\n"
        "S\t2\tiqn.2003-01.org.example:other\tLOGGED_IN\nD\t2\t3:0:0:0\tsdc\t100\t512\n"
    )
    disks = iscsi.parse_sysfs(text)
    assert [(d.iqn, d.lun, d.name) for d in disks if d.iqn == IQN] == [(IQN, 0, "sda"), (IQN, 1, "sdb")]
    assert disks[1].logical_block_size == 4096 and disks[1].size_bytes == 2 * 1024**3


def test_portal_names_bracket_ipv6() -> None:
    assert iscsi.portal_name("10.10.10.19", 3260) == "10.10.10.19:3260"
    assert iscsi.portal_name("fd00::19", 3260) == "[fd00::19]:3260"


# -- older tools and kernels: nvme-cli 1.x, Linux < 4.15, open-iscsi exit codes (tests/data/targets/README.md) --

OLD = DATA / "old"


def answering(answers: list[tuple[tuple[str, ...], tuple[int, str, str]]]) -> ScriptedHost:
    """A host that answers each command from ``answers`` (first matching argv prefix); others fail the test."""

    def script(argv: tuple[str, ...]) -> Answer:
        for prefix, answer in answers:
            if argv[: len(prefix)] == prefix and (prefix[-1:] != ("json",) or argv[-1] == "json"):
                return answer
        return None

    return ScriptedHost("el72h1", script)


def test_nvme_cli_1_13_text_discovery_log_is_read() -> None:
    records = nvme.parse_discovery_text((OLD / "nvme-cli-1.13-discover-rdma.txt").read_text())
    assert [(r.subnqn, r.trtype, r.traddr, r.trsvcid, r.portid) for r in records] == [
        ("nvmet1", "rdma", "10.10.10.19", "4420", 1),
        ("nvmet2", "rdma", "10.10.10.19", "4420", 1),
    ]
    (tcp,) = nvme.parse_discovery_text((OLD / "nvme-cli-1.12-discover-tcp.txt").read_text())
    assert (tcp.subnqn, tcp.trtype, tcp.subtype) == (NQN, "tcp", "nvme subsystem")


def test_discover_falls_back_to_text_when_nvme_cli_refuses_json() -> None:
    # nvme-cli 1.13 prints its usage and exits with errno's value, here 0: the refusal is on stderr only.
    refused = (
        0,
        "Usage: nvme discover <device> [OPTIONS]\n",
        (OLD / "nvme-cli-1.13-discover-o-json.stderr").read_text(),
    )
    text = (0, (OLD / "nvme-cli-1.13-discover-rdma.txt").read_text(), "")
    host = answering(
        [
            (("nvme", "discover", "-t", "rdma", "-a", "10.10.10.19", "-s", "4420", "-o", "json"), refused),
            (("nvme", "discover"), text),
        ]
    )
    records = nvme.discover(host, "rdma", "10.10.10.19", 4420)
    assert [r.subnqn for r in records] == ["nvmet1", "nvmet2"]
    assert host.commands[-1] == ("nvme", "discover", "-t", "rdma", "-a", "10.10.10.19", "-s", "4420")


def test_discover_failure_that_is_not_a_refused_option_is_raised() -> None:
    failed = (1, "", "Failed to write to /dev/nvme-fabrics: Connection refused\n")
    host = answering([(("nvme", "discover"), failed)])
    with pytest.raises(CommandError, match="Connection refused"):
        nvme.discover(host, "tcp", "10.10.10.19", 4420)


def _materialise(tree: Path, root: Path) -> None:
    for line in tree.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        rel, content = line.split("\t", 1)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if content.startswith("-> "):
            path.symlink_to(content[3:])
        else:
            path.write_text(content + "\n")


def test_sysfs_script_finds_namespaces_under_the_controller_on_kernels_before_4_15(tmp_path: Path) -> None:
    _materialise(OLD / "sysfs-linux-4.14-rdma.tree", tmp_path)
    assert not (tmp_path / "sys/class/nvme-subsystem").exists()
    out = subprocess.run(
        ["sh", "-c", nvme.SYSFS_SCRIPT, "sh", str(tmp_path)], capture_output=True, text=True, check=True
    )
    controllers, namespaces = nvme.parse_sysfs(out.stdout)
    assert [(c.name, c.subsysnqn, c.transport) for c in controllers] == [
        ("nvme0", "nvmet1", "rdma"),
        ("nvme1", "nvmet2", "rdma"),
    ]
    assert sorted((n.path, n.subsysnqn, n.nsid, n.size_bytes) for n in namespaces) == [
        ("/dev/nvme0n1", "nvmet1", 1, 2344225968 * 512),
        ("/dev/nvme1n1", "nvmet2", 1, 2344225968 * 512),
    ]


def test_iscsiadm_nothing_to_act_on_is_exit_21_and_out_of_memory_is_an_error() -> None:
    # include/iscsi_err.h: 21 ISCSI_ERR_NO_OBJS_FOUND, 3 ISCSI_ERR_NOMEM, 6 ISCSI_ERR_IDBM.
    none = (21, "", "iscsiadm: No active sessions.\n")
    assert iscsi.sessions(answering([(("iscsiadm",), none)])) == []
    nomem = (3, "", "iscsiadm: Could not allocate memory\n")
    with pytest.raises(CommandError, match="exited 3"):
        iscsi.sessions(answering([(("iscsiadm",), nomem)]))
    with pytest.raises(CommandError, match="exited 3"):
        iscsi.logout(answering([(("iscsiadm",), nomem)]), IQN, "10.10.10.19:3260")
    iscsi.logout(answering([(("iscsiadm",), (21, "", "iscsiadm: No matching sessions found\n"))]), IQN, "p")
    iscsi.delete_node(answering([(("iscsiadm",), (21, "", "iscsiadm: No records found\n"))]), IQN, "p")


def test_iscsiadm_failures_other_than_no_objects_are_not_swallowed() -> None:
    not_connected = (20, "", "iscsiadm: Could not connect to iscsid\n")
    for call in (
        lambda h: iscsi.node_records(h),
        lambda h: iscsi.delete_node(h, IQN, "10.10.10.19:3260"),
        lambda h: iscsi.iface_exists(h, "fabricqa_tcp"),
    ):
        with pytest.raises(CommandError, match="exited 20"):
            call(answering([(("iscsiadm",), not_connected)]))
    assert iscsi.node_records(answering([(("iscsiadm",), (21, "", "iscsiadm: No records found\n"))])) == []
    # A missing iface record is ISCSI_ERR_IDBM (6), seen as "does not exist".
    assert not iscsi.iface_exists(answering([(("iscsiadm",), (6, "", "iscsiadm: Could not read iface x (6).\n"))]), "x")
    assert (
        iscsi.discover(answering([(("iscsiadm",), (21, "", "iscsiadm: No portals found\n"))]), "10.10.10.19", 3260, "i")
        == []
    )


def test_sysfs_script_on_a_multipath_kernel_prints_what_it_recorded_on_the_virtual_lab(tmp_path: Path) -> None:
    _materialise(OLD / "sysfs-linux-6.1-tcp.tree", tmp_path)
    out = subprocess.run(
        ["sh", "-c", nvme.SYSFS_SCRIPT, "sh", str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout == (DATA / "nvme-sysfs-tcp.txt").read_text()


REFUSED = "iscsiadm: Could not perform SendTargets discovery: encountered non-retryable iSCSI login failure\n"


def test_a_discovery_login_refused_once_is_tried_again_and_a_lasting_refusal_still_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The refusal's text and exit code (19) as iscsiadm printed them on vnode1 in CI (2026-12-02, SCST over iSER)."""
    monkeypatch.setattr(iscsi, "DISCOVERY_PAUSE_S", 0.0)
    answers = [(19, "", REFUSED), (0, (DATA / "iscsiadm-discovery.txt").read_text(), "")]
    host = ScriptedHost("vnode1", lambda argv: answers.pop(0))
    (target,) = iscsi.discover(host, "10.10.10.19", 3260, "fabricqa_iser")
    assert target.iqn == IQN and len(host.commands) == 2
    refusing = ScriptedHost("vnode1", lambda argv: (19, "", REFUSED))
    with pytest.raises(CommandError, match="non-retryable iSCSI login failure"):
        iscsi.discover(refusing, "10.10.10.19", 3260, "fabricqa_iser")
    assert len(refusing.commands) == iscsi.DISCOVERY_TRIES
    elsewhere = ScriptedHost("vnode1", lambda argv: (4, "", "iscsiadm: cannot make connection to 10.10.10.19\n"))
    with pytest.raises(CommandError):
        iscsi.discover(elsewhere, "10.10.10.19", 3260, "fabricqa_iser")
    assert len(elsewhere.commands) == 1  # other failures are iscsiadm's own to retry, and were


def test_an_iscsiadm_that_crashed_in_discovery_is_tried_again_and_a_lasting_crash_still_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Status 139 and "Segmentation fault" as the lab's shell reported a process killed by SIGSEGV (vnode1,
    2026-12-03), the crash CI met in iscsiadm's iSER discovery reconnect."""
    monkeypatch.setattr(iscsi, "DISCOVERY_PAUSE_S", 0.0)
    answers = [(139, "", "Segmentation fault\n"), (0, (DATA / "iscsiadm-discovery.txt").read_text(), "")]
    host = ScriptedHost("vnode1", lambda argv: answers.pop(0))
    (target,) = iscsi.discover(host, "10.10.10.19", 3260, "fabricqa_iser")
    assert target.iqn == IQN and len(host.commands) == 2
    crashing = ScriptedHost("vnode1", lambda argv: (139, "", "Segmentation fault\n"))
    with pytest.raises(CommandError, match="exited 139"):
        iscsi.discover(crashing, "10.10.10.19", 3260, "fabricqa_iser")
    assert len(crashing.commands) == iscsi.DISCOVERY_TRIES


def test_deleting_records_a_failed_discovery_never_wrote_is_nothing_to_do() -> None:
    """iscsiadm 2.1.8's answers on vnode1 (2026-12-03) for a portal without a SendTargets record, and a target
    without node records: the undo of a discovery that crashed before writing either. (The locking failure is made
    up: any other IDBM failure still raises.)"""
    no_node = (21, "", "iscsiadm: No records found\n")
    no_discovery = (6, "", "iscsiadm: Discovery record [10.10.10.19,3260] not found.\n")
    host = answering([(("iscsiadm", "-m", "node"), no_node), (("iscsiadm", "-m", "discoverydb"), no_discovery)])
    iscsi.delete_records(host, IQN, "10.10.10.19:3260", "10.10.10.19", 3260)
    assert len(host.commands) == 2
    broken_db = (6, "", "iscsiadm: Could not lock discovery DB: /var/lib/iscsi/send_targets/.lock: Permission denied\n")
    failing = answering([(("iscsiadm", "-m", "node"), no_node), (("iscsiadm", "-m", "discoverydb"), broken_db)])
    with pytest.raises(CommandError, match="could not delete the open-iscsi records"):
        iscsi.delete_records(failing, IQN, "10.10.10.19:3260", "10.10.10.19", 3260)
