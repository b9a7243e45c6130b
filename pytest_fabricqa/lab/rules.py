"""Lab-file rules across sections: mistakes each key's own validation cannot see, caught at load time.

Every rule here guards something that would otherwise fail late -- at provisioning, at connect, or in the middle
of a run: the same NQN or IQN twice, a protocol no initiator or no target of the right kind can run, a target on
a host without the target role, an ACL that shuts out the lab's own initiators, a device exported twice, Oracle
settings that name nothing, a CHAP secret that cannot be read or that others can read. :func:`check_lab` raises :class:`~pytest_fabricqa.lab.model.LabError` with one line: the
file, the line, the key, what is wrong and how to fix it (plugin.py turns it into a usage error, exit 4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from pytest_fabricqa.core.kinds import REGISTRY, kinds_serving
from pytest_fabricqa.lab.model import IscsiChap, LabError, LabModel, iface_name, nqn_problem

Key = tuple[str, ...]


def check_lab(lab: LabModel, path: Path, lines: Mapping[Key, int] | None = None) -> None:
    """Raise :class:`LabError` for the first rule ``lab`` breaks (and say how many more there are)."""
    problems = list(lab_problems(lab))
    if not problems:
        return
    key, text = problems[0]
    line = _line(lines or {}, key)
    more = len(problems) - 1
    also = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    raise LabError(f"{path}{f':{line}' if line else ''}: {_dotted(key)}: {text}{also}")


def lab_problems(lab: LabModel) -> Iterator[tuple[Key, str]]:
    """Every broken rule as (key path, "what is wrong; how to fix it"), in file order."""
    yield from _target_rules(lab)
    yield from _name_rules(lab)
    yield from _protocol_rules(lab)
    yield from _access_rules(lab)
    yield from _database_rules(lab)
    yield from _path_rules(lab)


def _path_rules(lab: LabModel) -> Iterator[tuple[Key, str]]:
    expected = lab.multipath.nvme.iopolicy
    for i, target in enumerate(lab.targets):
        wanted = target.nvme.connect.iopolicy if target.nvme is not None else None
        if wanted is not None and expected is not None and wanted != expected:
            yield (
                ("targets", str(i), "nvme", "connect", "iopolicy"),
                f"sets {wanted} on every initiator, and multipath.nvme.iopolicy expects {expected} there; "
                "make them agree, or leave multipath.nvme.iopolicy unset",
            )
        if target.paths == "all" and target.kind not in ("nvmet", "spdk", "lio", "scst", "tgt"):
            yield (
                ("targets", str(i), "paths"),
                f"paths: all (every storage port a path) is built for the targets fabricqa provisions (nvmet, spdk, "
                f"lio, scst, tgt), not {target.kind}; use paths: first",
            )


def _target_rules(lab: LabModel) -> Iterator[tuple[Key, str]]:
    for i, target in enumerate(lab.targets):
        at: Key = ("targets", str(i))
        if target.host is not None and target.host in lab.hosts and "target" not in lab.hosts[target.host].roles:
            yield (
                (*at, "host"),
                f"host {target.host!r} runs a {target.kind} target but does not have the target role; "
                f"add 'target' to hosts.{target.host}.roles",
            )
        serves = REGISTRY[target.kind].serves
        for j, served in enumerate(target.protocols):
            if served not in serves:
                yield (
                    (*at, "protocols", str(j)),
                    f"a {target.kind} target cannot serve {served} ({target.kind} serves {', '.join(serves)}); "
                    f"serve {served} from a target of kind {' or '.join(kinds_serving(served))}, or remove it",
                )
        by_path: dict[str, str] = {}
        for name, device in target.devices.items():
            if device.path in by_path:
                yield (
                    (*at, "devices", name, "path"),
                    f"{device.path} is already device {by_path[device.path]!r} of this target; one device, one "
                    "entry (export it twice through the namespace or LUN lists if that is meant)",
                )
            by_path.setdefault(device.path, name)
        exported: list[tuple[Key, str]] = []
        if target.nvme is not None:
            for s, subsystem in enumerate(target.nvme.subsystems):
                exported += [
                    ((*at, "nvme", "subsystems", str(s), "namespaces", str(n)), dev)
                    for n, dev in enumerate(subsystem.namespaces)
                ]
        for key, dev in _repeats(exported):
            yield key, f"device {dev!r} is exported twice as an NVMe namespace; list it once"
        if target.kind == "spdk" and target.nvme is not None:
            for s, subsystem in enumerate(target.nvme.subsystems):
                if problem := nqn_problem(subsystem.nqn):
                    yield (
                        (*at, "nvme", "subsystems", str(s), "nqn"),
                        f"SPDK takes only NVMe qualified names and {subsystem.nqn!r} is not one: {problem} (nvmet "
                        "takes short names, SPDK refuses them)",
                    )
        if target.iscsi is not None:
            luns = [((*at, "iscsi", "luns", str(n)), dev) for n, dev in enumerate(target.iscsi.luns)]
            for key, dev in _repeats(luns):
                yield key, f"device {dev!r} is exported twice as a LUN; list it once"


def _name_rules(lab: LabModel) -> Iterator[tuple[Key, str]]:
    named: dict[str, int] = {}
    for i, target in enumerate(lab.targets):
        first = named.setdefault(target.name, i)
        if first != i:
            yield (
                ("targets", str(i), "name"),
                f"target name {target.name!r} is used by targets[{first}] ({lab.targets[first].kind}) and "
                f"targets[{i}] ({target.kind}); give each target its own 'name' (a target's name defaults to its "
                "kind)",
            )
    nqns: list[tuple[Key, str]] = []
    iqns: list[tuple[Key, str]] = []
    # Several targets on one host may export the same names (seed 000 served its NQNs from nvmet and from SPDK):
    # they take turns, one (protocol, target) at a time per host. On two hosts they could be live at once (xdist
    # groups are per host), and an initiator would see one subsystem through two portals.
    for i, target in enumerate(lab.targets):
        if target.nvme is not None:
            # Two targets may serve the same NQNs (seed 000's nvmet and SPDK did): a case provisions one at a time.
            own = [
                (("targets", str(i), "nvme", "subsystems", str(s), "nqn"), sub.nqn)
                for s, sub in enumerate(target.nvme.subsystems)
            ]
            for key, nqn in _repeats(own):
                yield key, f"subsystem NQN {nqn!r} is used twice in this target; every subsystem needs its own NQN"
            nqns += own
        if target.iscsi is not None:
            iqns.append((("targets", str(i), "iscsi", "iqn"), target.iscsi.iqn))
    for key, nqn in _repeats(nqns, _place(lab), across_only=True):
        yield (
            key,
            f"subsystem NQN {nqn!r} is also served by a target on another host; an initiator would see one "
            "subsystem through two portals, give it its own NQN",
        )
    for key, iqn in _repeats(iqns, _place(lab)):
        yield key, f"target IQN {iqn!r} is used by two targets; give each target its own IQN"
    # Initiators log in through one open-iscsi iface per name_prefix and transport. Targets of one host take turns
    # on it; iSCSI targets of two hosts may be live at once, and the first of their fabrics torn down would delete
    # the iface the other one's sessions and node records are bound to.
    ifaces = [
        (("targets", str(i), "name_prefix"), iface_name(target, "tcp"))
        for i, target in enumerate(lab.targets)
        if target.iscsi is not None
    ]
    for key, iface in _repeats(ifaces, _place(lab), across_only=True):
        prefix = lab.targets[int(key[1])].name_prefix
        yield (
            key,
            f"{prefix!r} is also the name_prefix of an iSCSI target on another host; the initiators would share "
            f"the open-iscsi iface {iface} between two fabrics that may be live at once (-n with --dist loadgroup), "
            "give this target its own name_prefix",
        )
    host_nqns = [(("hosts", name, "host_nqn"), h.host_nqn) for name, h in lab.hosts.items() if h.host_nqn]
    host_iqns = [
        (("hosts", name, "initiator_iqn"), h.initiator_iqn) for name, h in lab.hosts.items() if h.initiator_iqn
    ]
    for key, nqn in _repeats(host_nqns):
        yield key, f"host_nqn {nqn!r} is used by two hosts; the target cannot tell them apart, give each its own"
    for key, iqn in _repeats(host_iqns):
        yield key, f"initiator_iqn {iqn!r} is used by two hosts; the target cannot tell them apart, give each its own"
    subsystem_nqns = {nqn for _, nqn in nqns}
    for key, nqn in host_nqns:
        if nqn in subsystem_nqns:
            yield key, f"host_nqn {nqn!r} is also a subsystem NQN; a host NQN names the initiator, pick another"
    target_iqns = {iqn for _, iqn in iqns}
    for key, iqn in host_iqns:
        if iqn in target_iqns:
            yield key, f"initiator_iqn {iqn!r} is also a target IQN; an initiator IQN names the initiator, pick another"


def _protocol_rules(lab: LabModel) -> Iterator[tuple[Key, str]]:
    initiators = lab.hosts_with("initiator")
    for j, name in enumerate(lab.protocols):
        key: Key = ("protocols", str(j))
        if not initiators:
            yield (
                key,
                f"protocol {name} is declared but no host has the initiator role; add 'initiator' to a host's roles",
            )


def _access_rules(lab: LabModel) -> Iterator[tuple[Key, str]]:
    initiators = lab.hosts_with("initiator")
    for i, target in enumerate(lab.targets):
        if target.nvme is not None and any(p.startswith("nvme") for p in target.protocols):
            for s, sub in enumerate(target.nvme.subsystems):
                if sub.allow_any_host:
                    continue
                for host in initiators:
                    nqn = lab.hosts[host].host_nqn
                    if nqn is None:
                        # An empty allowed_hosts admits every initiator by its host_nqn, which must then exist.
                        yield (
                            ("hosts", host),
                            f"initiator {host} declares no host_nqn, and subsystem {sub.nqn} (targets[{i}]) admits "
                            f"only listed hosts; set hosts.{host}.host_nqn or allow_any_host: true",
                        )
                    elif sub.allowed_hosts and nqn not in sub.allowed_hosts:
                        yield (
                            ("targets", str(i), "nvme", "subsystems", str(s), "allowed_hosts"),
                            f"initiator {host} ({nqn}) is not allowed on {sub.nqn} and could never connect; "
                            "add its host_nqn here or set allow_any_host: true",
                        )
        if target.iscsi is not None and target.iscsi.acls and any(p in ("iscsi", "iser") for p in target.protocols):
            for host in initiators:
                iqn = lab.hosts[host].initiator_iqn
                if iqn is None or iqn not in target.iscsi.acls:
                    shown = iqn or "(no initiator_iqn)"
                    yield (
                        ("targets", str(i), "iscsi", "acls"),
                        f"initiator {host} ({shown}) is not in the ACLs of {target.iscsi.iqn} and could never log "
                        "in; add its initiator_iqn here or drop the acls list",
                    )

        chap = target.iscsi.chap if target.iscsi is not None else None
        if chap is not None:
            yield from _chap_rules(lab, i, target.kind, chap)


def _chap_rules(lab: LabModel, i: int, kind: str, chap: IscsiChap) -> Iterator[tuple[Key, str]]:
    key: Key = ("targets", str(i), "iscsi", "chap")
    if kind == "lio":
        missing = [h for h in lab.hosts_with("initiator") if lab.hosts[h].initiator_iqn is None]
        target = lab.targets[i]
        if missing and not (target.iscsi is not None and target.iscsi.acls):
            yield (
                key,
                (
                    f"LIO checks CHAP per initiator ACL, and initiator {missing[0]} declares no initiator_iqn; set "
                    f"hosts.{missing[0]}.initiator_iqn"
                ),
            )
    for side in ("initiator", "target"):
        credentials = getattr(chap, side)
        if credentials is not None and (problem := credentials.secret.problem()) is not None:
            yield (*key, side, "secret"), problem


def _database_rules(lab: LabModel) -> Iterator[tuple[Key, str]]:
    database = lab.database
    if database is None:
        return
    if not database.diskgroups:
        yield ("database", "diskgroups"), "no disk group is named; list the ASM disk groups to check, e.g. [DATA]"
    if database.asm is None and database.asmcmd is None:
        yield ("database",), "neither 'asm' (SQL as SYSASM) nor 'asmcmd' is set; the ASM health cannot be read"
    if database.asmcmd is not None and database.asmcmd.host not in lab.hosts:
        yield (
            ("database", "asmcmd", "host"),
            f"{database.asmcmd.host!r} is not under 'hosts' ({', '.join(lab.hosts)}); name the lab host that runs asmcmd",
        )
    if database.calibrate is not None and database.db is None:
        yield ("database", "calibrate"), "CALIBRATE_IO needs 'db' (the database to run it as SYSDBA); add database.db"
    waits = database.waits
    if waits is not None:
        if database.db is None:
            yield ("database", "waits"), "the wait figures are read from the database: add database.db"
        if waits.command is not None and waits.host not in lab.hosts:
            yield (
                ("database", "waits", "host"),
                f"{waits.host!r} is not under 'hosts' ({', '.join(lab.hosts)}); name the lab host that runs the load",
            )
        for event in waits.limits:
            if event not in waits.events:
                yield (
                    ("database", "waits", "limits", event),
                    f"{event!r} is not one of the events read ({', '.join(waits.events)}); add it to database.waits.events",
                )
    if database.lib_dir and database.driver_mode != "thick":
        yield (
            ("database", "lib_dir"),
            "lib_dir only applies to python-oracledb thick mode; set driver_mode: thick or remove lib_dir",
        )
    if database.misscount < 1:
        yield ("database", "misscount"), f"CSS misscount is whole seconds above zero, not {database.misscount}"
    elif database.disktimeout <= database.misscount:
        yield (
            ("database", "disktimeout"),
            f"CSS disktimeout ({database.disktimeout} s) must be above misscount ({database.misscount} s); "
            "give the values crsctl get css disktimeout / misscount print",
        )
    for key, value in _repeats([(("database", "disk_paths", str(n)), p) for n, p in enumerate(database.disk_paths)]):
        yield key, f"{value!r} is listed twice; list each disk path once"
    for key, value in _repeats(
        [(("database", "diskgroups", str(n)), g.upper()) for n, g in enumerate(database.diskgroups)]
    ):
        yield key, f"disk group {value} is listed twice; list it once"


def _repeats(
    items: Sequence[tuple[Key, str]], place: Callable[[Key], str] | None = None, *, across_only: bool = False
) -> Iterator[tuple[Key, str]]:
    """The second and later occurrences of each value (the first one is where it belongs). With ``place``, a
    value repeated in another place (another target host) counts, and one repeated in the same target unless
    ``across_only``; one repeated by a second target of the same host does not (those targets take turns)."""
    seen: dict[str, list[Key]] = {}
    for key, value in items:
        earlier = seen.setdefault(value, [])
        if earlier and (
            place is None or any(place(k) != place(key) or (k[:2] == key[:2] and not across_only) for k in earlier)
        ):
            yield key, value
        earlier.append(key)


def _place(lab: LabModel) -> Callable[[Key], str]:
    """Where the target a ``("targets", i, ...)`` key belongs to runs: its host, or an external array's address."""

    def place(key: Key) -> str:
        target = lab.targets[int(key[1])]
        return target.place

    return place


def _line(lines: Mapping[Key, int], key: Key) -> int | None:
    for i in range(len(key), -1, -1):
        if key[:i] in lines:
            return lines[key[:i]]
    return None


def _dotted(key: Key) -> str:
    out = ""
    for part in key:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out
