"""The SPDK driver: provisions the lab's NVMe subsystems in SPDK's nvmf target through JSON-RPC, every step's undo
registered first; starts and stops ``nvmf_tgt`` when the lab says so; cleans and reports leftovers."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pytest_fabricqa.core.export import Export, ExportedUnit
from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.lab.model import LabModel, SpdkSettings, TargetModel, nqn_problem
from pytest_fabricqa.targets import remote
from pytest_fabricqa.targets.configfs import ConfigfsTarget
from pytest_fabricqa.targets.nvmet.declared import plan_from_lab
from pytest_fabricqa.targets.nvmet.plan import NvmetPlan, NvmetSubsystem
from pytest_fabricqa.targets.nvmet.saved import SavedConfigError
from pytest_fabricqa.targets.spdk import app
from pytest_fabricqa.targets.spdk.jsonrpc import RpcClient, SpdkRpcError, SpdkUnreachable
from pytest_fabricqa.transport.base import Host

MAX_MODEL = 40  # SPDK_NVME_CTRLR_MN_LEN: the model number a subsystem reports
MAX_SERIAL = 20  # SPDK_NVME_CTRLR_SN_LEN
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"
# argv: paths. "B <path>" for a block device, "F <path>" for a regular file, nothing for what is neither.
PATH_KINDS = 'for p; do if [ -b "$p" ]; then echo "B $p"; elif [ -f "$p" ]; then echo "F $p"; fi; done'
# An AIO bdev over a file cannot detect a block size (SPDK answers "Invalid argument": rpc-session.json); a block
# device's own logical block size is detected.
FILE_BLOCK_SIZE = 512
# The transport options that bound what an initiator's queue depth reaches (nvmf_get_transports).
QUEUE_KEYS = ("max_queue_depth", "max_io_qpairs_per_ctrlr")
SNAPSHOT_CALLS: tuple[tuple[str, None], ...] = (
    ("nvmf_get_subsystems", None),
    ("bdev_get_bdevs", None),
    ("nvmf_get_transports", None),
)


def mark_serial(prefix: str) -> str:
    """The serial number every subsystem of this mark carries: 'FQA' and 17 hex digits derived from the mark."""
    return ("FQA" + hashlib.sha256(prefix.encode()).hexdigest().upper())[:MAX_SERIAL]


def namespace_uuid(prefix: str, nqn: str, nsid: int) -> str:
    """The UUID a namespace gets when the lab gives it neither NGUID nor UUID: derived from the mark, the subsystem
    and the NSID, so stable from run to run (multipath keeps its map) and different for every namespace."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fabricqa:{prefix}:{nqn}:{nsid}"))


def bdev_name(prefix: str, backing: str) -> str:
    """The AIO bdev name for a lab device: the mark, '_', the device name (a path's odd characters as '_')."""
    return f"{prefix}_{re.sub(r'[^A-Za-z0-9_.-]', '_', backing.strip('/'))}"


@dataclass
class SpdkSnapshot:
    """What the SPDK app holds, read in one round trip; ``loaded`` is False when no app answers."""

    loaded: bool = False
    subsystems: dict[str, dict[str, Any]] = field(default_factory=dict)
    bdevs: dict[str, dict[str, Any]] = field(default_factory=dict)
    transports: tuple[str, ...] = ()
    unreachable: str = ""  # why nothing answered

    def aio_user(self, path: str) -> str | None:
        """The bdev already opening ``path`` through AIO, if any."""
        for name, bdev in self.bdevs.items():
            if (bdev.get("driver_specific") or {}).get("aio", {}).get("filename") == path:
                return name
        return None


def parse_snapshot(responses: list[dict[str, Any]]) -> SpdkSnapshot:
    """The responses to :data:`SNAPSHOT_CALLS` -> :class:`SpdkSnapshot` (the discovery subsystem left out)."""
    results = [r.get("result") for r in responses] + [None] * 3
    subsystems = {
        str(s["nqn"]): s for s in results[0] or [] if isinstance(s, dict) and s.get("nqn") and s["nqn"] != DISCOVERY_NQN
    }
    bdevs = {str(b["name"]): b for b in results[1] or [] if isinstance(b, dict) and b.get("name")}
    transports = tuple(str(t.get("trtype", "")).upper() for t in results[2] or [] if isinstance(t, dict))
    return SpdkSnapshot(True, subsystems, bdevs, transports)


