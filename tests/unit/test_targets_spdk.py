"""The SPDK target kind on the shared scripted host: an nvmf_tgt whose JSON-RPC replies are SPDK 23.01.1's own,
recorded (tests/data/spdk/rpc-session.json), with the app's objects kept as state.

What is proven: the order of provisioning, that teardown undoes exactly what was made (foreign subsystems and bdevs
stay), that a killed run's leftovers -- its nvmf_tgt, or its objects in an app it attached to -- are cleaned at the
next start, that every refusal and RPC error is one line naming what and where, and the prerequisites.
"""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from fakes import Answer, ScriptedHost

from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.targets import load_target
from pytest_fabricqa.targets.spdk import (
    CLIENT_SCRIPT,
    PROBE_SCRIPT,
    SpdkRpcError,
    SpdkTarget,
    mark_serial,
    parse_probe,
    parse_snapshot,
    spdk_problems,
    start_argv,
)
from pytest_fabricqa.targets.spdk import app as spdk_app
from pytest_fabricqa.targets.spdk.driver import PATH_KINDS, namespace_uuid

DATA = Path(__file__).parents[1] / "data" / "spdk"
SESSION: list[dict[str, Any]] = json.loads((DATA / "rpc-session.json").read_text())
RECORDED_NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
NQN2 = "nqn.2026-11.io.fabricqa:vlab-nvme0"
FOREIGN_NQN = "nqn.2014-08.org.example:foreign"
SOCK = "/var/tmp/spdk.sock"
BINARY = "/opt/spdk/build/bin/nvmf_tgt"


def recorded(method: str, nth: int = 0) -> dict[str, Any]:
    """The ``nth`` recorded response to ``method``."""
    return copy.deepcopy([e["response"] for e in SESSION if e["method"] == method][nth])


def recorded_error(method: str, nth: int = 0) -> dict[str, Any]:
    """The ``nth`` recorded error response to ``method``."""
    return copy.deepcopy([e["response"] for e in SESSION if e["method"] == method and "error" in e["response"]][nth])


SUBSYSTEMS = next(r["result"] for r in (recorded("nvmf_get_subsystems", 0),))
DISCOVERY = next(s for s in SUBSYSTEMS if "discovery" in s["nqn"])
SUBSYSTEM_TEMPLATE = next(s for s in SUBSYSTEMS if s["nqn"] == RECORDED_NQN)
BDEV_TEMPLATE = next(b for b in recorded("bdev_get_bdevs")["result"] if b["name"] == "fabricqa_ram0")
TRANSPORT_TEMPLATE = recorded("nvmf_get_transports", 1)["result"][0]


