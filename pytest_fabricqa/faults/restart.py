"""A target restarted under I/O (issue 29, item 4): the whole target goes away on every path at once and comes
back, as when its service or appliance restarts, while the initiators keep their I/O queued.

Per kind, what "restart" is here (each a recorded fault, restored even after SIGKILL, like every fault of
:mod:`pytest_fabricqa.faults.inject`):

- nvmet: every port of ours taken from our subsystems and given back (:class:`~pytest_fabricqa.faults.inject.
  NvmetPortDown` on each port, together in a :class:`~pytest_fabricqa.faults.inject.PortOff`): the kernel deletes
  every controller on them, the hosts reconnect once the ports are back.
- LIO: every TPG of our target disabled, then enabled (:class:`LioTargetOff`): ``enable`` 0 closes every session
  of the TPG at once (``iscsit_tpg_disable_portal_group``), and a login meanwhile is answered "service unavailable",
  a target error open-iscsi retries.
- SCST: the target disabled and each of its sessions force-closed, then enabled (:class:`ScstTargetOff`):
  ``enabled`` 0 alone only refuses new logins (iscsi-scstd answers them with a target error); the sessions go
  through their ``force_close``.
- tgt: the target set offline and each of its connections deleted, then set ready (:class:`TgtTargetOff`):
  offline alone only refuses logins (tgtd answers them with a target error).
- SPDK: the ``nvmf_tgt`` this plugin started stopped and started again from its own saved configuration
  (:class:`SpdkAppRestart`: its configuration saved as ``rpc.py save_config`` does, SIGTERM, then the same command line with ``--json``): a real restart of
  the target process, every qpair gone with it. An app fabricqa attached to but did not start is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Self

from pytest_fabricqa.faults.inject import (
    CLOCK,
    NVMET,
    STARTED,
    FaultRefused,
    NvmetPortDown,
    PortOff,
    _nvmet_state,
    _RecordedFault,
    _target,
    of_lab,
)
from pytest_fabricqa.lab.model import LabModel, SpdkSettings, TgtSettings
from pytest_fabricqa.targets import lio, remote, scst
from pytest_fabricqa.targets.spdk import app
from pytest_fabricqa.targets.spdk.jsonrpc import RpcClient, SpdkRpcError, SpdkUnreachable
from pytest_fabricqa.targets.tgt import parse_show as parse_tgt
from pytest_fabricqa.transport.base import CommandResult, Host

RESTARTED = ("nvmet", "spdk", "lio", "scst", "tgt")
"""The target kinds :func:`target_restart` restarts: those fabricqa provisions (an external array's restart is its
own)."""


def not_restarted(kind: str) -> str | None:
    """Why a target of ``kind`` is not restarted here (None when it is): the suites' skip reason."""
    if kind in RESTARTED:
        return None
    return (
        f"a target restart is made on the targets fabricqa provisions ({', '.join(RESTARTED)}); this one is {kind}: "
        "restart it by hand"
    )


# $1 the IQN, then each TPG: disabled (every session of it closed at once).
LIO_TPGS_OFF = (
    STARTED
    + r"""
set -e
t=/sys/kernel/config/target/iscsi/$1
shift
for g; do echo 0 > "$t/$g/enable"; done
"""
    + CLOCK
)
# A target or TPG that is gone (a teardown removed it) has nothing left to restore.
LIO_TPGS_ON = (
    r"""
set -e
t=/sys/kernel/config/target/iscsi/$1
shift
for g; do
  [ -f "$t/$g/enable" ] || continue
  [ "$(cat "$t/$g/enable")" = 1 ] || echo 1 > "$t/$g/enable"
done
"""
    + CLOCK
)
# $1 the target's sysfs folder: disabled (no new login), then every session force-closed.
SCST_OFF = (
    STARTED
    + r"""
set -e
printf 0 > "$1/enabled"
for s in "$1"/sessions/*; do
  [ -f "$s/force_close" ] || continue
  printf 1 > "$s/force_close"
done
"""
    + CLOCK
)
SCST_ON = (
    r"""
set -e
if [ -f "$1/enabled" ]; then [ "$(cat "$1/enabled")" = 1 ] || printf 1 > "$1/enabled"; fi
"""
    + CLOCK
)
# $1 the control port, $2 the tid, then "SID:CID" of each connection: the target offline, each connection deleted.
TGT_OFF = (
    STARTED
    + r"""
set -e
p=$1 t=$2
shift 2
tgtadm --control-port "$p" --lld iscsi --mode target --op update --tid "$t" --name state --value offline
for c; do
  tgtadm --control-port "$p" --lld iscsi --mode conn --op delete --tid "$t" --sid "${c%%:*}" --cid "${c#*:}"
done
"""
    + CLOCK
)
# A target that is gone, or is another's under the tid now ($3 the IQN it had), has nothing left to restore.
TGT_ON = (
    r"""
set -e
if tgtadm --control-port "$1" --lld iscsi --mode target --op show 2>/dev/null | grep -qx "Target $2: $3"; then
  tgtadm --control-port "$1" --lld iscsi --mode target --op update --tid "$2" --name state --value ready
fi
"""
    + CLOCK
)

