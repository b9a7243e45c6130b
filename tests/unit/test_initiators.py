"""nvme-cli and open-iscsi parsers on outputs recorded on the virtual lab (tests/data/targets/README.md)."""

from __future__ import annotations

from pathlib import Path

from pytest_fabricqa.initiators import iscsi, nvme

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