class FakeSpdkHost(ScriptedHost):
    """A target host with an nvmf_tgt answering from recorded replies; devices, files and the app are state."""

    def __init__(self, devices: tuple[str, ...] = ("/dev/ram0", "/dev/nvme0n1"), running: bool = False) -> None:
        super().__init__("vstor")
        self.devices = set(devices)
        self.files: dict[str, str] = {}
        self.running = running
        self.started_by: str | None = None  # the command line of the app the plugin started
        self.pid = 4242
        self.hugepages = (0, 0, 2048)
        self.python3 = True
        self.subsystems: dict[str, dict[str, Any]] = {}
        self.bdevs: dict[str, dict[str, Any]] = {}
        self.transports: list[str] = []
        self.methods: list[str] = []  # every RPC method called, in order
        self.inject: dict[str, dict[str, Any]] = {}  # method -> error response to answer once
        self.on_call: dict[str, Any] = {}  # method -> callable run before answering (another session's step)
        self.exit_at_start = False
        self.socket = SOCK  # where the app listens
        self.other_pid = 5151  # the pid of an app fabricqa did not start

    # -- the app ----------------------------------------------------------------------------------------------
    def add_subsystem(
        self, nqn: str, model: str = "SPDK bdev Controller", serial: str = "00000000000000000000"
    ) -> None:
        entry = copy.deepcopy(SUBSYSTEM_TEMPLATE)
        entry.update(nqn=nqn, model_number=model, serial_number=serial, namespaces=[], hosts=[], listen_addresses=[])
        self.subsystems[nqn] = entry

    def add_bdev(self, name: str, filename: str) -> None:
        entry = copy.deepcopy(BDEV_TEMPLATE)
        entry["name"] = name
        entry["driver_specific"]["aio"]["filename"] = filename
        self.bdevs[name] = entry

    def rpc(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        self.methods.append(method)
        if method in self.on_call:
            self.on_call.pop(method)()
        if method in self.inject:
            return self.inject.pop(method)
        p = params or {}
        ok: Any = True
        if method == "framework_wait_init":
            pass
        elif method == "nvmf_get_subsystems":
            ok = [copy.deepcopy(DISCOVERY), *copy.deepcopy(list(self.subsystems.values()))]
        elif method == "bdev_get_bdevs":
            ok = copy.deepcopy(list(self.bdevs.values()))
        elif method == "nvmf_get_transports":
            ok = [{**copy.deepcopy(TRANSPORT_TEMPLATE), "trtype": t} for t in self.transports]
        elif method == "nvmf_create_transport":
            if p["trtype"] in self.transports:
                return recorded_error("nvmf_create_transport", 0)
            self.transports.append(p["trtype"])
        elif method == "bdev_aio_create":
            if p["name"] in self.bdevs:
                return recorded_error("bdev_aio_create", 0)
            self.add_bdev(p["name"], p["filename"])
            ok = p["name"]
        elif method == "nvmf_create_subsystem":
            if p["nqn"] in self.subsystems:
                error = recorded_error("nvmf_create_subsystem", 0)
                error["error"]["message"] = error["error"]["message"].replace(RECORDED_NQN, p["nqn"])
                return error
            self.add_subsystem(p["nqn"], p.get("model_number", ""), p.get("serial_number", ""))
            self.subsystems[p["nqn"]]["allow_any_host"] = p.get("allow_any_host", False)
        elif method == "nvmf_subsystem_add_ns":
            ns = p["namespace"]
            listed = {"nsid": ns["nsid"], "bdev_name": ns["bdev_name"]}
            listed.update({key: ns[key] for key in ("nguid", "uuid") if key in ns})  # as nvmf_get_subsystems lists
            self.subsystems[p["nqn"]]["namespaces"].append(listed)
            ok = ns["nsid"]
        elif method == "nvmf_subsystem_add_host":
            self.subsystems[p["nqn"]]["hosts"].append({"nqn": p["host"]})
        elif method == "nvmf_subsystem_add_listener":
            self.subsystems[p["nqn"]]["listen_addresses"].append(p["listen_address"])
        elif method == "nvmf_delete_subsystem":
            if p["nqn"] not in self.subsystems:
                return recorded_error("nvmf_delete_subsystem", 0)
            del self.subsystems[p["nqn"]]
        elif method == "bdev_aio_delete":
            if p["name"] not in self.bdevs:
                return recorded_error("bdev_aio_delete", 0)
            del self.bdevs[p["name"]]
        else:
            return recorded_error("no_such_method")
        return {"jsonrpc": "2.0", "id": 1, "result": ok}

    def stop_app(self) -> None:
        self.running = False
        self.started_by = None
        self.subsystems.clear()
        self.bdevs.clear()
        self.transports.clear()

    # -- the host ---------------------------------------------------------------------------------------------
    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[:2] == ("python3", "-c"):
            assert argv[2] == CLIENT_SCRIPT
            if not self.python3:
                return 127, "", "sh: 1: python3: not found\n"
            if not self.running or argv[4] != self.socket:
                message = f"cannot connect to {argv[4]}: No such file or directory"
                return 3, json.dumps({"fabricqa": "connect", "message": message, "responses": []}), ""
            responses = []
            for method, params in json.loads(argv[8]):
                responses.append(self.rpc(method, params))
                if "error" in responses[-1]:
                    break
            return json.dumps({"responses": responses})
        if argv[:2] == ("sh", "-c") and argv[2] != PATH_KINDS:
            script, args = argv[2], argv[4:]
            if script == PROBE_SCRIPT:
                lines = [f"binary {BINARY}", "binary-rdma yes", "hugepages {} {} {}".format(*self.hugepages)]
                lines += ["python3 yes"] if self.python3 else []
                lines += ["socket yes"] if self.running else []
                return "\n".join(lines) + "\n"
            if script == spdk_app.START_SCRIPT:
                pidfile, command = args[1], args[2:]
                if not self.exit_at_start:
                    self.running, self.started_by = True, shlex.join(command)
                self.files[pidfile] = str(self.pid)
                return f"PID {self.pid}\n"
            if script in (spdk_app.ALIVE_SCRIPT, spdk_app.STOP_SCRIPT):
                ours = self.running and self.started_by is not None and args[0] == str(self.pid)
                if script == spdk_app.ALIVE_SCRIPT:
                    return "RUNNING\n" if ours else "GONE\n"
                if ours:
                    self.stop_app()
                    return "STOPPED\n"
                return "GONE\n"
            if "mv -f" in script:  # remote.write_state
                self.files[args[1]] = args[0]
                return ""
            if "cat" in script and "tail" not in script:  # remote.read_state, the pid file
                return self.files.get(args[0], "")
            if "tail" in script:  # the app's log
                return "[2026-12-01 04:30:00.000000] app.c: 712:spdk_app_start: *ERROR*: Unable to start\n"
        if argv[:2] == ("rm", "-f"):
            self.files.pop(argv[2], None)
            return ""
        if argv[:3] == ("sh", "-c", PATH_KINDS):
            return "".join(f"B {p}\n" for p in argv[4:] if p in self.devices)
        if argv[:2] == ("ss", "-Hxlp"):  # recorded shape: iproute2 6.1's ss, a UNIX listener as root
            if not self.running:
                return ""
            pid = self.pid if self.started_by is not None else self.other_pid
            return f'u_str LISTEN 0 128 {self.socket} 817598 * 0 users:(("reactor_0",pid={pid},fd=10))\n'
        if argv[0] == "ss":
            return ""
        return None


def make_lab(**spdk: Any) -> LabModel:
    """labs/vlab.yaml's shape with one SPDK target on vstor serving both NVMe protocols."""
    data: dict[str, Any] = {
        "name": "vlab",
        "hosts": {
            "vstor": {
                "address": "127.0.0.1",
                "roles": ["target"],
                "storage": {"interface": "eth1", "address": "10.10.10.19"},
            },
            "vnode1": {
                "address": "127.0.0.1",
                "roles": ["initiator"],
                "storage": {"interface": "eth1", "address": "10.10.10.17"},
                "host_nqn": "nqn.2026-11.io.fabricqa:vnode1",
            },
        },
        "network": {"link_speed_gbps": 1},
        "protocols": ["nvme-tcp", "nvme-rdma"],
        "targets": [
            {
                "kind": "spdk",
                "host": "vstor",
                "protocols": ["nvme-tcp", "nvme-rdma"],
                "devices": {"ram0": {"path": "/dev/ram0", "writable": True}, "nvme0": {"path": "/dev/nvme0n1"}},
                "nvme": {
                    "port": 4420,
                    "subsystems": [
                        {"nqn": NQN, "namespaces": ["ram0"]},
                        {"nqn": NQN2, "namespaces": ["nvme0"], "allow_any_host": False},
                    ],
                },
                **({"spdk": spdk} if spdk else {}),
            }
        ],
    }
    return LabModel.model_validate(data)


START = {"mem_size_mb": 512, "no_huge": True, "binary": BINARY}


def target_on(host: FakeSpdkHost, **spdk: Any) -> SpdkTarget:
    lab = make_lab(**spdk)
    target = load_target(lab, lab.targets[0], {"vstor": host})
    assert isinstance(target, SpdkTarget)
    return target


def test_registered_under_its_kind_with_the_protocols_it_serves() -> None:
    from pytest_fabricqa.core.kinds import REGISTRY
    from pytest_fabricqa.core.protocols import PROTOCOLS

    assert REGISTRY["spdk"].serves == ("nvme-tcp", "nvme-rdma")
    assert PROTOCOLS["nvme-rdma"].target_modules["spdk"] == ("ib_uverbs", "rdma_ucm")
    assert isinstance(target_on(FakeSpdkHost(), **START), SpdkTarget)


def test_start_mode_provisions_in_order_and_teardown_stops_the_app() -> None:
    host = FakeSpdkHost()
    target = target_on(host, **START)
    undo = UndoStack()
    export = target.provision("nvme-tcp", undo)
    assert host.methods == [
        "framework_wait_init",
        "nvmf_get_subsystems", "bdev_get_bdevs", "nvmf_get_transports",  # transports of the fresh app
        "nvmf_create_transport",
        "bdev_aio_create", "bdev_aio_create",
        "nvmf_create_subsystem", "nvmf_subsystem_add_ns", "nvmf_subsystem_add_listener",
        "nvmf_create_subsystem", "nvmf_subsystem_add_host", "nvmf_subsystem_add_ns", "nvmf_subsystem_add_listener",
    ]  # fmt: skip
    assert host.started_by == shlex.join(
        [BINARY, "-m", "0x1", "-r", SOCK, "-s", "512", "-u", "--env-context=--no-huge --legacy-mem"]
    )
    assert export.subsystems == (NQN, NQN2) and (export.transport, export.address, export.port) == (
        "tcp",
        "10.10.10.19",
        4420,
    )
    ram = host.subsystems[NQN]
    assert (ram["model_number"], ram["serial_number"], ram["allow_any_host"]) == (
        "fqa-vlab",
        mark_serial("fqa-vlab"),
        True,
    )
    # A UUID per namespace, stable and unique: without one the initiators' WWIDs of both subsystems were the same
    # (the subsystems' common serial and NSID 1), and multipath would take them for one namespace.
    assert ram["namespaces"] == [{"nsid": 1, "bdev_name": "fqa-vlab_ram0", "uuid": namespace_uuid("fqa-vlab", NQN, 1)}]
    assert host.subsystems[NQN2]["namespaces"][0]["uuid"] not in (ram["namespaces"][0]["uuid"], None)
    assert ram["listen_addresses"] == [{"trtype": "TCP", "adrfam": "IPv4", "traddr": "10.10.10.19", "trsvcid": "4420"}]
    assert host.subsystems[NQN2]["hosts"] == [{"nqn": "nqn.2026-11.io.fabricqa:vnode1"}]
    state = json.loads(host.files[target.state_file])
    assert state["subsystems"] == [NQN, NQN2] and state["bdevs"] == ["fqa-vlab_nvme0", "fqa-vlab_ram0"]
    assert state["app"]["pid"] == host.pid and host.files[target.pidfile] == str(host.pid)
    assert undo.unwind() == []
    assert not host.running and host.files == {}
    assert target.leftovers() == []


def test_the_state_file_and_the_stop_are_registered_before_the_app_starts() -> None:
    """A run killed right after the start leaves the pid for the next run: the app is in the state file first."""
    host = FakeSpdkHost()
    target = target_on(host, **START)
    target.provision("nvme-rdma", UndoStack())
    writes = [i for i, c in enumerate(host.commands) if c[:2] == ("sh", "-c") and "mv -f" in c[2]]
    start = next(i for i, c in enumerate(host.commands) if c[:3] == ("sh", "-c", spdk_app.START_SCRIPT))
    assert writes[0] < start and "pidfile" in json.loads(host.commands[writes[0]][4])["app"]
    assert host.transports == ["RDMA"]


def test_attached_teardown_removes_exactly_what_was_made() -> None:
    host = FakeSpdkHost(devices=("/dev/ram0", "/dev/nvme0n1", "/dev/vda"), running=True)
    host.transports.append("TCP")
    host.add_bdev("foreign_disk", "/dev/vda")
    host.add_subsystem(FOREIGN_NQN, model="fqa-vlab")  # our model number, not our serial: not ours
    before = (copy.deepcopy(host.subsystems), copy.deepcopy(host.bdevs))
    target = target_on(host, start=False)
    undo = UndoStack()
    target.provision("nvme-tcp", undo)
    assert "nvmf_create_transport" not in host.methods  # the app's TCP transport is shared, and stays
    assert set(host.subsystems) == {FOREIGN_NQN, NQN, NQN2}
    assert undo.unwind() == []
    assert (host.subsystems, host.bdevs) == before
    assert host.transports == ["TCP"] and host.running
    assert target.leftovers() == [] and target.cleanup_stale() == []


def test_a_killed_runs_nvmf_tgt_is_stopped_by_the_next_start() -> None:
    host = FakeSpdkHost()
    target_on(host, **START).provision("nvme-tcp", UndoStack())  # killed: nothing unwinds
    target = target_on(host, **START)
    left = target.leftovers()
    assert left[0] == f"vstor: nvmf_tgt pid {host.pid} started by fabricqa is still running"
    assert f"vstor: SPDK subsystem {NQN} is still configured" in left
    assert target.cleanup_stale() == [
        f"vstor: stopped nvmf_tgt (pid {host.pid}) an earlier run started, with its subsystems {NQN}, {NQN2}",
        f"vstor: removed the stale state file {target.state_file}",
    ]
    assert not host.running and target.leftovers() == []
    undo = UndoStack()
    target.provision("nvme-tcp", undo)  # the next run starts its own
    assert undo.unwind() == [] and host.files == {}


def test_a_killed_runs_objects_in_an_attached_app_are_deleted_and_foreign_ones_stay() -> None:
    host = FakeSpdkHost(running=True)
    host.add_subsystem(FOREIGN_NQN)
    host.add_bdev("fqa-vlab_scratch", "/dev/vdb")  # named like ours, in no state file: someone else's
    target_on(host, start=False).provision("nvme-tcp", UndoStack())
    target = target_on(host, start=False)
    assert target.cleanup_stale() == [
        f"vstor: removed SPDK subsystem {NQN}",
        f"vstor: removed SPDK subsystem {NQN2}",
        "vstor: removed SPDK bdev fqa-vlab_nvme0",
        "vstor: removed SPDK bdev fqa-vlab_ram0",
        f"vstor: removed the stale state file {target.state_file}",
    ]
    assert set(host.subsystems) == {FOREIGN_NQN} and set(host.bdevs) == {"fqa-vlab_scratch"}
    assert target.leftovers() == []


def test_a_marked_subsystem_no_record_lists_is_named_and_left_alone() -> None:
    """Every run records before it creates, so a marked subsystem without a record is another session's (two labs
    sharing a prefix, or a session whose record is on another socket): named, never deleted."""
    host = FakeSpdkHost(running=True)
    host.add_subsystem(NQN, model="fqa-vlab", serial=mark_serial("fqa-vlab"))
    host.add_subsystem(NQN2, model="fqa-vlab", serial=mark_serial("another-lab"))
    target = target_on(host, start=False)
    assert target.cleanup_stale() == [
        f"vstor: left SPDK subsystem {NQN} on {SOCK} alone: it carries the mark but no record of this lab lists it "
        "(another session's?)"
    ]
    assert set(host.subsystems) == {NQN, NQN2} and target.leftovers() == []


def test_a_recorded_but_unmarked_subsystem_is_never_deleted() -> None:
    """The record names it, but the live object lacks our model and serial: someone made it after our run died."""
    host = FakeSpdkHost(running=True)
    target_on(host, start=False).provision("nvme-tcp", UndoStack())  # killed
    del host.subsystems[NQN]
    host.add_subsystem(NQN)  # another tool's, same NQN, SPDK's default model and serial
    host.bdevs.pop("fqa-vlab_ram0")
    host.add_bdev("scratch_ram0", "/dev/ram0")
    state = json.loads(host.files[remote_state := target_on(host, start=False).state_file])
    state["bdevs"].append("scratch_ram0")  # a recorded bdev without our name: not ours either
    host.files[remote_state] = json.dumps(state)
    target = target_on(host, start=False)
    assert target.cleanup_stale() == [
        f"vstor: removed SPDK subsystem {NQN2}",
        "vstor: removed SPDK bdev fqa-vlab_nvme0",
        f"vstor: left SPDK subsystem {NQN} on {SOCK} alone: its name is recorded but it lacks fabricqa's mark "
        "(model and serial)",
        f"vstor: removed the stale state file {target.state_file}",
    ]
    assert set(host.subsystems) == {NQN} and set(host.bdevs) == {"scratch_ram0"}


def test_objects_on_another_socket_are_never_deleted() -> None:
    """A killed attach-mode run on one socket; the lab then points at another app's socket, holding the same NQNs
    and bdev names unmarked. The clean-up looks only on the socket it recorded (gone now), so the other app keeps
    everything."""
    host = FakeSpdkHost(running=True)
    host.socket = "/var/tmp/old.sock"
    target_on(host, start=False, rpc_socket="/var/tmp/old.sock").provision("nvme-tcp", UndoStack())  # killed
    host.socket = SOCK  # the old app is gone; another app answers on the lab's new socket
    host.subsystems.clear()
    host.bdevs.clear()
    host.add_subsystem(NQN)
    host.add_bdev("fqa-vlab_ram0", "/dev/ram0")
    target = target_on(host, start=False)
    assert target.cleanup_stale() == [f"vstor: removed the stale state file {target.state_file}"]
    assert set(host.subsystems) == {NQN} and set(host.bdevs) == {"fqa-vlab_ram0"}


def test_a_killed_runs_objects_are_cleaned_on_the_socket_it_recorded() -> None:
    """The same, with the old app still up: its marked objects go, from the socket the record names."""
    host = FakeSpdkHost(running=True)
    host.socket = "/var/tmp/old.sock"
    target_on(host, start=False, rpc_socket="/var/tmp/old.sock").provision("nvme-tcp", UndoStack())  # killed
    target = target_on(host, start=False)  # the lab now names the default socket
    assert f"vstor: removed SPDK subsystem {NQN}" in target.cleanup_stale()
    assert host.subsystems == {} and host.bdevs == {}


def test_an_app_that_replaced_the_one_we_attached_to_holds_nothing_of_ours() -> None:
    """Attach mode records the pid listening on the socket; another pid there now means another app."""
    host = FakeSpdkHost(running=True)
    target_on(host, start=False).provision("nvme-tcp", UndoStack())  # killed
    host.other_pid = 6262  # the app was restarted; someone re-created the lab's objects, marks and all
    target = target_on(host, start=False)
    assert target.leftovers() == [f"vstor: state file {target.state_file} is still there"]
    assert target.cleanup_stale() == [f"vstor: removed the stale state file {target.state_file}"]
    assert set(host.subsystems) == {NQN, NQN2}


def test_start_mode_refuses_an_answer_from_another_app_on_the_socket() -> None:
    """framework_wait_init answered, but ss names another pid on the socket: our app is stopped, nothing made."""
    host = FakeSpdkHost()
    original = host.answer

    def someone_elses(argv: tuple[str, ...]) -> Answer:
        if argv[:2] == ("ss", "-Hxlp") and host.running:
            return f'u_str LISTEN 0 128 {SOCK} 1 * 0 users:(("reactor_0",pid={host.other_pid},fd=10))\n'
        return original(argv)

    host.answer = someone_elses  # type: ignore[method-assign]
    undo = UndoStack()
    with pytest.raises(ProvisionError, match=f"is pid {host.other_pid}, not the nvmf_tgt fabricqa just started"):
        target_on(host, **START).provision("nvme-tcp", undo)
    assert undo.unwind() == [] and not host.running and host.files == {}


def test_an_rpc_error_is_one_line_with_method_parameters_and_spdks_message() -> None:
    host = FakeSpdkHost()
    host.inject["nvmf_subsystem_add_listener"] = recorded_error("nvmf_subsystem_add_listener")
    target = target_on(host, **START)
    undo = UndoStack()
    with pytest.raises(SpdkRpcError) as info:
        target.provision("nvme-tcp", undo)
    message = str(info.value)
    error = recorded_error("nvmf_subsystem_add_listener")["error"]
    assert "\n" not in message
    assert message.startswith(
        f'vstor: SPDK RPC nvmf_subsystem_add_listener {{"listen_address": {{"adrfam": "IPv4", "traddr": '
        f'"10.10.10.19", "trsvcid": "4420", "trtype": "TCP"}}, "nqn": "{NQN}"}} failed: '
    )
    assert f"{error['message'].splitlines()[0].strip()}" in message and f"(code {error['code']})" in message
    assert "check that 10.10.10.19 is an address of the target" in message
    assert undo.unwind() == [] and not host.running and target.leftovers() == []


def test_refusals_are_one_line_and_make_nothing() -> None:
    cases = []
    host = FakeSpdkHost(running=True)  # an app nobody told us about, in start mode
    cases.append((host, START, "an SPDK app already answers on /var/tmp/spdk.sock and was not started by fabricqa"))
    host = FakeSpdkHost(running=True)
    host.add_subsystem(NQN)
    cases.append((host, {"start": False}, f"SPDK subsystem {NQN} already exists and was not created by fabricqa"))
    host = FakeSpdkHost(running=True)
    host.add_bdev("fqa-vlab_ram0", "/dev/vdc")
    cases.append((host, {"start": False}, "SPDK bdev fqa-vlab_ram0 already exists and was not created by fabricqa"))
    host = FakeSpdkHost(running=True)
    host.add_bdev("scratch", "/dev/ram0")
    cases.append((host, {"start": False}, "/dev/ram0 is already opened by SPDK bdev scratch"))
    host = FakeSpdkHost(devices=("/dev/nvme0n1",))
    cases.append((host, START, "backing device ram0 (/dev/ram0) of " + NQN + " does not exist; fix targets[0]"))
    cases.append((FakeSpdkHost(), {}, "no free hugepages for nvmf_tgt (HugePages_Total 0, HugePages_Free 0)"))
    cases.append((FakeSpdkHost(), {"start": False}, "no SPDK app answers on /var/tmp/spdk.sock (cannot connect"))
    host = FakeSpdkHost()
    host.python3 = False
    cases.append((host, START, "python3 is missing"))
    for host, spdk, expected in cases:
        before = (copy.deepcopy(host.subsystems), copy.deepcopy(host.bdevs), host.running)
        undo = UndoStack()
        with pytest.raises(ProvisionError) as info:
            target_on(host, **spdk).provision("nvme-tcp", undo)
        assert "\n" not in str(info.value) and str(info.value).startswith("vstor: "), info.value
        assert expected in str(info.value), info.value
        assert len(undo) == 0 and host.files == {}
        assert (host.subsystems, host.bdevs, host.running) == before


@pytest.mark.parametrize("marked", [False, True], ids=["unmarked", "marked-by-a-session-sharing-the-prefix"])
def test_a_subsystem_made_by_someone_else_meanwhile_is_not_removed_by_our_undo(marked: bool) -> None:
    """The guard fires: without the discard, teardown would delete the other session's subsystem, even one that
    carries our mark (another session with the same prefix made it)."""
    host = FakeSpdkHost(running=True)
    mark = {"model": "fqa-vlab", "serial": mark_serial("fqa-vlab")} if marked else {}
    host.on_call["nvmf_create_subsystem"] = lambda: host.add_subsystem(NQN, **mark)
    target = target_on(host, start=False)
    undo = UndoStack()
    with pytest.raises(ProvisionError, match="appeared while fabricqa was creating it"):
        target.provision("nvme-tcp", undo)
    assert undo.unwind() == []
    assert set(host.subsystems) == {NQN} and host.bdevs == {}
    assert NQN not in json.loads(host.files.get(target.state_file, '{"subsystems": []}'))["subsystems"]


def test_an_app_that_exits_at_start_is_one_line_with_its_log() -> None:
    host = FakeSpdkHost()
    host.exit_at_start = True
    original = host.answer

    def exited(argv: tuple[str, ...]) -> Answer:
        if argv[:2] == ("python3", "-c") and argv[7]:  # the wait for the app, watching its pid
            return 3, json.dumps({"fabricqa": "exited", "message": "process 4242 exited", "responses": []}), ""
        return original(argv)

    host.answer = exited  # type: ignore[method-assign]
    undo = UndoStack()
    with pytest.raises(ProvisionError) as info:
        target_on(host, **START).provision("nvme-tcp", undo)
    assert str(info.value).startswith("vstor: nvmf_tgt (pid 4242) exited: [2026-12-01 04:30:00.000000] app.c: 712")
    assert "see /run/fabricqa/fqa-vlab-spdk-nvmf_tgt.log on the target host" in str(info.value)
    assert undo.unwind() == [] and host.files == {}


def test_start_argv_follows_the_lab() -> None:
    lab = make_lab(core_mask="[0,2]", mem_size_mb=1024, no_pci=False)
    assert start_argv(BINARY, lab.targets[0].spdk_settings) == [BINARY, "-m", "[0,2]", "-r", SOCK, "-s", "1024"]


def test_prerequisites_name_what_is_missing_on_which_host() -> None:
    settings = make_lab(mem_size_mb=1024).targets[0].spdk_settings
    facts = parse_probe("no-binary nvmf_tgt\nhugepages 512 256 2048\n")
    assert spdk_problems("vstor", "targets[0]", facts, settings, "nvme-rdma", None) == [
        "vstor: python3 is missing (SPDK's rpc.py and fabricqa's JSON-RPC client run on it); install python3",
        "vstor: SPDK's nvmf_tgt not found (not on PATH, in /opt/spdk/bin, /opt/spdk/build/bin or /usr/local/bin); "
        "install SPDK on "
        "the target host or set targets[0].spdk.binary",
        "vstor: 512 MiB of hugepages free, nvmf_tgt is to get 1024 MiB; reserve more hugepages or lower "
        "targets[0].spdk.mem_size_mb",
    ]
    facts = parse_probe(f"binary {BINARY}\npython3 yes\nhugepages 1024 1024 2048\n")
    assert spdk_problems("vstor", "targets[0]", facts, settings, "nvme-tcp", None) == []
    assert spdk_problems("vstor", "targets[0]", facts, settings, "nvme-rdma", None) == [
        f"vstor: {BINARY} is not linked with librdmacm, so it cannot serve nvme-rdma; build SPDK --with-rdma (and "
        "install rdma-core)"
    ]
    # The nvmf_tgt this plugin started holds every hugepage while its fabric is up (seen on the virtual lab: the
    # prerequisite case of a live SPDK pair found "no free hugepages"): not a missing prerequisite then.
    held = parse_probe(f"binary {BINARY}\npython3 yes\nhugepages 256 0 2048\n")
    assert spdk_problems("vstor", "targets[0]", held, settings, "nvme-tcp", None, running=True) == []
    assert spdk_problems("vstor", "targets[0]", held, settings, "nvme-tcp", None)[0].startswith(
        "vstor: no free hugepages for nvmf_tgt (HugePages_Total 256, HugePages_Free 0)"
    )
    attach = make_lab(start=False).targets[0].spdk_settings
    assert spdk_problems("vstor", "targets[0]", facts, attach, "nvme-tcp", None) == [
        "vstor: no SPDK RPC socket at /var/tmp/spdk.sock (targets[0].spdk.start is false, so an app must be "
        "running); start nvmf_tgt with -r /var/tmp/spdk.sock, or set targets[0].spdk.start: true"
    ]


def test_the_probe_finds_spdk_and_its_own_rpc_client() -> None:
    facts = parse_probe((DATA / "probe-local.txt").read_text())
    assert facts.binary and facts.binary.endswith("nvmf_tgt") and facts.binary_rdma and facts.python3
    assert facts.rpc_py and facts.client_mode == f"spdk:{facts.rpc_pydir}"
    assert parse_probe("python3 yes\nhugepages 0 0 2048\n").client_mode == "own"
    # rpc.py without SPDK's python package beside it cannot run: fabricqa's client then.
    assert parse_probe("rpc-py /opt/spdk/scripts/rpc.py\npython3 yes\n").client_mode == "own"


def test_the_client_script_speaks_json_rpc_and_sends_a_busy_call_again(tmp_path: Path) -> None:
    """The real client, run here against a socket that answers as SPDK did: first "subsystem busy, retry later."
    (recorded), then success; and an error response ends the batch."""
    import socket
    import subprocess
    import sys
    import threading

    busy = json.loads((DATA / "rpc-busy.json").read_text())[0]["response"]
    replies = [busy, recorded("nvmf_subsystem_add_listener", 0), recorded_error("bdev_aio_delete")]
    requests: list[dict[str, Any]] = []
    path = str(tmp_path / "spdk.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        decoder = json.JSONDecoder()
        with conn:
            buffer = ""
            for reply in replies:
                while True:
                    try:
                        request, end = decoder.raw_decode(buffer.lstrip())
                        buffer = buffer.lstrip()[end:]
                        break
                    except ValueError:
                        buffer += conn.recv(65536).decode()
                requests.append(request)
                conn.sendall(json.dumps(reply, indent=1).encode())  # SPDK sends indented JSON, in pieces

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    calls = [
        ["nvmf_subsystem_add_listener", {"nqn": NQN}],
        ["bdev_aio_delete", {"name": "x"}],
        ["spdk_get_version", None],
    ]
    result = subprocess.run(
        [sys.executable, "-c", CLIENT_SCRIPT, "own", path, "10", "0", "", json.dumps(calls)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    thread.join(timeout=10)
    server.close()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["responses"] == replies[1:]
    assert [r["method"] for r in requests] == ["nvmf_subsystem_add_listener"] * 2 + ["bdev_aio_delete"]
    assert requests[0] == {"jsonrpc": "2.0", "method": "nvmf_subsystem_add_listener", "id": 1, "params": {"nqn": NQN}}


def test_both_clients_read_the_same_snapshot_from_a_real_app() -> None:
    """Recorded: SPDK's own client (beside rpc.py) and fabricqa's printed the same responses, and the same kind of
    'nothing answers' when the socket was not there."""
    recorded_runs = json.loads((DATA / "client-snapshot.json").read_text())
    own, spdk = (json.loads(recorded_runs[k][1]) for k in ("own", "spdk"))
    assert own == spdk
    snap = parse_snapshot(own["responses"])
    assert snap.loaded and snap.subsystems == {} and snap.bdevs == {} and snap.transports == ("TCP",)
    for key in ("noapp-own", "noapp-spdk"):
        code, out, _ = recorded_runs[key]
        assert code == 3 and json.loads(out)["fabricqa"] == "connect"


def test_after_our_app_died_an_app_on_the_same_socket_is_left_alone() -> None:
    """Our nvmf_tgt died (its objects with it); someone then started theirs with the same NQNs: we touch nothing."""
    host = FakeSpdkHost()
    target_on(host, **START).provision("nvme-tcp", UndoStack())
    host.stop_app()  # our app dies with the run
    host.running = True  # someone else's app on the socket, with the lab's NQN and names
    host.add_subsystem(NQN, model="fqa-vlab", serial=mark_serial("fqa-vlab"))
    host.add_bdev("fqa-vlab_ram0", "/dev/ram0")
    target = target_on(host, **START)
    assert target.cleanup_stale() == [f"vstor: removed the stale state file {target.state_file}"]
    assert set(host.subsystems) == {NQN} and set(host.bdevs) == {"fqa-vlab_ram0"}


def test_a_host_without_python3_has_no_leftovers_of_ours_to_report() -> None:
    """No RPC client can run there, so nothing of ours can be there: the gate says nothing, and provisioning says why."""
    host = FakeSpdkHost()
    host.python3 = False
    target = target_on(host, **START)
    assert target.leftovers() == [] and target.cleanup_stale() == []
    assert not any(c[0] == "python3" for c in host.commands)


def test_the_transports_queue_limits_are_read_back() -> None:
    """SPDK 23.01's TCP transport caps a queue at 128 (recorded): a case at QD 128 x 4 jobs records what it met."""
    host = FakeSpdkHost()
    target = target_on(host, **START)
    undo = UndoStack()
    target.provision("nvme-tcp", undo)
    assert target.queue_settings("nvme-tcp") == {"spdk_max_queue_depth": 128, "spdk_max_io_qpairs_per_ctrlr": 127}
    assert target.queue_settings("nvme-rdma") == {}  # no RDMA transport in this app
    assert undo.unwind() == []
    assert target.queue_settings("nvme-tcp") == {}  # no app: nothing read, nothing guessed


def test_with_paths_all_every_subsystem_listens_on_every_storage_port_of_the_host() -> None:
    data = make_lab(**START).model_dump(mode="json")
    data["hosts"]["vstor"]["storage"] = [
        {"interface": "eth1", "address": "10.10.10.19"}, {"interface": "eth2", "address": "10.10.20.19"},
    ]  # fmt: skip
    data["targets"][0]["paths"] = "all"
    lab = LabModel.model_validate(data)
    host = FakeSpdkHost()
    target = load_target(lab, lab.targets[0], {"vstor": host})
    export = target.provision("nvme-tcp", UndoStack())
    assert export.addresses == ("10.10.10.19", "10.10.20.19")
    for nqn in (NQN, NQN2):
        assert [a["traddr"] for a in host.subsystems[nqn]["listen_addresses"]] == ["10.10.10.19", "10.10.20.19"]


# The newest lines of nvmf_tgt's log on vstor as SPDK 23.01 wrote them (2026-12-07 18:16, the virtual lab, an
# nvme-rdma fabric just made).
NVMF_TGT_LOG = """\
[2026-12-07 18:16:09.534518] reactor.c: 926:reactor_run: *NOTICE*: Reactor started on core 0
[2026-12-07 18:16:13.740464] rdma.c:2855:nvmf_rdma_listen: *NOTICE*: *** NVMe/RDMA Target Listening on 10.10.10.19 port 4420 ***
"""


def test_a_failed_case_is_shown_the_newest_lines_of_the_nvmf_tgt_log_the_plugin_started() -> None:
    lab = make_lab()
    asked: list[tuple[str, ...]] = []

    def script(argv: tuple[str, ...]) -> str:
        asked.append(argv)
        return NVMF_TGT_LOG

    target = load_target(lab, lab.targets[0], {"vstor": ScriptedHost("vstor", script)})
    assert isinstance(target, SpdkTarget)
    assert target.app_log() == (
        f"nvmf_tgt log on vstor ({target.log}, its newest 20 lines)",
        NVMF_TGT_LOG.rstrip(),
    )
    assert asked[-1][-2:] == (target.log, "20")
    quiet = load_target(lab, lab.targets[0], {"vstor": ScriptedHost("vstor", lambda argv: "")})
    assert isinstance(quiet, SpdkTarget) and quiet.app_log() is None
