"""Lab files: the shipped labs load, and every kind of bad input gives one line naming file, key and fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_fabricqa.lab.load import load_lab, resolve_lab_path
from pytest_fabricqa.lab.model import LabError, LabModel
from pytest_fabricqa.lab.thresholds import Thresholds, thresholds_for

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
name: t
hosts:
  stor:
    address: 10.0.0.1
    roles: [target]
    storage: {interface: eth1, address: 10.10.10.19}
  node1:
    address: 10.0.0.2
    roles: [initiator]
network: {link_speed_gbps: 40}
protocols: [nvme-tcp]
targets:
  - kind: nvmet
    host: stor
    protocols: [nvme-tcp]
    devices: {d0: {path: /dev/nvme0n1}}
    nvme: {subsystems: [{nqn: nvmet1, namespaces: [d0]}]}
"""


def iscsi_lab(setting: str) -> str:
    """GOOD with its nvmet target serving iSCSI instead, with ``setting`` in the target's iscsi section."""
    return GOOD.replace("protocols: [nvme-tcp]", "protocols: [iscsi]").replace(
        "    nvme: {subsystems: [{nqn: nvmet1, namespaces: [d0]}]}",
        f"    iscsi: {{iqn: 'iqn.2026-11.io.x:t', luns: [d0], {setting}}}",
    )


def spdk_lab(settings: str) -> str:
    """GOOD with an SPDK target instead of nvmet (a full NQN, as SPDK wants), with ``settings`` as its spdk section."""
    return GOOD.replace("kind: nvmet", "kind: spdk").replace("nqn: nvmet1", "nqn: 'nqn.2016-06.io.spdk:cnode1'") + (
        f"    spdk: {settings}\n" if settings else ""
    )


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return path


def test_rac3_reproduces_seed_000() -> None:
    lab = load_lab(ROOT / "labs" / "rac3.yaml")
    assert lab.hosts_with("initiator") == ["el72h1", "el72h2"]
    assert [str(lab.hosts[h].storage_link.address) for h in ("el72h1", "el72h2", "el72h3")] == [  # type: ignore[union-attr]
        "10.10.10.17",
        "10.10.10.18",
        "10.10.10.19",
    ]
    nvmet = lab.target_for("nvme-rdma")
    assert nvmet.kind == "nvmet" and nvmet.host == "el72h3"
    assert nvmet.nvme is not None and nvmet.nvme.port == 4420
    assert [s.nqn for s in nvmet.nvme.subsystems] == ["nvmet1", "nvmet2"]
    assert [d.path for d in nvmet.devices.values()] == ["/dev/nvme0n1", "/dev/nvme1n1"]
    assert lab.network.link_speed_gbps == 40
    assert lab.target_address(nvmet) == "10.10.10.19"


def test_vlab_has_a_storage_node_and_two_initiators() -> None:
    lab = load_lab(ROOT / "labs" / "vlab.yaml")
    assert lab.hosts_with("target") == ["vstor"] and len(lab.hosts_with("initiator")) == 2
    assert set(lab.protocols) == {"nvme-tcp", "nvme-rdma", "iscsi", "iser"}
    assert lab.vlab is not None and set(lab.vlab) == set(lab.hosts)
    # The virtual-lab tests hand the lab to child processes as its JSON dump: it must load back as it was.
    assert LabModel.model_validate(lab.model_dump(mode="json")) == lab


def test_good_lab_loads(tmp_path: Path) -> None:
    assert isinstance(load_lab(write(tmp_path, GOOD)), LabModel)


def test_a_host_has_one_storage_port_or_a_list_of_them(tmp_path: Path) -> None:
    one = load_lab(write(tmp_path, GOOD))
    assert [p.interface for p in one.hosts["stor"].storage] == ["eth1"]
    assert one.hosts["node1"].storage == () and one.hosts["node1"].storage_link is None
    two = load_lab(
        write(
            tmp_path,
            GOOD.replace(
                "storage: {interface: eth1, address: 10.10.10.19}",
                "storage: [{interface: eth1, address: 10.10.10.19}, {interface: eth2, address: 10.10.20.19}]",
            ),
        )
    )
    ports = two.hosts["stor"].storage
    assert [(p.interface, str(p.address)) for p in ports] == [("eth1", "10.10.10.19"), ("eth2", "10.10.20.19")]
    assert two.hosts["stor"].storage_link == ports[0]
    assert two.target_address(two.target_for("nvme-tcp")) == "10.10.10.19"  # the first path, as before
    assert LabModel.model_validate(two.model_dump(mode="json")) == two  # a dumped lab loads back (the vlab tests)


