"""Two labs, one target host (issue 28): a record names the lab that wrote it, and a lab never reads, cleans or
writes over another lab's record. Two labs that give one host's objects the same ``name_prefix`` share the
record's file name, so the first to meet the other's record stops with one line, touching nothing.

The host is scripted: the record files are state, every other command answers empty (an empty configfs or sysfs
tree, no SPDK app) and is logged, so a test sees that nothing was deleted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes import Answer, ScriptedHost

from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.targets import load_target
from pytest_fabricqa.targets.configfs import ConfigfsTarget, ForeignRecord

LABS = Path(__file__).parents[2] / "labs"
KINDS = ("nvmet", "lio", "spdk", "scst", "tgt")


class RecordsHost(ScriptedHost):
    """A target host holding record files (``mv -f`` writes one, ``cat`` reads one, ``rm -f`` removes one)."""

    def __init__(self) -> None:
        super().__init__("vstor")
        self.files: dict[str, str] = {}

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[:2] == ("sh", "-c") and "mv -f" in argv[2] and len(argv) > 5:
            self.files[argv[5]] = argv[4]
        elif argv[:2] == ("sh", "-c") and "cat" in argv[2] and len(argv) > 4 and argv[4].endswith(".json"):
            return self.files.get(argv[4], "")
        elif argv[:2] == ("rm", "-f"):
            self.files.pop(argv[2], None)
        return ""

    def deletions(self) -> list[tuple[str, ...]]:
        words = ("rmdir", "rm ", "del_", "delete", "kill", "unlink")
        return [c for c in self.commands if any(w in " ".join(c) for w in words)]


def _driver(lab: LabModel, kind: str, host: RecordsHost) -> ConfigfsTarget:
    model = next(t for t in lab.targets if t.kind == kind)
    target = load_target(lab, model, {"vstor": host})
    assert isinstance(target, ConfigfsTarget)
    return target


def _labs() -> tuple[LabModel, LabModel]:
    lab = load_lab(LABS / "vlab.yaml")
    return lab, lab.model_copy(update={"name": "team-b"})


@pytest.mark.parametrize("kind", KINDS)
def test_another_labs_record_is_never_cleaned_and_stops_the_run_in_one_line(kind: str) -> None:
    lab_a, lab_b = _labs()
    host = RecordsHost()
    a = _driver(lab_a, kind, host)
    record: dict[str, Any] = {"kind": kind, "owner": "pid 4242", "subsystems": [], "targets": [], "devices": []}
    a._write_state(record)
    assert json.loads(host.files[a.state_file])["lab"] == "vlab"
    host.commands.clear()
    b = _driver(lab_b, kind, host)
    for step in (b.cleanup_stale, b.leftovers):
        with pytest.raises(ForeignRecord) as info:
            step()
        message = str(info.value)
        assert "\n" not in message and message.startswith(
            f"vstor: {a.state_file} is the record of lab 'vlab' (pid 4242), and lab 'team-b'"
        )
        assert "lab 'team-b' would use the same file" in message and ".name_prefix another value" in message
    assert host.deletions() == [] and a.state_file in host.files
    # The lab that wrote it reads it as its own.
    assert _driver(lab_a, kind, host).leftovers() == [f"vstor: state file {a.state_file} is still there"]


@pytest.mark.parametrize("kind", ["nvmet", "lio"])
def test_provisioning_never_writes_over_another_labs_record(kind: str) -> None:
    lab_a, lab_b = _labs()
    host = RecordsHost()
    _driver(lab_a, kind, host)._write_state({"kind": kind, "owner": "pid 4242"})
    before = dict(host.files)
    undo = UndoStack()
    with pytest.raises(ForeignRecord):
        _driver(lab_b, kind, host).provision("nvme-tcp" if kind == "nvmet" else "iscsi", undo)
    assert undo.unwind() == [] and host.files == before


def test_a_record_from_before_records_named_their_lab_is_this_labs() -> None:
    """A killed run of the previous version left a record without ``lab``: the next run still cleans it up."""
    lab, _ = _labs()
    host = RecordsHost()
    target = _driver(lab, "nvmet", host)
    host.files[target.state_file] = json.dumps({"kind": "nvmet", "owner": "pid 4242", "subsystems": []})
    assert target.cleanup_stale() == [f"vstor: removed the stale state file {target.state_file}"]


def test_other_labs_records_are_found_on_a_real_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The clean-up names every record of another lab on the target host (and touches none of its objects)."""
    from pytest_fabricqa.targets import remote
    from pytest_fabricqa.transport.local import LocalHost

    monkeypatch.setattr(remote, "STATE_DIR", str(tmp_path))
    (tmp_path / "fqa-team-b-spdk.json").write_text(json.dumps({"kind": "spdk", "lab": "team-b"}))
    (tmp_path / "fqa-vlab-nvmet.json").write_text(json.dumps({"kind": "nvmet", "lab": "vlab"}))
    (tmp_path / "fabricqa-lio.json").write_text(json.dumps({"kind": "lio"}))  # before records named their lab
    (tmp_path / "torn.json").write_text("{")
    assert remote.other_labs_records(LocalHost("localhost"), "vlab") == [
        (str(tmp_path / "fqa-team-b-spdk.json"), "team-b")
    ]
    assert remote.other_labs_records(LocalHost("localhost"), "team-b") == [
        (str(tmp_path / "fqa-vlab-nvmet.json"), "vlab")
    ]


