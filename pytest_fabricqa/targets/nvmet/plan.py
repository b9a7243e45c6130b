"""What nvmet is to create for one protocol: subsystems, namespaces, ports and host entries, from the lab file."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pytest_fabricqa.lab.model import SHORT_NQN_RE, nqn_problem


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


def adrfam(address: str) -> str:
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
