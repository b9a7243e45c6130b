"""Lab-file rules across sections (pytest_fabricqa.lab.rules): each fires at load time with file, line, key, fix.

Every case starts from labs/vlab.yaml (which passes) and makes one mistake that passed validation before and
failed late -- at provisioning, at connect or mid-run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from labfiles import vlab_kernel_text

from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabError, LabModel
from pytest_fabricqa.lab.rules import lab_problems

ROOT = Path(__file__).parents[2]
VLAB = vlab_kernel_text()
RAC3 = (ROOT / "labs" / "rac3.yaml").read_text()


def test_the_bundled_labs_break_no_rule() -> None:
    for name in ("vlab", "rac3"):
        assert list(lab_problems(load_lab(ROOT / "labs" / f"{name}.yaml"))) == []


def test_two_targets_of_one_host_may_serve_one_protocol_with_the_same_names(tmp_path: Path) -> None:
    """Seed 000 served nvmet1 and nvmet2 from the kernel's nvmet and from SPDK on el72h3: they take turns."""
    second = (
        "  - kind: external\n    name: nvmet-again\n    address: 10.10.10.50\n    protocols: [nvme-tcp]\n"
        "    nvme: {subsystems: [{nqn: 'nqn.2026-11.io.fabricqa:vlab-ram0', namespaces: [a]}]}\n\nvlab:\n"
    )
    lab = yaml.safe_load(_swap(VLAB, "\nvlab:\n", second))
    lab["targets"][2].pop("address")
    lab["targets"][2]["host"] = "vstor"
    lab["targets"][2]["kind"] = "nvmet"
    lab["targets"][2]["devices"] = {"a": {"path": "/dev/vdz"}}
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(lab))
    loaded = load_lab(path)
    assert [t.name for t in loaded.targets_for("nvme-tcp")] == ["nvmet", "nvmet-again"]