BAD = [
    ("empty", "", r"lab\.yaml: the lab file is empty"),
    ("syntax", "name: [unclosed\n", r"lab\.yaml:\d+: YAML syntax error"),
    ("not-a-mapping", "- a\n- b\n", r"lab\.yaml:1: the lab file must be a mapping .* not a list"),
    ("missing-key", GOOD.replace("name: t\n", ""), r"lab\.yaml(:1)?: name: required key is missing"),
    ("unknown-key", GOOD + "colour: blue\n", r"lab\.yaml:\d+: colour: unknown key"),
    (
        "wrong-type",
        GOOD.replace("link_speed_gbps: 40", "link_speed_gbps: fast"),
        r"lab\.yaml:\d+: network\.link_speed_gbps: .*number.*\(got 'fast'\)",
    ),
    (
        "unknown-protocol",
        GOOD.replace("protocols: [nvme-tcp]\ntargets", "protocols: [fc]\ntargets"),
        r"lab\.yaml:\d+: protocols\[0\]: 'fc' is not allowed; allowed: 'nvme-tcp', 'nvme-rdma', 'iscsi' or 'iser'",
    ),
    (
        "unknown-target-kind",
        GOOD.replace("kind: nvmet", "kind: netapp"),
        r"lab\.yaml:\d+: targets\[0\]\.kind: 'netapp' is not a target kind; allowed: nvmet, spdk, lio",
    ),
    (
        "unknown-role",
        GOOD.replace("roles: [target]", "roles: [storage]"),
        r"lab\.yaml:\d+: hosts\.stor\.roles\[0\]: 'storage' is not allowed; allowed: 'target', 'initiator' or 'db'",
    ),
    (
        "bad-nqn",
        GOOD.replace("nqn: nvmet1", "nqn: 'x;touch /tmp/pwned'"),
        r"lab\.yaml:\d+: targets\[0\]\.nvme\.subsystems\[0\]\.nqn: 'x;touch /tmp/pwned': a short name \(nvmet only\)",
    ),
    (
        "corruptible-not-writable",
        GOOD.replace("d0: {path: /dev/nvme0n1}", "d0: {path: /dev/nvme0n1, corruptible: true}"),
        r"lab\.yaml:\d+: targets\[0\]\.devices\.d0: corruptible: true needs writable: true",
    ),
    (
        "undeclared-device",
        GOOD.replace("namespaces: [d0]", "namespaces: [d9]"),
        r"lab\.yaml:\d+: targets\[0\]: exports device 'd9', which is not under 'devices'",
    ),
    (
        "protocol-without-target",
        GOOD.replace("protocols: [nvme-tcp]\ntargets", "protocols: [nvme-tcp, iser]\ntargets"),
        r"lab\.yaml(:1)?: protocol 'iser' is declared but no target serves it",
    ),
    (
        "unknown-limit",
        GOOD + "thresholds:\n  '*':\n    '*': {min_iop: 5}\n",
        r"lab\.yaml:\d+: thresholds\.\*\.\*\.min_iop: unknown key",
    ),
    (
        "limit-not-a-number",
        GOOD + "thresholds:\n  iscsi:\n    '*': {max_p99_us: 1ms}\n",
        r"lab\.yaml:\d+: thresholds\.iscsi\.\*\.max_p99_us: expected a number, not '1ms'",
    ),
    (
        "bad-workload-override",
        GOOD + "workloads: {sets: [alflash-4k]}\n",
        r"lab\.yaml:\d+: workloads: sets\[0\]: unknown set 'alflash-4k'",
    ),
    (
        "cmds-max-not-a-power-of-two",
        iscsi_lab("cmds_max: 100"),
        r"lab\.yaml:\d+: targets\[0\]\.iscsi\.cmds_max: cmds_max 100 must be a power of two",
    ),
    (
        "cmdsn-depth-on-a-non-lio-target",
        iscsi_lab("cmdsn_depth: 128"),
        r"lab\.yaml:\d+: targets\[0\]: iscsi\.cmdsn_depth is LIO's default_cmdsn_depth; a nvmet target",
    ),
    (
        "spdk-no-huge-without-memory",
        spdk_lab("{no_huge: true}"),
        r"lab\.yaml:\d+: targets\[0\]\.spdk: no_huge runs nvmf_tgt without hugepages and needs its memory size; "
        r"set mem_size_mb, e\.g\. 512$",
    ),
    (
        "spdk-start-keys-when-attaching",
        spdk_lab("{start: false, binary: /opt/spdk/build/bin/nvmf_tgt, core_mask: '0x3'}"),
        r"lab\.yaml:\d+: targets\[0\]\.spdk: binary, core_mask only apply when the plugin starts nvmf_tgt; set "
        r"start: true or drop them$",
    ),
    (
        "spdk-bad-core-mask",
        spdk_lab("{core_mask: 'cores 1-2'}"),
        r"lab\.yaml:\d+: targets\[0\]\.spdk\.core_mask: core_mask 'cores 1-2' is not an SPDK core mask",
    ),
    (
        "spdk-relative-socket",
        spdk_lab("{rpc_socket: spdk.sock}"),
        r"lab\.yaml:\d+: targets\[0\]\.spdk\.rpc_socket: 'spdk\.sock' must be an absolute path on the target host",
    ),
    (
        "spdk-unknown-key",
        spdk_lab("{hugepages: 512}"),
        r"lab\.yaml:\d+: targets\[0\]\.spdk\.hugepages: unknown key",
    ),
    (
        "spdk-section-on-nvmet",
        GOOD + "    spdk: {start: false}\n",
        r"lab\.yaml:\d+: targets\[0\]: 'spdk' holds settings of spdk targets; a nvmet target cannot take it$",
    ),
    (
        "bad-address",
        GOOD.replace("address: 10.10.10.19", "address: 10.10.10.300"),
        r"lab\.yaml:\d+: hosts\.stor\.storage\.address: ",
    ),
    (
        "bad-address-of-a-second-path",
        GOOD.replace(
            "storage: {interface: eth1, address: 10.10.10.19}",
            "storage: [{interface: eth1, address: 10.10.10.19}, {interface: eth2, address: 10.10.20.300}]",
        ),
        r"lab\.yaml:6: hosts\.stor\.storage\[1\]\.address: ",
    ),
    (
        "two-paths-on-one-interface",
        GOOD.replace(
            "storage: {interface: eth1, address: 10.10.10.19}",
            "storage: [{interface: eth1, address: 10.10.10.19}, {interface: eth1, address: 10.10.20.19}]",
        ),
        r"lab\.yaml:6: hosts\.stor\.storage: two storage ports share the interface eth1; each path needs its own$",
    ),
]


