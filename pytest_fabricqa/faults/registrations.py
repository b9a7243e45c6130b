"""The reservation keys a run registers, recorded on the initiator before each is sent, and swept after a killed run.

A cluster's fencing test leaves a registration, and often a reservation, on the disk until it unregisters. Its
undo does that when the run ends; a SIGKILL skips the undo. A target this plugin provisions takes the keys away
with its LUN or namespace at the next start, but an external array keeps them: the next run's register meets its
own old key, and every other write meets a reservation conflict. So each key is written to a record on the host
that registers it (``/run/fabricqa/<name_prefix>-reservations.json``, under the fault records' lock, with its
owner: lab, controller, pid) *before* the command is sent (:meth:`KeyLedger.add`), and dropped once the target no
longer lists it (:meth:`KeyLedger.drop`).

At the next start :func:`sweep_stale` (run by :func:`pytest_fabricqa.fabric.provision.cleanup_stale` right after the
killed run's faults are restored, while its initiators are still connected) unregisters each key a dead owner of
this lab recorded, from the host and device it was registered on, and checks the target no longer lists it. Only
recorded keys are touched: a registration someone else made (a cluster's, a person's) is never unregistered, and a
record of another lab's run is left alone and named. :func:`leftover_keys` names every record still there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from pytest_fabricqa.core.commands import command_tail
from pytest_fabricqa.faults.inject import (
    FaultError,
    _owner,
    _owner_text,
    records_locked,
    whose,
)
from pytest_fabricqa.initiators.reservations import driver_for
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.targets import remote
from pytest_fabricqa.transport.base import CommandError, Host
from pytest_fabricqa.transport.fanout import each

STATE_KIND = "reservations"


def keys_path(name_prefix: str) -> str:
    """Where an initiator keeps the records of the keys it registered with the targets of ``name_prefix``:
    /run/fabricqa/<prefix>-reservations.json (a tmpfs: a reboot forgets them, and the registrations of a target
    that does not persist them through power loss go with it)."""
    return remote.state_path(name_prefix, STATE_KIND)


def _read(host: Host, path: str) -> dict[str, dict[str, Any]]:
    state = remote.read_state(host, path) or {}
    keys = state.get("keys")
    return {k: v for k, v in keys.items() if isinstance(v, dict)} if isinstance(keys, dict) else {}


def _update(host: Host, path: str, change: Callable[[dict[str, dict[str, Any]]], object]) -> None:
    # The fault records' lock of the host (one per state folder): two sessions never lose each other's record.
    with records_locked(host, path):
        keys = _read(host, path)
        change(keys)
        if keys:
            remote.write_state(host, path, {"kind": STATE_KIND, "keys": keys})
        else:
            remote.remove_state(host, path)


def _forget(entry: str, keys: dict[str, dict[str, Any]]) -> None:
    keys.pop(entry, None)


def _entry(device: str, key: int) -> str:
    return f"{device}@{key:#x}"


@dataclass
class KeyLedger:
    """The records of one fabric's reservation keys: target ``target`` (its ``name_prefix`` names the records
    file), the protocol ``family`` (``scsi`` or ``nvme``) and the NVMe namespace id ``nsid``, as the sweep needs
    them to unregister."""

    lab: str
    name_prefix: str
    target: str
    family: str
    nsid: int

    @property
    def path(self) -> str:
        return keys_path(self.name_prefix)

    def add(self, host: Host, device: str, key: int) -> None:
        """Record ``key`` on ``host`` before it is registered over ``device``."""
        record = {
            "key": key,
            "device": device,
            "family": self.family,
            "nsid": self.nsid,
            "target": self.target,
            "what": f"reservation key {key:#x} on {device}",
            "owner": _owner(self.lab),
        }
        _update(host, self.path, lambda keys: keys.__setitem__(_entry(device, key), record))

    def drop(self, host: Host, device: str, key: int) -> None:
        """Forget ``key`` once the target no longer lists it."""
        _update(host, self.path, partial(_forget, _entry(device, key)))


class DeviceGone(FaultError):
    """The device a key was registered over is no longer on the host."""


def unregister_recorded(host: Host, record: Mapping[str, Any]) -> str:
    """Unregister a recorded key from the host and device it was registered on, when the target still lists it;
    raise :class:`FaultError` when it cannot, or when the target lists it after. A sentence saying what was done."""
    key, device = int(record["key"]), str(record["device"])
    driver = driver_for(str(record["family"]), int(record.get("nsid", 0)))
    fix = f"unregister it by hand from {host.name} (the key is {key:#x}) and remove its record from the host's /run/fabricqa"
    try:
        if not remote.is_block_device(host, device):
            raise DeviceGone(host.name, f"cannot unregister reservation key {key:#x}: {device} is gone", fix)
        if key not in driver.report(host, device).keys:
            return f"{host.name}: reservation key {key:#x} on {device} was already gone"
        driver.unregister(host, device, key)
        left = driver.report(host, device)
    except CommandError as exc:
        raise FaultError(
            host.name, f"cannot unregister reservation key {key:#x} on {device} ({command_tail(exc)})", fix
        ) from None
    except ValueError as exc:
        raise FaultError(host.name, f"cannot read the reservations of {device} ({exc})", fix) from None
    if key in left.keys:
        raise FaultError(
            host.name, f"reservation key {key:#x} on {device} is still registered after unregistering it", fix
        )
    return f"{host.name}: unregistered reservation key {key:#x} on {device}"


def _prefixes(lab: LabModel, target_host: str | None) -> dict[str, str]:
    """name_prefix -> target kind, for the targets at ``target_host`` (every target when None)."""
    return {t.name_prefix: t.kind for t in lab.targets if target_host in (None, t.place)}


def _records_of(host: Host, prefixes: Mapping[str, str]) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """(name_prefix, its key records) for each prefix with records on ``host`` (one read per name prefix, as the
    fault records: the targets of one host share theirs)."""
    return [(prefix, records) for prefix in prefixes if (records := _read(host, keys_path(prefix)))]


def _initiators(lab: LabModel, hosts: Mapping[str, Host]) -> list[Host]:
    return [hosts[n] for n in lab.hosts_with("initiator") if n in hosts]


def sweep_stale(lab: LabModel, hosts: Mapping[str, Host], *, target_host: str | None = None) -> list[str]:
    """Unregister every key a killed run of this lab recorded (see the module); one sentence each. A key whose
    device is gone on a target the plugin provisions went with the target's clean-up (its LUN or namespace, and
    the registrations on it, are made again); on an external array it is an error. Raises the first
    :class:`FaultError` after every record was tried."""
    prefixes = _prefixes(lab, target_host)
    initiators = _initiators(lab, hosts)
    found = each(initiators, lambda host: _records_of(host, prefixes), check=False)
    done: list[str] = []
    failures: list[FaultError] = []
    for host in initiators:
        listing = found[host.name]
        if isinstance(listing, BaseException):
            raise listing
        for prefix, records in listing:
            for entry, record in records.items():
                owner = record.get("owner")
                kind = whose(record, lab.name)
                if kind == "live":
                    continue
                if kind == "other lab":
                    done.append(
                        f"{host.name}: left {_owner_text(owner)}'s reservation key record '{record.get('what', entry)}' "
                        f"alone (in {keys_path(prefix)})"
                    )
                    continue
                try:
                    said = unregister_recorded(host, record)
                except DeviceGone as exc:
                    if prefixes[prefix] == "external":
                        failures.append(exc)
                        continue
                    said = (
                        f"{host.name}: reservation key {record.get('key', 0):#x}'s device {record.get('device')} is "
                        "gone (the target's clean-up makes its LUN or namespace again, without the key)"
                    )
                except FaultError as exc:
                    failures.append(exc)
                    continue
                except (KeyError, TypeError, ValueError):
                    failures.append(
                        FaultError(
                            host.name,
                            f"reservation key record {entry} in {keys_path(prefix)} is incomplete",
                            "unregister the key by hand and remove the record",
                        )
                    )
                    continue
                _update(host, keys_path(prefix), partial(_forget, entry))
                done.append(f"{said} that {_owner_text(owner)} left")
    if failures:
        raise failures[0]
    return done


def leftover_keys(lab: LabModel, hosts: Mapping[str, Host]) -> list[str]:
    """Every reservation key record still on an initiator of the lab, one sentence each."""
    found: list[str] = []
    prefixes = _prefixes(lab, None)
    for host in _initiators(lab, hosts):
        try:
            listing = _records_of(host, prefixes)
        except Exception as exc:  # an unverified host is not a clean one
            found.append(f"{host.name}: could not be checked for reservation key records ({command_tail(exc)})")
            continue
        for prefix, records in listing:
            for record in records.values():
                found.append(
                    f"{host.name}: {record.get('what', 'a reservation key')} by {_owner_text(record.get('owner'))} "
                    f"is still recorded (in {keys_path(prefix)}; unregister it, or the next run of the lab does)"
                )
    return found
