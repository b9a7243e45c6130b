"""nvmet: nvmetcli saved JSON in and out, the configfs snapshot parser, plans from lab files.

Data: tests/data/targets/ (recorded on the virtual lab; README.md there says how) and seed 000's nvmetcli file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabError
from pytest_fabricqa.targets.nvmet import (
    NvmetPort,
    SavedConfigError,
    dump_saved_config,
    load_saved_config,
    parse_snapshot,
    plan_from_lab,
    port_conflict,
)

DATA = Path(__file__).parents[1] / "data" / "targets"
LABS = Path(__file__).parents[2] / "labs"


def test_seed_000_saved_config_loads_as_two_subsystems_on_one_rdma_port() -> None:
    plan = load_saved_config(DATA / "nvmetcli-seed000.json")
    assert [s.nqn for s in plan.subsystems] == ["nvmet2", "nvmet1"]
    assert [ns.path for s in plan.subsystems for ns in s.namespaces] == ["/dev/nvme0n1", "/dev/nvme1n1"]
    assert all(s.allow_any_host for s in plan.subsystems)
    assert plan.subsystems[0].namespaces[0].nguid == "00000000-0000-0000-0000-000000000102"
    (port,) = plan.ports
    assert (port.trtype, port.traddr, port.trsvcid, port.portid) == ("rdma", "10.10.10.19", 4420, 1)
    assert port.subsystems == ("nvmet2", "nvmet1")


def test_saved_config_round_trips_to_the_same_json() -> None:
    original = json.loads((DATA / "nvmetcli-seed000.json").read_text())
    assert dump_saved_config(load_saved_config(original)) == original


def test_saved_config_maps_device_paths_to_the_lab_device_names() -> None:
    lab = load_lab(LABS / "rac3.yaml")
    plan = load_saved_config(DATA / "nvmetcli-seed000.json", lab.targets[0])
    assert [ns.backing for s in plan.subsystems for ns in s.namespaces] == ["p750a", "p750b"]


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda d: d["subsystems"][0].update(nqn="bad nqn with spaces"), "subsystems[0].nqn"),
        (lambda d: d["subsystems"][1]["namespaces"][0]["device"].update(path="nvme1n1"), "namespaces[0].device.path"),
        (lambda d: d["ports"][0]["addr"].update(trtype="fc"), "ports[0].addr.trtype"),
        (lambda d: d["ports"][0]["subsystems"].append("nvmet9"), "ports[0].subsystems"),
        (lambda d: d["subsystems"][0]["namespaces"][0].update(nsid=0), "namespaces[0].nsid"),
    ],
)
def test_a_bad_saved_config_names_the_key(mutate: object, key: str) -> None:
    data = json.loads((DATA / "nvmetcli-seed000.json").read_text())
    mutate(data)  # type: ignore[operator]
    with pytest.raises(SavedConfigError) as info:
        load_saved_config(data)
    assert key in str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_saved_config_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SavedConfigError, match="cannot read"):
        load_saved_config(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(SavedConfigError, match="not JSON"):
        load_saved_config(tmp_path / "x.json")


def test_recorded_snapshot_parses_subsystem_namespace_and_port() -> None:
    snap = parse_snapshot((DATA / "nvmet-snapshot-tcp.txt").read_text())
    nqn = "nqn.2026-11.io.fabricqa:vlab-nvme0"
    assert list(snap.subsystems) == [nqn]
    assert snap.model_of(nqn) == "fabricqa"
    assert snap.subsystems[nqn]["namespaces"][1]["path"] == "/dev/nvme0n1"
    assert snap.subsystems[nqn]["namespaces"][1]["enable"] == 1
    assert snap.ports[1]["trtype"] == "tcp" and snap.ports[1]["subsystems"] == [nqn]
    assert json.loads((DATA / "nvmet-provisioned-tcp.json").read_text()) == snap.to_saved_config()


def test_empty_snapshot_and_unloaded_nvmet() -> None:
    snap = parse_snapshot((DATA / "nvmet-snapshot-empty.txt").read_text())
    assert snap.loaded and not snap.subsystems and not snap.ports
    assert not parse_snapshot("NOCONFIGFS\n").loaded


def test_port_conflict_finds_the_same_address_and_wildcards_but_not_other_transports() -> None:
    snap = parse_snapshot((DATA / "nvmet-snapshot-rdma.txt").read_text())
    rdma = NvmetPort("rdma", "10.10.10.19", 4420, ())
    assert port_conflict(snap, rdma) == 1
    assert port_conflict(snap, rdma, frozenset({1})) is None
    assert port_conflict(snap, NvmetPort("tcp", "10.10.10.19", 4420, ())) is None
    assert port_conflict(snap, NvmetPort("rdma", "10.10.10.19", 4421, ())) is None
    snap.ports[1]["traddr"] = "0.0.0.0"
    assert port_conflict(snap, rdma) == 1


def test_plan_from_the_vlab_lab_serves_each_nvme_protocol_on_every_storage_address() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    for protocol, trtype in (("nvme-tcp", "tcp"), ("nvme-rdma", "rdma")):
        plan = plan_from_lab(lab, lab.target_for(protocol), protocol)
        # paths: all: a port per storage port of vstor, the first first (the portal discovery asks).
        assert [(p.trtype, p.traddr, p.trsvcid) for p in plan.ports] == [
            (trtype, "10.10.10.19", 4420), (trtype, "10.10.20.19", 4420),
        ]  # fmt: skip
        assert all(p.subsystems == plan.ports[0].subsystems for p in plan.ports)
        assert [(s.nqn, [ns.path for ns in s.namespaces]) for s in plan.subsystems] == [
            ("nqn.2026-11.io.fabricqa:vlab-ram0", ["/dev/ram0"]),
            ("nqn.2026-11.io.fabricqa:vlab-nvme0", ["/dev/nvme0n1"]),
        ]
        # Closed to any host (issue 31's access check): each subsystem admits the initiators' host_nqn.
        assert plan.hosts == ("nqn.2026-11.io.fabricqa:vnode1", "nqn.2026-11.io.fabricqa:vnode2")
        assert all(not s.allow_any_host and s.allowed_hosts == plan.hosts for s in plan.subsystems)


def _lab_with(tmp_path: Path, **nvme: object) -> Path:
    text = (LABS / "vlab.yaml").read_text()
    base = '        - {nqn: "nqn.2026-11.io.fabricqa:vlab-nvme0", namespaces: [nvme0], allow_any_host: false}'
    assert base in text  # the lab as shipped closes its subsystems to any host
    replacement = base
    if "saved_config" in nvme:
        replacement = base + f"\n      saved_config: {nvme['saved_config']}"
    path = tmp_path / "lab.yaml"
    path.write_text(text.replace(base, replacement))
    return path


def test_a_subsystem_closed_to_any_host_admits_every_initiator_host_nqn(tmp_path: Path) -> None:
    lab = load_lab(_lab_with(tmp_path))
    plan = plan_from_lab(lab, lab.target_for("nvme-tcp"), "nvme-tcp")
    closed = plan.subsystems[1]
    assert closed.nqn.endswith("vlab-nvme0") and not closed.allow_any_host
    assert closed.allowed_hosts == ("nqn.2026-11.io.fabricqa:vnode1", "nqn.2026-11.io.fabricqa:vnode2")
    assert plan.hosts == closed.allowed_hosts


def test_a_closed_subsystem_and_an_initiator_without_host_nqn_is_one_line(tmp_path: Path) -> None:
    path = _lab_with(tmp_path)
    path.write_text(path.read_text().replace("    host_nqn: nqn.2026-11.io.fabricqa:vnode2\n", ""))
    # Caught when the lab is loaded (pytest_fabricqa.lab.rules), no longer at provisioning.
    with pytest.raises(LabError, match=r"hosts\.vnode2: initiator vnode2 declares no host_nqn, .*set hosts\.vnode2"):
        load_lab(path)


def test_a_saved_config_for_rdma_still_serves_tcp_on_the_lab_port(tmp_path: Path) -> None:
    lab = load_lab(_lab_with(tmp_path, saved_config=DATA / "nvmetcli-seed000.json"))
    rdma = plan_from_lab(lab, lab.target_for("nvme-rdma"), "nvme-rdma")
    assert [p.trtype for p in rdma.ports] == ["rdma"] and rdma.ports[0].portid == 1
    tcp = plan_from_lab(lab, lab.target_for("nvme-tcp"), "nvme-tcp")
    assert [(p.trtype, p.traddr, p.trsvcid, p.subsystems) for p in tcp.ports] == [
        ("tcp", "10.10.10.19", 4420, ("nvmet2", "nvmet1"))
    ]


def test_rac3_declares_the_seed_000_namespaces_with_their_nguids() -> None:
    """labs/rac3.yaml says in lab keys what seed 000's nvmetcli JSON says: same subsystems, paths and NGUIDs."""
    lab = load_lab(LABS / "rac3.yaml")
    declared = plan_from_lab(lab, lab.target_for("nvme-rdma", "nvmet"), "nvme-rdma")
    saved = load_saved_config(DATA / "nvmetcli-seed000.json")

    def namespaces(plan: object) -> dict[str, list[tuple[str, str | None]]]:
        return {s.nqn: [(n.path, n.nguid) for n in s.namespaces] for s in plan.subsystems}  # type: ignore[attr-defined]

    assert (
        namespaces(declared)
        == namespaces(saved)
        == {
            "nvmet1": [("/dev/nvme1n1", "00000000-0000-0000-0000-000000000101")],
            "nvmet2": [("/dev/nvme0n1", "00000000-0000-0000-0000-000000000102")],
        }
    )
    assert [(p.trtype, p.traddr, p.trsvcid) for p in declared.ports] == [("rdma", "10.10.10.19", 4420)]


def test_with_paths_first_the_plan_has_the_first_storage_port_only(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text((LABS / "vlab.yaml").read_text().replace("    paths: all ", "    paths: first "))
    lab = load_lab(path)
    plan = plan_from_lab(lab, lab.target_for("nvme-tcp"), "nvme-tcp")
    assert [p.traddr for p in plan.ports] == ["10.10.10.19"]
