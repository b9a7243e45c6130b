"""A killed run's faults: every record of a fault not restored yet, listed for the leftovers gate
(:func:`leftover_faults`) and restored from its record at the next start (:func:`restore_stale`, run by
:func:`pytest_fabricqa.fabric.provision.cleanup_stale`). :data:`REGISTRY` knows every kind of record: the faults of
:mod:`~pytest_fabricqa.faults.inject` and of :mod:`~pytest_fabricqa.faults.restart`, and the access check's tries of
:mod:`~pytest_fabricqa.faults.identity`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_fabricqa.core.commands import command_tail
from pytest_fabricqa.faults import identity, restart
from pytest_fabricqa.faults.inject import (
    AnaStateChange,
    FaultError,
    LinkDown,
    LinkDrop,
    LioAluaChange,
    LioPortalDown,
    NvmetPortDown,
    PathTimeouts,
    SessionRelogin,
    SpdkAnaChange,
    SpdkListenerDown,
    _owner_text,
    _RecordedFault,
    _records,
    of_lab,
    records_path,
    whose,
)
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

REGISTRY: dict[str, Callable[[LabModel, Host, str, Mapping[str, Any]], _RecordedFault]] = {
    LinkDown.kind: LinkDown.from_record,
    LinkDrop.kind: LinkDrop.from_record,
    NvmetPortDown.kind: NvmetPortDown.from_record,
    AnaStateChange.kind: AnaStateChange.from_record,
    LioPortalDown.kind: LioPortalDown.from_record,
    LioAluaChange.kind: LioAluaChange.from_record,
    SpdkListenerDown.kind: SpdkListenerDown.from_record,
    SpdkAnaChange.kind: SpdkAnaChange.from_record,
    PathTimeouts.kind: PathTimeouts.from_record,
    SessionRelogin.kind: SessionRelogin.from_record,
    identity.UnlistedIdentity.kind: identity.UnlistedIdentity.from_record,
    restart.LioTargetOff.kind: restart.LioTargetOff.from_record,
    restart.ScstTargetOff.kind: restart.ScstTargetOff.from_record,
    restart.TgtTargetOff.kind: restart.TgtTargetOff.from_record,
    restart.SpdkAppRestart.kind: restart.SpdkAppRestart.from_record,
}
"""Record kind -> how to rebuild the fault from its record (for :func:`restore_stale`)."""


def _prefixes(lab: LabModel, target_host: str | None = None) -> list[str]:
    return list(dict.fromkeys(t.name_prefix for t in lab.targets if target_host in (None, t.place)))


def _lab_hosts(lab: LabModel, hosts: Mapping[str, Host], target_host: str | None = None) -> list[Host]:
    names = [n for n in lab.hosts if target_host in (None, n) or n in lab.hosts_with("initiator")]
    return [hosts[name] for name in names if name in hosts]


def leftover_faults(lab: LabModel, hosts: Mapping[str, Host]) -> list[str]:
    """Every fault record still on a lab host (a fault not restored yet), one sentence each."""
    found: list[str] = []
    for host in _lab_hosts(lab, hosts):
        for prefix in _prefixes(lab):
            path = records_path(prefix)
            try:
                records = _records(host, path)
            except Exception as exc:  # an unverified host is not a clean one
                found.append(f"{host.name}: could not be checked for fault records ({command_tail(exc)})")
                continue
            for record in records.values():
                found.append(
                    f"{host.name}: fault '{record.get('what', '?')}' by {_owner_text(record.get('owner'))} is not "
                    f"restored (record in {path}; restore: {record.get('restore', '?')})"
                )
    return found


def restore_stale(lab: LabModel, hosts: Mapping[str, Host], *, target_host: str | None = None) -> list[str]:
    """Restore every fault a killed run left, from its record; one sentence per restore.

    A record whose run still runs on this machine (this process, another xdist worker) is live, not stale: left to
    its own undo. With ``target_host`` (a target's ``place``, as :func:`pytest_fabricqa.fabric.provision.cleanup_stale`
    gets it), only the records of that place's targets' name prefixes, on the initiators and that host. A record
    that cannot be restored raises a :class:`FaultError` after every other was tried.
    """
    restored: list[str] = []
    failures: list[FaultError] = []
    prefixes = _prefixes(lab, target_host)
    # Every connect_fabric asks this of every host: read them at once (one round trip, not one per host).
    places = _lab_hosts(lab, hosts, target_host)
    found = each(
        places,
        lambda host: [(p, _records(host, records_path(p))) for p in prefixes],
        check=False,
    )
    for host in places:
        listing = found[host.name]
        if isinstance(listing, BaseException):
            raise listing  # as a read on its own would have
        for prefix, records in listing:
            for key, record in records.items():
                owner = whose(record, lab.name)
                if owner == "live":
                    continue
                if owner == "other lab":
                    restored.append(
                        f"{host.name}: left {_owner_text(record.get('owner'))}'s fault '{record.get('what', key)}' "
                        f"alone (its record in {records_path(prefix)})"
                    )
                    continue
                rebuild = REGISTRY.get(str(record.get("kind")))
                what = record.get("what", key)
                try:
                    if rebuild is None:
                        raise FaultError(
                            host.name,
                            f"fault record {key} has an unknown kind {record.get('kind')!r}",
                            f"restore it by hand ({record.get('restore', '?')}) and remove it from "
                            f"{records_path(prefix)}",
                        )
                    of_lab(lab, rebuild(lab, host, prefix, record)).restore()
                except FaultError as exc:
                    failures.append(exc)
                    continue
                except (KeyError, TypeError, ValueError):
                    failures.append(
                        FaultError(
                            host.name,
                            f"fault record {key} in {records_path(prefix)} is incomplete",
                            f"restore it by hand ({record.get('restore', '?')}) and remove the record",
                        )
                    )
                    continue
                restored.append(
                    f"{host.name}: restored '{what}' that {_owner_text(record.get('owner'))} left "
                    f"({record.get('restore', '?')})"
                )
    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        first = failures[0]
        raise FaultError(first.host, f"{first.what}{more}", first.fix)
    return restored
