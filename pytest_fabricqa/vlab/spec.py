"""What a virtual lab is made of: guests, their storage addresses and their emulated drives.

The lab-file model (the lead's) turns ``labs/vlab.yaml`` into a :class:`VlabSpec`; the CLI reads the same
shape from JSON with :func:`load_spec_json`. Validation happens here, once, with errors that name the key.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_fabricqa.core.errors import UserError

DEFAULT_MEMORY_MB = 1024
DEFAULT_CPUS = 1
# Linux's minimum IPv4 MTU and the largest frame the lab's switch passes (jumbo frames).
MIN_MTU = 576
MAX_MTU = 9000
# "ram": a brd RAM disk in the guest (/dev/ramN), for load that emulated drives cannot carry under TCG.
DRIVE_KINDS = ("nvme", "virtio", "ram")

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_DRIVE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,19}$")  # an NVMe serial is at most 20 characters


class SpecError(UserError, ValueError):
    """A virtual-lab spec is invalid; the message names the key and the fix."""


@dataclass(frozen=True)
class Drive:
    """An emulated drive: ``nvme`` becomes ``-device nvme,serial=<id>``, ``virtio`` a virtio-blk disk."""

    id: str
    size_mb: int
    kind: str = "nvme"


@dataclass(frozen=True)
class Guest:
    """One guest: its SSH port on 127.0.0.1, its address on the first storage segment (eth1) and on each further
    one (eth2, eth3, ...: a second path)."""

    name: str
    ssh_port: int
    storage_address: str  # "10.10.10.19/24"
    storage_mtu: int = 1500
    storage_paths: tuple[str, ...] = ()  # eth2's, eth3's, ... address on segment 2, 3, ...: "10.10.20.19/24"
    memory_mb: int = DEFAULT_MEMORY_MB
    cpus: int = DEFAULT_CPUS
    drives: tuple[Drive, ...] = ()
    hugepages_mb: int = 0  # 2 MiB hugepages reserved at boot (SPDK's memory), in MiB

    @property
    def storage_ip(self) -> str:
        """The storage address without its prefix length ("10.10.10.19")."""
        return str(ipaddress.ip_interface(self.storage_address).ip)


@dataclass(frozen=True)
class VlabSpec:
    """A lab: guests that share one storage L2 segment, or several (one per path: segment k joins the guests'
    eth<k>)."""

    name: str
    guests: tuple[Guest, ...]

    def __post_init__(self) -> None:
        validate(self)

    @property
    def segments(self) -> int:
        """How many storage segments (switches) the lab has: 1 + the most further paths of any guest."""
        return 1 + max((len(g.storage_paths) for g in self.guests), default=0)

    def guest(self, name: str) -> Guest:
        """The guest called ``name``; KeyError names the guests there are."""
        for guest in self.guests:
            if guest.name == name:
                return guest
        raise KeyError(f"no guest {name!r} in lab {self.name!r}; guests: {[g.name for g in self.guests]}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data; :func:`spec_from_dict` reads it back."""
        return asdict(self)


def validate(spec: VlabSpec) -> None:
    """Raise :class:`SpecError` naming the first invalid key of ``spec``."""
    if not _NAME.match(spec.name):
        raise SpecError(f"name: {spec.name!r} must be lower-case letters, digits and '-' (a host name)")
    if not spec.guests:
        raise SpecError("guests: a lab needs at least one guest")
    seen_names: set[str] = set()
    seen_ports: set[int] = set()
    seen_ips: set[str] = set()
    networks: dict[int, set[Any]] = {}  # segment -> the subnets its guests are in
    for i, guest in enumerate(spec.guests):
        where = f"guests[{i}]"
        if not _NAME.match(guest.name):
            raise SpecError(f"{where}.name: {guest.name!r} must be a host name (a-z, 0-9, '-')")
        if guest.name in seen_names:
            raise SpecError(f"{where}.name: {guest.name!r} is used twice")
        seen_names.add(guest.name)
        if not 1024 <= guest.ssh_port <= 65535:
            raise SpecError(f"{where}.ssh_port: {guest.ssh_port} must be 1024..65535 (an unprivileged port)")
        if guest.ssh_port in seen_ports:
            raise SpecError(f"{where}.ssh_port: {guest.ssh_port} is used twice")
        seen_ports.add(guest.ssh_port)
        addresses = [(f"{where}.storage_address", guest.storage_address)]
        addresses += [(f"{where}.storage_paths[{k}]", a) for k, a in enumerate(guest.storage_paths)]
        for segment, (key, address) in enumerate(addresses):
            try:
                iface = ipaddress.ip_interface(address)
            except ValueError:
                raise SpecError(f"{key}: {address!r} is not an address/prefix like 10.10.10.11/24") from None
            if "/" not in address or iface.version != 4:
                raise SpecError(f"{key}: {address!r} needs an IPv4 /prefix")
            if str(iface.ip) in seen_ips:
                raise SpecError(f"{key}: {iface.ip} is used twice")
            seen_ips.add(str(iface.ip))
            networks.setdefault(segment, set()).add(iface.network)
        if not MIN_MTU <= guest.storage_mtu <= MAX_MTU:
            raise SpecError(f"{where}.storage_mtu: {guest.storage_mtu} must be {MIN_MTU}..{MAX_MTU}")
        if not 256 <= guest.memory_mb <= 16384:
            raise SpecError(f"{where}.memory_mb: {guest.memory_mb} must be 256..16384")
        if not 1 <= guest.cpus <= 8:
            raise SpecError(f"{where}.cpus: {guest.cpus} must be 1..8")
        if guest.hugepages_mb % 2 or not 0 <= guest.hugepages_mb <= guest.memory_mb // 2:
            raise SpecError(
                f"{where}.hugepages_mb: {guest.hugepages_mb} must be an even number of MiB (2 MiB pages), at most "
                f"half of memory_mb ({guest.memory_mb})"
            )
        drive_ids: set[str] = set()
        for j, drive in enumerate(guest.drives):
            dwhere = f"{where}.drives[{j}]"
            if not _DRIVE_ID.match(drive.id):
                raise SpecError(f"{dwhere}.id: {drive.id!r} must be 1-20 of A-Z a-z 0-9 _ . - (an NVMe serial)")
            if drive.id in drive_ids:
                raise SpecError(f"{dwhere}.id: {drive.id!r} is used twice in {guest.name}")
            drive_ids.add(drive.id)
            if not 1 <= drive.size_mb <= 1024 * 1024:
                raise SpecError(f"{dwhere}.size_mb: {drive.size_mb} must be 1..1048576")
            if drive.kind not in DRIVE_KINDS:
                raise SpecError(f"{dwhere}.kind: {drive.kind!r} must be one of {', '.join(DRIVE_KINDS)}")
    for segment, nets in sorted(networks.items()):
        key = "storage_address" if segment == 0 else f"storage_paths[{segment - 1}]"
        if len(nets) > 1:
            raise SpecError(
                f"guests[*].{key}: the guests share one L2 segment there but are in {len(nets)} subnets "
                f"({', '.join(sorted(str(n) for n in nets))}); put them in one"
            )
    subnets = [next(iter(nets)) for _, nets in sorted(networks.items())]
    for segment, net in enumerate(subnets):
        if any(net.overlaps(other) for other in subnets[:segment]):
            raise SpecError(
                f"guests[*].storage_paths[{segment - 1}]: segment {segment + 1} is in {net}, which overlaps another "
                "segment's subnet; give each path its own subnet (10.10.20.0/24 beside 10.10.10.0/24)"
            )


