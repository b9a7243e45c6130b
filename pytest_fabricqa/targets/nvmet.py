"""Linux kernel NVMe target (nvmet) through configfs: ports, subsystems, namespaces, hosts.

What to create is an :class:`NvmetPlan`, built from the lab (``targets[i].nvme``) or from an nvmetcli saved
configuration (``nvme.saved_config``, the JSON ``nvmetcli save`` writes, as in seed 000), and dumped back to that
same format by :func:`dump_saved_config`.

Ownership: subsystem NQNs are the user's, so they cannot carry a name prefix. Instead the target host keeps a
state file, ``/run/fabricqa/<name_prefix>-nvmet.json``, listing every port, subsystem and host entry this plugin
is about to create; it is written *before* the first object is made and removed after the last one is gone.
/run is a tmpfs, so the file lives exactly as long as the configfs objects. Each subsystem also gets
``attr_model`` = the name prefix (where the kernel allows it), so an engineer sees on the initiator
(``nvme list``) and on the target who made it. Objects in neither are never touched.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pytest_fabricqa.errors import UserError
from pytest_fabricqa.lab import NQN_RE, SHORT_NQN_RE, LabModel, TargetModel
from pytest_fabricqa.targets import remote
from pytest_fabricqa.targets.base import (
    Export,
    ExportedUnit,
    ProvisionError,
    UndoStack,
    command_tail,
    mark_number,
    target_index,
)
from pytest_fabricqa.transport.base import CommandError, Host

ROOT = "/sys/kernel/config/nvmet"
TRTYPE = {"nvme-tcp": "tcp", "nvme-rdma": "rdma"}
MAX_MODEL = 40  # NVMe Identify Controller MN is 40 bytes
# Port IDs are 16-bit; ours are derived from the mark in this range (nvmetcli numbers from 1 up).
PORT_IDS = (10_000, 65_535)
PORT_TRIES = 16

# Everything this module needs to know about the nvmet tree, in one round trip. Fixed text; no arguments.
SNAPSHOT_SCRIPT = r"""
root=/sys/kernel/config/nvmet
[ -d "$root" ] || { echo NOCONFIGFS; exit 0; }
cd "$root" || exit 1
for s in subsystems/*; do
  [ -d "$s" ] || continue
  q=${s#subsystems/}
  printf 'S\t%s\n' "$q"
  for f in "$s"/attr_*; do
    [ -f "$f" ] && printf 'SA\t%s\t%s\t%s\n' "$q" "${f##*/attr_}" "$(head -n1 "$f" 2>/dev/null)"
  done
  for n in "$s"/namespaces/*; do
    [ -d "$n" ] || continue
    printf 'N\t%s\t%s\t%s\t%s\t%s\t%s\n' "$q" "${n##*/}" "$(cat "$n/device_path")" "$(cat "$n/enable")" \
      "$(cat "$n/device_nguid" 2>/dev/null)" "$(cat "$n/device_uuid" 2>/dev/null)"
  done
  for h in "$s"/allowed_hosts/*; do [ -L "$h" ] && printf 'SH\t%s\t%s\n' "$q" "${h##*/}"; done
done
for p in ports/*; do
  [ -d "$p" ] || continue
  i=${p#ports/}
  printf 'P\t%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$(cat "$p/addr_trtype")" "$(cat "$p/addr_adrfam")" \
    "$(cat "$p/addr_traddr")" "$(cat "$p/addr_trsvcid")" "$(cat "$p/addr_treq" 2>/dev/null)"
  for l in "$p"/subsystems/*; do [ -L "$l" ] && printf 'PS\t%s\t%s\n' "$i" "${l##*/}"; done
  for r in "$p"/referrals/*; do [ -d "$r" ] && printf 'PR\t%s\t%s\n' "$i" "${r##*/}"; done