# $1 the pid, $2 the binary, $3 the socket: the app stopped as its own teardown stops it (app.STOP_SCRIPT), timed.
SPDK_STOP = STARTED + app.STOP_SCRIPT.strip() + "\n" + CLOCK
SPDK_CONFIG_WRITE = 'umask 077; cat > "$1"'

_NEXUS = re.compile(r"^\s+I_T nexus: (\d+)$")
_CONNECTION = re.compile(r"^\s+Connection: (\d+)$")
_TARGET = re.compile(r"^Target (\d+): (\S+)$")


def tgt_connections(text: str, tid: int) -> list[tuple[int, int]]:
    """(session id, connection id) of every connection of target ``tid`` in ``tgtadm --mode target --op show``
    output: the I_T nexus number is tgtd's session id."""
    found: list[tuple[int, int]] = []
    current: int | None = None
    sid: int | None = None
    for line in text.splitlines():
        if match := _TARGET.match(line):
            current, sid = int(match[1]), None
        elif current == tid and (match := _NEXUS.match(line)):
            sid = int(match[1])
        elif current == tid and sid is not None and (match := _CONNECTION.match(line)):
            found.append((sid, int(match[1])))
    return found


class LioTargetOff(_RecordedFault):
    """Every enabled TPG of LIO target ``iqn`` disabled, then enabled again (see the module). Refused unless the
    LIO driver's state file lists the IQN and it has an enabled TPG."""

    kind = "lio-target"

    def __init__(self, host: Host, name_prefix: str, iqn: str) -> None:
        super().__init__(host, name_prefix)
        self.iqn = iqn
        self.tpgs: list[str] = []
        self.name = f"{host.name} LIO target {iqn} disabled and enabled"
        self.key = f"lio-target:{iqn}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> Self:
        """The fault a record describes, to restore it."""
        params = record["params"]
        fault = cls(host, name_prefix, str(params["iqn"]))
        fault.tpgs = [str(t) for t in params["tpgs"]]
        fault.params = dict(params)
        return fault

    def how(self) -> str:
        return "; ".join(f"echo 1 > {lio.ROOT}/iscsi/{self.iqn}/{t}/enable" for t in self.tpgs or ["TPG"])

    def _check(self) -> None:
        state_file = remote.state_path(self.name_prefix, "lio")
        if self.iqn not in (remote.read_state(self.host, state_file) or {}).get("targets", []):
            raise self._refuse(
                f"iSCSI target {self.iqn} was not made by fabricqa ({state_file} does not list it)",
                "restart the target of the fabric fabricqa provisioned (faults.restart.target_restart)",
            )
        snap = lio.parse_snapshot(self.host.run(["sh", "-c", lio.SNAPSHOT_SCRIPT]).stdout)
        tpgs = sorted(g for g, tpg in snap.targets.get(self.iqn, {}).items() if tpg.get("enable") == "1")
        if not tpgs:
            raise self._refuse(f"{self.iqn} has no enabled TPG (nothing to disable)", "connect the fabric first")
        self.tpgs = tpgs
        self.params = {"iqn": self.iqn, "tpgs": tpgs}

    def _inject(self) -> CommandResult:
        return self.host.run(["sh", "-c", LIO_TPGS_OFF, "sh", self.iqn, *self.tpgs], timeout=120)

    def _restore(self) -> CommandResult:
        return self.host.run(["sh", "-c", LIO_TPGS_ON, "sh", self.iqn, *self.tpgs], timeout=120)