@pytest.mark.parametrize(("text", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_lab_gives_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(LabError) as info:
        load_lab(write(tmp_path, text))
    text_out = str(info.value)
    assert "\n" not in text_out
    assert text_out.startswith(str(tmp_path / "lab.yaml"))
    assert re.search(message, text_out), text_out


def test_spdk_settings_load_with_defaults_or_as_given(tmp_path: Path) -> None:
    lab = load_lab(write(tmp_path, spdk_lab("")))
    assert lab.targets[0].spdk is None and lab.targets[0].spdk_settings.start
    assert lab.targets[0].spdk_settings.rpc_socket == "/var/tmp/spdk.sock"
    lab = load_lab(write(tmp_path, spdk_lab("{core_mask: '[0,2-3]', mem_size_mb: 512, no_huge: true}")))
    settings = lab.targets[0].spdk_settings
    assert (settings.core_mask, settings.mem_size_mb, settings.no_huge) == ("[0,2-3]", 512, True)
    lab = load_lab(write(tmp_path, spdk_lab("{core_mask: 0xff}")))  # YAML's number 255, meant as the mask
    assert lab.targets[0].spdk_settings.core_mask == "0xff"


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(LabError, match=r"cannot read the lab file"):
        load_lab(tmp_path / "gone.yaml")


def test_lab_name_resolves_under_labs_dir(tmp_path: Path) -> None:
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "mine.yaml").write_text(GOOD)
    assert resolve_lab_path("mine", tmp_path) == tmp_path / "labs" / "mine.yaml"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.yml").write_text(GOOD)
    assert resolve_lab_path("x", tmp_path, "elsewhere") == tmp_path / "elsewhere" / "x.yml"


def test_unknown_lab_name_lists_known_labs(tmp_path: Path) -> None:
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "rac3.yaml").write_text(GOOD)
    with pytest.raises(LabError, match=r"--lab=rac4: unknown lab name \(known labs: rac3\)"):
        resolve_lab_path("rac4", tmp_path)


