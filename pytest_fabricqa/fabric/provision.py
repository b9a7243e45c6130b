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
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial

from pytest_fabricqa.core.commands import command_tail
from pytest_fabricqa.core.export import Export
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.fabric import lock
from pytest_fabricqa.fabric.queues import read_queues
from pytest_fabricqa.faults.registrations import leftover_keys, sweep_stale
from pytest_fabricqa.faults.stale import leftover_faults, restore_stale
from pytest_fabricqa.initiators import iscsi
from pytest_fabricqa.initiators.connect import Connected, FabricDevice, connect_one, initiator_objects
from pytest_fabricqa.lab.model import LabModel, TargetModel, iface_name
from pytest_fabricqa.targets import load_target, remote
from pytest_fabricqa.targets.base import Target
from pytest_fabricqa.targets.configfs import ConfigfsTarget
from pytest_fabricqa.targets.nvmet import SavedConfigError, load_saved_config
from pytest_fabricqa.transport.base import CommandError, Host
from pytest_fabricqa.transport.fanout import each

__all__ = ["Fabric", "FabricDevice", "ProvisionError", "cleanup_stale", "connect_fabric", "leftovers"]


# Targets with a live Fabric in this process: two fabrics on one target would share NQNs/IQNs and undo each other.
_LIVE: dict[str, str] = {}
_LIVE_LOCK = threading.Lock()


class Fabric:
    """A provisioned target and every initiator connected to it, for one protocol."""

    target: str
    """The lab's name of the target (``targets[].name``)."""

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
        self.target = export.target or lab.target_for(protocol).name
        self.export = export
        self.devices = devices
        self.discovered = discovered
        self.queues: dict[str, dict[str, int]] = {}
        """Queue settings per host as read back once the fabric was up (:func:`pytest_fabricqa.fabric.queues.read_queues`)."""
        self.setup_seconds = setup_seconds
        self.teardown_seconds: float | None = None
        self.connected = True
        """False once :meth:`teardown` ran, or an initiator failed to disconnect or connect again (until
        :meth:`reconnect`)."""
        self.stale_removed = stale_removed
        self._undo = undo
        self._live_key = live_key
        self._initiator_stacks: dict[str, UndoStack] = {}
        """Each initiator's own undo stack; the target's stack unwinds this very dict (see connect_fabric)."""
        self._target_model = lab.target_for(protocol, export.target)
        """The lab's target this fabric serves (connect_fabric sets the one it provisioned)."""
        self._live_what = f"{protocol} fabric of target {self.target}"
        self._app_log: Callable[[], tuple[str, str] | None] | None = None
        """The target driver's reader of its own app's log (``app_log``), for a target kind that has one."""

    def target_log(self) -> tuple[str, str] | None:
        """``(title, text)``: the newest lines of the log of the target app this plugin started for the fabric
        (SPDK's nvmf_tgt), shown with a failed case; None for a kernel target, an app it attached to, or a log that
        cannot be read. Never raises."""
        if self._app_log is None:
            return None
        try:
            return self._app_log()
        except Exception:  # a diagnostic: never the reason a report fails
            return None

    def __repr__(self) -> str:
        return f"Fabric({self.protocol}, {self.target}, {len(self.devices)} devices on {sorted(self.discovered)})"

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
        fresh = connect_fabric(self.lab, self.protocol, self.hosts, target=self.target)
        self.__dict__.update(fresh.__dict__)

    def disconnect_initiators(self, names: Iterable[str] | None = None) -> None:
        """Log out/disconnect ``names`` (default: every initiator), the target staying as it is; their devices leave
        :attr:`devices`. Raises :class:`ProvisionError` naming the first initiator that could not let go; the
        fabric is then half gone and :attr:`connected` turns False, so the ``fabric`` fixture provisions it anew
        for the next case instead of handing out a fabric without those devices."""
        wanted = list(self._initiator_stacks) if names is None else list(names)
        self._known(wanted)
        results = each([self.hosts[n] for n in wanted], lambda host: self._initiator_stacks[host.name].unwind())
        self.devices = [d for d in self.devices if d.initiator not in wanted]
        for name, result in results.items():
            if isinstance(result, list) and result:
                self.connected = False
                raise ProvisionError(name, f"disconnecting from the {self.protocol} target failed: {result[0]}", "")

    def connect_initiators(self, names: Iterable[str] | None = None) -> None:
        """Connect ``names`` (default: every initiator not connected) to the target again, in parallel, as
        :func:`connect_fabric` did; their devices (whose paths may differ now) join :attr:`devices`. An initiator
        that could not connect raises, and :attr:`connected` turns False (see :meth:`disconnect_initiators`)."""
        connected_now = {d.initiator for d in self.devices}
        order = self.lab.hosts_with("initiator")
        wanted = [n for n in order if n not in connected_now] if names is None else list(names)
        self._known(wanted)
        model = self._target_model
        for name in wanted:
            self._initiator_stacks[name] = UndoStack()
        results = each(
            [self.hosts[n] for n in wanted],
            lambda host: connect_one(self.lab, model, self.export, host, self._initiator_stacks[host.name]),
            check=False,
        )
        failed = [r for r in results.values() if isinstance(r, BaseException)]
        for name, result in results.items():
            if isinstance(result, Connected):
                self.devices.extend(result.devices)
                self.discovered[name] = result.discovered
        self.devices.sort(key=lambda d: order.index(d.initiator) if d.initiator in order else len(order))
        if failed:
            self.connected = False
            raise _one_line(failed)

    def reconnect_initiators(self, names: Iterable[str] | None = None) -> None:
        """The fabric gone and back for ``names`` (default: every initiator): each logs out/disconnects, then
        connects again; the target and what it stores are untouched. Devices are found anew (paths may change)."""
        wanted = list(self._initiator_stacks) if names is None else list(names)
        self.disconnect_initiators(wanted)
        self.connect_initiators(wanted)

    def _known(self, names: list[str]) -> None:
        for name in names:
            if name not in self._initiator_stacks:
                known = ", ".join(self._initiator_stacks) or "none"
                raise KeyError(f"{name!r} is not an initiator of this fabric (initiators: {known})")

    def teardown(self) -> None:
        """Log out/disconnect every initiator, then remove every target object this fabric made (idempotent).

        Every undo runs even when some fail; failures are raised together afterwards as one ProvisionError.
        """
        t0 = time.monotonic()
        self.connected = False
        errors = self._undo.unwind()
        if self.teardown_seconds is None or errors:
            self.teardown_seconds = round(time.monotonic() - t0, 2)
        with _LIVE_LOCK:
            if _LIVE.get(self._live_key) == self._live_what:
                del _LIVE[self._live_key]
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise ProvisionError(
                self.export.target_host or self.export.address,
                f"teardown of the {self.protocol} fabric of target {self.target} failed: {errors[0]}{more}",
                "the next connect_fabric removes what is left; leftovers() lists it",
            )