class ScstTargetOff(_RecordedFault):
    """SCST iSCSI target ``iqn`` disabled with its sessions force-closed, then enabled (see the module). Refused
    unless the SCST driver's state file lists the IQN and the target is enabled."""

    kind = "scst-target"

    def __init__(self, host: Host, name_prefix: str, iqn: str) -> None:
        super().__init__(host, name_prefix)
        self.iqn = iqn
        self.folder = f"{scst.ISCSI}/{iqn}"
        self.name = f"{host.name} SCST target {iqn} disabled (sessions closed) and enabled"
        self.key = f"scst-target:{iqn}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> Self:
        """The fault a record describes, to restore it."""
        fault = cls(host, name_prefix, str(record["params"]["iqn"]))
        fault.params = dict(record["params"])
        return fault

    def how(self) -> str:
        return f"echo 1 > {self.folder}/enabled"

    def _check(self) -> None:
        state_file = remote.state_path(self.name_prefix, "scst")
        if self.iqn not in (remote.read_state(self.host, state_file) or {}).get("targets", []):
            raise self._refuse(
                f"SCST target {self.iqn} was not made by fabricqa ({state_file} does not list it)",
                "restart the target of the fabric fabricqa provisioned (faults.restart.target_restart)",
            )
        snap = scst.parse_snapshot(self.host.run(["sh", "-c", scst.SNAPSHOT_SCRIPT]).stdout)
        target = snap.targets.get(self.iqn)
        if target is None or target.enabled != "1":
            raise self._refuse(
                f"SCST target {self.iqn} is not enabled (nothing to disable)", "connect the fabric first"
            )
        self.params = {"iqn": self.iqn, "sessions": list(target.sessions)}

    def _inject(self) -> CommandResult:
        return self.host.run(["sh", "-c", SCST_OFF, "sh", self.folder], timeout=120)

    def _restore(self) -> CommandResult:
        return self.host.run(["sh", "-c", SCST_ON, "sh", self.folder], timeout=120)


class TgtTargetOff(_RecordedFault):
    """tgt target ``tid`` set offline with its connections deleted, then set ready (see the module). Refused unless
    the tgt driver's state file lists the target (tid and IQN) and tgtd serves it, ready."""

    kind = "tgt-target"

    def __init__(self, host: Host, name_prefix: str, control_port: int, tid: int, iqn: str) -> None:
        super().__init__(host, name_prefix)
        self.control_port = control_port
        self.tid = tid
        self.iqn = iqn
        self.name = f"{host.name} tgt target {iqn} (tid {tid}) offline (connections closed) and ready"
        self.key = f"tgt-target:{control_port}:{tid}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> Self:
        """The fault a record describes, to restore it."""
        params = record["params"]
        fault = cls(host, name_prefix, int(params["control_port"]), int(params["tid"]), str(params["iqn"]))
        fault.params = dict(params)
        return fault

    def how(self) -> str:
        return (
            f"tgtadm --control-port {self.control_port} --lld iscsi --mode target --op update --tid {self.tid} "
            "--name state --value ready"
        )

    def _show(self) -> str:
        argv = ["tgtadm", "--control-port", str(self.control_port), "--lld", "iscsi", "--mode", "target", "--op"]
        return self.host.run([*argv, "show"]).stdout

    def _check(self) -> None:
        state_file = remote.state_path(self.name_prefix, "tgt")
        recorded = {
            (int(t["tid"]), str(t["iqn"]))
            for t in (remote.read_state(self.host, state_file) or {}).get("targets", [])
            if "tid" in t and "iqn" in t
        }
        if (self.tid, self.iqn) not in recorded:
            raise self._refuse(
                f"tgt target {self.iqn} (tid {self.tid}) was not made by fabricqa ({state_file} does not list it)",
                "restart the target of the fabric fabricqa provisioned (faults.restart.target_restart)",
            )
        target = parse_tgt(self._show()).targets.get(self.tid)
        if target is None or target.iqn != self.iqn or target.state != "ready":
            raise self._refuse(
                f"tgtd serves no ready target {self.iqn} under tid {self.tid} (nothing to take offline)",
                "connect the fabric first",
            )
        self.params = {"control_port": self.control_port, "tid": self.tid, "iqn": self.iqn}

    def _inject(self) -> CommandResult:
        connections = [f"{sid}:{cid}" for sid, cid in tgt_connections(self._show(), self.tid)]
        argv = ["sh", "-c", TGT_OFF, "sh", str(self.control_port), str(self.tid), *connections]
        return self.host.run(argv, timeout=120)

    def _restore(self) -> CommandResult:
        argv = ["sh", "-c", TGT_ON, "sh", str(self.control_port), str(self.tid), self.iqn]
        return self.host.run(argv, timeout=120)


