"""LIO: the configfs snapshot parser (recorded on the virtual lab), plans, and what counts as ours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fakes import Answer, ScriptedHost
from labfiles import as_recorded

from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.lab.load import load_lab as load_lab_file
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.targets.lio import REMOVE_BACKSTORE_SCRIPT, LioTarget, parse_snapshot, plan_from_lab
from pytest_fabricqa.targets.scsi import unit_serial

DATA = Path(__file__).parents[1] / "data" / "targets"


def load_lab(path: Path) -> LabModel:
    """The lab file, its targets marked with the name_prefix the recorded listings here were made with."""
    return as_recorded(load_lab_file(path))


LABS = Path(__file__).parents[2] / "labs"


def test_recorded_iser_snapshot() -> None:
    snap = parse_snapshot((DATA / "lio-snapshot-iser.txt").read_text())
    assert snap.hbas == ["iblock_0"]
    assert snap.backstores == {"iblock_0/fabricqa_nvme0": {"udev_path": "/dev/nvme0n1", "enable": "1"}}
    tpg = snap.targets["iqn.2026-11.io.fabricqa:vstor"]["tpgt_1"]
    assert tpg["enable"] == "1"
    assert tpg["portals"] == {"10.10.10.19:3260": "1"}
    assert tpg["acls"] == ["iqn.2026-11.io.fabricqa:vnode1", "iqn.2026-11.io.fabricqa:vnode2"]
    assert snap.lun_backstores("iqn.2026-11.io.fabricqa:vstor") == ["fabricqa_nvme0"]
    assert snap.backstore_named("fabricqa_nvme0") == "iblock_0/fabricqa_nvme0"


def test_recorded_iscsi_snapshot_has_iser_off_and_the_empty_tree_is_empty() -> None:
    snap = parse_snapshot((DATA / "lio-snapshot-iscsi.txt").read_text())
    assert snap.targets["iqn.2026-11.io.fabricqa:vstor"]["tpgt_1"]["portals"] == {"10.10.10.19:3260": "0"}
    empty = parse_snapshot((DATA / "lio-snapshot-empty.txt").read_text())
    assert empty.loaded and not empty.targets and not empty.backstores


def test_plan_names_backstores_with_the_prefix_and_uses_initiator_iqns_as_acls() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    plan = plan_from_lab(lab, lab.target_for("iser"), "iser")
    assert plan.iser and plan.portal == "10.10.10.19:3260"
    assert [(lun.lun, lun.backstore, lun.path) for lun in plan.luns] == [
        (0, "fabricqa_ram0", "/dev/ram0"),
        (1, "fabricqa_nvme0", "/dev/nvme0n1"),
    ]
    assert plan.acls == ("iqn.2026-11.io.fabricqa:vnode1", "iqn.2026-11.io.fabricqa:vnode2")
    assert not plan_from_lab(lab, lab.target_for("iscsi"), "iscsi").iser


def test_no_initiator_iqns_means_demo_mode(tmp_path: Path) -> None:
    text = (LABS / "vlab.yaml").read_text()
    text = "\n".join(line for line in text.splitlines() if "initiator_iqn" not in line)
    (tmp_path / "lab.yaml").write_text(text)
    lab = load_lab(tmp_path / "lab.yaml")
    assert plan_from_lab(lab, lab.target_for("iscsi"), "iscsi").acls == ()


def test_a_bad_name_prefix_is_one_line(tmp_path: Path) -> None:
    text = (LABS / "vlab.yaml").read_text().replace("  - kind: lio\n", "  - kind: lio\n    name_prefix: 'my qa'\n")
    (tmp_path / "lab.yaml").write_text(text)
    lab = load_lab(tmp_path / "lab.yaml")
    with pytest.raises(ProvisionError, match=r"^vstor: backstore name 'my qa_ram0' .*; use letters"):
        plan_from_lab(lab, lab.target_for("iscsi"), "iscsi")


class LioHost(ScriptedHost):
    """Answers the LIO snapshot script with recorded text and the state-file read with ``state``."""

    def __init__(self, snapshot: str, state: str = "") -> None:
        super().__init__("vstor")
        self.snapshot = snapshot
        self.state = state

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[:2] == ("sh", "-c") and "SNAPSHOT" not in argv[2] and "core/*_[0-9]*" in argv[2]:
            return self.snapshot
        if argv[:2] == ("sh", "-c") and "cat" in argv[2] and argv[-1].endswith(".json"):
            return self.state
        return ""


RECORD = json.dumps(
    {"kind": "lio", "targets": ["iqn.2026-11.io.fabricqa:vstor"], "backstores": ["iblock_0/fabricqa_nvme0"], "hbas": []}
)


def test_leftovers_and_cleanup_find_our_target_recorded_and_backed_by_our_backstores() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    host = LioHost((DATA / "lio-snapshot-iser.txt").read_text(), RECORD)
    target = LioTarget(lab, lab.target_for("iser"), {"vstor": host})
    assert target.leftovers() == [
        "vstor: iSCSI target iqn.2026-11.io.fabricqa:vstor is still configured",
        "vstor: LIO backstore iblock_0/fabricqa_nvme0 is still configured",
        "vstor: state file /run/fabricqa/fabricqa-lio.json is still there",
    ]
    removed = target.cleanup_stale()
    assert removed[0] == "vstor: removed iSCSI target iqn.2026-11.io.fabricqa:vstor"
    removals = [c for c in host.commands if c[-1] in ("iqn.2026-11.io.fabricqa:vstor",) or "fabricqa_nvme0" in c[-1]]
    assert removals[0][-1] == "iqn.2026-11.io.fabricqa:vstor"  # the target goes before its backstore
    assert removals[1][-2:] == ("sh", "iblock_0/fabricqa_nvme0")  # with the ALUA groups in it
    assert removals[1][2] == REMOVE_BACKSTORE_SCRIPT


def test_a_target_with_our_mark_that_no_record_lists_is_named_and_left_alone() -> None:
    """Checked twice (issue 28): its LUNs' backstores carry our prefix, but no record of this lab lists it, so it is
    not known to be ours (a record lost by hand, or another session with the same prefix): named, never removed."""
    lab = load_lab(LABS / "vlab.yaml")
    host = LioHost((DATA / "lio-snapshot-iser.txt").read_text())
    target = LioTarget(lab, lab.target_for("iser"), {"vstor": host})
    assert target.leftovers() == []
    assert target.cleanup_stale() == [
        "vstor: left iSCSI target iqn.2026-11.io.fabricqa:vstor alone: its LUNs carry this lab's mark ('fabricqa_') "
        "but no record of this lab lists it (remove it by hand if it is yours)"
    ]
    assert not [c for c in host.commands if "rmdir" in " ".join(c) or "REMOVE" in " ".join(c)]


def test_a_recorded_target_backed_by_another_backstore_is_named_and_left_alone() -> None:
    """The record lists the IQN (a run killed before making it), then someone else made a target of that IQN over
    a backstore of theirs: never ours to remove."""
    lab = load_lab(LABS / "vlab.yaml")
    foreign = (
        "H\tiblock_7\nB\tiblock_7/prod_lun\t/dev/sdz\t1\nT\tiqn.2026-11.io.fabricqa:vstor\n"
        "G\tiqn.2026-11.io.fabricqa:vstor\ttpgt_1\t1\n"
        "L\tiqn.2026-11.io.fabricqa:vstor\ttpgt_1\tlun_0\t../../../../../../target/core/iblock_7/prod_lun\n"
    )
    host = LioHost(foreign, RECORD)
    target = LioTarget(lab, lab.target_for("iser"), {"vstor": host})
    assert target.leftovers() == ["vstor: state file /run/fabricqa/fabricqa-lio.json is still there"]
    assert target.cleanup_stale() == [
        "vstor: left iSCSI target iqn.2026-11.io.fabricqa:vstor alone: this lab's record lists it, but a LUN of it is "
        "backed by a backstore that is not the lab's (another session or tool made it since)",
        "vstor: removed the stale state file /run/fabricqa/fabricqa-lio.json",
    ]
    assert not [c for c in host.commands if c[-1] in ("iqn.2026-11.io.fabricqa:vstor", "iblock_7/prod_lun")]


def test_a_foreign_target_and_backstore_are_not_ours() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    foreign = (
        "H\tiblock_7\nB\tiblock_7/prod_lun\t/dev/sdz\t1\nT\tiqn.2003-01.org.example:prod\n"
        "G\tiqn.2003-01.org.example:prod\ttpgt_1\t1\n"
        "L\tiqn.2003-01.org.example:prod\ttpgt_1\tlun_0\t../../../../../../target/core/iblock_7/prod_lun\n"
    )
    host = LioHost(foreign)
    target = LioTarget(lab, lab.target_for("iscsi"), {"vstor": host})
    assert target.leftovers() == []
    assert target.cleanup_stale() == []
    assert not [c for c in host.commands if "prod" in " ".join(c)]


def test_the_labs_cmdsn_depth_is_set_before_the_acls_inherit_it(tmp_path: Path) -> None:
    text = (LABS / "vlab.yaml").read_text().replace("    iscsi:\n", "    iscsi:\n      cmdsn_depth: 128\n", 1)
    (tmp_path / "lab.yaml").write_text(text)
    lab = load_lab(tmp_path / "lab.yaml")
    model = lab.target_for("iscsi")
    plan = plan_from_lab(lab, model, "iscsi")
    stock = load_lab(LABS / "vlab.yaml")
    assert plan.cmdsn_depth == 128 and plan_from_lab(stock, stock.target_for("iscsi"), "iscsi").cmdsn_depth is None
    host = LioHost((DATA / "lio-snapshot-empty.txt").read_text())
    target = LioTarget(lab, model, {"vstor": host})  # type: ignore[dict-item]
    target._make_target(plan, {0: "iblock_0", 1: "iblock_1"}, UndoStack(), {"targets": [plan.iqn]})
    commands = [" ".join(c) for c in host.commands]
    depth = next(i for i, c in enumerate(commands) if "attrib/default_cmdsn_depth" in c)
    assert "128" in commands[depth]
    assert depth < next(i for i, c in enumerate(commands) if "/acls/" in c)


def test_each_backstore_gets_its_own_unit_serial_before_its_lun_is_linked() -> None:
    """Without a serial LIO reports no VPD pages and its LUNs no WWID; the serial is what SCST and tgt set
    (scsi.unit_serial), written while the backstore is not yet exported (LIO refuses it afterwards)."""
    lab = load_lab(LABS / "vlab.yaml")
    model = lab.target_for("iscsi")
    plan = plan_from_lab(lab, model, "iscsi")
    assert [lun.serial for lun in plan.luns] == [
        unit_serial("fabricqa", "iqn.2026-11.io.fabricqa:vstor", name) for name in ("ram0", "nvme0")
    ]
    assert len({lun.serial for lun in plan.luns}) == 2
    host = LioHost((DATA / "lio-snapshot-empty.txt").read_text())
    target = LioTarget(lab, model, {"vstor": host})  # type: ignore[dict-item]
    undo = UndoStack()
    for lun in plan.luns:
        target._make_backstore(lun, f"iblock_{lun.lun}", parse_snapshot(""), undo, {"hbas": [], "backstores": []})
    target._make_target(plan, {0: "iblock_0", 1: "iblock_1"}, undo, {"targets": [plan.iqn]})
    commands = [" ".join(c) for c in host.commands]
    for lun in plan.luns:
        serial = next(i for i, c in enumerate(commands) if f"{lun.backstore}/wwn/vpd_unit_serial" in c)
        assert lun.serial in commands[serial]
        assert serial < next(i for i, c in enumerate(commands) if f"lun_{lun.lun}/{lun.backstore}" in c)


def test_each_portal_gets_its_own_tpg_and_each_tpg_its_own_alua_group_in_every_backstore() -> None:
    """Several paths: a TPG per portal (a target port per path in SCSI's terms), and in each backstore an ALUA group
    per TPG, numbered, with the TPG's LUN put in it after the LUN is linked -- what lets one path's ALUA state
    change alone (faults.LioAluaChange). As recorded on the lab: tests/data/targets/lio-snapshot-two-paths.txt."""
    lab = load_lab(LABS / "vlab.yaml")
    model = lab.target_for("iscsi", "lio")
    plan = plan_from_lab(lab, model, "iscsi")
    assert plan.tpgs == ("tpgt_1", "tpgt_2")
    assert plan.tpg_of("10.10.20.19") == "tpgt_2" and plan.tpg_of("10.10.10.19") == "tpgt_1"
    with pytest.raises(ValueError, match=r"no portal at 10\.10\.30\.19:3260"):
        plan.tpg_of("10.10.30.19")
    host = LioHost((DATA / "lio-snapshot-empty.txt").read_text())
    LioTarget(lab, model, {"vstor": host})._make_target(  # type: ignore[dict-item]
        plan, {0: "iblock_0", 1: "iblock_1"}, UndoStack(), {"targets": [plan.iqn]}
    )
    commands = [" ".join(c) for c in host.commands]
    tpg = f"/sys/kernel/config/target/iscsi/{plan.iqn}/tpgt_"
    assert [c.rsplit("np/", 1)[-1] for c in commands if "/np/" in c and "mkdir" in c] == [
        "10.10.10.19:3260",
        "10.10.20.19:3260",
    ]
    assert any(f"{tpg}1/np/10.10.10.19:3260" in c for c in commands)
    assert any(f"{tpg}2/np/10.10.20.19:3260" in c for c in commands)
    for index in (1, 2):
        for lun in plan.luns:
            group = f"iblock_{lun.lun}/{lun.backstore}/alua/fabricqa_tpgt_{index}"
            made = next(i for i, c in enumerate(commands) if c.endswith(group))
            numbered = next(i for i, c in enumerate(commands) if f"{group}/tg_pt_gp_id" in c)
            assert commands[numbered].split()[-2] == str(index)  # remote.write: sh -c SCRIPT sh VALUE PATH
            linked = next(i for i, c in enumerate(commands) if f"tpgt_{index}/lun/lun_{lun.lun}/{lun.backstore}" in c)
            joined = next(i for i, c in enumerate(commands) if f"tpgt_{index}/lun/lun_{lun.lun}/alua_tg_pt_gp" in c)
            assert made < numbered < joined and linked < joined
            assert commands[joined].split()[-2] == f"fabricqa_tpgt_{index}"
        assert any(c.endswith(f"1 {tpg}{index}/enable") for c in commands)


def test_one_portal_keeps_lios_default_alua_group() -> None:
    data = yaml.safe_load((LABS / "vlab.yaml").read_text())
    next(t for t in data["targets"] if t["kind"] == "lio")["paths"] = "first"
    lab = LabModel.model_validate(data)
    model = lab.target_for("iscsi", "lio")
    plan = plan_from_lab(lab, model, "iscsi")
    assert plan.tpgs == ("tpgt_1",)
    host = LioHost((DATA / "lio-snapshot-empty.txt").read_text())
    LioTarget(lab, model, {"vstor": host})._make_target(  # type: ignore[dict-item]
        plan, {0: "iblock_0", 1: "iblock_1"}, UndoStack(), {"targets": [plan.iqn]}
    )
    assert not [c for c in host.commands if any("alua" in part for part in c)]


def test_the_recorded_two_path_snapshot_has_a_tpg_per_portal_with_every_lun() -> None:
    snap = parse_snapshot((DATA / "lio-snapshot-two-paths.txt").read_text())
    tpgs = snap.targets["iqn.2026-11.io.fabricqa:vstor"]
    assert {name: list(tpg["portals"]) for name, tpg in tpgs.items()} == {
        "tpgt_1": ["10.10.10.19:3260"],
        "tpgt_2": ["10.10.20.19:3260"],
    }
    assert tpgs["tpgt_1"]["luns"] == tpgs["tpgt_2"]["luns"]