# -- ownership checked twice (item 3): nvmet ----------------------------------------------------------------------

NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
HOST_NQN = "nqn.2026-11.io.fabricqa:vnode1"


class NvmetHost(RecordsHost):
    """A target host whose nvmet tree is ``tree`` (SNAPSHOT_SCRIPT's lines) besides its record files."""

    def __init__(self, tree: str) -> None:
        super().__init__()
        self.tree = tree

    def answer(self, argv: tuple[str, ...]) -> Answer:
        from pytest_fabricqa.targets.nvmet.snapshot import SNAPSHOT_SCRIPT

        if argv[:3] == ("sh", "-c", SNAPSHOT_SCRIPT):
            return self.tree
        return super().answer(argv)


def _nvmet_record(lab: LabModel, host: NvmetHost, **record: Any) -> ConfigfsTarget:
    target = _driver(lab, "nvmet", host)
    host.files[target.state_file] = json.dumps({"kind": "nvmet", "owner": "pid 4242", "lab": lab.name, **record})
    return target


def test_nvmet_a_recorded_subsystem_without_the_labs_mark_is_never_deleted_nor_its_port_or_host_entry() -> None:
    """The run was killed after recording NQN, port 10001 and a host entry; someone then made a subsystem of that
    NQN (nvmetcli's model 'Linux'), exported it on a port of that ID and allowed the host entry. None is ours."""
    lab, _ = _labs()
    tree = (
        f"S\t{NQN}\nSA\t{NQN}\tmodel\tLinux\nSH\t{NQN}\t{HOST_NQN}\n"
        f"P\t10001\ttcp\tipv4\t10.10.10.19\t4420\tnot specified\nPS\t10001\t{NQN}\nH\t{HOST_NQN}\n"
    )
    host = NvmetHost(tree)
    target = _nvmet_record(lab, host, subsystems=[NQN], marks={NQN: "fqa-vlab"}, ports=[10001], hosts=[HOST_NQN])
    assert target.leftovers() == [f"vstor: state file {target.state_file} is still there"]
    assert target.cleanup_stale() == [
        f"vstor: left nvmet subsystem {NQN} alone: this lab's record lists it, but its model is 'Linux', not the "
        "lab's mark (another session or tool made it since)",
        f"vstor: removed the stale state file {target.state_file}",
    ]
    assert [c for c in host.deletions() if c[:2] != ("rm", "-f")] == []


def test_nvmet_a_marked_subsystem_no_record_lists_is_named_and_never_deleted() -> None:
    lab, _ = _labs()
    host = NvmetHost(f"S\t{NQN}\nSA\t{NQN}\tmodel\tfqa-vlab\n")
    target = _driver(lab, "nvmet", host)
    assert target.leftovers() == []
    assert target.cleanup_stale() == [
        f"vstor: left nvmet subsystem {NQN} alone: it carries this lab's mark ('fqa-vlab') but no record of this lab "
        "lists it (remove it by hand if it is yours)"
    ]
    assert host.deletions() == []


def test_nvmet_recorded_and_marked_objects_are_cleaned() -> None:
    """The other half: what both the record and the mark say is ours goes (subsystem, its port, its host entry)."""
    lab, _ = _labs()
    tree = (
        f"S\t{NQN}\nSA\t{NQN}\tmodel\tfqa-vlab\nSH\t{NQN}\t{HOST_NQN}\n"
        f"P\t10001\ttcp\tipv4\t10.10.10.19\t4420\tnot specified\nPS\t10001\t{NQN}\nH\t{HOST_NQN}\n"
    )
    host = NvmetHost(tree)
    target = _nvmet_record(lab, host, subsystems=[NQN], marks={NQN: "fqa-vlab"}, ports=[10001], hosts=[HOST_NQN])
    assert target.cleanup_stale()[:2] == [
        "vstor: removed nvmet port 10001 (tcp 10.10.10.19:4420)",
        f"vstor: removed nvmet subsystem {NQN}",
    ]
