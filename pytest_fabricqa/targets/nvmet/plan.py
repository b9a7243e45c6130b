"""What nvmet is to create for one protocol: subsystems, namespaces, ports and host entries, from the lab file."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pytest_fabricqa.lab import SHORT_NQN_RE, LabModel, TargetModel, nqn_problem
from pytest_fabricqa.protocols import protocol as protocol_spec
from pytest_fabricqa.targets.base import ProvisionError, target_index


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


def _adrfam(address: str) -> str:
    try:
        return "ipv6" if ipaddress.ip_address(address).version == 6 else "ipv4"
    except ValueError:
        return "ipv4"


def check_nqn(nqn: str) -> str | None:
    """None when ``nqn`` is a name nvmet accepts (NVMe NQN, at most 223 bytes, or a short name), else why not."""
    if len(nqn.encode()) > 223:
        return f"NQN {nqn!r} is longer than 223 bytes"
    if nqn_problem(nqn) is not None and not SHORT_NQN_RE.match(nqn):
        return f"{nqn!r} is not a valid NQN (nqn.yyyy-mm.reverse.domain:name)"
    return None


def plan_from_lab(lab: LabModel, model: TargetModel, protocol: str) -> NvmetPlan:
    """The plan a lab declares for ``protocol``: its saved configuration, or ``nvme.subsystems`` on one port."""
    assert model.nvme is not None
    trtype = protocol_spec(protocol).transport
    address = lab.target_address(model)
    where = f"targets[{target_index(lab, model)}]"
    if model.nvme.saved_config is not None:
        from pytest_fabricqa.targets.nvmet.saved import load_saved_config

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
                nguid=model.devices[name].nguid,
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
    ports = tuple(  # one per path: every storage port of the host with paths: all
        NvmetPort(trtype, a, model.nvme.port, tuple(s.nqn for s in subsystems), _adrfam(a))
        for a in lab.target_addresses(model)
    )
    return NvmetPlan(tuple(subsystems), ports, hosts)
