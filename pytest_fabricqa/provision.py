"""Provision the target serving a protocol, connect every initiator, and always undo it.

:func:`connect_fabric` is what the ``fabric`` fixture yields; :meth:`Fabric.teardown` undoes it;
:func:`leftovers` is the session-end check that nothing this plugin made is still there; :func:`cleanup_stale`
removes what a killed earlier run left (only objects carrying this plugin's mark, see the target modules).

Every step registers its undo on an :class:`~pytest_fabricqa.targets.base.UndoStack` before it runs. Initiators
connect in parallel, each with its own stack, and the target's stack holds one entry that unwinds them all, so
teardown is: every initiator logs out/disconnects (in parallel), then the target objects go, newest first.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from pytest_fabricqa.fanout import each
from pytest_fabricqa.initiators import iscsi, nvme, portal_reachable
from pytest_fabricqa.lab import LabModel, TargetModel
from pytest_fabricqa.queues import iscsi_node_updates, read_queues
from pytest_fabricqa.targets import load_target
from pytest_fabricqa.targets.base import Export, ProvisionError, Target, UndoStack, command_tail
from pytest_fabricqa.transport.base import CommandError, Host

__all__ = ["Fabric", "FabricDevice", "ProvisionError", "cleanup_stale", "connect_fabric", "leftovers"]

DEVICE_TIMEOUT_S = 60.0

# Targets with a live Fabric in this process: two fabrics on one target would share NQNs/IQNs and undo each other.
_LIVE: dict[str, str] = {}
_LIVE_LOCK = threading.Lock()


@dataclass(frozen=True)
class FabricDevice:
    """A namespace or LUN as one initiator sees it, with what backs it on the target."""

    initiator: str  # lab host name of the initiator
    path: str  # block device on the initiator, e.g. /dev/nvme1n1 or /dev/sdb
    backing: str  # the lab's device name on the target (e.g. "nvme0")
    subsystem: str  # subsystem NQN or target IQN
    address: int  # NSID (NVMe) or LUN (SCSI)
    size_bytes: int
    logical_block_size: int
    writable: bool  # from the lab's device entry
    destructive_ok: bool
    load: bool = True  # performance workloads run on it (the lab's device entry)


@dataclass(frozen=True)
class _Connected:
    devices: list[FabricDevice]
    discovered: list[str]


class Fabric:
    """A provisioned target and every initiator connected to it, for one protocol."""

    def __init__(
        self,
        lab: LabModel,
        protocol: str,
        export: Export,
        undo: UndoStack,
        live_key: str,
        devices: list[FabricDevice],
        discovered: dict[str, list[str]],
        setup_seconds: float,
        stale_removed: list[str],
        hosts: Mapping[str, Host],
    ) -> None:
        self.lab = lab
        self.hosts = hosts
        self.protocol = protocol
        self.export = export
        self.devices = devices
        self.discovered = discovered
        self.queues: dict[str, dict[str, int]] = {}
        """Queue settings per host as read back once the fabric was up (:func:`pytest_fabricqa.queues.read_queues`)."""
        self.setup_seconds = setup_seconds
        self.teardown_seconds: float | None = None
        self.stale_removed = stale_removed
        self._undo = undo
        self._live_key = live_key

    def __repr__(self) -> str:
        return f"Fabric({self.protocol}, {len(self.devices)} devices on {sorted(self.discovered)})"

    @property
    def target_host(self) -> str | None:
        """The lab host running the target (None for an external array)."""
        return self.export.target_host

    def devices_on(self, initiator: str) -> list[FabricDevice]:
        """The devices ``initiator`` sees, in export order."""
        return [d for d in self.devices if d.initiator == initiator]

    def backing_path(self, device: FabricDevice) -> str:
        """The block device (or file) behind ``device`` on the target host."""
        for unit in self.export.units:
            if unit.subsystem == device.subsystem and unit.address == device.address:
                return unit.backing_path
        raise KeyError(f"{device.subsystem} {device.address} is not part of this fabric")

    def reconnect(self) -> None:
        """Tear down (if not done yet) and connect again, in place: this object then holds the new devices.

        For a check that needs the fabric gone for a while (nothing left after teardown) inside a session whose
        fabric fixture others still use: two fabrics on one target cannot coexist (they share NQNs and IQNs).
        """
        self.teardown()
        fresh = connect_fabric(self.lab, self.protocol, self.hosts)
        self.__dict__.update(fresh.__dict__)

    def teardown(self) -> None:
        """Log out/disconnect every initiator, then remove every target object this fabric made (idempotent).

        Every undo runs even when some fail; failures are raised together afterwards as one ProvisionError.
        """
        t0 = time.monotonic()
        errors = self._undo.unwind()
        if self.teardown_seconds is None or errors:
            self.teardown_seconds = round(time.monotonic() - t0, 2)
        with _LIVE_LOCK:
            if _LIVE.get(self._live_key) == self.protocol:
                del _LIVE[self._live_key]
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise ProvisionError(
                self.export.target_host or self.export.address,
                f"teardown of the {self.protocol} fabric failed: {errors[0]}{more}",
                "the next connect_fabric removes what is left; leftovers() lists it",
            )


# -- connect --------------------------------------------------------------------------------------------------


def connect_fabric(lab: LabModel, protocol: str, hosts: Mapping[str, Host]) -> Fabric:
    """Clean stale objects from a killed earlier run, provision the target serving ``protocol``, export it,
    connect EVERY initiator (``lab.hosts_with('initiator')``) in parallel and find each device.

    Every step registers its undo before it runs; on any failure (or Ctrl-C) everything done so far is undone
    and a :class:`ProvisionError` is raised whose message is one line: host, what failed, how to fix.
    """
    t0 = time.monotonic()
    model = lab.target_for(protocol)
    initiators = lab.hosts_with("initiator")
    if not initiators:
        raise ProvisionError(lab.name, "the lab has no host with the initiator role", "add roles: [initiator]")
    for name in [*initiators, *([model.host] if model.host else [])]:
        if name not in hosts:
            raise ProvisionError(name, "no transport for this lab host", "pass every lab host in `hosts`")
    target = load_target(lab, model, hosts)
    live_key = model.host or model.address or lab.name
    with _LIVE_LOCK:
        if live_key in _LIVE:
            raise ProvisionError(
                live_key,
                f"the {_LIVE[live_key]} fabric on this target is still connected",
                "tear it down (fabric.teardown()) before connecting another protocol",
            )
        _LIVE[live_key] = protocol
    undo = UndoStack()
    try:
        stale = cleanup_stale(lab, hosts)
        export = target.provision(protocol, undo)
        stacks = {name: UndoStack() for name in initiators}
        undo.push("disconnect the initiators", partial(_unwind_initiators, stacks, hosts))
        results = each(
            [hosts[name] for name in initiators],
            lambda host: _connect_one(lab, model, export, host, stacks[host.name]),
            check=False,
        )
        failed = [r for r in results.values() if isinstance(r, BaseException)]
        if failed:
            raise _one_line(failed)
        connected = {name: r for name, r in results.items() if isinstance(r, _Connected)}
    except BaseException as exc:
        errors = undo.unwind()
        with _LIVE_LOCK:
            _LIVE.pop(live_key, None)
        if isinstance(exc, ProvisionError):
            if errors:
                exc.args = (f"{exc.args[0]} (clean-up after it also failed: {errors[0]})",)
            raise
        if isinstance(exc, CommandError):
            raise ProvisionError(exc.result.host, f"`{exc.result.command}` failed ({command_tail(exc)})", "") from exc
        raise
    devices = [d for name in initiators for d in connected[name].devices]
    discovered = {name: connected[name].discovered for name in initiators}
    fabric = Fabric(
        lab, protocol, export, undo, live_key, devices, discovered, round(time.monotonic() - t0, 2), stale, hosts
    )
    fabric.queues = read_queues(
        [hosts[name] for name in initiators],
        hosts[model.host] if model.host else None,
        protocol=protocol,
        subsystems=export.subsystems,
        portal=iscsi.portal_name(export.address, export.port),
        iface=iface_name(model, export.transport),
        target_kind=model.kind,
    )
    return fabric


def _one_line(failures: list[BaseException]) -> ProvisionError:
    first = failures[0]
    more = (
        f" (and {len(failures) - 1} more initiator{'s' if len(failures) > 2 else ''} failed)"
        if len(failures) > 1
        else ""
    )
    if isinstance(first, ProvisionError):
        return ProvisionError(first.host, f"{first.what}{more}", first.fix)
    if isinstance(first, CommandError):
        return ProvisionError(first.result.host, f"`{first.result.command}` failed ({command_tail(first)}){more}", "")
    return ProvisionError("initiator", f"{type(first).__name__}: {command_tail(first)}{more}", "")


def _unwind_initiators(stacks: dict[str, UndoStack], hosts: Mapping[str, Host]) -> None:
    results = each([hosts[name] for name in stacks], lambda host: stacks[host.name].unwind(), check=False)
    errors = []
    for name, result in results.items():
        if isinstance(result, BaseException):
            errors.append(f"{name}: {command_tail(result)}")
        else:
            errors += [f"{name}: {line}" for line in result]
    if errors:
        raise ProvisionError(errors[0].split(":", 1)[0], errors[0].split(": ", 1)[1], "")


def _connect_one(lab: LabModel, model: TargetModel, export: Export, host: Host, undo: UndoStack) -> _Connected:
    if not portal_reachable(host, export.address, export.port, "rdma" if export.transport == "rdma" else "tcp"):
        where = f"targets[{lab.targets.index(model)}]"
        raise ProvisionError(
            host.name,
            f"cannot reach the portal {export.address}:{export.port} ({export.protocol})",
            f"check the storage network (address and link of the storage interface, routes, firewall) and the "
            f"target's address ({where})",
        )
    if export.protocol.startswith("nvme"):
        return _connect_nvme(lab, export, host, undo)
    return _connect_iscsi(lab, model, export, host, undo)


def _loads(lab: LabModel, export: Export, backing: str) -> bool:
    device = lab.target_for(export.protocol).devices.get(backing)
    return device.load if device is not None else True


def _connect_nvme(lab: LabModel, export: Export, host: Host, undo: UndoStack) -> _Connected:
    hostnqn = lab.hosts[host.name].host_nqn
    trtype = export.transport
    nvme_export = lab.target_for(export.protocol).nvme
    options = nvme.ConnectOptions(**nvme_export.connect.model_dump()) if nvme_export else None
    try:
        records = nvme.discover(host, trtype, export.address, export.port, hostnqn)
    except CommandError as exc:
        raise ProvisionError(
            host.name,
            f"nvme discover at {export.address}:{export.port} ({trtype}) failed ({command_tail(exc)})",
            "check that the target's port is enabled and, for rdma, that an RDMA link exists on both ends",
        ) from None
    discovered = list(dict.fromkeys(r.subnqn for r in records))
    for nqn in export.subsystems:
        if nqn not in discovered:
            raise ProvisionError(
                host.name,
                f"discovery at {export.address}:{export.port} does not list {nqn} (it lists: "
                f"{', '.join(discovered) or 'nothing'})",
                f"allow host NQN {hostnqn or '(the host default)'} on the subsystem, and link it to the port",
            )
    # Connected before this run's connect (a killed run's controllers were removed at the start): someone else's.
    # Connecting would fail or join their controller as a path, and our disconnect would then end their I/O.
    already = sorted({c.subsysnqn for c in nvme.state(host)[0]} & set(export.subsystems))
    if already:
        raise ProvisionError(
            host.name,
            f"{', '.join(already)} is already connected on this host, and not by this run",
            f"if nothing uses it, disconnect it (nvme disconnect -n {already[0]}); else wait for whoever uses it",
        )
    for nqn in export.subsystems:
        undo.push(f"disconnect {nqn}", partial(nvme.disconnect, host, nqn))
        try:
            nvme.connect(host, trtype, export.address, export.port, nqn, hostnqn, options)
        except CommandError as exc:
            raise ProvisionError(
                host.name,
                f"nvme connect to {nqn} at {export.address}:{export.port} ({trtype}) failed ({command_tail(exc)})",
                "see dmesg on both ends (host NQN allowed? queue count? RDMA link?)",
            ) from None
    wanted = [(u.subsystem, u.address) for u in export.units]
    found = nvme.wait_for_namespaces(host, wanted, DEVICE_TIMEOUT_S)
    for key in wanted:
        if key not in found:
            raise ProvisionError(
                host.name,
                f"namespace {key[1]} of {key[0]} has no block device {DEVICE_TIMEOUT_S:.0f} s after connect",
                "check that the namespace is enabled on the target and see dmesg on the initiator",
            )
    devices = [
        FabricDevice(
            host.name,
            found[(u.subsystem, u.address)].path,
            u.backing,
            u.subsystem,
            u.address,
            found[(u.subsystem, u.address)].size_bytes,
            found[(u.subsystem, u.address)].logical_block_size,
            u.writable,
            u.destructive_ok,
            _loads(lab, export, u.backing),
        )
        for u in export.units
    ]
    return _Connected(devices, discovered)


def iface_name(model: TargetModel, transport: str) -> str:
    """The open-iscsi iface record this plugin creates for a target and transport (its mark on the initiator)."""
    return f"{model.name_prefix}_{transport}"


def _connect_iscsi(lab: LabModel, model: TargetModel, export: Export, host: Host, undo: UndoStack) -> _Connected:
    iface = iface_name(model, export.transport)
    iqn = export.subsystems[0]
    initiator_iqn = lab.hosts[host.name].initiator_iqn
    portal = iscsi.portal_name(export.address, export.port)
    undo.push(f"delete iface {iface}", partial(iscsi.delete_iface, host, iface))
    try:
        iscsi.ensure_iface(host, iface, export.transport, initiator_iqn)
    except CommandError as exc:
        raise ProvisionError(
            host.name, f"cannot create the open-iscsi iface {iface} ({command_tail(exc)})", "is iscsid running?"
        ) from None
    undo.push(
        f"delete the node records of {iqn}",
        partial(iscsi.delete_records, host, iqn, portal, export.address, export.port),
    )
    try:
        targets = iscsi.discover(host, export.address, export.port, iface)
    except CommandError as exc:
        raise ProvisionError(
            host.name,
            f"iSCSI discovery at {portal} failed ({command_tail(exc)})",
            "check that iscsid runs on the initiator and the target's portal is enabled",
        ) from None
    discovered = list(dict.fromkeys(t.iqn for t in targets))
    if iqn not in discovered:
        raise ProvisionError(
            host.name,
            f"discovery at {portal} does not list {iqn} (it lists: {', '.join(discovered) or 'nothing'})",
            "check the target IQN and that its TPG is enabled",
        )
    portal = next((t.portal for t in targets if t.iqn == iqn and t.portal == portal), portal)
    if any(s.iqn == iqn for s in iscsi.sessions(host)):
        # Logged in before this run's login (a killed run's sessions were ended at the start): someone else's.
        raise ProvisionError(
            host.name,
            f"a session to {iqn} already exists on this host, and not by this run",
            f"if nothing uses it, log it out (iscsiadm -m node -T {iqn} -u); else wait for whoever uses it",
        )
    settings = {
        "node.session.queue_depth": model.iscsi.queue_depth if model.iscsi else None,
        "node.session.cmds_max": model.iscsi.cmds_max if model.iscsi else None,
    }
    for argv in iscsi_node_updates(iqn, portal, iface, settings):
        try:
            host.run(argv)
        except CommandError as exc:
            raise ProvisionError(
                host.name,
                f"cannot set {argv[-3]} of the node record of {iqn} ({command_tail(exc)})",
                "check the value against open-iscsi's limits (iscsid.conf)",
            ) from None
    undo.push(f"log out of {iqn}", partial(iscsi.logout, host, iqn, portal))
    try:
        iscsi.login(host, iqn, portal, iface)
    except CommandError as exc:
        fix = (
            f"check that the target's ACLs admit {initiator_iqn}"
            if initiator_iqn
            else "check the target's ACLs (demo mode?)"
        )
        if export.transport == "iser":
            fix += " and that the portal has iser=1 and both ends have an RDMA link"
        raise ProvisionError(
            host.name, f"iSCSI login to {iqn} at {portal} over {export.transport} failed ({command_tail(exc)})", fix
        ) from None
    session = next((s for s in iscsi.sessions(host) if s.iqn == iqn), None)
    if session is None or session.transport != export.transport:
        raise ProvisionError(
            host.name,
            f"the session to {iqn} runs over {session.transport if session else 'nothing'}, not {export.transport}",
            "check the node's iface.transport_name and the portal's iser attribute",
        )
    luns = [u.address for u in export.units]
    found = iscsi.wait_for_luns(host, iqn, luns, DEVICE_TIMEOUT_S)
    for lun in luns:
        if lun not in found:
            raise ProvisionError(
                host.name,
                f"LUN {lun} of {iqn} has no disk {DEVICE_TIMEOUT_S:.0f} s after login",
                "load sd_mod on the initiator and check the ACL's mapped LUNs on the target",
            )
    devices = [
        FabricDevice(
            host.name,
            found[u.address].path,
            u.backing,
            u.subsystem,
            u.address,
            found[u.address].size_bytes,
            found[u.address].logical_block_size,
            u.writable,
            u.destructive_ok,
            _loads(lab, export, u.backing),
        )
        for u in export.units
    ]
    return _Connected(devices, discovered)


# -- stale state and leftovers --------------------------------------------------------------------------------


def _lab_nqns(lab: LabModel) -> set[str]:
    nqns = set()
    for target in lab.targets:
        if target.nvme is None:
            continue
        nqns |= {s.nqn for s in target.nvme.subsystems}
        if target.nvme.saved_config is not None:
            from pytest_fabricqa.targets.nvmet import SavedConfigError, load_saved_config

            with contextlib.suppress(SavedConfigError):  # a broken file fails loudly in provision, not here
                nqns |= {s.nqn for s in load_saved_config(target.nvme.saved_config, target).subsystems}
    return nqns


def _lab_iqns(lab: LabModel) -> dict[str, TargetModel]:
    return {t.iscsi.iqn: t for t in lab.targets if t.iscsi is not None}


def _initiator_objects(lab: LabModel, host: Host) -> list[tuple[str, Callable[[], None]]]:
    """What this plugin may have left on one initiator: (sentence, undo action)."""
    found: list[tuple[str, Callable[[], None]]] = []
    nqns = _lab_nqns(lab)
    if nqns:
        listing = host.run(["sh", "-c", nvme.SYSFS_SCRIPT], check=False)
        controllers, _ = nvme.parse_sysfs(listing.stdout)
        for nqn in sorted({c.subsysnqn for c in controllers if c.subsysnqn in nqns}):
            names = ", ".join(c.name for c in controllers if c.subsysnqn == nqn)
            found.append(
                (
                    f"{host.name}: NVMe controller(s) {names} to {nqn} still connected",
                    partial(nvme.disconnect, host, nqn),
                )
            )
    iqns = _lab_iqns(lab)
    if iqns and host.run(["sh", "-c", "command -v iscsiadm"], check=False).ok:
        for session in iscsi.sessions(host):
            if session.iqn in iqns:
                found.append(
                    (
                        f"{host.name}: iSCSI session {session.sid} to {session.iqn} ({session.transport}) still logged in",
                        partial(iscsi.logout, host, session.iqn, session.portal),
                    )
                )
        for record in iscsi.node_records(host):
            if record.iqn in iqns:
                found.append(
                    (
                        f"{host.name}: open-iscsi node record {record.iqn} at {record.portal} still there",
                        partial(iscsi.delete_node, host, record.iqn, record.portal),
                    )
                )
        for iface in sorted({iface_name(t, tr) for t in iqns.values() for tr in ("tcp", "iser")}):
            if iscsi.iface_exists(host, iface):
                found.append(
                    (f"{host.name}: open-iscsi iface {iface} still there", partial(iscsi.delete_iface, host, iface))
                )
    return found


def _target_drivers(lab: LabModel, hosts: Mapping[str, Host]) -> list[Target]:
    from pytest_fabricqa.targets import REGISTRY

    drivers: list[Target] = []
    for model in lab.targets:
        if model.host is None or REGISTRY.get(model.kind) is None or model.host not in hosts:
            continue
        drivers.append(load_target(lab, model, hosts))
    return drivers


def cleanup_stale(lab: LabModel, hosts: Mapping[str, Host]) -> list[str]:
    """Remove what a killed earlier run left (only objects carrying our mark); return what was removed.

    Initiators first (controllers, sessions, node records, our iface), then every target of the lab.
    """
    removed: list[str] = []
    initiators = [hosts[n] for n in lab.hosts_with("initiator") if n in hosts]

    def clean(host: Host) -> list[str]:
        done = []
        for sentence, action in _initiator_objects(lab, host):
            action()
            done.append(
                sentence.replace(" still connected", " disconnected")
                .replace(" still logged in", " logged out")
                .replace(" still there", " removed")
            )
        return done

    results = each(initiators, clean, check=False)
    for name, result in results.items():
        if isinstance(result, BaseException):
            raise ProvisionError(
                name, f"cannot clean what an earlier run left ({command_tail(result)})", "check the host by hand"
            )
        removed += result
    for driver in _target_drivers(lab, hosts):
        try:
            removed += driver.cleanup_stale()
        except CommandError as exc:
            raise ProvisionError(
                exc.result.host,
                f"cannot clean what an earlier run left ({command_tail(exc)})",
                "check the target by hand",
            ) from None
    return removed


def leftovers(lab: LabModel, hosts: Mapping[str, Host]) -> list[str]:
    """Objects this plugin creates (configfs entries, controllers, sessions) still present, one sentence each.

    A host that cannot be checked is reported too: an unverified host is not a clean one.
    """
    found: list[str] = []
    initiators = [hosts[n] for n in lab.hosts_with("initiator") if n in hosts]
    results = each(initiators, lambda host: [s for s, _ in _initiator_objects(lab, host)], check=False)
    for name, result in results.items():
        if isinstance(result, BaseException):
            found.append(f"{name}: could not be checked for leftovers ({command_tail(result)})")
        else:
            found += result
    for driver in _target_drivers(lab, hosts):
        try:
            found += driver.leftovers()
        except Exception as exc:
            found.append(f"{driver!r}: could not be checked for leftovers ({command_tail(exc)})")
    return found