def _drive_layout(guest: Guest) -> dict[str, list[str]]:
    """A guest's drives per kind, in spec order: the guest names each kind's devices in that order
    (/dev/nvme0n1, /dev/nvme1n1; /dev/vda; /dev/ram0), so the order across kinds names nothing."""
    layout: dict[str, list[str]] = {}
    for drive in guest.drives:
        layout.setdefault(drive.kind, []).append(f"{drive.id} {drive.size_mb} MB")
    return layout


def spec_differences(running: VlabSpec, wanted: VlabSpec) -> list[str]:
    """What keeps a running lab from being the one ``wanted``, one phrase per difference ([] when it is).

    A lab is its guests by name: the order in which a lab file lists its hosts (or a YAML tool re-saved them)
    is not a difference, and neither is the order of drives of different kinds.
    """
    found: list[str] = []
    if running.name != wanted.name:
        found.append(f"name: running {running.name!r}, wanted {wanted.name!r}")
    ran = {g.name: g for g in running.guests}
    want = {g.name: g for g in wanted.guests}
    found += [f"guest {name} runs but is not wanted" for name in ran if name not in want]
    found += [f"guest {name} is wanted but not running" for name in want if name not in ran]
    for name in (n for n in want if n in ran):
        old, new = ran[name], want[name]
        for key in ("ssh_port", "storage_address", "storage_paths", "storage_mtu", "memory_mb", "cpus", "hugepages_mb"):
            if getattr(old, key) != getattr(new, key):
                found.append(f"{name}.{key}: running {getattr(old, key)}, wanted {getattr(new, key)}")
        old_drives, new_drives = _drive_layout(old), _drive_layout(new)
        if old_drives != new_drives:
            found.append(f"{name}.drives: running {_layout_text(old_drives)}, wanted {_layout_text(new_drives)}")
    return found


def _layout_text(layout: dict[str, list[str]]) -> str:
    return "; ".join(f"{kind} {', '.join(drives)}" for kind, drives in sorted(layout.items())) or "none"


def spec_from_dict(data: Any, source: str = "spec") -> VlabSpec:
    """A validated :class:`VlabSpec` from plain data; errors name ``source`` and the key."""
    try:
        if not isinstance(data, dict):
            raise SpecError("the top level must be an object with 'name' and 'guests'")
        guests = []
        for i, g in enumerate(data.get("guests") or []):
            if not isinstance(g, dict):
                raise SpecError(f"guests[{i}]: must be an object")
            unknown = set(g) - {f for f in Guest.__dataclass_fields__}
            if unknown:
                raise SpecError(f"guests[{i}]: unknown keys {sorted(unknown)}")
            drives = tuple(Drive(**d) for d in g.get("drives", ()))
            guests.append(Guest(**{**g, "drives": drives, "storage_paths": tuple(g.get("storage_paths", ()))}))
        unknown = set(data) - {"name", "guests"}
        if unknown:
            raise SpecError(f"unknown keys {sorted(unknown)}")
        return VlabSpec(name=data.get("name", ""), guests=tuple(guests))
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
    except TypeError as exc:  # missing or unexpected dataclass fields
        raise SpecError(f"{source}: {exc}") from None


def load_spec_json(path: Path) -> VlabSpec:
    """Read a lab spec from a JSON file (the shape of :meth:`VlabSpec.to_dict`)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise SpecError(f"{path}: not JSON: {exc}") from None
    return spec_from_dict(data, str(path))