def target_restart(lab: LabModel, hosts: Mapping[str, Host], target: str, protocol: str) -> PortOff:
    """The fault that restarts target ``target`` for ``protocol`` on every path at once (see the module), its parts
    taken as one: every part armed before any fires, restored in reverse order."""
    model, host = _target(lab, hosts, target, protocol)
    if model.kind == "nvmet":
        state = _nvmet_state(host, model.name_prefix)
        ports = sorted(int(p) for p in state.get("ports", []))
        if not ports:
            raise FaultRefused(
                host.name,
                f"target {model.name} has no nvmet port of fabricqa to take away ({NVMET}/ports)",
                "connect the fabric first (the fixture `fabric`), then restart its target",
            )
        parts = [of_lab(lab, NvmetPortDown(host, model.name_prefix, portid)) for portid in ports]
        return PortOff(f"{host.name} nvmet ports {', '.join(map(str, ports))} of {model.name} down", parts)
    if model.kind in ("lio", "scst", "tgt"):
        assert model.iscsi is not None
        part: _RecordedFault
        if model.kind == "lio":
            part = LioTargetOff(host, model.name_prefix, model.iscsi.iqn)
        elif model.kind == "scst":
            part = ScstTargetOff(host, model.name_prefix, model.iscsi.iqn)
        else:
            part = _tgt_fault(lab, host, model.name_prefix, model.iscsi.iqn, (model.tgt or TgtSettings()).control_port)
        fault = of_lab(lab, part)
        return PortOff(fault.name, [fault])
    if model.kind == "spdk":
        from pytest_fabricqa.targets.spdk import SpdkTarget

        driver = SpdkTarget(lab, model, hosts)
        restarting = of_lab(
            lab, SpdkAppRestart(host, model.name_prefix, model.spdk_settings, driver.facts().client_mode)
        )
        return PortOff(restarting.name, [restarting])
    raise FaultRefused(
        host.name,
        f"no target restart for {model.kind} targets (target {model.name}, {protocol})",
        "restart a target fabricqa provisions (nvmet, spdk, lio, scst, tgt)",
    )


def _tgt_fault(lab: LabModel, host: Host, name_prefix: str, iqn: str, control_port: int) -> TgtTargetOff:
    """The tgt target of ``iqn`` this lab's state file lists (its tid)."""
    state_file = remote.state_path(name_prefix, "tgt")
    for entry in (remote.read_state(host, state_file) or {}).get("targets", []):
        if entry.get("iqn") == iqn and "tid" in entry:
            return TgtTargetOff(host, name_prefix, control_port, int(entry["tid"]), iqn)
    raise FaultRefused(
        host.name,
        f"tgt target {iqn} was not made by fabricqa ({state_file} does not list it)",
        "connect the fabric first (the fixture `fabric`), then restart its target",
    )