# -- connect --------------------------------------------------------------------------------------------------


def connect_fabric(lab: LabModel, protocol: str, hosts: Mapping[str, Host], *, target: str | None = None) -> Fabric:
    """Clean stale objects from a killed earlier run, provision the target ``target`` (by name; default: the first
    serving ``protocol``), export it, connect EVERY initiator (``lab.hosts_with('initiator')``) in parallel and
    find each device. One fabric per target host at a time: its targets share devices and portals (LIO, SCST
    and tgt all listen on 3260), so a second one is refused until the first is torn down.

    Every step registers its undo before it runs; on any failure (or Ctrl-C) everything done so far is undone
    and a :class:`ProvisionError` is raised whose message is one line: host, what failed, how to fix.
    """
    t0 = time.monotonic()
    model = lab.target_for(protocol, target)
    initiators = lab.hosts_with("initiator")
    if not initiators:
        raise ProvisionError(lab.name, "the lab has no host with the initiator role", "add roles: [initiator]")
    for name in [*initiators, *([model.host] if model.host else [])]:
        if name not in hosts:
            raise ProvisionError(name, "no transport for this lab host", "pass every lab host in `hosts`")
    driver = load_target(lab, model, hosts)
    live_key = model.place or lab.name
    what = f"{protocol} fabric of target {model.name}"
    with _LIVE_LOCK:
        if live_key in _LIVE:
            raise ProvisionError(
                live_key,
                f"the {_LIVE[live_key]} is still connected on this host",
                f"tear it down (fabric.teardown()) before connecting the {what}",
            )
        _LIVE[live_key] = what
    undo = UndoStack()
    try:
        if model.host is not None:
            _take_target_lock(lab, model, hosts[model.host], undo)
        stale = cleanup_stale(lab, hosts, target_host=live_key)
        export = replace(driver.provision(protocol, undo), target=model.name)
        stacks = {name: UndoStack() for name in initiators}
        undo.push("disconnect the initiators", partial(_unwind_initiators, stacks, hosts))
        results = each(
            [hosts[name] for name in initiators],
            lambda host: connect_one(lab, model, export, host, stacks[host.name]),
            check=False,
        )
        failed = [r for r in results.values() if isinstance(r, BaseException)]
        if failed:
            raise _one_line(failed)
        connected = {name: r for name, r in results.items() if isinstance(r, Connected)}
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
    fabric._initiator_stacks = stacks
    fabric._target_model = model
    fabric._app_log = getattr(driver, "app_log", None)
    fabric.queues = read_queues(
        [hosts[name] for name in initiators],
        hosts[model.host] if model.host else None,
        protocol=protocol,
        subsystems=export.subsystems,
        portal=iscsi.portal_name(export.address, export.port),
        iface=iface_name(model, export.transport),
        target_kind=model.kind,
    )
    # A target kind whose queue limits live behind its own interface (SPDK's transport) reads them itself.
    reader = getattr(driver, "queue_settings", None)
    if reader is not None and model.host is not None:
        values = reader(protocol)
        if values:
            fabric.queues.setdefault(model.host, {}).update(values)
    return fabric


