"""What the user-space-managed SCSI target kinds (SCST, tgt) share: the plan a lab declares for iSCSI/iSER --
target IQN, portal, LUNs with unit serials, initiator ACLs -- and the export built from it.

LIO keeps its own plan (backstores and HBAs are LIO's words); SCST and tgt name LUNs after devices and targets
after IQNs, so one plan serves both, with each kind's first LUN number (tgt keeps LUN 0 for its controller).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from pytest_fabricqa.core.export import Export, ExportedUnit, portal_name
from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import ProvisionError
from pytest_fabricqa.lab.model import IscsiChap, LabModel, TargetModel, iqn_problem
from pytest_fabricqa.targets.base import target_index
from pytest_fabricqa.transport.base import Host

# SCST's vdisk keeps at most 20 characters of a unit serial (MAX_USN_LEN in scst_vdisk.c); tgt shows 36. One
# length for both, so a LUN served by either kind carries the same serial.
SERIAL_LEN = 20
_SERIAL_MARK = re.compile(r"[^A-Za-z0-9]")

# The pid in file $1 when it is a live process named $2 (a zombie left by a stopped daemon does not count).
PID_SCRIPT = r"""[ -f "$1" ] || exit 0
p=$(cat "$1")
case "$p" in ''|*[!0-9]*) exit 0;; esac
[ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ] || exit 0
grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2>/dev/null || echo "$p"
"""


@dataclass(frozen=True)
class ScsiLun:
    """One LUN: its number, the lab device behind it, and the unit serial number it reports (VPD page 0x80)."""

    lun: int
    backing: str  # the lab's device name
    path: str  # block device or file on the target host
    serial: str
    writable: bool = False
    destructive_ok: bool = False


@dataclass(frozen=True)
class ScsiPlan:
    """Everything one SCST or tgt target exports for one protocol."""

    iqn: str
    address: str
    port: int
    iser: bool
    luns: tuple[ScsiLun, ...]
    acls: tuple[str, ...]  # initiator IQNs; empty means every initiator
    chap: IscsiChap | None = None  # where the CHAP secrets are read (never the secrets: a plan is shown in messages)
    more_addresses: tuple[str, ...] = ()  # further portals on the same port, one more path each (``paths: all``)

    @property
    def portal(self) -> str:
        """ADDR:PORT, or [ADDR]:PORT for IPv6."""
        return portal_name(self.address, self.port)

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every portal's address, the first path's first."""
        return (self.address, *self.more_addresses)

    @property
    def portals(self) -> tuple[str, ...]:
        """Every portal, ADDR:PORT each, the first path's first."""
        return tuple(portal_name(a, self.port) for a in self.addresses)

    def export(self, protocol: str, target_host: str) -> Export:
        """What initiators connect to."""
        units = tuple(
            ExportedUnit(self.iqn, lun.lun, lun.backing, lun.path, lun.writable, lun.destructive_ok)
            for lun in self.luns
        )
        return Export(
            protocol, protocol_spec(protocol).transport, self.address, self.port, units, target_host,
            more_addresses=self.more_addresses,
        )  # fmt: skip


def unit_serial(mark: str, iqn: str, backing: str) -> str:
    """The unit serial number of a LUN: the mark's letters and digits (up to 8), then a digest of the mark, the
    target IQN and the device name, :data:`SERIAL_LEN` characters in all.

    Stable from run to run and unique per LUN, so multipath on an initiator recognises one LUN behind two portals;
    the mark shows whose it is in ``lsscsi``/``sg_inq`` and in tgtadm's listing, where vendor and product are not
    shown.
    """
    prefix = _SERIAL_MARK.sub("", mark)[:8]
    digest = hashlib.sha256(f"{mark}\0{iqn}\0{backing}".encode()).hexdigest()
    return (prefix + digest)[:SERIAL_LEN]


def plan_from_lab(lab: LabModel, model: TargetModel, protocol: str, first_lun: int = 0) -> ScsiPlan:
    """The plan a lab declares for ``protocol`` (iscsi or iser); LUNs numbered from ``first_lun`` in lab order."""
    assert model.iscsi is not None
    acls = model.iscsi.acls or tuple(
        iqn for n in lab.hosts_with("initiator") if (iqn := lab.hosts[n].initiator_iqn) is not None
    )
    for iqn in (model.iscsi.iqn, *acls):
        if problem := iqn_problem(iqn):
            raise ProvisionError(
                model.host or lab.name,
                f"{iqn!r} is not an iSCSI qualified name: {problem}",
                f"use iqn.yyyy-mm.reverse.domain:name, lower case (targets[{target_index(lab, model)}].iscsi)",
            )
    luns = []
    for offset, name in enumerate(model.iscsi.luns):
        device = model.devices[name]
        serial = unit_serial(model.name_prefix, model.iscsi.iqn, name)
        luns.append(ScsiLun(first_lun + offset, name, device.path, serial, device.writable, device.destructive_ok))
    addresses = lab.target_addresses(model)
    return ScsiPlan(
        model.iscsi.iqn,
        addresses[0],
        model.iscsi.port,
        protocol_spec(protocol).transport == "iser",
        tuple(luns),
        tuple(acls),
        chap=model.iscsi.chap,
        more_addresses=addresses[1:],
    )


def daemon_pid(host: Host, pid_file: str, name: str) -> int | None:
    """The pid that ``pid_file`` names, when it is a live process called ``name``; else None."""
    out = host.run(["sh", "-c", PID_SCRIPT, "sh", pid_file, name], check=False).stdout.strip()
    return int(out) if out.isdigit() else None