@dataclass
class Owned:
    """What of an SPDK app is ours, on the socket the record names; ``alone``: sentences naming what is marked or
    recorded but not both, left alone."""

    socket: str
    has_state: bool
    apps: list[int] = field(default_factory=list)
    subsystems: list[str] = field(default_factory=list)
    bdevs: list[str] = field(default_factory=list)
    alone: list[str] = field(default_factory=list)


APP_LOG_LINES = 20
"""How many of nvmf_tgt's newest log lines a failed case on SPDK shows."""


class SpdkTarget(ConfigfsTarget):
    """SPDK's NVMe-oF target (``nvmf_tgt``) on a lab host, driven through its JSON-RPC socket.

    Ownership is checked twice before anything is deleted. The state file ``/run/fabricqa/<name_prefix>-spdk.json``
    lists the RPC socket, the subsystems and bdevs about to be made and the app (the nvmf_tgt this plugin started,
    or the pid listening on the socket it attached to) before the first object exists, and goes when the last is
    gone. Subsystems also carry the mark: model number = the name prefix, serial number derived from it
    (:func:`mark_serial`); bdevs are named ``<name_prefix>_<device>``. An object counts as ours only when the
    record lists it *and* it carries the mark, in the app the record names, on the socket the record names: a
    killed run's objects are cleaned on its own socket even when the lab now points at another, and an app that
    replaced the recorded one holds nothing of ours. A marked subsystem no record lists is another session's: the
    clean-up names it and leaves it alone. A transport, once created in an app this plugin did not start, stays:
    SPDK 23.01 has no RPC to delete one.
    """

    kind = "spdk"

    def __init__(self, lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> None:
        assert model.nvme is not None
        super().__init__(lab, model, hosts)
        self.settings = model.spdk_settings
        self.mark = model.name_prefix[:MAX_MODEL]
        self.serial = mark_serial(model.name_prefix)
        self.log = f"{remote.STATE_DIR}/{model.name_prefix}-spdk-nvmf_tgt.log"
        self.pidfile = f"{remote.STATE_DIR}/{model.name_prefix}-spdk-nvmf_tgt.pid"
        self._facts: app.SpdkHost | None = None
        self._files: set[str] = set()  # backing paths that are regular files, not block devices

    # -- the host and its app ---------------------------------------------------------------------------------
    def app_log(self) -> tuple[str, str] | None:
        """``(title, text)``: the newest :data:`APP_LOG_LINES` lines of the log of the nvmf_tgt this plugin started
        (an app it attached to logs elsewhere: None), for a failed case: a qpair SPDK dropped, a keep-alive it timed
        out, a CQ error, each stamped with the target's clock. None when there is no such log or it is empty."""
        out = self.host.run(
            ["sh", "-c", '[ ! -r "$1" ] || tail -n "$2" "$1"', "sh", self.log, str(APP_LOG_LINES)], check=False
        ).stdout.rstrip()
        if not out:
            return None
        return f"nvmf_tgt log on {self.host.name} ({self.log}, its newest {APP_LOG_LINES} lines)", out

    def facts(self) -> app.SpdkHost:
        """What the target host has (nvmf_tgt, rpc.py, python3, the socket, hugepages); probed once."""
        if self._facts is None:
            self._facts = app.probe(self.host, self.settings)
        return self._facts

    def rpc(self, socket: str | None = None) -> RpcClient:
        """The JSON-RPC client for the app on the lab's socket, or on ``socket`` (SPDK's own where rpc.py is)."""
        sock = socket or self.settings.rpc_socket
        return RpcClient(self.host, sock, self.facts().client_mode, self.settings.rpc_timeout)

    def snapshot(self, socket: str | None = None) -> SpdkSnapshot:
        """Subsystems, bdevs and transports of the app on the lab's socket (or ``socket``), in one round trip (not
        loaded: no app)."""
        if not self.facts().python3:
            # No client can run, so no run of ours made anything here: the leftovers gate need not fail on it.
            return SpdkSnapshot(loaded=False, unreachable="python3 is missing on the target host")
        try:
            responses = self.rpc(socket).batch(list(SNAPSHOT_CALLS))
        except SpdkUnreachable as exc:
            if exc.reason in ("connect", "exited"):
                return SpdkSnapshot(loaded=False, unreachable=exc.what)
            raise
        return parse_snapshot(responses)

    def _app_ours(self, state: Mapping[str, Any] | None) -> int | None:
        """The pid of the nvmf_tgt this plugin started (per the state file) if it still runs, else None."""
        started = (state or {}).get("app")
        if not isinstance(started, dict):
            return None
        pid = started.get("pid") or self._pid_from_file(str(started.get("pidfile", "")))
        if not pid:
            return None
        binary, socket = str(started.get("binary", "")), str(started.get("socket", ""))
        return int(pid) if app.alive(self.host, int(pid), binary, socket) else None

    def _pid_from_file(self, path: str) -> int | None:
        if not path:
            return None
        out = self.host.run(["sh", "-c", '[ ! -r "$1" ] || cat "$1"', "sh", path], check=False).stdout.strip()
        return int(out) if out.isdigit() else None

    def _stop_app(self) -> None:
        """Undo of the start: stop the nvmf_tgt the state file names, if it is still ours; drop its pid file."""
        state = self._read_state() or {}
        started = state.get("app")
        if isinstance(started, dict):
            pid = started.get("pid") or self._pid_from_file(str(started.get("pidfile", "")))
            if pid:
                app.stop(self.host, int(pid), str(started.get("binary", "")), str(started.get("socket", "")))
        self.host.run(["rm", "-f", self.pidfile])

    # -- provision ------------------------------------------------------------------------------------------
    def provision(self, protocol: str, undo: UndoStack) -> Export:
        """Start nvmf_tgt (or attach), then the transport, AIO bdevs, subsystems with namespaces, hosts, listener."""
        spec = protocol_spec(protocol)
        if spec.family != "nvme":
            raise self._fail(f"spdk does not serve {protocol}", f"serve {protocol} with another target kind")
        trtype = spec.transport.upper()
        try:
            plan = plan_from_lab(self.lab, self.model, protocol)
        except SavedConfigError as exc:
            raise self._fail(str(exc), "fix the saved configuration or drop nvme.saved_config") from None
        facts = self.facts()
        if not facts.python3:
            raise self._fail(
                "python3 is missing (SPDK's rpc.py and fabricqa's JSON-RPC client run on it)", "install python3"
            )
        snap = self.snapshot()
        binary = self._check_app(snap, plan)
        self._check(plan, snap)
        bdevs = {
            ns.backing: bdev_name(self.model.name_prefix, ns.backing) for s in plan.subsystems for ns in s.namespaces
        }
        state: dict[str, Any] = {
            "kind": "spdk",
            "owner": f"pid {os.getpid()}",
            "socket": self.settings.rpc_socket,
            "subsystems": [s.nqn for s in plan.subsystems],
            "bdevs": sorted(set(bdevs.values())),
        }
        if binary is None and (listener := app.socket_pid(self.host, self.settings.rpc_socket)) is not None:
            state["attached_pid"] = listener  # the app provisioned into: one that replaces it holds nothing of ours
        if binary is not None:
            state["app"] = {
                "binary": binary,
                "socket": self.settings.rpc_socket,
                "pidfile": self.pidfile,
                "log": self.log,
            }
        # Recorded before anything exists: a run killed from here on leaves a list the next run cleans up.
        undo.push(f"remove {self.state_file}", self._remove_state_if_clean)
        self._write_state(state)
        if binary is not None:
            self._start_app(binary, state, undo)
        rpc = self.rpc()
        self._make_transport(rpc, trtype, snap if binary is None else None)
        for backing, name in bdevs.items():
            path = next(ns.path for s in plan.subsystems for ns in s.namespaces if ns.backing == backing)
            self._make_bdev(rpc, name, path, undo, state)
        address = plan.ports[0]
        for sub in plan.subsystems:
            self._make_subsystem(rpc, sub, bdevs, undo, state, ana=len(plan.ports) > 1)
            for port in plan.ports:  # a listener per path (paths: all), removed with the subsystem
                self._step_rpc(
                    rpc,
                    "nvmf_subsystem_add_listener",
                    {
                        "nqn": sub.nqn,
                        "listen_address": {
                            "trtype": trtype,
                            "adrfam": "IPv6" if port.adrfam == "ipv6" else "IPv4",
                            "traddr": port.traddr,
                            "trsvcid": str(port.trsvcid),
                        },
                    },
                    f"check that {port.traddr} is an address of the target and port {port.trsvcid} is free"
                    + (" and that an RDMA device (rxe or a NIC) sits on its interface" if trtype == "RDMA" else ""),
                )
        units = tuple(
            ExportedUnit(sub.nqn, ns.nsid, ns.backing, ns.path, ns.writable, ns.destructive_ok)
            for sub in plan.subsystems
            for ns in sub.namespaces
            if ns.enable
        )
        more = tuple(p.traddr for p in plan.ports[1:] if p.trsvcid == address.trsvcid)
        return Export(
            protocol, spec.transport, address.traddr, address.trsvcid, units, self.host.name, more_addresses=more
        )

    def _check_app(self, snap: SpdkSnapshot, plan: NvmetPlan) -> str | None:
        """Whether the app is there as the lab says; the binary to start (None: attach to the running app)."""
        settings, facts, sock = self.settings, self.facts(), self.settings.rpc_socket
        if not settings.start:
            if not snap.loaded:
                raise self._fail(
                    f"no SPDK app answers on {sock} ({snap.unreachable or 'no socket'})",
                    f"start nvmf_tgt with -r {sock}, or set {self.where}.spdk.start: true so fabricqa starts it",
                )
            return None
        if snap.loaded:
            raise self._fail(
                f"an SPDK app already answers on {sock} and was not started by fabricqa",
                f"stop it, or set {self.where}.spdk.start: false to provision into it, or give "
                f"{self.where}.spdk.rpc_socket another path",
            )
        for problem in (binary_problem(self.where, facts, None), memory_problem(self.where, facts, settings)):
            if problem is not None:
                raise self._fail(*problem)
        for port in plan.ports:
            if port.trtype == "tcp":
                self._refuse_busy_port(port.trsvcid, "nvme.port")
        return facts.binary

    def _check(self, plan: NvmetPlan, snap: SpdkSnapshot) -> None:
        paths = list(dict.fromkeys(ns.path for sub in plan.subsystems for ns in sub.namespaces))
        kinds = dict(
            line.split(" ", 1)[::-1]
            for line in self.host.run(["sh", "-c", PATH_KINDS, "sh", *paths]).stdout.splitlines()
            if line[:2] in ("B ", "F ")
        )
        self._files = {path for path, kind in kinds.items() if kind == "F"}
        for sub in plan.subsystems:
            if problem := nqn_problem(sub.nqn):
                raise self._fail(
                    f"SPDK takes only NVMe qualified names; {sub.nqn!r} is not one: {problem}",
                    f"use nqn.yyyy-mm.reverse.domain:name in {self.where}.nvme.subsystems",
                )
            if sub.nqn in snap.subsystems:
                raise self._fail(
                    f"SPDK subsystem {sub.nqn} already exists and was not created by fabricqa",
                    f"delete it (rpc.py nvmf_delete_subsystem {sub.nqn}) or use another NQN in "
                    f"{self.where}.nvme.subsystems",
                )
            for ns in sub.namespaces:
                if ns.path not in kinds:
                    raise self._fail(
                        f"backing device {ns.backing} ({ns.path}) of {sub.nqn} does not exist",
                        f"fix {self.where}.devices.{ns.backing}.path in the lab file or attach the device",
                    )
                name = bdev_name(self.model.name_prefix, ns.backing)
                if name in snap.bdevs:
                    raise self._fail(
                        f"SPDK bdev {name} already exists and was not created by fabricqa",
                        f"delete it or give {self.where}.name_prefix another value",
                    )
                if user := snap.aio_user(ns.path):
                    raise self._fail(
                        f"{ns.path} is already opened by SPDK bdev {user}, which fabricqa did not create",
                        f"delete that bdev or export another device in {self.where}.devices",
                    )

    def _start_app(self, binary: str, state: dict[str, Any], undo: UndoStack) -> None:
        undo.push(f"stop nvmf_tgt on {self.settings.rpc_socket}", self._stop_app)
        argv = app.start_argv(binary, self.settings)
        try:
            pid = app.start_detached(self.host, argv, self.log, self.pidfile)
        except ValueError as exc:
            raise self._fail(f"cannot start {binary} ({exc})", f"see {self.log} on the target host") from None
        state["app"]["pid"] = pid
        self._write_state(state)
        try:
            self.rpc().batch([("framework_wait_init", None)], wait=self.settings.start_timeout, pid=pid)
        except SpdkUnreachable as exc:
            why = "exited" if exc.reason == "exited" else f"did not answer within {self.settings.start_timeout:g} s"
            raise self._fail(
                f"nvmf_tgt (pid {pid}) {why}: {app.log_tail(self.host, self.log)}",
                f"see {self.log} on the target host; check {self.where}.spdk (core_mask, mem_size_mb, no_huge)",
            ) from None
        # The answer must come from the app just started, not from another that took the socket meanwhile.
        listener = app.socket_pid(self.host, self.settings.rpc_socket)
        if listener is not None and listener != pid:
            raise self._fail(
                f"the SPDK app answering on {self.settings.rpc_socket} is pid {listener}, not the nvmf_tgt fabricqa "
                f"just started (pid {pid})",
                f"stop the other app, or give {self.where}.spdk.rpc_socket another path",
            )

    def _make_transport(self, rpc: RpcClient, trtype: str, snap: SpdkSnapshot | None) -> None:
        present = snap.transports if snap is not None else self.snapshot().transports
        if trtype in present:
            return  # shared by every subsystem of the app; never ours to remove
        fix = (
            "SPDK needs RDMA support (built --with-rdma) and an RDMA device on the storage interface (`rdma link`)"
            if trtype == "RDMA"
            else "see the nvmf_tgt log on the target host"
        )
        self._step_rpc(rpc, "nvmf_create_transport", {"trtype": trtype}, fix)

    def _make_bdev(self, rpc: RpcClient, name: str, path: str, undo: UndoStack, state: dict[str, Any]) -> None:
        discard = undo.push(f"delete SPDK bdev {name}", partial(self._delete, "bdev", name))
        params: dict[str, Any] = {"name": name, "filename": path}
        if path in self._files:
            params["block_size"] = FILE_BLOCK_SIZE
        _, error = rpc.try_call("bdev_aio_create", params)
        if error is None:
            return
        if name in self.snapshot().bdevs:
            # Another session or tool made it since the snapshot: not ours, never removed by us.
            discard()
            self._forget(state, "bdevs", name)
            raise self._fail(
                f"SPDK bdev {name} appeared while fabricqa was creating it (another session or tool)",
                f"let the other session finish, or give {self.where}.name_prefix another value",
            )
        raise self._with_fix(error, f"check that {path} is a block device or file nvmf_tgt can open with O_DIRECT")

    def _make_subsystem(
        self,
        rpc: RpcClient,
        sub: NvmetSubsystem,
        bdevs: Mapping[str, str],
        undo: UndoStack,
        state: dict[str, Any],
        *,
        ana: bool = False,
    ) -> None:
        """One subsystem, its allowed hosts and namespaces. ``ana``: served on several paths, the subsystem reports
        ANA (``ana_reporting``; each listener optimized until changed), so the initiators' native multipath follows
        a listener's ANA state (:class:`pytest_fabricqa.faults.inject.SpdkAnaChange`) as it follows nvmet's."""
        discard = undo.push(f"delete SPDK subsystem {sub.nqn}", partial(self._delete, "subsystem", sub.nqn))
        params = {
            "nqn": sub.nqn,
            "serial_number": self.serial,
            "model_number": self.mark,
            "allow_any_host": sub.allow_any_host,
        }
        if ana:
            params["ana_reporting"] = True
        _, error = rpc.try_call("nvmf_create_subsystem", params)
        if error is not None:
            now = self.snapshot()
            if sub.nqn in now.subsystems:
                # Made by another session or tool since the snapshot, marked or not: never ours to remove.
                discard()
                self._forget(state, "subsystems", sub.nqn)
                raise self._fail(
                    f"SPDK subsystem {sub.nqn} appeared while fabricqa was creating it (another session or tool)",
                    f"let the other session finish, or use another NQN in {self.where}.nvme.subsystems",
                )
            raise self._with_fix(error, f"check the NQN in {self.where}.nvme.subsystems")
        if not sub.allow_any_host:
            for host_nqn in sub.allowed_hosts:
                self._step_rpc(
                    rpc,
                    "nvmf_subsystem_add_host",
                    {"nqn": sub.nqn, "host": host_nqn},
                    f"check {self.where}.nvme.subsystems allowed_hosts and the initiators' host_nqn",
                )
        for ns in sub.namespaces:
            if not ns.enable:
                continue  # SPDK has no disabled namespace: a disabled one in a saved configuration is left out
            namespace: dict[str, Any] = {"nsid": ns.nsid, "bdev_name": bdevs[ns.backing]}
            if ns.nguid:
                namespace["nguid"] = ns.nguid.replace("-", "").upper()
            # Without an NGUID or UUID SPDK reports none for an AIO bdev, and the initiators' WWID falls back to the
            # subsystem's serial and the NSID: the same for every subsystem of the mark ("nvme.8086-<serial>-
            # <model>-00000001" for both of the virtual lab's), which multipath takes for one namespace.
            namespace["uuid"] = ns.uuid or namespace_uuid(self.mark, sub.nqn, ns.nsid)
            self._step_rpc(
                rpc,
                "nvmf_subsystem_add_ns",
                {"nqn": sub.nqn, "namespace": namespace},
                "check the namespace's NSID, NGUID and UUID",
            )

    def _step_rpc(self, rpc: RpcClient, method: str, params: Mapping[str, Any], fix: str) -> Any:
        _, error = rpc.try_call(method, params)
        if error is not None:
            raise self._with_fix(error, fix)
        return _

    def _with_fix(self, error: SpdkRpcError, fix: str) -> SpdkRpcError:
        return SpdkRpcError(error.host, error.method, error.params, error.code, error.message, fix)

    def _delete(self, what: str, name: str) -> None:
        """Undo of one object: delete it if the app still holds it (idempotent; nothing when the app is gone)."""
        snap = self.snapshot()
        if not snap.loaded:
            return
        if what == "subsystem" and name in self._marked(snap):
            self.rpc().call("nvmf_delete_subsystem", {"nqn": name})
        elif what == "bdev" and name in snap.bdevs:
            self.rpc().call("bdev_aio_delete", {"name": name})

    # -- what shapes the figures ---------------------------------------------------------------------------
    def queue_settings(self, protocol: str) -> dict[str, int]:
        """The transport's queue limits for ``protocol`` as the app reports them (SPDK 23.01's TCP default caps a
        queue at 128 entries and a controller at 127 I/O queues): what a deep fio queue actually meets. Empty when
        they cannot be read: the report then shows none rather than a guess."""
        try:
            snap = self.snapshot()
            transports = self.rpc().call("nvmf_get_transports") if snap.loaded else []
        except (SpdkUnreachable, SpdkRpcError):
            return {}
        trtype = protocol_spec(protocol).transport.upper()
        entry: dict[str, Any] = next((t for t in transports or [] if str(t.get("trtype", "")).upper() == trtype), {})
        return {
            f"spdk_{key}": int(entry[key])
            for key in QUEUE_KEYS
            if isinstance(entry.get(key), int) and not isinstance(entry.get(key), bool)
        }

    # -- stale state and leftovers -------------------------------------------------------------------------
    def _marked(self, snap: SpdkSnapshot) -> list[str]:
        return [
            nqn
            for nqn, sub in snap.subsystems.items()
            if sub.get("model_number") == self.mark and sub.get("serial_number") == self.serial
        ]

    def _owned(self) -> Owned:
        """What of the recorded app is ours now: the record lists it and it carries the mark (see the class)."""
        state = self._read_state()
        recorded = state or {}
        socket = str(recorded.get("socket") or self.settings.rpc_socket)
        snap = self.snapshot(socket)
        owned = Owned(socket=socket, has_state=state is not None)
        marked = self._marked(snap)
        if state is None:
            owned.alone = [self._alone(nqn, socket) for nqn in marked]
            return owned
        app_pid = self._app_ours(state)
        if isinstance(recorded.get("app"), dict) and app_pid is None:
            return owned  # the app we started is gone and its objects with it; one now on the socket is not ours
        attached = recorded.get("attached_pid")
        if isinstance(attached, int) and snap.loaded:
            listener = app.socket_pid(self.host, socket)
            if listener is not None and listener != attached:
                return owned  # the app we provisioned into was replaced: what the new one holds is not ours
        names = [s for s in recorded.get("subsystems", []) if isinstance(s, str)]
        owned.apps = [app_pid] if app_pid else []
        owned.subsystems = [nqn for nqn in names if nqn in marked]
        owned.alone = [
            self._alone(nqn, socket, recorded=nqn in names)
            for nqn in snap.subsystems
            if nqn not in owned.subsystems and (nqn in marked or nqn in names)
        ]
        owned.bdevs = [
            b
            for b in recorded.get("bdevs", [])
            if isinstance(b, str) and b in snap.bdevs and b.startswith(f"{self.model.name_prefix}_")
        ]
        return owned

    def _alone(self, nqn: str, socket: str, *, recorded: bool = False) -> str:
        why = (
            "its name is recorded but it lacks fabricqa's mark (model and serial)"
            if recorded
            else "it carries the mark but no record of this lab lists it (another session's?)"
        )
        return f"{self.host.name}: left SPDK subsystem {nqn} on {socket} alone: {why}"

    def _owned_now(self) -> tuple[list[int], list[str], list[str]]:
        owned = self._owned()
        return owned.apps, owned.subsystems, owned.bdevs

    def cleanup_stale(self) -> list[str]:
        """Stop the nvmf_tgt an earlier run started (its objects go with it), or delete the subsystems and bdevs it
        recorded and marked in the app it attached to, on the socket it recorded; then its state file. What is
        marked or recorded but not both is named, and left alone."""
        owned = self._owned()
        removed: list[str] = []
        if owned.apps:
            self._stop_app()
            removed.append(
                f"{self.host.name}: stopped nvmf_tgt (pid {owned.apps[0]}) an earlier run started, with its "
                f"subsystems {', '.join(owned.subsystems) or '(none)'}"
            )
            return removed + owned.alone + self._drop_stale_state(owned.has_state)
        rpc = self.rpc(owned.socket)
        for nqn in owned.subsystems:
            rpc.call("nvmf_delete_subsystem", {"nqn": nqn})
            removed.append(f"{self.host.name}: removed SPDK subsystem {nqn}")
        for name in owned.bdevs:
            rpc.call("bdev_aio_delete", {"name": name})
            removed.append(f"{self.host.name}: removed SPDK bdev {name}")
        if owned.has_state:
            self.host.run(["rm", "-f", self.pidfile])
        return removed + owned.alone + self._drop_stale_state(owned.has_state)

    def leftovers(self) -> list[str]:
        """The nvmf_tgt, subsystems and bdevs this plugin made that are still there, and its state file."""
        owned = self._owned()
        found = [f"{self.host.name}: nvmf_tgt pid {p} started by fabricqa is still running" for p in owned.apps]
        found += [f"{self.host.name}: SPDK subsystem {s} is still configured" for s in owned.subsystems]
        found += [f"{self.host.name}: SPDK bdev {b} is still configured" for b in owned.bdevs]
        if owned.has_state:
            found.append(f"{self.host.name}: state file {self.state_file} is still there")
        return found

    # -- prerequisites --------------------------------------------------------------------------------------
    def prerequisite_problems(self, protocol: str) -> list[str]:
        """What the target host lacks to serve ``protocol`` with SPDK, one sentence each (host, what, fix)."""
        running = self.settings.start and self._app_ours(self._read_state()) is not None
        return spdk_problems(
            self.host.name, self.where, self.facts(), self.settings, protocol, self.snapshot_or_none(), running=running
        )

    def snapshot_or_none(self) -> SpdkSnapshot | None:
        """The snapshot, or None when no RPC client can run on the host (no python3)."""
        return self.snapshot() if self.facts().python3 else None


Problem = tuple[str, str]  # (what is wrong, how to fix it)


def binary_problem(where: str, facts: app.SpdkHost, protocol: str | None) -> Problem | None:
    """nvmf_tgt missing, or (for an RDMA ``protocol``) built without RDMA."""
    if facts.binary is None:
        if facts.missing_binary and facts.missing_binary.startswith("/"):
            return (
                f"SPDK's nvmf_tgt not found at {facts.missing_binary} ({where}.spdk.binary)",
                "install SPDK there or fix the path",
            )
        return (
            "SPDK's nvmf_tgt not found (not on PATH, in /opt/spdk/bin, /opt/spdk/build/bin or /usr/local/bin)",
            f"install SPDK on the target host or set {where}.spdk.binary",
        )
    if protocol is not None and protocol_spec(protocol).needs_rdma and not facts.binary_rdma:
        return (
            f"{facts.binary} is not linked with librdmacm, so it cannot serve {protocol}",
            "build SPDK --with-rdma (and install rdma-core)",
        )
    return None


def memory_problem(where: str, facts: app.SpdkHost, settings: SpdkSettings) -> Problem | None:
    """Too few free hugepages for nvmf_tgt (unless the lab runs it with ``no_huge``)."""
    if settings.no_huge:
        return None
    total, free, _ = facts.hugepages
    if total == 0 or free == 0:
        return (
            f"no free hugepages for nvmf_tgt (HugePages_Total {total}, HugePages_Free {free})",
            f"reserve some (e.g. echo 1024 > /proc/sys/vm/nr_hugepages) or set {where}.spdk.no_huge: true with "
            "mem_size_mb",
        )
    if settings.mem_size_mb and facts.free_hugepage_mb < settings.mem_size_mb:
        return (
            f"{facts.free_hugepage_mb} MiB of hugepages free, nvmf_tgt is to get {settings.mem_size_mb} MiB",
            f"reserve more hugepages or lower {where}.spdk.mem_size_mb",
        )
    return None


def spdk_problems(
    host: str,
    where: str,
    facts: app.SpdkHost,
    settings: SpdkSettings,
    protocol: str,
    snap: SpdkSnapshot | None,
    *,
    running: bool = False,
) -> list[str]:
    """The SPDK prerequisites ``facts`` (and the app's answer, ``snap``) break on ``host``; one sentence each.
    ``running``: the nvmf_tgt this plugin started runs now (its fabric is up), so the hugepages it holds are not
    missing ones."""
    found: list[Problem | None] = []
    sock = settings.rpc_socket
    if not facts.python3:
        found.append(("python3 is missing (SPDK's rpc.py and fabricqa's JSON-RPC client run on it)", "install python3"))
    if facts.missing_rpc_py:
        found.append((f"{where}.spdk.rpc_py {facts.missing_rpc_py} does not exist", "fix the path or drop the key"))
    if settings.start:
        found += [binary_problem(where, facts, protocol), None if running else memory_problem(where, facts, settings)]
    elif not facts.socket:
        found.append(
            (
                f"no SPDK RPC socket at {sock} ({where}.spdk.start is false, so an app must be running)",
                f"start nvmf_tgt with -r {sock}, or set {where}.spdk.start: true",
            )
        )
    elif snap is not None and not snap.loaded:
        found.append(
            (f"the SPDK RPC socket {sock} is there but no app answers ({snap.unreachable})", "restart nvmf_tgt")
        )
    return [f"{host}: {what}; {fix}" for what, fix in (p for p in found if p is not None)]