def test_a_threshold_pattern_that_matches_no_workload_names_what_it_could_mean(tmp_path: Path) -> None:
    text = GOOD + "thresholds:\n  nvme-tcp:\n    randread-8k*: {min_iops: 1}\n    randread-8k-qd12-j4: {min_iops: 1}\n"
    with pytest.raises(LabError) as info:
        load_lab(write(tmp_path, text))
    assert str(info.value) == (
        f"{tmp_path / 'lab.yaml'}:21: thresholds.nvme-tcp.randread-8k-qd12-j4: matches no workload of the selected "
        "sets; did you mean randread-8k-qd128-j4, randread-4k-qd128-j4, randread-4k-qd1-j4?"
    )
    # Narrowing the run with 'only' does not make a limit for the selected sets' other workloads a mistake...
    narrowed = GOOD + "workloads: {sets: [oracle-8k], only: [randread-*]}\n"
    assert load_lab(write(tmp_path, narrowed + "thresholds:\n  '*':\n    randwrite-8k*: {min_iops: 1}\n"))
    # ...but a set that is not selected does not count.
    with pytest.raises(LabError, match=r"thresholds\.\*\.read-1m-\*: matches no workload"):
        load_lab(write(tmp_path, narrowed + "thresholds:\n  '*':\n    read-1m-*: {min_mbps: 1}\n"))


def test_null_lifts_an_inherited_limit(tmp_path: Path) -> None:
    text = GOOD + (
        "thresholds:\n"
        "  '*':\n    '*': {max_p99_us: 100, min_iops: 5}\n"
        "  nvme-tcp:\n    randread-8k-qd128-j4: {max_p99_us: null}\n"
    )
    lab = load_lab(write(tmp_path, text))
    lifted = thresholds_for(lab.thresholds_table(), "nvme-tcp", "randread-8k-qd128-j4")
    assert lifted == Thresholds(min_iops=5) and lifted.max_p99_us is None
    assert thresholds_for(lab.thresholds_table(), "nvme-tcp", "randwrite-8k-qd128-j4").max_p99_us == 100


def test_a_malformed_nguid_is_a_load_time_error(tmp_path: Path) -> None:
    text = GOOD.replace("{path: /dev/nvme0n1}", "{path: /dev/nvme0n1, nguid: '0101'}")
    assert text != GOOD
    with pytest.raises(LabError, match=r"nguid '0101' is not an NGUID: 32 hex digits as 8-4-4-4-12"):
        load_lab(write(tmp_path, text))


def test_rac3_has_seed_000s_three_targets() -> None:
    lab = load_lab(ROOT / "labs" / "rac3.yaml")
    assert lab.protocols == ("nvme-rdma", "iser")
    assert [(t.name, t.kind, t.protocols) for t in lab.targets] == [
        ("nvmet", "nvmet", ("nvme-rdma",)),
        ("spdk", "spdk", ("nvme-rdma",)),
        ("scst", "scst", ("iser",)),
    ]
    scst = lab.target_for("iser")
    assert scst.iscsi is not None and scst.iscsi.iqn == "iqn.2017-10.tgt1"
    assert scst.scst is not None and scst.scst.queued_commands == 128
    spdk = lab.target_for("nvme-rdma", "spdk")
    assert spdk.nvme is not None and spdk.nvme.port == 4420 and lab.target_address(spdk) == "10.10.10.19"


