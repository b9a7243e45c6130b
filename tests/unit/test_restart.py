"""The target restart faults (issue 29, item 4): each recorded before it breaks anything, undone by its restore and
by the next run's start after a SIGKILL, refused on a target fabricqa did not make; the builder's choice per kind.
The faults on the virtual lab's real targets: ``suites/test_failover.py::test_target_restart`` and
``tests/vlab/test_faults_vlab.py``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fakes import Answer, ScriptedHost, answer_files
from labfiles import as_recorded

from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.faults import restart, stale
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.targets import lio, scst
from pytest_fabricqa.targets.spdk import app as spdk_app
from pytest_fabricqa.targets.spdk.jsonrpc import CLIENT_SCRIPT

LABS = Path(__file__).parents[2] / "labs"
DATA = Path(__file__).parents[1] / "data"
IQN = "iqn.2026-11.io.fabricqa:vstor"
RECORDS = "/run/fabricqa/fabricqa-faults.json"
T_DOWN, T_UP = "1764445200.250000000", "1764445203.750000000"
DEAD = {"controller": "a-controller-that-was-killed", "pid": 4242, "started": 1}


def lab() -> LabModel:
    return as_recorded(load_lab(LABS / "vlab.yaml"))


class TargetHost(ScriptedHost):
    """vstor serving the lab's IQN from LIO (two TPGs), SCST (two sessions) or tgt (tid 625172, two connections), as
    the fault scripts change it; ``events`` lists each break and restore with the fault records as they were."""

    def __init__(self, kind: str) -> None:
        super().__init__("vstor")
        self.files: dict[str, str] = {}
        state: dict[str, Any] = {"targets": [IQN]} if kind != "tgt" else {"targets": [{"tid": 625172, "iqn": IQN}]}
        self.files[f"/run/fabricqa/fabricqa-{kind}.json"] = json.dumps(state)
        self.enabled = {"tpgt_1": "1", "tpgt_2": "1"}
        self.scst_enabled = "1"
        self.closed: list[str] = []
        self.tgt_state = "ready"
        self.deleted: list[str] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    def records(self) -> dict[str, Any]:
        text = self.files.get(RECORDS)
        return json.loads(text)["faults"] if text else {}

    def answer(self, argv: tuple[str, ...]) -> Answer:
        script = argv[2] if argv[:2] == ("sh", "-c") else ""
        stored = answer_files(self.files, argv)
        if stored is not None:
            return stored
        if script == lio.SNAPSHOT_SCRIPT:
            return f"T\t{IQN}\n" + "".join(f"G\t{IQN}\t{g}\t{e}\n" for g, e in self.enabled.items())
        if script == restart.LIO_TPGS_OFF:
            self.events.append(("break", self.records()))
            self.enabled.update(dict.fromkeys(argv[5:], "0"))
            return f"started {T_DOWN}\n{T_DOWN}\n"
        if script == restart.LIO_TPGS_ON:
            self.events.append(("restore", self.records()))
            self.enabled.update(dict.fromkeys(argv[5:], "1"))
            return T_UP + "\n"
        if script == scst.SNAPSHOT_SCRIPT:
            return f"T\t{IQN}\t{self.scst_enabled}\t128\nS\t{IQN}\tiqn.1993-08.org.debian:01:vnode1\n"
        if script == restart.SCST_OFF:
            self.events.append(("break", self.records()))
            self.scst_enabled = "0"
            self.closed.append(argv[4])
            return f"started {T_DOWN}\n{T_DOWN}\n"
        if script == restart.SCST_ON:
            self.events.append(("restore", self.records()))
            self.scst_enabled = "1"
            return T_UP + "\n"
        if argv[:1] == ("tgtadm",) and argv[-2:] == ("--op", "show"):
            return (
                (DATA / "tgt" / "show-two-connections.stdout")
                .read_text()
                .replace("State: ready", f"State: {self.tgt_state}")
            )
        if script == restart.TGT_OFF:
            self.events.append(("break", self.records()))
            self.tgt_state = "offline"
            self.deleted.extend(argv[6:])
            return f"started {T_DOWN}\n{T_DOWN}\n"
        if script == restart.TGT_ON:
            self.events.append(("restore", self.records()))
            self.tgt_state = "ready"
            return T_UP + "\n"
        return None


def fault(kind: str, host: TargetHost) -> faults.PortOff:
    model = next(t for t in lab().targets if t.kind == kind)
    return restart.target_restart(lab(), {"vstor": host}, model.name, "iscsi")


@pytest.mark.parametrize("kind", ["lio", "scst", "tgt"])
def test_a_target_restart_is_recorded_before_it_breaks_and_undone_by_its_restore(kind: str) -> None:
    host = TargetHost(kind)
    undo = UndoStack()
    restarting = fault(kind, host)
    assert restarting.inject(undo) == float(T_DOWN)
    ((what, records),) = host.events
    assert what == "break" and len(records) == 1  # the record was there before the target went
    if kind == "lio":
        assert host.enabled == {"tpgt_1": "0", "tpgt_2": "0"}  # every TPG: every path
    elif kind == "scst":
        assert host.scst_enabled == "0" and host.closed == [f"{scst.ISCSI}/{IQN}"]
    else:
        assert host.tgt_state == "offline" and host.deleted == ["1:0", "2:0"]  # each session's connection
    assert restarting.restore() == float(T_UP)
    assert host.records() == {} and [e for e, _ in host.events] == ["break", "restore"]
    assert (host.enabled, host.scst_enabled, host.tgt_state) == ({"tpgt_1": "1", "tpgt_2": "1"}, "1", "ready")
    assert undo.unwind() == []  # idempotent: restored already


@pytest.mark.parametrize("kind", ["lio", "scst", "tgt"])
def test_a_run_killed_while_the_target_is_down_brings_it_back_at_the_next_start(kind: str) -> None:
    host = TargetHost(kind)
    fault(kind, host).inject(UndoStack())  # killed here
    records = host.records()
    (record,) = records.values()
    record["owner"] = DEAD
    host.files[RECORDS] = json.dumps({"kind": "faults", "faults": records})
    (line,) = stale.restore_stale(lab(), {"vstor": host})
    assert line.startswith(f"vstor: restored '{record['what']}' that pid 4242 on a-controller-that-was-killed left")
    assert host.records() == {} and [e for e, _ in host.events] == ["break", "restore"]


@pytest.mark.parametrize("kind", ["lio", "scst", "tgt"])
def test_a_target_fabricqa_did_not_make_is_never_restarted(kind: str) -> None:
    host = TargetHost(kind)
    host.files[f"/run/fabricqa/fabricqa-{kind}.json"] = json.dumps({"targets": []})
    with pytest.raises(faults.FaultRefused, match=r"was not made by fabricqa|does not list it"):
        fault(kind, host).inject(UndoStack())
    assert host.events == [] and host.records() == {}


def test_a_target_already_down_is_refused_as_nothing_to_restart() -> None:
    host = TargetHost("scst")
    host.scst_enabled = "0"
    with pytest.raises(faults.FaultRefused, match=re.escape(f"SCST target {IQN} is not enabled")):
        fault("scst", host).inject(UndoStack())


def test_tgt_connections_are_read_per_target_from_tgtadm_show() -> None:
    text = (DATA / "tgt" / "show-two-connections.stdout").read_text()
    assert restart.tgt_connections(text, 625172) == [(1, 0), (2, 0)]
    assert restart.tgt_connections(text, 1) == []  # another's target: none of its sessions


def test_nvmet_restarts_as_every_port_of_ours_unlinked() -> None:
    host = ScriptedHost("vstor")
    files = {"/run/fabricqa/fabricqa-nvmet.json": json.dumps({"ports": [2, 1], "subsystems": []})}
    host.answer = lambda argv: answer_files(files, argv)
    nvmet = next(t for t in lab().targets if t.kind == "nvmet")
    made = restart.target_restart(lab(), {"vstor": host}, nvmet.name, "nvme-tcp")
    assert [(type(p).__name__, p.portid) for p in made.parts] == [("NvmetPortDown", 1), ("NvmetPortDown", 2)]


SPDK_STATE = "/run/fabricqa/fabricqa-spdk.json"
BINARY = "/opt/spdk/bin/nvmf_tgt"


class SpdkHost(ScriptedHost):
    """vstor running the nvmf_tgt fabricqa started (pid 700, per the SPDK driver's state file): ``save_config``
    answers a configuration, the stop ends the app, the start gives pid 701 and ``framework_wait_init`` answers."""

    def __init__(self, *, started: bool = True) -> None:
        super().__init__("vstor")
        app = {"binary": BINARY, "socket": "/var/tmp/spdk.sock", "pidfile": "/run/p.pid", "log": "/run/l.log"}
        state = {"kind": "spdk", "subsystems": [], **({"app": {**app, "pid": 700}} if started else {})}
        self.files: dict[str, str] = {SPDK_STATE: json.dumps(state), RECORDS: ""}
        self.running: set[int] = {700}
        self.written: dict[str, str] = {}
        self.steps: list[str] = []

    def answer(self, argv: tuple[str, ...]) -> Answer:
        script = argv[2] if argv[:2] == ("sh", "-c") else ""
        stored = answer_files(self.files, argv)
        if stored is not None:
            return stored
        if script == spdk_app.ALIVE_SCRIPT:
            return "RUNNING\n" if int(argv[4]) in self.running else "GONE\n"
        if argv[:3] == ("python3", "-c", CLIENT_SCRIPT):
            (method, params), *_ = json.loads(argv[-1])
            self.steps.append(method)
            result: Any = True
            if method == "framework_get_subsystems":
                result = [{"subsystem": "bdev", "depends_on": []}, {"subsystem": "nvmf", "depends_on": ["bdev"]}]
            elif method == "framework_get_config":
                result = [{"method": f"{params['name']}_set_options", "params": {}}]
            return json.dumps({"responses": [{"jsonrpc": "2.0", "id": 1, "result": result}]})
        if script == restart.SPDK_CONFIG_WRITE:
            self.written[argv[4]] = self.stdins[-1] or ""
            return ""
        if script == restart.SPDK_STOP:
            self.steps.append(f"stop {argv[4]} ({len(self.records())} record)")
            self.running.discard(int(argv[4]))
            return f"started {T_DOWN}\nSTOPPED\n{T_DOWN}\n"
        if script == spdk_app.START_SCRIPT:
            self.steps.append("start " + " ".join(argv[6:]))
            self.running.add(701)
            return "PID 701\n"
        if script == faults.CLOCK:
            return T_UP + "\n"
        return None

    def records(self) -> dict[str, Any]:
        text = self.files.get(RECORDS)
        return json.loads(text)["faults"] if text else {}


def spdk_restart(host: SpdkHost) -> restart.SpdkAppRestart:
    spdk = next(t for t in lab().targets if t.kind == "spdk")
    return faults.of_lab(lab(), restart.SpdkAppRestart(host, "fabricqa", spdk.spdk_settings, "builtin"))


def test_spdk_restarts_as_its_app_stopped_and_started_again_from_its_own_saved_configuration() -> None:
    host = SpdkHost()
    fault = spdk_restart(host)
    assert fault.inject(UndoStack()) == float(T_DOWN)
    saved = ["framework_get_subsystems", "framework_get_config", "framework_get_config"]
    assert host.steps == [*saved, "stop 700 (1 record)"]  # saved, recorded, then stopped
    assert json.loads(host.written[fault.config]) == {  # as `rpc.py save_config` writes it
        "subsystems": [
            {"subsystem": "bdev", "config": [{"method": "bdev_set_options", "params": {}}]},
            {"subsystem": "nvmf", "config": [{"method": "nvmf_set_options", "params": {}}]},
        ]
    }
    assert fault.restore() == float(T_UP)
    assert host.steps[4] == f"start {BINARY} -m 0x1 -r /var/tmp/spdk.sock -s 512 -u --json {fault.config}"
    assert host.steps[5:] == ["framework_wait_init"]
    assert json.loads(host.files[SPDK_STATE])["app"]["pid"] == 701  # its teardown stops the new app
    assert host.records() == {}
    fault.restore()  # running again: nothing more
    assert len(host.steps) == 6


def test_a_killed_run_s_stopped_spdk_app_is_started_again_at_the_next_start() -> None:
    host = SpdkHost()
    spdk_restart(host).inject(UndoStack())  # killed here: the app is down
    records = host.records()
    (record,) = records.values()
    record["owner"] = DEAD
    host.files[RECORDS] = json.dumps({"kind": "faults", "faults": records})
    (line,) = stale.restore_stale(lab(), {"vstor": host})
    assert line.startswith("vstor: restored 'vstor SPDK nvmf_tgt on /var/tmp/spdk.sock stopped and started again'")
    assert 701 in host.running and json.loads(host.files[SPDK_STATE])["app"]["pid"] == 701


def test_an_spdk_app_fabricqa_did_not_start_is_never_restarted() -> None:
    host = SpdkHost(started=False)
    with pytest.raises(faults.FaultRefused, match="was not started by fabricqa"):
        spdk_restart(host).inject(UndoStack())
    assert host.steps == [] and host.records() == {}