done
for h in hosts/*; do [ -d "$h" ] && printf 'H\t%s\n' "${h#hosts/}"; done
exit 0
"""

# Remove one subsystem whatever state it is in: port links, namespaces (disabled first), allowed hosts.
REMOVE_SUBSYSTEM_SCRIPT = r"""
set -e
s=/sys/kernel/config/nvmet/subsystems/$1
[ -d "$s" ] || exit 0
for l in /sys/kernel/config/nvmet/ports/*/subsystems/"$1"; do [ ! -L "$l" ] || rm -f "$l"; done
for n in "$s"/namespaces/*; do
  [ -d "$n" ] || continue
  echo 0 > "$n/enable"
  rmdir "$n"
done
for h in "$s"/allowed_hosts/*; do [ ! -L "$h" ] || rm -f "$h"; done
rmdir "$s"
"""

REMOVE_PORT_SCRIPT = r"""
set -e
p=/sys/kernel/config/nvmet/ports/$1
[ -d "$p" ] || exit 0
for l in "$p"/subsystems/*; do [ ! -L "$l" ] || rm -f "$l"; done
for r in "$p"/referrals/*; do [ ! -d "$r" ] || rmdir "$r"; done
rmdir "$p"
"""


# -- the plan ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NvmetNamespace:
    """A namespace: NSID, backing path, the lab's device name for it, and optional NGUID/UUID."""

    nsid: int
    path: str
    backing: str
    enable: bool = True
    nguid: str | None = None
    uuid: str | None = None
    writable: bool = False
    destructive_ok: bool = False


@dataclass(frozen=True)
class NvmetSubsystem:
    """A subsystem: NQN, namespaces, host access, and extra ``attr_*`` values from a saved configuration."""

    nqn: str
    namespaces: tuple[NvmetNamespace, ...]
    allow_any_host: bool = True
    allowed_hosts: tuple[str, ...] = ()
    attrs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NvmetPort:
    """A port: transport address and the subsystems it exports. ``portid`` is a preference, not a promise."""

    trtype: str
    traddr: str
    trsvcid: int
    subsystems: tuple[str, ...]
    adrfam: str = "ipv4"
    treq: str = "not specified"
    portid: int | None = None


@dataclass(frozen=True)
class NvmetPlan:
    """Everything to create on one nvmet target."""

    subsystems: tuple[NvmetSubsystem, ...]
    ports: tuple[NvmetPort, ...]
    hosts: tuple[str, ...] = ()


class SavedConfigError(UserError, ValueError):
    """An nvmetcli saved configuration is unreadable or invalid; the message names the file and the key."""


def _adrfam(address: str) -> str:
    try:
        return "ipv6" if ipaddress.ip_address(address).version == 6 else "ipv4"
    except ValueError:
        return "ipv4"


def check_nqn(nqn: str) -> str | None:
    """None when ``nqn`` is a name nvmet accepts (NVMe NQN, at most 223 bytes, or a short name), else why not."""
    if len(nqn.encode()) > 223:
        return f"NQN {nqn!r} is longer than 223 bytes"
    if not (NQN_RE.match(nqn) or SHORT_NQN_RE.match(nqn)):
        return f"{nqn!r} is not a valid NQN (nqn.yyyy-mm.reverse.domain:name)"
    return None


def plan_from_lab(lab: LabModel, model: TargetModel, protocol: str) -> NvmetPlan:
    """The plan a lab declares for ``protocol``: its saved configuration, or ``nvme.subsystems`` on one port."""
    assert model.nvme is not None
    trtype = TRTYPE[protocol]
    address = lab.target_address(model)
    where = f"targets[{target_index(lab, model)}]"
    if model.nvme.saved_config is not None:
        saved = load_saved_config(model.nvme.saved_config, model)
        ports = tuple(p for p in saved.ports if p.trtype == trtype)
        if not ports:
            # A file saved for rdma still serves tcp: same subsystems, a port of the protocol under test.
            ports = (
                NvmetPort(trtype, address, model.nvme.port, tuple(s.nqn for s in saved.subsystems), _adrfam(address)),
            )
        return NvmetPlan(saved.subsystems, ports, saved.hosts)
    initiator_nqns = tuple(h.host_nqn for n in lab.hosts_with("initiator") if (h := lab.hosts[n]).host_nqn is not None)
    subsystems = []
    for index, sub in enumerate(model.nvme.subsystems):
        namespaces = tuple(
            NvmetNamespace(
                nsid,
                model.devices[name].path,
                name,
                writable=model.devices[name].writable,
                destructive_ok=model.devices[name].destructive_ok,
            )
            for nsid, name in enumerate(sub.namespaces, start=1)
        )
        allowed = sub.allowed_hosts
        if not sub.allow_any_host and not allowed:
            missing = [n for n in lab.hosts_with("initiator") if lab.hosts[n].host_nqn is None]
            if missing:
                raise ProvisionError(
                    model.host or lab.name,
                    f"{where}.nvme.subsystems[{index}] ({sub.nqn}) admits only listed hosts but initiator "
                    f"{missing[0]} declares no host_nqn",
                    f"set hosts.{missing[0]}.host_nqn or list allowed_hosts",
                )
            allowed = initiator_nqns
        subsystems.append(NvmetSubsystem(sub.nqn, namespaces, sub.allow_any_host, tuple(allowed)))
    hosts = tuple(dict.fromkeys(h for s in subsystems for h in s.allowed_hosts))
    port = NvmetPort(trtype, address, model.nvme.port, tuple(s.nqn for s in subsystems), _adrfam(address))
    return NvmetPlan(tuple(subsystems), (port,), hosts)


# -- nvmetcli's saved JSON -----------------------------------------------------------------------------------


def load_saved_config(source: Path | str | Mapping[str, Any], model: TargetModel | None = None) -> NvmetPlan:
    """Read an nvmetcli saved configuration (``nvmetcli save`` / ``/etc/nvmet/config.json``) into a plan.

    Device paths are matched to the lab's device names through ``model.devices``; NQNs are checked against the
    NVMe naming rules here, at the edge, because a hand-edited file has not been through the lab validator.
    """
    if isinstance(source, Mapping):
        name, data = "saved config", dict(source)
    else:
        name = str(source)
        try:
            data = json.loads(Path(os.path.expanduser(str(source))).read_text())
        except OSError as exc:
            raise SavedConfigError(f"{name}: cannot read the nvmetcli saved configuration ({exc.strerror})") from None
        except ValueError as exc:
            raise SavedConfigError(f"{name}: not JSON ({exc}); give the file `nvmetcli save` wrote") from None
        if not isinstance(data, dict):
            raise SavedConfigError(f"{name}: the top level must be an object with ports, subsystems, hosts")
    by_path = {dev.path: dev_name for dev_name, dev in (model.devices.items() if model else ())}

    def fail(key: str, why: str) -> SavedConfigError:
        return SavedConfigError(f"{name}: {key}: {why}")

    hosts: list[str] = []
    for i, host in enumerate(data.get("hosts") or []):
        nqn = host.get("nqn") if isinstance(host, dict) else None
        if not isinstance(nqn, str):
            raise fail(f"hosts[{i}].nqn", "missing")
        if why := check_nqn(nqn):
            raise fail(f"hosts[{i}].nqn", why)
        hosts.append(nqn)
    subsystems: list[NvmetSubsystem] = []
    for i, sub in enumerate(data.get("subsystems") or []):
        if not isinstance(sub, dict) or not isinstance(sub.get("nqn"), str):
            raise fail(f"subsystems[{i}].nqn", "missing")
        nqn = sub["nqn"]
        if why := check_nqn(nqn):
            raise fail(f"subsystems[{i}].nqn", why)
        attr = {str(k): str(v) for k, v in (sub.get("attr") or {}).items()}
        allow_any = attr.pop("allow_any_host", "1" if not sub.get("allowed_hosts") else "0") == "1"
        namespaces = []
        for j, ns in enumerate(sub.get("namespaces") or []):
            key = f"subsystems[{i}].namespaces[{j}]"
            device = ns.get("device") or {}
            path = device.get("path")
            if not isinstance(path, str) or not path.startswith("/"):
                raise fail(f"{key}.device.path", f"{path!r} must be an absolute device path")
            try:
                nsid = int(ns["nsid"])
            except (KeyError, TypeError, ValueError):
                raise fail(f"{key}.nsid", "missing or not a number") from None
            if not 1 <= nsid <= 0xFFFFFFFE:
                raise fail(f"{key}.nsid", f"{nsid} is out of range 1..4294967294")
            backing = by_path.get(path, path)
            dev = model.devices.get(backing) if model else None
            namespaces.append(
                NvmetNamespace(
                    nsid,
                    path,
                    backing,
                    enable=int(ns.get("enable", 1)) == 1,
                    nguid=device.get("nguid") or None,
                    uuid=device.get("uuid") or None,
                    writable=dev.writable if dev else False,
                    destructive_ok=dev.destructive_ok if dev else False,
                )
            )
        allowed = tuple(str(h) for h in sub.get("allowed_hosts") or [])
        for h in allowed:
            if why := check_nqn(h):
                raise fail(f"subsystems[{i}].allowed_hosts", why)
        subsystems.append(NvmetSubsystem(nqn, tuple(namespaces), allow_any, allowed, tuple(sorted(attr.items()))))
    known = {s.nqn for s in subsystems}
    ports: list[NvmetPort] = []
    for i, port in enumerate(data.get("ports") or []):
        addr = port.get("addr") or {}
        trtype = addr.get("trtype")
        if trtype not in ("tcp", "rdma"):
            raise fail(f"ports[{i}].addr.trtype", f"{trtype!r}: this plugin drives tcp and rdma ports")
        try:
            trsvcid = int(addr.get("trsvcid", 4420))
        except ValueError:
            raise fail(f"ports[{i}].addr.trsvcid", f"{addr.get('trsvcid')!r} is not a port number") from None
        linked = tuple(str(s) for s in port.get("subsystems") or [])
        for s in linked:
            if s not in known:
                raise fail(f"ports[{i}].subsystems", f"{s!r} is not under subsystems")
        ports.append(
            NvmetPort(
                trtype,
                str(addr.get("traddr", "")),
                trsvcid,
                linked,
                str(addr.get("adrfam", "ipv4")),
                str(addr.get("treq", "not specified")),
                int(port["portid"]) if "portid" in port else None,
            )
        )
    return NvmetPlan(tuple(subsystems), tuple(ports), tuple(hosts))


def dump_saved_config(plan: NvmetPlan, portids: Mapping[int, int] | None = None) -> dict[str, Any]:
    """The plan in nvmetcli's saved JSON shape (what ``nvmetcli restore`` reads). ``portids`` maps port index ->
    the port ID actually used on the target."""
    subsystems = []
    for sub in plan.subsystems:
        attr = dict(sub.attrs)
        attr["allow_any_host"] = "1" if sub.allow_any_host else "0"
        subsystems.append(
            {
                "allowed_hosts": list(sub.allowed_hosts),
                "attr": dict(sorted(attr.items())),
                "namespaces": [
                    {
                        "device": {
                            **({"nguid": ns.nguid} if ns.nguid else {}),
                            "path": ns.path,
                            **({"uuid": ns.uuid} if ns.uuid else {}),
                        },
                        "enable": 1 if ns.enable else 0,
                        "nsid": ns.nsid,
                    }
                    for ns in sub.namespaces
                ],
                "nqn": sub.nqn,
            }
        )
    ports = []
    for index, port in enumerate(plan.ports):
        portid = (portids or {}).get(index, port.portid if port.portid is not None else index + 1)
        ports.append(
            {
                "addr": {
                    "adrfam": port.adrfam,
                    "traddr": port.traddr,
                    "treq": port.treq,
                    "trsvcid": str(port.trsvcid),
                    "trtype": port.trtype,
                },
                "portid": portid,
                "referrals": [],
                "subsystems": list(port.subsystems),
            }
        )
    return {"hosts": [{"nqn": h} for h in plan.hosts], "ports": ports, "subsystems": subsystems}


# -- what is on the target -----------------------------------------------------------------------------------


@dataclass
class NvmetSnapshot:
    """The nvmet configfs tree as :data:`SNAPSHOT_SCRIPT` printed it."""

    loaded: bool = True
    subsystems: dict[str, dict[str, Any]] = field(default_factory=dict)
    ports: dict[int, dict[str, Any]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)

    def model_of(self, nqn: str) -> str:
        """The subsystem's ``attr_model`` ('' when unknown)."""
        return str(self.subsystems.get(nqn, {}).get("attr", {}).get("model", ""))

    def to_saved_config(self) -> dict[str, Any]:
        """What is on the target, in nvmetcli's saved JSON shape."""
        subsystems = []
        for nqn, sub in self.subsystems.items():
            attr = {k: v for k, v in sub["attr"].items() if k in ("allow_any_host", "model", "serial", "version")}
            subsystems.append(
                {
                    "allowed_hosts": list(sub["allowed_hosts"]),
                    "attr": attr,
                    "namespaces": [
                        {
                            "device": {"nguid": ns["nguid"], "path": ns["path"], "uuid": ns["uuid"]},
                            "enable": ns["enable"],
                            "nsid": nsid,
                        }
                        for nsid, ns in sorted(sub["namespaces"].items())
                    ],
                    "nqn": nqn,
                }
            )
        ports = [
            {
                "addr": {k: port[k] for k in ("adrfam", "traddr", "treq", "trsvcid", "trtype")},
                "portid": portid,
                "referrals": list(port["referrals"]),
                "subsystems": list(port["subsystems"]),
            }
            for portid, port in sorted(self.ports.items())
        ]
        return {"hosts": [{"nqn": h} for h in self.hosts], "ports": ports, "subsystems": subsystems}


def parse_snapshot(text: str) -> NvmetSnapshot:
    """Parse :data:`SNAPSHOT_SCRIPT` output."""
    snap = NvmetSnapshot()
    for line in text.splitlines():
        parts = line.split("\t")
        tag = parts[0]
        if tag == "NOCONFIGFS":
            snap.loaded = False
        elif tag == "S":
            snap.subsystems[parts[1]] = {"attr": {}, "namespaces": {}, "allowed_hosts": []}
        elif tag == "SA" and parts[1] in snap.subsystems:
            snap.subsystems[parts[1]]["attr"][parts[2]] = parts[3] if len(parts) > 3 else ""
        elif tag == "N" and parts[1] in snap.subsystems:
            nqn, nsid, path, enable, nguid, uuid = (parts + [""] * 7)[1:7]
            snap.subsystems[nqn]["namespaces"][int(nsid)] = {
                "path": path,
                "enable": int(enable or 0),
                "nguid": nguid,
                "uuid": uuid,
            }
        elif tag == "SH" and parts[1] in snap.subsystems:
            snap.subsystems[parts[1]]["allowed_hosts"].append(parts[2])
        elif tag == "P":
            portid, trtype, adrfam, traddr, trsvcid, treq = (parts + [""] * 7)[1:7]
            snap.ports[int(portid)] = {
                "trtype": trtype,
                "adrfam": adrfam,
                "traddr": traddr,
                "trsvcid": trsvcid,
                "treq": treq,
                "subsystems": [],
                "referrals": [],
            }
        elif tag == "PS" and int(parts[1]) in snap.ports:
            snap.ports[int(parts[1])]["subsystems"].append(parts[2])
        elif tag == "PR" and int(parts[1]) in snap.ports:
            snap.ports[int(parts[1])]["referrals"].append(parts[2])
        elif tag == "H":
            snap.hosts.append(parts[1])
    return snap


def port_conflict(snap: NvmetSnapshot, port: NvmetPort, ours: frozenset[int] = frozenset()) -> int | None:
    """The ID of an existing port (not in ``ours``) already serving ``port``'s transport address, or None."""
    wildcard = {"0.0.0.0", "::", port.traddr}
    for portid, existing in snap.ports.items():
        if portid in ours:
            continue
        if (
            existing["trtype"] == port.trtype
            and existing["traddr"] in wildcard
            and str(existing["trsvcid"]) == str(port.trsvcid)
        ):
            return portid
    return None


# -- the driver -----------------------------------------------------------------------------------------------


class NvmetTarget:
    """Kernel nvmet on a lab host, driven through configfs over the host's transport."""

    kind = "nvmet"

    def __init__(self, lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> None:
        assert model.host is not None and model.nvme is not None
        self.lab = lab
        self.model = model
        self.host = hosts[model.host]
        self.where = f"targets[{target_index(lab, model)}]"
        self.mark = model.name_prefix[:MAX_MODEL]
        self.state_file = remote.state_path(model.name_prefix, "nvmet")
        self.last_plan: NvmetPlan | None = None
        self.last_portids: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"NvmetTarget({self.host.name})"

    def _fail(self, what: str, fix: str) -> ProvisionError:
        return ProvisionError(self.host.name, what, fix)

    def snapshot(self) -> NvmetSnapshot:
        """Read the target's whole nvmet tree in one command."""
        return parse_snapshot(self.host.run(["sh", "-c", SNAPSHOT_SCRIPT]).stdout)

    def dump(self) -> dict[str, Any]:
        """What the target holds now, as an nvmetcli saved configuration."""
        return self.snapshot().to_saved_config()

    def provisioned_config(self) -> dict[str, Any] | None:
        """What the last :meth:`provision` created, as an nvmetcli saved configuration."""
        return dump_saved_config(self.last_plan, self.last_portids) if self.last_plan else None

    # -- provision ------------------------------------------------------------------------------------------
    def provision(self, protocol: str, undo: UndoStack) -> Export:
        """Create hosts, subsystems, namespaces and the port for ``protocol``; link and thereby enable them."""
        trtype = TRTYPE.get(protocol)
        if trtype is None:
            raise self._fail(f"nvmet does not serve {protocol}", f"serve {protocol} with another target kind")
        try:
            plan = plan_from_lab(self.lab, self.model, protocol)
        except SavedConfigError as exc:
            raise self._fail(str(exc), "fix the saved configuration or drop nvme.saved_config") from None
        self._load_modules(trtype)
        snap = self.snapshot()
        self._check(plan, snap)
        portids = self._pick_portids(plan, snap)
        new_hosts = [h for h in plan.hosts if h not in snap.hosts]  # a host entry already there is not ours
        state: dict[str, Any] = {
            "kind": "nvmet",
            "owner": f"pid {os.getpid()}",
            "subsystems": [s.nqn for s in plan.subsystems],
            "ports": sorted(portids.values()),
            "hosts": new_hosts,
        }
        # Recorded before anything exists: a run killed from here on leaves a list the next run cleans up.
        undo.push(f"remove {self.state_file}", self._remove_state_if_clean)
        remote.write_state(self.host, self.state_file, state)
        for nqn in new_hosts:
            path = f"{ROOT}/hosts/{nqn}"
            discard = undo.push(f"remove nvmet host {nqn}", partial(remote.rmdir_if, self.host, path))
            if not self._create(f"cannot create nvmet host entry {nqn}", path):
                # Another session or tool made it since the snapshot: shared, used as it is, never removed by us.
                discard()
                self._forget(state, "hosts", nqn)
        for sub in plan.subsystems:
            self._make_subsystem(sub, undo, state)
        for index, port in enumerate(plan.ports):
            portids[index] = self._make_port(port, portids[index], snap, undo, state)
        self.last_plan, self.last_portids = plan, portids
        units = tuple(
            ExportedUnit(sub.nqn, ns.nsid, ns.backing, ns.path, ns.writable, ns.destructive_ok)
            for sub in plan.subsystems
            if any(sub.nqn in p.subsystems for p in plan.ports)
            for ns in sub.namespaces
            if ns.enable
        )
        port = plan.ports[0]
        return Export(protocol, trtype, port.traddr, port.trsvcid, units, self.host.name)

    def _step(self, what: str, action: Any, fix: str = "") -> None:
        try:
            action()
        except CommandError as exc:
            raise self._fail(f"{what} ({command_tail(exc)})", fix or "see the target's dmesg") from None

    def _load_modules(self, trtype: str) -> None:
        module = f"nvmet_{trtype}"
        result = self.host.run(["modprobe", "-a", "nvmet", module], check=False)
        if not result.ok:
            raise self._fail(
                f"cannot load kernel modules nvmet and {module} ({command_tail_result(result.stderr)})",
                "install the kernel's NVMe target modules (CONFIG_NVME_TARGET_TCP/RDMA)",
            )

    def _check(self, plan: NvmetPlan, snap: NvmetSnapshot) -> None:
        for sub in plan.subsystems:
            if why := check_nqn(sub.nqn):
                raise self._fail(why, f"fix the subsystem NQN in {self.where}.nvme")
            if sub.nqn in snap.subsystems:
                raise self._fail(
                    f"nvmet subsystem {sub.nqn} already exists and was not created by fabricqa",
                    "remove it on the target (nvmetcli clear, or rmdir under /sys/kernel/config/nvmet) or use "
                    f"another NQN in {self.where}.nvme.subsystems",
                )
            for ns in sub.namespaces:
                if not self.host.run(["test", "-b", ns.path, "-o", "-f", ns.path], check=False).ok:
                    raise self._fail(
                        f"backing device {ns.backing} ({ns.path}) of {sub.nqn} does not exist",
                        f"fix {self.where}.devices.{ns.backing}.path in the lab file or attach the device",
                    )
        for port in plan.ports:
            taken = port_conflict(snap, port)
            if taken is not None:
                raise self._fail(
                    f"{port.trtype} {port.traddr}:{port.trsvcid} is already served by nvmet port {taken}, "
                    "which fabricqa did not create",
                    f"remove that port or set {self.where}.nvme.port to a free port",
                )
            if port.trtype == "tcp":
                busy = remote.listening_processes(self.host, port.trsvcid)
                if busy:
                    raise self._fail(
                        f"TCP port {port.trsvcid} is taken by a process ({busy[0]})",
                        f"stop that process or set {self.where}.nvme.port to a free port",
                    )

    def _pick_portids(self, plan: NvmetPlan, snap: NvmetSnapshot) -> dict[int, int]:
        # A saved configuration's port ID where it is free; else one derived from the mark and the port's address,
        # so that two sessions with different marks never reach for the same ID.
        used = set(snap.ports)
        chosen: dict[int, int] = {}
        for index, port in enumerate(plan.ports):
            portid = port.portid if port.portid and port.portid not in used else self._next_portid(port, used)
            used.add(portid)
            chosen[index] = portid
        return chosen

    def _next_portid(self, port: NvmetPort, used: set[int]) -> int:
        low, high = PORT_IDS
        start = mark_number(self.model.name_prefix, f"{port.trtype}:{port.traddr}:{port.trsvcid}", low, high)
        for step in range(high - low):
            portid = low + (start - low + step) % (high - low)
            if portid not in used:
                return portid
        raise self._fail("no free nvmet port ID", "remove unused ports under /sys/kernel/config/nvmet/ports")

    def _create(self, what: str, path: str, fix: str = "") -> bool:
        """``mkdir`` one configfs object: True when this step made it, False when it was already there."""
        try:
            return remote.create_dir(self.host, path)
        except CommandError as exc:
            raise self._fail(f"{what} ({command_tail(exc)})", fix or "see the target's dmesg") from None

    def _forget(self, state: dict[str, Any], key: str, value: Any) -> None:
        """Drop an object that turned out not to be ours from the state file, so no later run removes it."""
        state[key] = [v for v in state[key] if v != value]
        remote.write_state(self.host, self.state_file, state)

    def _make_subsystem(self, sub: NvmetSubsystem, undo: UndoStack, state: dict[str, Any]) -> None:
        base = f"{ROOT}/subsystems/{sub.nqn}"
        host = self.host
        discard = undo.push(f"remove nvmet subsystem {sub.nqn}", lambda: remove_subsystem(host, sub.nqn))
        if not self._create(
            f"cannot create nvmet subsystem {sub.nqn}", base, f"check the NQN in {self.where}.nvme and configfs"
        ):
            discard()
            self._forget(state, "subsystems", sub.nqn)
            raise self._fail(
                f"nvmet subsystem {sub.nqn} appeared while fabricqa was creating it (another session or tool)",
                f"let the other session finish, or use another NQN in {self.where}.nvme.subsystems",
            )
        attrs = dict(sub.attrs)
        attrs.setdefault("model", self.mark)
        for name, value in attrs.items():
            result = host.run(["sh", "-c", 'printf %s "$1" > "$2"', "sh", value, f"{base}/attr_{name}"], check=False)
            if not result.ok and name != "model":  # the mark is best effort: old kernels have no attr_model
                raise self._fail(
                    f"cannot set attr_{name}={value} on {sub.nqn} ({command_tail_result(result.stderr)})",
                    "drop that attribute from the saved configuration",
                )
        self._step(
            f"cannot set allow_any_host on {sub.nqn}",
            lambda: remote.write(host, f"{base}/attr_allow_any_host", "1" if sub.allow_any_host else "0"),
        )
        for nqn in sub.allowed_hosts:
            self._step(
                f"cannot allow host {nqn} on {sub.nqn}",
                lambda n=nqn: remote.link(host, f"{ROOT}/hosts/{n}", f"{base}/allowed_hosts/{n}"),
            )
        for ns in sub.namespaces:
            path = f"{base}/namespaces/{ns.nsid}"
            self._step(f"cannot create namespace {ns.nsid} of {sub.nqn}", lambda p=path: remote.mkdir(host, p))
            self._step(
                f"cannot set namespace {ns.nsid} of {sub.nqn} to {ns.path}",
                lambda p=path, n=ns: remote.write(host, f"{p}/device_path", n.path),
            )
            for attr, ident in (("device_nguid", ns.nguid), ("device_uuid", ns.uuid)):
                if ident:
                    self._step(
                        f"cannot set {attr} of namespace {ns.nsid} of {sub.nqn}",
                        lambda p=path, a=attr, v=ident: remote.write(host, f"{p}/{a}", v),
                    )
            if ns.enable:
                self._step(
                    f"cannot enable namespace {ns.nsid} of {sub.nqn} on {ns.path}",
                    lambda p=path: remote.write(host, f"{p}/enable", "1"),
                    f"check that {ns.path} is a usable block device and not held exclusively by another target "
                    "(a file on tmpfs needs buffered_io=1)",
                )

    def _make_port(
        self, port: NvmetPort, portid: int, snap: NvmetSnapshot, undo: UndoStack, state: dict[str, Any]
    ) -> int:
        """Create the port (under the next derived ID if the planned one was taken meanwhile); the ID used."""
        host = self.host
        used = set(snap.ports) | {portid}
        for _ in range(PORT_TRIES):
            base = f"{ROOT}/ports/{portid}"
            discard = undo.push(f"remove nvmet port {portid}", partial(remove_port, host, portid))
            if self._create(f"cannot create nvmet port {portid}", base):
                break
            discard()
            new = self._next_portid(port, used)
            used.add(new)
            state["ports"] = sorted({*state["ports"], new} - {portid})
            remote.write_state(host, self.state_file, state)
            portid = new
        else:
            raise self._fail(
                f"nvmet port IDs were each taken while fabricqa created them (last tried {portid})",
                "another session or tool is creating nvmet ports on this target; run one at a time",
            )
        for attr, value in (
            ("addr_trtype", port.trtype),
            ("addr_adrfam", port.adrfam),
            ("addr_traddr", port.traddr),
            ("addr_trsvcid", str(port.trsvcid)),
            ("addr_treq", port.treq),
        ):
            self._step(
                f"cannot set {attr}={value} on nvmet port {portid}",
                lambda a=attr, v=value: remote.write(host, f"{base}/{a}", v),
            )
        fix = (
            f"check that {port.traddr} is an address of the target and that an RDMA device (rxe or a NIC) sits on "
            "its interface (`rdma link`)"
            if port.trtype == "rdma"
            else f"check that {port.traddr} is an address of the target and port {port.trsvcid} is free"
        )
        for nqn in port.subsystems:
            # The first link enables the port: this is where a bad address or a taken port shows.
            self._step(
                f"cannot export {nqn} on {port.trtype} {port.traddr}:{port.trsvcid} (port {portid})",
                lambda n=nqn: remote.link(host, f"{ROOT}/subsystems/{n}", f"{base}/subsystems/{n}"),
                fix,
            )
        return portid

    # -- stale state and leftovers -------------------------------------------------------------------------
    def _ours(self, snap: NvmetSnapshot) -> tuple[list[int], list[str], list[str], bool]:
        state = remote.read_state(self.host, self.state_file)
        recorded = state or {}
        ports = [int(p) for p in recorded.get("ports", []) if int(p) in snap.ports]
        subsystems = [s for s in recorded.get("subsystems", []) if s in snap.subsystems]
        subsystems += [
            nqn for nqn in snap.subsystems if nqn not in subsystems and self.mark and snap.model_of(nqn) == self.mark
        ]
        hosts = [h for h in recorded.get("hosts", []) if h in snap.hosts]
        return ports, subsystems, hosts, state is not None

    def _remove_state_if_clean(self) -> None:
        """The last undo: drop the state file, unless objects it lists survived the teardown (the leftovers gate
        reports them, and the next run needs the file to know they are ours)."""
        snap = self.snapshot()
        ports, subsystems, hosts, _ = self._ours(snap) if snap.loaded else ([], [], [], False)
        if not (ports or subsystems or hosts):
            remote.remove_state(self.host, self.state_file)

    def cleanup_stale(self) -> list[str]:
        """Remove the ports, subsystems and host entries an earlier run recorded (or marked), then its state file."""
        snap = self.snapshot()
        if not snap.loaded:
            if remote.read_state(self.host, self.state_file) is not None:
                remote.remove_state(self.host, self.state_file)
                return [f"{self.host.name}: removed the stale state file {self.state_file}"]
            return []
        ports, subsystems, hosts, has_state = self._ours(snap)
        removed: list[str] = []
        for portid in ports:
            p = snap.ports[portid]
            remove_port(self.host, portid)
            removed.append(
                f"{self.host.name}: removed nvmet port {portid} ({p['trtype']} {p['traddr']}:{p['trsvcid']})"
            )
        for nqn in subsystems:
            remove_subsystem(self.host, nqn)
            removed.append(f"{self.host.name}: removed nvmet subsystem {nqn}")
        for nqn in hosts:
            result = self.host.run(
                ["sh", "-c", '[ ! -d "$1" ] || rmdir "$1"', "sh", f"{ROOT}/hosts/{nqn}"], check=False
            )
            if result.ok:
                removed.append(f"{self.host.name}: removed nvmet host entry {nqn}")
        if has_state:
            remote.remove_state(self.host, self.state_file)
            removed.append(f"{self.host.name}: removed the stale state file {self.state_file}")
        return removed

    def leftovers(self) -> list[str]:
        """Ports, subsystems and host entries this plugin created that are still there, and its state file."""
        snap = self.snapshot()
        ports, subsystems, hosts, has_state = self._ours(snap)
        found = [f"{self.host.name}: nvmet port {p} is still configured" for p in ports]
        found += [f"{self.host.name}: nvmet subsystem {s} is still configured" for s in subsystems]
        found += [f"{self.host.name}: nvmet host entry {h} is still configured" for h in hosts]
        if has_state:
            found.append(f"{self.host.name}: state file {self.state_file} is still there")
        return found


def command_tail_result(stderr: str) -> str:
    """The last non-empty stderr line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def remove_subsystem(host: Host, nqn: str) -> None:
    """Remove subsystem ``nqn`` with its namespaces, allowed-host links and port links (idempotent)."""
    host.run(["sh", "-c", REMOVE_SUBSYSTEM_SCRIPT, "sh", nqn])


def remove_port(host: Host, portid: int) -> None:
    """Remove nvmet port ``portid`` with its subsystem links and referrals (idempotent)."""
    host.run(["sh", "-c", REMOVE_PORT_SCRIPT, "sh", str(portid)])