def _swap(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# id -> (lab text, regex the one-line error must match after "<file>:")
CASES = {
    "same-nqn-twice": (
        _swap(VLAB, '"nqn.2026-11.io.fabricqa:vlab-nvme0"', '"nqn.2026-11.io.fabricqa:vlab-ram0"'),
        r"\d+: targets\[0\]\.nvme\.subsystems\[1\]\.nqn: subsystem NQN 'nqn.2026-11.io.fabricqa:vlab-ram0' is used "
        r"twice in this target; every subsystem needs its own NQN$",
    ),
    "spdk-short-nqn": (
        _swap(
            _swap(_swap(VLAB, "  - kind: nvmet\n", "  - kind: spdk\n"), "    paths: all ", "    paths: first "),
            '"nqn.2026-11.io.fabricqa:vlab-nvme0"',
            "nvmet2",
        ),
        r"\d+: targets\[0\]\.nvme\.subsystems\[1\]\.nqn: SPDK takes only NVMe qualified names and 'nvmet2' is not "
        r"one: an NQN starts with 'nqn\.', a yyyy-mm date code and '\.' \(nqn\.yyyy-mm\.reverse\.domain:name\) \(nvmet "
        r"takes short names, SPDK refuses them\)$",
    ),
    "iopolicy-set-and-expected-otherwise": (
        _swap(
            VLAB,
            "      connect: {keep_alive_tmo: 60}\n",
            "      connect: {keep_alive_tmo: 60, iopolicy: round-robin}\n",
        ),
        r"\d+: targets\[0\]\.nvme\.connect\.iopolicy: sets round-robin on every initiator, and "
        r"multipath\.nvme\.iopolicy expects numa there; make them agree, or leave multipath\.nvme\.iopolicy unset$",
    ),
    "same-iqn-twice": (
        _swap(
            VLAB,
            "\nvlab:\n",
            "  - kind: external\n    address: 10.10.10.50\n    protocols: [iscsi]\n"
            "    iscsi: {iqn: 'iqn.2026-11.io.fabricqa:vstor', luns: [a]}\n\nvlab:\n",
        ),
        r"targets\[2\]\.iscsi\.iqn: target IQN 'iqn.2026-11.io.fabricqa:vstor' is used by two targets",
    ),
    "same-iface-on-two-hosts": (
        _swap(
            VLAB,
            "\nvlab:\n",
            "  - kind: external\n    address: 10.10.10.50\n    protocols: [iscsi]\n    name_prefix: fqa-vlab-vstor\n"
            "    iscsi: {iqn: 'iqn.2026-11.io.fabricqa:array', luns: [a]}\n\nvlab:\n",
        ),
        r"targets\[2\]\.name_prefix: 'fqa-vlab-vstor' is also the name_prefix of an iSCSI target on another host; "
        r"the initiators would share the open-iscsi iface fqa-vlab-vstor_tcp between two fabrics that may be live at once "
        r"\(-n with --dist loadgroup\), give this target its own name_prefix$",
    ),
    "same-host-nqn": (
        _swap(VLAB, "host_nqn: nqn.2026-11.io.fabricqa:vnode2", "host_nqn: nqn.2026-11.io.fabricqa:vnode1"),
        r"hosts\.vnode2\.host_nqn: host_nqn 'nqn.2026-11.io.fabricqa:vnode1' is used by two hosts",
    ),
    "same-initiator-iqn": (
        _swap(VLAB, "initiator_iqn: iqn.2026-11.io.fabricqa:vnode2", "initiator_iqn: iqn.2026-11.io.fabricqa:vnode1"),
        r"hosts\.vnode2\.initiator_iqn: initiator_iqn 'iqn.2026-11.io.fabricqa:vnode1' is used by two hosts",
    ),
    "lio-serving-nvme": (
        _swap(VLAB, "  - kind: nvmet\n", "  - kind: lio\n"),
        r"targets\[0\]\.protocols\[0\]: a lio target cannot serve nvme-tcp \(lio serves iscsi, iser\); serve "
        r"nvme-tcp from a target of kind nvmet or spdk or external, or remove it",
    ),
    "tgt-serving-nvme": (
        _swap(VLAB, "  - kind: nvmet\n", "  - kind: tgt\n"),
        r"targets\[0\]\.protocols\[0\]: a tgt target cannot serve nvme-tcp \(tgt serves iscsi, iser\)",
    ),
    "two-targets-one-name": (
        _swap(VLAB, "  - kind: lio\n", "  - kind: lio\n    name: nvmet\n"),
        r"targets\[1\]\.name: target name 'nvmet' is used by targets\[0\] \(nvmet\) and targets\[1\] \(lio\); "
        r"give each target its own 'name'",
    ),
    "unknown-kind": (
        _swap(VLAB, "  - kind: lio\n", "  - kind: iet\n"),
        r"targets\[1\]\.kind: 'iet' is not a target kind; allowed: nvmet, spdk, lio, scst, tgt, external$",
    ),
    "no-initiator": (
        VLAB.replace("roles: [initiator]", "roles: [db]"),
        r"protocols\[0\]: protocol nvme-tcp is declared but no host has the initiator role",
    ),
    "same-nqn-on-two-hosts": (
        _swap(
            VLAB,
            "\nvlab:\n",
            "  - kind: external\n    address: 10.10.10.50\n    protocols: [nvme-tcp]\n"
            "    nvme: {subsystems: [{nqn: 'nqn.2026-11.io.fabricqa:vlab-ram0', namespaces: [a]}]}\n\nvlab:\n",
        ),
        r"targets\[2\]\.nvme\.subsystems\[0\]\.nqn: subsystem NQN 'nqn.2026-11.io.fabricqa:vlab-ram0' is also served "
        r"by a target on another host; an initiator would see one subsystem through two portals",
    ),
    "target-host-without-role": (
        _swap(VLAB, "roles: [target]", "roles: [db]"),
        r"targets\[0\]\.host: host 'vstor' runs a nvmet target but does not have the target role; add 'target'",
    ),
    "device-twice": (
        _swap(VLAB, "nvme0: {path: /dev/nvme0n1, load: false}", "nvme0: {path: /dev/ram0, load: false}"),
        r"targets\[0\]\.devices\.nvme0\.path: /dev/ram0 is already device 'ram0' of this target",
    ),
    "namespace-twice": (
        _swap(VLAB, "namespaces: [ram0], allow_any_host", "namespaces: [ram0, ram0], allow_any_host"),
        r"targets\[0\]\.nvme\.subsystems\[0\]\.namespaces\[1\]: device 'ram0' is exported twice",
    ),
    "closed-subsystem-shuts-out-an-initiator": (
        _swap(
            VLAB,
            '{nqn: "nqn.2026-11.io.fabricqa:vlab-ram0", namespaces: [ram0], allow_any_host: false}',
            '{nqn: "nqn.2026-11.io.fabricqa:vlab-ram0", namespaces: [ram0], allow_any_host: false, '
            "allowed_hosts: [nqn.2026-11.io.fabricqa:vnode1]}",
        ),
        r"targets\[0\]\.nvme\.subsystems\[0\]\.allowed_hosts: initiator vnode2 \(nqn.2026-11.io.fabricqa:vnode2\) "
        r"is not allowed on nqn.2026-11.io.fabricqa:vlab-ram0 and could never connect",
    ),
    "acl-shuts-out-an-initiator": (
        _swap(
            VLAB, "      luns: [ram0, nvme0]", "      luns: [ram0, nvme0]\n      acls: [iqn.2026-11.io.fabricqa:vnode1]"
        ),
        r"targets\[1\]\.iscsi\.acls: initiator vnode2 \(iqn.2026-11.io.fabricqa:vnode2\) is not in the ACLs",
    ),
    "lib-dir-without-thick": (
        _swap(RAC3, "  diskgroups: [NVME]", "  diskgroups: [NVME]\n  lib_dir: /opt/oracle/instantclient_19_25"),
        r"database\.lib_dir: lib_dir only applies to python-oracledb thick mode; set driver_mode: thick",
    ),
    "asmcmd-host-unknown": (
        _swap(RAC3, "    host: el72h1\n    user: grid", "    host: el72h9\n    user: grid"),
        r"database\.asmcmd\.host: 'el72h9' is not under 'hosts'",
    ),
    "misscount-zero": (
        _swap(RAC3, "  diskgroups: [NVME]", "  diskgroups: [NVME]\n  misscount: 0"),
        r"database\.misscount: CSS misscount is whole seconds above zero, not 0",
    ),
    "disktimeout-not-above-misscount": (
        _swap(RAC3, "  diskgroups: [NVME]", "  diskgroups: [NVME]\n  misscount: 60\n  disktimeout: 60"),
        r"database\.disktimeout: CSS disktimeout \(60 s\) must be above misscount \(60 s\)",
    ),
    "waits-load-host-unknown": (
        _swap(
            RAC3, "    window_s: 600\n", "    window_s: 600\n    host: swingbench1\n    command: charbench -c sb.xml\n"
        ),
        r"database\.waits\.host: 'swingbench1' is not under 'hosts'",
    ),
    "waits-limit-on-an-event-not-read": (
        _swap(
            RAC3,
            "      log file sync: {max_ms: 7}\n",
            "      log file sync: {max_ms: 7}\n      gc cr request: {max_ms: 1}\n",
        ),
        r"database\.waits\.limits\.gc cr request: 'gc cr request' is not one of the events read",
    ),
    "disk-path-twice": (
        _swap(RAC3, "disk_paths: [/dev/nvme0n1, /dev/nvme1n1]", "disk_paths: [/dev/nvme1n1, /dev/nvme1n1]"),
        r"database\.disk_paths\[1\]: '/dev/nvme1n1' is listed twice",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_rule_is_a_one_line_load_time_error(tmp_path: Path, case: str) -> None:
    text, expected = CASES[case]
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    with pytest.raises(LabError) as caught:
        load_lab(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:"), message
    assert re.search(expected, message), message


def test_the_line_is_the_offending_key(tmp_path: Path) -> None:
    text, _ = CASES["same-nqn-twice"]
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    with pytest.raises(LabError) as caught:
        load_lab(path)
    line = int(str(caught.value).split(":")[1])
    assert "vlab-ram0" in text.splitlines()[line - 1] and "nvme0]" in text.splitlines()[line - 1]


def test_two_targets_may_serve_the_same_nqns() -> None:
    """Seed 000 served nvmet1/nvmet2 from the kernel target and from SPDK: one target per case, so no clash."""
    spdk = (
        "  - kind: spdk\n    host: vstor\n    protocols: []\n    devices: *devices\n"
        "    nvme:\n      port: 4421\n      subsystems:\n"
        '        - {nqn: "nqn.2026-11.io.fabricqa:vlab-ram0", namespaces: [ram0]}\n'
    )
    lab = LabModel.model_validate(yaml.safe_load(_swap(VLAB, "  - kind: lio\n", spdk + "  - kind: lio\n")))
    assert list(lab_problems(lab)) == []


def test_css_budgets_default_to_oracles_and_load_when_given() -> None:
    lab = LabModel.model_validate(yaml.safe_load(RAC3))
    assert lab.database is not None and (lab.database.misscount, lab.database.disktimeout) == (30, 200)
    text = _swap(RAC3, "  diskgroups: [NVME]", "  diskgroups: [NVME]\n  misscount: 60\n  disktimeout: 600")
    lab = LabModel.model_validate(yaml.safe_load(text))
    assert lab.database is not None and (lab.database.misscount, lab.database.disktimeout) == (60, 600)
    assert list(lab_problems(lab)) == []


def test_thick_mode_settings_load() -> None:
    text = _swap(RAC3, "  diskgroups: [NVME]", "  diskgroups: [NVME]\n  driver_mode: thick\n  lib_dir: /opt/ic")
    lab = LabModel.model_validate(yaml.safe_load(text))
    assert lab.database is not None and (lab.database.driver_mode, lab.database.lib_dir) == ("thick", "/opt/ic")
    assert list(lab_problems(lab)) == []


def test_a_broken_rule_stops_pytest_with_exit_4_and_one_line(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(CASES["same-nqn-twice"][0])
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", f"--lab={path}", "-p", "no:cacheprovider", str(tmp_path / "test_x.py")],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.returncode == 4, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert (
        len(errors) == 1
        and "subsystem NQN 'nqn.2026-11.io.fabricqa:vlab-ram0' is used twice in this target" in errors[0]
    )
    assert "Traceback" not in result.stderr