def _take_target_lock(lab: LabModel, model: TargetModel, host: Host, undo: UndoStack) -> None:
    """Hold the lock of ``model``'s kind on its host while the fabric lives (given back by ``undo``): while another
    live process holds it (another lab's session, or a script driving the same kind there), this one is refused with
    one line naming that process (:mod:`pytest_fabricqa.fabric.lock`)."""
    holder = lock.me(lab.name, os.getpid())
    undo.push(
        f"give back the {model.kind} lock on {host.name}", partial(lock.give_back_target, host, model.kind, holder)
    )
    lock.take_target(host, model.kind, holder)


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


def _target_drivers(lab: LabModel, hosts: Mapping[str, Host], target_host: str | None = None) -> list[Target]:
    from pytest_fabricqa.core.kinds import REGISTRY

    drivers: list[Target] = []
    for model in lab.targets:
        kind = REGISTRY.get(model.kind)
        if model.host is None or kind is None or kind.driver is None or model.host not in hosts:
            continue
        if target_host is not None and model.host != target_host:
            continue  # another target host may be live in another xdist worker
        drivers.append(load_target(lab, model, hosts))
    return drivers


def cleanup_stale(lab: LabModel, hosts: Mapping[str, Host], *, target_host: str | None = None) -> list[str]:
    """Remove what a killed earlier run left (only objects carrying our mark); return what was removed.

    First the faults a killed run left injected (:func:`~pytest_fabricqa.faults.stale.restore_stale`: a storage link left
    down would make every clean-up command on that path fail), then the initiators (controllers, sessions, node
    records, our iface), then every target of the lab. With
    ``target_host`` (what :func:`connect_fabric` is about to connect: a target's ``place``), only what belongs to
    the targets there, on both sides: every target of that host, since they take turns on it, and on the
    initiators only their NQNs, IQNs and iface names, never one that a target elsewhere also uses -- under xdist
    another worker's fabric of another target host may be live on the same initiators
    (:func:`~pytest_fabricqa.initiators.connect.initiator_objects` says why shared names stay).
    """
    removed: list[str] = restore_stale(lab, hosts, target_host=target_host)
    # A killed run's reservation keys, unregistered through its initiators while they are still connected.
    removed += sweep_stale(lab, hosts, target_host=target_host)
    initiators = [hosts[n] for n in lab.hosts_with("initiator") if n in hosts]

    def clean(host: Host) -> list[str]:
        done = []
        for sentence, action in initiator_objects(lab, host, target_host=target_host, saved_nqns=saved_nqns(lab)):
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
    drivers = _target_drivers(lab, hosts, target_host)
    for driver in drivers:
        try:
            removed += driver.cleanup_stale()
        except CommandError as exc:
            raise ProvisionError(
                exc.result.host,
                f"cannot clean what an earlier run left ({command_tail(exc)})",
                "check the target by hand",
            ) from None
    # Another lab's records on these target hosts: its objects are its own, named here and never touched.
    target_hosts = {d.host.name: d.host for d in drivers if isinstance(d, ConfigfsTarget)}
    for host in target_hosts.values():
        removed += [
            f"{host.name}: left lab {other!r}'s objects alone (its record {path})"
            for path, other in remote.other_labs_records(host, lab.name)
        ]
    return removed


def leftovers(lab: LabModel, hosts: Mapping[str, Host]) -> list[str]:
    """Objects this plugin creates (configfs entries, controllers, sessions) and faults it injected still present,
    one sentence each.

    A host that cannot be checked is reported too: an unverified host is not a clean one.
    """
    found: list[str] = leftover_faults(lab, hosts) + leftover_keys(lab, hosts)
    initiators = [hosts[n] for n in lab.hosts_with("initiator") if n in hosts]
    saved = saved_nqns(lab)
    results = each(initiators, lambda host: [s for s, _ in initiator_objects(lab, host, saved_nqns=saved)], check=False)
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


def saved_nqns(lab: LabModel) -> dict[str, set[str]]:
    """By target name, the NQNs an nvmet target's saved nvmetcli configuration exports: the initiators' clean-up
    looks for controllers to them too. A broken file fails loudly in provisioning, not here."""
    found: dict[str, set[str]] = {}
    for target in lab.targets:
        if target.nvme is None or target.nvme.saved_config is None:
            continue
        with contextlib.suppress(SavedConfigError):
            found[target.name] = {s.nqn for s in load_saved_config(target.nvme.saved_config, target).subsystems}
    return found
