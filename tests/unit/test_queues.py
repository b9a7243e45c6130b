"""Queue settings: set from the lab file, read back from the hosts (tests/data/queues/README.md)."""

from __future__ import annotations

from pathlib import Path

from fakes import Answer, ScriptedHost

from pytest_fabricqa.fabric.queues import LIO_SCRIPT, NVME_SCRIPT, parse_iscsi_node, parse_lio, parse_nvme, read_queues
from pytest_fabricqa.initiators.iscsi import node_updates as iscsi_node_updates

DATA = Path(__file__).resolve().parent.parent / "data" / "queues"
IQN = "iqn.2026-11.io.fabricqa:vstor"


def text(name: str) -> str:
    return (DATA / name).read_text()


def test_nvme_queues_are_read_from_queue_count_and_sqsize() -> None:
    # queue_count counts the admin queue; sqsize is 0-based.
    assert parse_nvme(text("nvme-sysfs-queues.txt")) == {"nr_io_queues": 1, "queue_size": 128}
    # Controllers that disagree are each recorded, so none hides behind its siblings.
    assert parse_nvme(text("nvme-sysfs-queues-mixed.txt")) == {
        "nvme1.nr_io_queues": 1,
        "nvme1.queue_size": 128,
        "nvme2.nr_io_queues": 4,
        "nvme2.queue_size": 64,
    }
    assert parse_nvme("") == {} and parse_nvme("nvme1 - -\n") == {}


def test_iscsi_and_lio_settings_are_read_from_their_records() -> None:
    assert parse_iscsi_node(text("iscsiadm-node-record.txt")) == {
        "node.session.queue_depth": 32,
        "node.session.cmds_max": 128,
    }
    assert parse_lio(text("lio-queues.txt")) == {
        "default_cmdsn_depth": 64,
        "cmdsn_depth[iqn.2026-11.io.fabricqa:vnode1]": 64,
    }


def test_the_lab_settings_become_node_updates_before_login() -> None:
    updates = iscsi_node_updates(
        IQN, "10.10.10.19:3260", "fabricqa_tcp", {"node.session.queue_depth": 128, "node.session.cmds_max": None}
    )
    assert updates == [
        ["iscsiadm", "-m", "node", "-T", IQN, "-p", "10.10.10.19:3260", "-I", "fabricqa_tcp",
         "-o", "update", "-n", "node.session.queue_depth", "-v", "128"],
    ]  # fmt: skip


def _host(name: str, answers: dict[str, str]) -> ScriptedHost:
    """Answers each read with a file from tests/data/queues; fails what it was not given."""

    def script(argv: tuple[str, ...]) -> Answer:
        key = "nvme" if NVME_SCRIPT in argv else "lio" if LIO_SCRIPT in argv else argv[0]
        return answers.get(key, (1, "", "no such file"))

    return ScriptedHost(name, script)


def test_read_queues_reads_every_host_once_and_leaves_out_what_it_cannot_read() -> None:
    nodes = [_host("vnode1", {"nvme": text("nvme-sysfs-queues.txt")}), _host("vnode2", {})]
    found = read_queues(nodes, None, protocol="nvme-tcp", subsystems=["nqn.2026-11.io.fabricqa:vlab-ram0"])
    assert found == {"vnode1": {"nr_io_queues": 1, "queue_size": 128}}
    assert [len(h.commands) for h in nodes] == [1, 1]
    assert nodes[0].commands[0][-1] == "nqn.2026-11.io.fabricqa:vlab-ram0"

    nodes = [_host("vnode1", {"iscsiadm": text("iscsiadm-node-record.txt")})]
    target = _host("vstor", {"lio": text("lio-queues.txt")})
    found = read_queues(
        nodes, target, protocol="iscsi", subsystems=[IQN], portal="10.10.10.19:3260", iface="fabricqa_tcp",
        target_kind="lio",
    )  # fmt: skip
    assert found["vnode1"] == {"node.session.queue_depth": 32, "node.session.cmds_max": 128}
    assert found["vstor"]["default_cmdsn_depth"] == 64
    assert nodes[0].commands == [("iscsiadm", "-m", "node", "-T", IQN, "-p", "10.10.10.19:3260", "-I", "fabricqa_tcp")]
