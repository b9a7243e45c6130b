"""NQN and IQN rules as strict as the targets that take them (issue 28, item 5).

The NVMe rule is the spec's as SPDK 23.01 checks it (lib/nvmf/subsystem.c): before this, a lab could name an NQN
with no ':name', or a domain label starting with a digit, or text after the UUID prefix that is no UUID; nvmet took
it and SPDK refused it without a reason. The iSCSI rule is RFC 3720's, which tgt 1.0.97 enforces by character
(usr/target.c: letters, digits, ':', '.' and '-'): '_' used to pass here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from labfiles import vlab_kernel_text

from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabError, iqn_problem, nqn_problem

UUID_NQN = "nqn.2014-08.org.nvmexpress:uuid:1d6fb2de-586d-48f9-a0b4-3f875fda2ddd"


@pytest.mark.parametrize(
    "nqn",
    [
        "nqn.2026-11.io.fabricqa:vlab-ram0",
        "nqn.2016-06.io.spdk:cnode1",
        "nqn.2019-08.org.qemu:SN1",
        UUID_NQN,
        UUID_NQN.upper().replace("NQN.2014-08.ORG.NVMEXPRESS:UUID:", "nqn.2014-08.org.nvmexpress:uuid:"),
        "nqn.2026-11.Io.Fabric-QA:x",  # SPDK's labels take either case
    ],
)
def test_names_spdk_takes_pass(nqn: str) -> None:
    assert nqn_problem(nqn) is None


@pytest.mark.parametrize(
    ("nqn", "rule"),
    [
        ("nqn.2026-11.io.fabricqa", "needs ':' and a name after the reverse domain"),
        ("nqn.2026-11.io.fabricqa:", "needs ':' and a name after the reverse domain"),
        ("nqn.2014-08.org.nvmexpress.discovery", "needs ':' and a name"),
        ("nqn.2026-11.9io.fabricqa:x", "label '9io' must start with a letter"),
        (
            "nqn.2026-11.io.fabricqa-:x",
            "label 'fabricqa-' must start with a letter, hold only letters, digits and '-', end",
        ),
        ("nqn.2026-11.io..fabricqa:x", "label '' must start with a letter"),
        ("nqn.2026-11.io.fab_ricqa:x", "label 'fab_ricqa'"),
        ("nqn.2026-11.io." + "a" * 64 + ":x", "63 characters at most"),
        ("nqn.2014-08.org.nvmexpress:uuid:el72h1", "only a UUID may follow"),
        ("nqn.26-11.io.fabricqa:x", "a yyyy-mm date code"),
        ("nvmet1", "starts with 'nqn.'"),
        ("nqn.2026-11.io.fabricqa:a b", "printable ASCII without spaces"),
        ("nqn.2026-11.io.fabricqa:" + "x" * 200, "at most 223 bytes"),
    ],
)
def test_each_nqn_rule_names_itself(nqn: str, rule: str) -> None:
    problem = nqn_problem(nqn)
    assert problem is not None and rule in problem, problem


@pytest.mark.parametrize(
    ("iqn", "rule"),
    [
        ("iqn.2026-11.io.fabricqa:v_stor", "'_' not allowed"),
        ("iqn.2026-11.io.fabricqa:Vstor", "'V' not allowed"),
        ("iqn.2026-11.io.fabricqa:v stor", "' ' not allowed"),
        ("iqn.2026-11.-io.fabricqa:vstor", "must start and end with a letter or digit"),
        ("iqn.26-11.io.fabricqa:vstor", "a yyyy-mm date code"),
        ("iqn.2026-11.io.fabricqa:" + "x" * 200, "at most 223 bytes"),
    ],
)
def test_each_iqn_rule_names_itself(iqn: str, rule: str) -> None:
    problem = iqn_problem(iqn)
    assert problem is not None and rule in problem, problem


@pytest.mark.parametrize("iqn", ["iqn.2026-11.io.fabricqa:vstor", "iqn.2017-10.tgt1", "iqn.1994-05.com.redhat:el72h1"])
def test_iscsi_names_every_target_kind_takes_pass(iqn: str) -> None:
    assert iqn_problem(iqn) is None


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        (
            "host_nqn: nqn.2026-11.io.fabricqa:vnode1",
            "host_nqn: nqn.2014-08.org.nvmexpress:uuid:vnode1",
            r"hosts\.vnode1: .*host_nqn 'nqn\.2014-08\.org\.nvmexpress:uuid:vnode1': after "
            r"'nqn\.2014-08\.org\.nvmexpress:uuid:' only a UUID may follow",
        ),
        (
            "iqn: iqn.2026-11.io.fabricqa:vstor",
            "iqn: iqn.2026-11.io.fabricqa:v_stor",
            r"targets\[\d\]\.iscsi\.iqn: .*'_' not allowed: an iSCSI name holds only lower-case letters",
        ),
        (
            '"nqn.2026-11.io.fabricqa:vlab-ram0"',
            '"nqn.2026-11.io.fabricqa"',
            r"nqn: 'nqn\.2026-11\.io\.fabricqa': an NQN needs ':' and a name after the reverse domain .*SPDK refuses",
        ),
    ],
)
def test_a_lab_breaking_a_rule_is_one_line_naming_the_key_and_the_rule(
    tmp_path: Path, old: str, new: str, line: str
) -> None:
    text = vlab_kernel_text()
    assert old in text
    path = tmp_path / "lab.yaml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(LabError, match=line) as raised:
        load_lab(path)
    assert "\n" not in str(raised.value)


def test_the_shipped_labs_keep_to_the_rules() -> None:
    root = Path(__file__).parent.parent.parent / "labs"
    for name in ("rac3.yaml", "vlab.yaml"):
        load_lab(root / name)
