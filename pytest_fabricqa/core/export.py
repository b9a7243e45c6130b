"""What a target exported for one protocol, as the initiators see it: a portal and the units behind it.

The agreed rule: an initiator knows a portal, not how it was made. Targets make an :class:`Export`; initiators and
faults read it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class ExportedUnit:
    """One namespace or LUN a target exports: where it lives (subsystem + NSID/LUN) and what backs it."""

    subsystem: str  # subsystem NQN or target IQN
    address: int  # NSID or LUN
    backing: str  # the lab's device name ("nvme0"); the path itself when the lab has no such device
    backing_path: str  # the block device (or file) on the target host
    writable: bool = False
    destructive_ok: bool = False


@dataclass(frozen=True)
class Export:
    """What a target exported for one protocol: the portal initiators reach and every unit behind it."""

    protocol: str
    transport: str  # "tcp" or "rdma" (NVMe trtype); "tcp" or "iser" for SCSI
    address: str  # portal address on the storage network
    port: int
    units: tuple[ExportedUnit, ...]
    target_host: str | None  # the lab host running the target (None for an external array)
    target: str | None = None  # the lab's name of the target (set by connect_fabric; drivers need not)
    more_addresses: tuple[str, ...] = ()  # further portals, same port: one more path each (``paths: all``)

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every portal address, one per path, the first first."""
        return (self.address, *self.more_addresses)

    @property
    def subsystems(self) -> tuple[str, ...]:
        """The NQNs or IQNs exported, in order, without repeats."""
        return tuple(dict.fromkeys(u.subsystem for u in self.units))


def portal_name(address: str, port: int) -> str:
    """An iSCSI portal as LIO's configfs, SCST and tgt name it: ADDR:PORT, or [ADDR]:PORT for IPv6."""
    try:
        v6 = ipaddress.ip_address(address).version == 6
    except ValueError:
        v6 = False
    return f"[{address}]:{port}" if v6 else f"{address}:{port}"
