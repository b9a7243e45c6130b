"""Connecting one initiator to what a target exported, and finding what this plugin left on an initiator.

nvme-cli (discover, connect, the namespaces by NQN + NSID) and open-iscsi (iface, discovery, node settings, login,
the LUNs by IQN + LUN); every step's undo goes on the initiator's own stack before the step runs, and a connection
that was there before this run's own connect (someone else's) stops the run instead of being taken over.
:func:`initiator_objects` lists what carries this plugin's mark on one initiator, for the stale clean-up at the
start and the leftovers gate at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial

from pytest_fabricqa.core.commands import command_tail
from pytest_fabricqa.core.export import Export
from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.initiators import dm, iscsi, nvme, portal_reachable
from pytest_fabricqa.lab.model import LabModel, TargetModel, iface_name
from pytest_fabricqa.transport.base import CommandError, Host

DEVICE_TIMEOUT_S = 60.0
ANSWER_TIMEOUT_S = 15.0  # `true` over SSH: a host that is up answers in well under a second, a TCG guest included


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
class Connected:
    devices: list[FabricDevice]
    discovered: list[str]


def connect_one(lab: LabModel, model: TargetModel, export: Export, host: Host, undo: UndoStack) -> Connected:
    for address in export.addresses:
        if not portal_reachable(host, address, export.port, "rdma" if export.transport == "rdma" else "tcp"):
            answer = host.run(["true"], check=False, timeout=ANSWER_TIMEOUT_S)
            if not answer.ok:  # the probe failed because the host itself is gone, not its storage network
                raise ProvisionError(
                    host.name,
                    f"does not answer over SSH any more ({answer.stderr.strip() or f'exit {answer.exit_code}'})",
                    "check that the host is up (a virtual lab's guest: the end of its console log, "
                    "`fabricqa-vlab status --lab NAME`)",
                )
            where = f"targets[{lab.targets.index(model)}]"
            raise ProvisionError(
                host.name,
                f"cannot reach the portal {address}:{export.port} ({export.protocol})",
                f"check the storage network (address and link of the storage interface, routes, firewall) and the "
                f"target's address ({where})",
            )
    if protocol_spec(export.protocol).family == "nvme":
        return connect_nvme(lab, export, host, undo)
    return connect_iscsi(lab, model, export, host, undo)


def _loads(lab: LabModel, export: Export, backing: str) -> bool:
    device = lab.target_for(export.protocol, export.target).devices.get(backing)
    return device.load if device is not None else True


def connect_nvme(lab: LabModel, export: Export, host: Host, undo: UndoStack) -> Connected:
    hostnqn = lab.hosts[host.name].host_nqn
    trtype = export.transport
    nvme_export = lab.target_for(export.protocol, export.target).nvme
    options = nvme.ConnectOptions(**nvme_export.connect.model_dump(exclude={"iopolicy"})) if nvme_export else None
    iopolicy = nvme_export.connect.iopolicy if nvme_export else None
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
    # Every path: one controller per portal, each from this host's own port in the portal's subnet (one path, one
    # port) when the target has several; the kernel's native multipath joins them under one namespace device.
    paths = [(a, lab.local_port(host.name, a) if len(export.addresses) > 1 else None) for a in export.addresses]
    for address, local in paths:
        if len(paths) > 1 and local is None:
            raise ProvisionError(
                host.name,
                f"has no storage port in the subnet of the target's path {address}",
                f"give hosts.{host.name}.storage a port in that subnet, or set the target's paths: first",
            )
    for nqn in export.subsystems:
        undo.push(f"disconnect {nqn}", partial(nvme.disconnect, host, nqn))
        for address, local in paths:
            try:
                nvme.connect(host, trtype, address, export.port, nqn, hostnqn, options, host_traddr=local)
            except CommandError as exc:
                raise ProvisionError(
                    host.name,
                    f"nvme connect to {nqn} at {address}:{export.port} ({trtype}) failed ({command_tail(exc)})",
                    "see dmesg on both ends (host NQN allowed? queue count? RDMA link?)",
                ) from None
    if len(paths) > 1:
        controllers = nvme.state(host)[0]
        for nqn in export.subsystems:
            live = [c for c in controllers if c.subsysnqn == nqn]
            if len(live) != len(paths):
                raise ProvisionError(
                    host.name,
                    f"{nqn} has {len(live)} controller(s) after connecting over {len(paths)} paths",
                    "see dmesg on both ends (is every path's port and RDMA link up?)",
                )
    wanted = [(u.subsystem, u.address) for u in export.units]
    found = nvme.wait_for_namespaces(host, wanted, DEVICE_TIMEOUT_S)
    for key in wanted:
        if key not in found:
            raise ProvisionError(
                host.name,
                f"namespace {key[1]} of {key[0]} has no block device {DEVICE_TIMEOUT_S:.0f} s after connect",
                "check that the namespace is enabled on the target and see dmesg on the initiator",
            )
    if len(paths) > 1:
        # Without native multipath every path makes a device of its own: two disks that are one namespace.
        shown = nvme.state(host)[1]
        for nqn, nsid in wanted:
            names = sorted(d.name for d in shown if (d.subsysnqn, d.nsid) == (nqn, nsid))
            if len(names) > 1:
                raise ProvisionError(
                    host.name,
                    f"namespace {nsid} of {nqn} shows as {len(names)} devices ({', '.join(names)}), one per path",
                    "turn the kernel's native NVMe multipath on (nvme_core multipath=Y), or set the target's "
                    "paths: first",
                )
    if iopolicy is not None:
        for nqn in export.subsystems:
            _set_iopolicy(host, nqn, iopolicy)
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
    return Connected(devices, discovered)


def _set_iopolicy(host: Host, nqn: str, policy: str) -> None:
    try:
        nvme.set_iopolicy(host, nqn, policy)
    except CommandError as exc:
        raise ProvisionError(
            host.name,
            f"iopolicy {policy} could not be set on {nqn} ({command_tail(exc)})",
            "set the target's nvme.connect.iopolicy to one this kernel has (numa or round-robin; queue-depth from "
            "Linux 6.11), or leave it unset for the kernel's default",
        ) from None


def connect_iscsi(lab: LabModel, model: TargetModel, export: Export, host: Host, undo: UndoStack) -> Connected:
    """Log in over every portal of ``export`` (one session per path). Over several, each LUN is one disk per
    session, and the device used is the dm-multipath map multipathd made of them (:mod:`.dm`)."""
    iface = iface_name(model, export.transport)
    iqn = export.subsystems[0]
    initiator_iqn = lab.hosts[host.name].initiator_iqn
    undo.push(f"delete iface {iface}", partial(iscsi.delete_iface, host, iface))
    try:
        iscsi.ensure_iface(host, iface, export.transport, initiator_iqn)
    except CommandError as exc:
        raise ProvisionError(
            host.name, f"cannot create the open-iscsi iface {iface} ({command_tail(exc)})", "is iscsid running?"
        ) from None
    portals: list[str] = []
    discovered: list[str] = []
    for address in export.addresses:
        portal = iscsi.portal_name(address, export.port)
        undo.push(
            f"delete the node records of {iqn} at {portal}",
            partial(iscsi.delete_records, host, iqn, portal, address, export.port),
        )
        try:
            targets = iscsi.discover(host, address, export.port, iface)
        except CommandError as exc:
            raise ProvisionError(
                host.name,
                f"iSCSI discovery at {portal} failed ({command_tail(exc)})",
                "check that iscsid runs on the initiator and the target's portal is enabled",
            ) from None
        here = list(dict.fromkeys(t.iqn for t in targets))
        discovered += [name for name in here if name not in discovered]
        if iqn not in here:
            raise ProvisionError(
                host.name,
                f"discovery at {portal} does not list {iqn} (it lists: {', '.join(here) or 'nothing'})",
                "check the target IQN and that its TPG is enabled",
            )
        portals.append(next((t.portal for t in targets if t.iqn == iqn and t.portal == portal), portal))
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
    for portal in portals:
        for argv in iscsi.node_updates(iqn, portal, iface, settings):
            try:
                host.run(argv)
            except CommandError as exc:
                raise ProvisionError(
                    host.name,
                    f"cannot set {argv[-3]} of the node record of {iqn} ({command_tail(exc)})",
                    "check the value against open-iscsi's limits (iscsid.conf)",
                ) from None
    chap = model.iscsi.chap if model.iscsi else None
    if chap is not None:
        mutual = (chap.target.user, chap.target.secret.reveal()) if chap.target is not None else None
        auth = iscsi.chap_settings(chap.initiator.user, chap.initiator.secret.reveal(), mutual)
        for portal in portals:
            try:
                iscsi.set_node_settings(host, iqn, portal, iface, auth)
            except CommandError as exc:
                raise ProvisionError(
                    host.name,
                    f"cannot set CHAP in the node record of {iqn} at {portal} ({command_tail(exc)})",
                    "check that iscsiadm runs on the initiator (open-iscsi 2.0.874 or later)",
                ) from None
    multipath = len(portals) > 1
    known = dm.remembered(host) if multipath else set()
    conf = lab.multipath.dm_conf
    if multipath and conf:
        # Before the logins, so that the maps are made with it; removed after the logouts (pushed first).
        undo.push(
            f"remove {dm.conf_path(model.name_prefix)}",
            partial(dm.remove_conf, host, model.name_prefix, dm.DM_CONF_MARK),
        )
        try:
            dm.write_conf(host, model.name_prefix, dm.conf_text(conf, model.name_prefix), dm.DM_CONF_MARK)
        except CommandError as exc:
            raise ProvisionError(
                host.name,
                f"the lab's multipath.dm_conf could not be applied ({command_tail(exc)})",
                f"check the keywords against multipath.conf(5) and that multipathd runs; a file of ours is "
                f"{dm.conf_path(model.name_prefix)}",
            ) from None
    for portal in portals:
        undo.push(f"log out of {iqn} at {portal}", partial(iscsi.logout, host, iqn, portal))
        try:
            iscsi.login(host, iqn, portal, iface)
        except CommandError as exc:
            fix = (
                f"check that the target's ACLs admit {initiator_iqn}"
                if initiator_iqn
                else "check the target's ACLs (demo mode?)"
            )
            if chap is not None:
                fix += f" and that its CHAP matches the lab's (targets[].iscsi.chap, {chap.initiator.user})"
            if export.transport == "iser":
                fix += " and that the portal has iser=1 and both ends have an RDMA link"
            raise ProvisionError(
                host.name,
                f"iSCSI login to {iqn} at {portal} over {export.transport} failed ({command_tail(exc)})",
                fix,
            ) from None
    ours = [s for s in iscsi.sessions(host) if s.iqn == iqn]
    wrong = [s for s in ours if s.transport != export.transport]
    if len(ours) != len(portals) or wrong:
        shown = ", ".join(f"{s.portal} over {s.transport}" for s in ours) or "none"
        raise ProvisionError(
            host.name,
            f"after logging in to {iqn} over {len(portals)} portal(s) over {export.transport}, its sessions are: "
            f"{shown}",
            "check the node's iface.transport_name and the portal's iser attribute",
        )
    luns = [u.address for u in export.units]
    found = iscsi.wait_for_lun_paths(host, iqn, luns, len(portals), DEVICE_TIMEOUT_S)
    for lun in luns:
        if len(found.get(lun, [])) < len(portals):
            raise ProvisionError(
                host.name,
                f"LUN {lun} of {iqn} has {len(found.get(lun, []))} disk(s) over {len(portals)} session(s) "
                f"{DEVICE_TIMEOUT_S:.0f} s after login",
                "load sd_mod on the initiator and check the ACL's mapped LUNs on the target",
            )
    paths: dict[int, str] = {lun: found[lun][0].path for lun in luns}
    if multipath:
        for lun in luns:
            disks = [d.name for d in found[lun]]
            made = dm.wait_for_map(host, disks, DEVICE_TIMEOUT_S)
            if made is None:
                raise ProvisionError(
                    host.name,
                    f"LUN {lun} of {iqn} shows as {len(disks)} disks ({', '.join(disks)}), one per path, and no "
                    f"multipath map holds them {DEVICE_TIMEOUT_S:.0f} s after login",
                    "run multipathd (multipath-tools) with a multipath.conf that maps them (find_multipaths, "
                    "blacklist), check that every path shows the same WWID (the connectivity suite), or set the "
                    "target's paths: first",
                )
            wwid = dm.map_wwid(host, made.node)
            if wwid not in known:
                undo.push(f"forget WWID {wwid} in {dm.WWIDS_FILE}", partial(dm.forget, host, wwid))
            undo.push(f"remove multipath map {made.name}", partial(dm.flush, host, made.name))
            paths[lun] = made.path
    devices = [
        FabricDevice(
            host.name,
            paths[u.address],
            u.backing,
            u.subsystem,
            u.address,
            found[u.address][0].size_bytes,
            found[u.address][0].logical_block_size,
            u.writable,
            u.destructive_ok,
            _loads(lab, export, u.backing),
        )
        for u in export.units
    ]
    return Connected(devices, discovered)


def path_problems(
    host: str, export: Export, controllers: Iterable[nvme.Controller], sessions: Iterable[iscsi.Session]
) -> list[str]:
    """Whether ``host`` reaches every exported subsystem over every path of ``export`` (its portal addresses): one
    live NVMe controller per path and subsystem, or one iSCSI session per path; one sentence per gap."""
    problems = []
    wanted = list(export.addresses)
    for name in export.subsystems:
        if protocol_spec(export.protocol).family == "nvme":
            ours = [c for c in controllers if c.subsysnqn == name]
            reached = sorted(nvme.traddr(c.address) for c in ours if c.state == "live")
            down = [f"{c.name} ({c.state})" for c in ours if c.state != "live"]
            what = "live controller"
        else:
            reached = sorted(s.portal.rsplit(":", 1)[0].strip("[]") for s in sessions if s.iqn == name)
            down, what = [], "session"
        missing = [a for a in wanted if a not in reached]
        if missing or len(reached) != len(wanted):
            problems.append(
                f"{host}: {name} is reached over {len(reached)} path(s) ({', '.join(reached) or 'none'}), the lab "
                f"gives {len(wanted)} ({', '.join(wanted)}): no {what} to {', '.join(missing) or 'a path'}"
                + (f"; not live: {', '.join(down)}" if down else "")
            )
    return problems


# -- what this plugin left on an initiator ----------------------------------------------------------------------


def _nqns(targets: Iterable[TargetModel], saved: Mapping[str, Iterable[str]]) -> set[str]:
    nqns = set()
    for target in targets:
        if target.nvme is None:
            continue
        nqns |= {s.nqn for s in target.nvme.subsystems}
        nqns |= set(saved.get(target.name, ()))
    return nqns


def _iqns(targets: Iterable[TargetModel]) -> set[str]:
    return {t.iscsi.iqn for t in targets if t.iscsi is not None}


def _ifaces(targets: Iterable[TargetModel]) -> set[str]:
    return {iface_name(t, transport) for t in targets if t.iscsi is not None for transport in ("tcp", "iser")}


def initiator_objects(
    lab: LabModel,
    host: Host,
    *,
    target_host: str | None = None,
    saved_nqns: Mapping[str, Iterable[str]] | None = None,
) -> list[tuple[str, Callable[[], None]]]:
    """What this plugin may have left on one initiator: (sentence, undo action).

    ``saved_nqns``: by target name, the NQNs a target exports beyond those the lab file lists (an nvmet target's
    saved nvmetcli configuration). The target side reads them; an initiator knows a portal, not how it was made.

    Without ``target_host``: what any target of the lab may have left (NVMe controllers to its NQNs, iSCSI
    sessions and node records of its IQNs, our iface records): the session-end leftovers gate.

    With ``target_host`` (a target's :attr:`~pytest_fabricqa.lab.model.TargetModel.place`: its host, or an external
    array's address): only what belongs to the targets there, for the clean-up before connecting one of them.
    Under xdist a fabric of another target host may be live in another worker on this very initiator, and its
    controllers, sessions, records and iface look exactly like a killed run's. A name that a target elsewhere
    also uses is left alone too, since it may be that live fabric's: removing a killed run's object late is
    harmless, ending someone's I/O is not. (The lab rules refuse NQNs, IQNs and iface names shared across hosts,
    but not the NQNs of a saved nvmet config, which they do not read, nor in a lab built in code.) The leftovers
    gate still names such an object, and connect's "already connected, not by this run" guard stops a connect to
    it with the command that removes it.
    """
    saved = saved_nqns or {}
    if target_host is None:
        nqns, iqns, ifaces = _nqns(lab.targets, saved), _iqns(lab.targets), _ifaces(lab.targets)
    else:
        here = [t for t in lab.targets if t.place == target_host]
        elsewhere = [t for t in lab.targets if t.place != target_host]
        nqns = _nqns(here, saved) - _nqns(elsewhere, saved)
        iqns = _iqns(here) - _iqns(elsewhere)
        ifaces = _ifaces(here) - _ifaces(elsewhere)
    found: list[tuple[str, Callable[[], None]]] = []
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
    if (iqns or ifaces) and host.run(["sh", "-c", "command -v iscsiadm"], check=False).ok:
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
        for iface in sorted(ifaces):
            if iscsi.iface_exists(host, iface):
                found.append(
                    (f"{host.name}: open-iscsi iface {iface} still there", partial(iscsi.delete_iface, host, iface))
                )
    if lab.multipath.dm_conf:
        scsi = [t for t in lab.targets if t.iscsi is not None]
        prefixes = {t.name_prefix for t in scsi if target_host is None or t.place == target_host}
        if target_host is not None:  # a prefix shared with a target elsewhere may be that live fabric's
            prefixes -= {t.name_prefix for t in scsi if t.place != target_host}
        for prefix in sorted(prefixes):
            if dm.has_conf(host, prefix, dm.DM_CONF_MARK):
                found.append(
                    (
                        f"{host.name}: multipath configuration {dm.conf_path(prefix)} (the lab's dm_conf) still there",
                        partial(dm.remove_conf, host, prefix, dm.DM_CONF_MARK),
                    )
                )
    return found