def test_reactor_cores_are_the_mask_the_plugin_starts_spdk_with(tmp_path: Path) -> None:
    lab = load_lab(ROOT / "labs" / "rac3.yaml")
    assert [t.reactor_cores for t in lab.targets] == ["", "0x1", ""]  # SPDK's default mask; nvmet and SCST: none
    text = (ROOT / "labs" / "rac3.yaml").read_text()
    masked = text.replace(
        '        - {nqn: "nqn.2016-06.io.spdk:cnode2", namespaces: [p750a]}\n',
        "        - {nqn: \"nqn.2016-06.io.spdk:cnode2\", namespaces: [p750a]}\n    spdk: {core_mask: '0x6'}\n",
    )
    attached = text.replace(
        '        - {nqn: "nqn.2016-06.io.spdk:cnode2", namespaces: [p750a]}\n',
        '        - {nqn: "nqn.2016-06.io.spdk:cnode2", namespaces: [p750a]}\n    spdk: {start: false}\n',
    )
    assert masked != text and attached != text
    (tmp_path / "masked.yaml").write_text(masked)
    (tmp_path / "attached.yaml").write_text(attached)
    assert load_lab(tmp_path / "masked.yaml").target_for("nvme-rdma", "spdk").reactor_cores == "0x6"
    assert load_lab(tmp_path / "attached.yaml").target_for("nvme-rdma", "spdk").reactor_cores == ""


VLAB_FILE = Path(__file__).parents[2] / "labs" / "vlab.yaml"


def test_every_lab_gets_a_name_prefix_of_its_own_by_default(tmp_path: Path) -> None:
    """Two labs sharing a target host carry different marks and records unless one sets the other's prefix."""
    from pytest_fabricqa.targets import remote
    from pytest_fabricqa.targets.spdk import mark_serial

    text = VLAB_FILE.read_text()
    (tmp_path / "b.yaml").write_text(text.replace("\nname: vlab\n", "\nname: team-b\n", 1))
    a, b = load_lab(VLAB_FILE), load_lab(tmp_path / "b.yaml")
    assert {t.name_prefix for t in a.targets} == {"fqa-vlab"}
    assert {t.name_prefix for t in b.targets} == {"fqa-team-b"}
    for ta, tb in zip(a.targets, b.targets, strict=True):
        assert remote.state_path(ta.name_prefix, ta.kind) != remote.state_path(tb.name_prefix, tb.kind)
        assert mark_serial(ta.name_prefix) != mark_serial(tb.name_prefix)
    # A prefix the lab sets stays, even one equal to another lab's default (refused when their records meet).
    (tmp_path / "c.yaml").write_text(text.replace("  - kind: lio\n", "  - kind: lio\n    name_prefix: fqa-team-b\n", 1))
    assert [t.name_prefix for t in load_lab(tmp_path / "c.yaml").targets][:2] == ["fqa-vlab", "fqa-team-b"]


def test_a_default_prefix_names_the_place_when_targets_sit_on_several_and_stays_short() -> None:
    from pytest_fabricqa.lab.model import PREFIX_MAX, default_prefix

    assert default_prefix("vlab") == "fqa-vlab"
    assert default_prefix("vlab", "vstor2") == "fqa-vlab-vstor2"
    assert default_prefix("qa lab/α") == "fqa-qa-lab--"  # what a sysfs or iface name cannot hold becomes '-'
    long_a, long_b = default_prefix("x" * 40 + "a"), default_prefix("x" * 40 + "b")
    assert len(long_a) == len(long_b) == PREFIX_MAX and long_a != long_b
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", long_a)


def test_targets_on_two_places_get_two_default_prefixes_so_their_ifaces_differ(tmp_path: Path) -> None:
    from pytest_fabricqa.lab.rules import lab_problems

    external = (
        "  - kind: external\n    address: 10.10.10.50\n    protocols: [iscsi]\n"
        "    iscsi: {iqn: 'iqn.2026-11.io.fabricqa:array', luns: [a]}\n\nvlab:\n"
    )
    (tmp_path / "lab.yaml").write_text(VLAB_FILE.read_text().replace("\nvlab:\n", "\n" + external, 1))
    lab = load_lab(tmp_path / "lab.yaml")
    assert {t.place: t.name_prefix for t in lab.targets} == {
        "vstor": "fqa-vlab-vstor",
        "10.10.10.50": "fqa-vlab-10.10.10.50",
    }
    assert list(lab_problems(lab)) == []
