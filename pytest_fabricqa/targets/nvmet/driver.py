"""The nvmet driver: provisions a plan through configfs, every step's undo registered first; cleans and reports leftovers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Any

from pytest_fabricqa.core.export import Export, ExportedUnit
from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.targets import remote
from pytest_fabricqa.targets.base import mark_number
from pytest_fabricqa.targets.configfs import ConfigfsTarget
from pytest_fabricqa.targets.nvmet.declared import plan_from_lab
from pytest_fabricqa.targets.nvmet.plan import NvmetPlan, NvmetPort, NvmetSubsystem, check_nqn
from pytest_fabricqa.targets.nvmet.saved import SavedConfigError, dump_saved_config
from pytest_fabricqa.targets.nvmet.snapshot import (
    SNAPSHOT_SCRIPT,
    NvmetSnapshot,
    parse_snapshot,
    port_conflict,
    remove_port,
    remove_subsystem,
)
from pytest_fabricqa.transport.base import Host

ROOT = "/sys/kernel/config/nvmet"
MAX_MODEL = 40  # NVMe Identify Controller MN is 40 bytes
# Port IDs are 16-bit; ours are derived from the mark in this range (nvmetcli numbers from 1 up).
PORT_IDS = (10_000, 65_535)
PORT_TRIES = 16


class NvmetTarget(ConfigfsTarget):
    """Kernel nvmet on a lab host, driven through configfs over the host's transport."""

    kind = "nvmet"

    def __init__(self, lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> None:
        assert model.nvme is not None
        super().__init__(lab, model, hosts)
        self.mark = model.name_prefix[:MAX_MODEL]
        self.last_plan: NvmetPlan | None = None
        self.last_portids: dict[int, int] = {}

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
        spec = protocol_spec(protocol)
        trtype = spec.transport
        if spec.family != "nvme":
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
            # The mark each subsystem will carry (its attr_model: the lab's mark unless the saved configuration
            # sets one): a recorded subsystem is ours only while it carries it.
            "marks": {s.nqn: dict(s.attrs).get("model", self.mark) for s in plan.subsystems},
            "ports": sorted(portids.values()),
            "hosts": new_hosts,
        }
        # Recorded before anything exists: a run killed from here on leaves a list the next run cleans up.
        undo.push(f"remove {self.state_file}", self._remove_state_if_clean)
        self._write_state(state)
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
        more = tuple(p.traddr for p in plan.ports[1:] if p.trtype == port.trtype and p.trsvcid == port.trsvcid)
        return Export(protocol, trtype, port.traddr, port.trsvcid, units, self.host.name, more_addresses=more)

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
                self._refuse_busy_port(port.trsvcid, "nvme.port")

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
            self._write_state(state)
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
        """Ours, checked twice: recorded in this lab's state file *and* carrying our mark.

        - a subsystem: recorded, and its ``attr_model`` is the mark the record gives it (a kernel without
          ``attr_model`` shows none: the record alone then);
        - a port: recorded, and every subsystem it exports is ours (a port exporting another's subsystem is theirs
          too: removing it would cut their paths);
        - a host entry: recorded, and no subsystem of another allows it.
        """
        state = self._read_state()
        recorded = state or {}
        subsystems = [
            s for s in recorded.get("subsystems", []) if s in snap.subsystems and self._marked(snap, s, recorded)
        ]
        ports = [
            int(p)
            for p in recorded.get("ports", [])
            if int(p) in snap.ports and all(n in subsystems for n in snap.ports[int(p)]["subsystems"])
        ]
        allowed_by_others = {
            h for nqn, sub in snap.subsystems.items() if nqn not in subsystems for h in sub["allowed_hosts"]
        }
        hosts = [h for h in recorded.get("hosts", []) if h in snap.hosts and h not in allowed_by_others]
        return ports, subsystems, hosts, state is not None

    def _marked(self, snap: NvmetSnapshot, nqn: str, recorded: Mapping[str, Any]) -> bool:
        model = snap.model_of(nqn)
        marks = recorded.get("marks")
        mark = marks.get(nqn, self.mark) if isinstance(marks, dict) else self.mark
        return model in ("", mark)

    def _left_alone(self, snap: NvmetSnapshot, ours: list[str]) -> list[str]:
        """One sentence per subsystem that is half ours: recorded but not marked, or marked but not recorded."""
        recorded = self._read_state() or {}
        lines = [
            f"{self.host.name}: left nvmet subsystem {nqn} alone: this lab's record lists it, but its model is "
            f"{snap.model_of(nqn)!r}, not the lab's mark (another session or tool made it since)"
            for nqn in recorded.get("subsystems", [])
            if nqn in snap.subsystems and nqn not in ours
        ]
        lines += [
            f"{self.host.name}: left nvmet subsystem {nqn} alone: it carries this lab's mark ({self.mark!r}) but no "
            f"record of this lab lists it (remove it by hand if it is yours)"
            for nqn in snap.subsystems
            if nqn not in ours
            and nqn not in recorded.get("subsystems", [])
            and self.mark
            and snap.model_of(nqn) == self.mark
        ]
        return lines

    def cleanup_stale(self) -> list[str]:
        """Remove the ports, subsystems and host entries an earlier run recorded that are still ours (:meth:`_ours`),
        name those left alone, then drop its state file."""
        snap = self.snapshot()
        if not snap.loaded:
            return self._drop_stale_state(self._read_state() is not None)
        ports, subsystems, hosts, has_state = self._ours(snap)
        removed: list[str] = self._left_alone(snap, subsystems)
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
        return removed + self._drop_stale_state(has_state)

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