class SpdkAppRestart(_RecordedFault):
    """The ``nvmf_tgt`` this plugin started (the SPDK driver's state file names it) stopped and started again from
    its own configuration (see the module): what ``rpc.py save_config`` writes (each subsystem's
    ``framework_get_config``) into ``/run/fabricqa/<name_prefix>-spdk-restart.json``,
    the app stopped as its teardown stops it, then the command line it was started with plus ``--json`` that file,
    waited for until its framework is up; the new pid goes into the driver's state file (its teardown stops that
    one). The restore does nothing while the recorded app still runs. Refused for an app fabricqa did not start."""

    kind = "spdk-app"

    def __init__(self, host: Host, name_prefix: str, settings: SpdkSettings, client_mode: str) -> None:
        super().__init__(host, name_prefix)
        self.settings = settings
        self.client_mode = client_mode
        self.state_file = remote.state_path(name_prefix, "spdk")
        self.config = f"{remote.STATE_DIR}/{name_prefix}-spdk-restart.json"
        self.name = f"{host.name} SPDK nvmf_tgt on {settings.rpc_socket} stopped and started again"
        self.key = f"spdk-app:{settings.rpc_socket}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> Self:
        """The fault a record describes, to restore it."""
        params = record["params"]
        settings = SpdkSettings(rpc_socket=str(params["socket"]), start_timeout=float(params["start_timeout"]))
        fault = cls(host, name_prefix, settings, str(params["mode"]))
        fault.params = dict(params)
        return fault

    def how(self) -> str:
        argv = " ".join(self.params.get("argv", ["nvmf_tgt"]))
        return f"{argv} --json {self.config} (detached, its pid into {self.state_file})"

    def _rpc(self) -> RpcClient:
        return RpcClient(self.host, self.settings.rpc_socket, self.client_mode, self.settings.rpc_timeout)

    def _check(self) -> None:
        state = remote.read_state(self.host, self.state_file) or {}
        started = state.get("app")
        pid = started.get("pid") if isinstance(started, dict) else None
        if not isinstance(started, dict) or not pid:
            raise self._refuse(
                f"the SPDK app on {self.settings.rpc_socket} was not started by fabricqa ({self.state_file} names "
                "none it started): restarting it is its owner's to do",
                "let fabricqa start nvmf_tgt for the fabric (targets[].spdk.binary, or nvmf_tgt on PATH)",
            )
        binary, socket = str(started.get("binary", "")), str(started.get("socket", ""))
        if not app.alive(self.host, int(pid), binary, socket):
            raise self._refuse(f"the nvmf_tgt fabricqa started (pid {pid}) is not running", "connect the fabric first")
        self.params = {
            "socket": socket,
            "mode": self.client_mode,
            "start_timeout": self.settings.start_timeout,
            "pid": int(pid),
            "binary": binary,
            "argv": app.start_argv(binary, self.settings),
            "log": str(started.get("log", "")),
            "pidfile": str(started.get("pidfile", "")),
        }
        # Saved now, before the fault's window opens (a save takes seconds under emulation; the stop is the break).
        # What SPDK's `rpc.py save_config` writes (it is the client's, not an RPC): each subsystem's config in the
        # app's order, which `--json` replays at start.
        try:
            rpc = self._rpc()
            names = [str(entry["subsystem"]) for entry in rpc.call("framework_get_subsystems")]
            configs = [rpc.call("framework_get_config", {"name": name}) for name in names]
        except (SpdkRpcError, SpdkUnreachable, KeyError, TypeError) as exc:
            raise self._refuse(f"its configuration could not be saved ({exc})", "see the app's log") from None
        config = json.dumps(
            {"subsystems": [{"subsystem": n, "config": c} for n, c in zip(names, configs, strict=True)]}
        )
        self.host.run(["sh", "-c", SPDK_CONFIG_WRITE, "sh", self.config], stdin=config)

    def _inject(self) -> CommandResult:
        p = self.params
        return self.host.run(["sh", "-c", SPDK_STOP, "sh", str(p["pid"]), p["binary"], p["socket"]], timeout=90)

    def _restore(self) -> CommandResult:
        p = self.params
        state = remote.read_state(self.host, self.state_file)
        started = (state or {}).get("app")
        running = isinstance(started, dict) and started.get("pid")
        if state is None or (running and app.alive(self.host, int(running), p["binary"], p["socket"])):
            return self.host.run(["sh", "-c", CLOCK])  # torn down since, or running (restored already)
        pid = app.start_detached(self.host, [*p["argv"], "--json", self.config], p["log"], p["pidfile"])
        started = {**(started if isinstance(started, dict) else {}), "pid": pid}
        remote.write_state(self.host, self.state_file, {**state, "app": started})
        wait = float(p["start_timeout"])
        self._rpc().batch([("framework_wait_init", None)], wait=wait, pid=pid)
        return self.host.run(["sh", "-c", CLOCK])
