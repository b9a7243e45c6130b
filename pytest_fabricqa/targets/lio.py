"""Linux-IO (LIO) iSCSI/iSER target through configfs: iblock backstores, target IQN, TPGs, LUNs, portals, ACLs,
and ALUA target port groups.

One TPG per portal (``tpgt_1`` for the lab's first address, ``tpgt_2`` for the next, ...): each TPG's LUNs are
target ports of their own in SCSI's terms, so with several paths every path of a LUN reports its own relative
target port and its own ALUA target port group (``<name_prefix>_tpgt_N`` in the backstore's ``alua`` folder, all
Active/Optimized until a fault changes one: :class:`pytest_fabricqa.faults.inject.LioAluaChange`). The initiators'
dm-multipath (``prio alua``, ``group_by_prio``: multipath-tools' own settings for LIO-ORG devices) follows each
path's ALUA state. One portal keeps LIO's default group, as targetcli leaves it.

targetcli-fb needs a system D-Bus, which minimal hosts (and the virtual lab's guests) lack; configfs is what
targetcli writes in the end, so this module writes it directly.

Ownership: every backstore is named ``<name_prefix>_<device>`` (``fabricqa_nvme0``): that name is the mark.
The target host's state file ``/run/fabricqa/<name_prefix>-lio.json`` lists the HBAs, backstores and target
IQN this plugin is about to create, written before the first one exists. An object is ours only when both say so
(checked twice, issue 28): a backstore the state file lists that carries our name; a target IQN the state file
lists whose every LUN is one of our backstores. A target that is only one of the two is named by the stale
clean-up and never touched; anything else is never touched either.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pytest_fabricqa.core.export import Export, ExportedUnit, portal_name
from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.lab.model import IscsiChap, LabModel, TargetModel, iqn_problem
from pytest_fabricqa.targets import remote
from pytest_fabricqa.targets.base import mark_number, target_index
from pytest_fabricqa.targets.configfs import ConfigfsTarget
from pytest_fabricqa.targets.scsi import unit_serial
from pytest_fabricqa.transport.base import Host

ROOT = "/sys/kernel/config/target"
TPG = "tpgt_1"
"""The first portal's TPG (the only one with a single path): the TPG settings (``attrib``) are the same in all."""
ALUA_FOLDER = "alua"
# HBA indexes are derived from the mark in this range (targetcli numbers from 0 up); tries before giving up.
HBA_INDEXES = (100_000, 2**31 - 1)
HBA_TRIES = 16
_BACKSTORE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

SNAPSHOT_SCRIPT = r"""
root=/sys/kernel/config/target
[ -d "$root/core" ] || { echo NOCONFIGFS; exit 0; }
cd "$root" || exit 1
for h in core/*_[0-9]*; do
  [ -d "$h" ] || continue
  printf 'H\t%s\n' "${h#core/}"
  for b in "$h"/*; do
    [ -d "$b" ] || continue
    printf 'B\t%s\t%s\t%s\n' "${b#core/}" "$(cat "$b/udev_path" 2>/dev/null)" "$(cat "$b/enable" 2>/dev/null)"
  done
done
[ -d iscsi ] || exit 0
for t in iscsi/*; do
  [ -d "$t" ] || continue
  q=${t#iscsi/}
  [ "$q" = discovery_auth ] && continue
  printf 'T\t%s\n' "$q"
  for tp in "$t"/tpgt_*; do
    [ -d "$tp" ] || continue
    g=${tp##*/}
    printf 'G\t%s\t%s\t%s\n' "$q" "$g" "$(cat "$tp/enable" 2>/dev/null)"
    for l in "$tp"/lun/lun_*; do
      [ -d "$l" ] || continue
      for k in "$l"/*; do [ -L "$k" ] && printf 'L\t%s\t%s\t%s\t%s\n' "$q" "$g" "${l##*/}" "$(readlink "$k")"; done
    done
    for n in "$tp"/np/*; do [ -d "$n" ] && printf 'N\t%s\t%s\t%s\t%s\n' "$q" "$g" "${n##*/}" "$(cat "$n/iser" 2>/dev/null)"; done
    for a in "$tp"/acls/*; do [ -d "$a" ] && printf 'A\t%s\t%s\t%s\n' "$q" "$g" "${a##*/}"; done
  done
done
exit 0
"""

# Remove one iSCSI target whatever state it is in: disable, mapped LUNs, ACLs, LUNs, portals, TPGs, the IQN.
REMOVE_TARGET_SCRIPT = r"""
set -e
t=/sys/kernel/config/target/iscsi/$1
[ -d "$t" ] || exit 0
for tp in "$t"/tpgt_*; do
  [ -d "$tp" ] || continue
  echo 0 > "$tp/enable" 2>/dev/null || true
  for a in "$tp"/acls/*; do
    [ -d "$a" ] || continue
    for m in "$a"/lun_*; do
      [ -d "$m" ] || continue
      for k in "$m"/*; do [ ! -L "$k" ] || rm -f "$k"; done
      rmdir "$m"
    done
    rmdir "$a"
  done
  for l in "$tp"/lun/lun_*; do
    [ -d "$l" ] || continue
    for k in "$l"/*; do [ ! -L "$k" ] || rm -f "$k"; done
    rmdir "$l"
  done
  for n in "$tp"/np/*; do
    [ -d "$n" ] || continue
    [ ! -f "$n/iser" ] || echo 0 > "$n/iser" 2>/dev/null || true
    rmdir "$n"
  done
  rmdir "$tp"
done
rmdir "$t"
"""

# Remove one backstore ("hba/name") with the ALUA groups fabricqa made in it (a backstore with a group of its own
# cannot be removed; LIO's default group goes with it). Idempotent.
REMOVE_BACKSTORE_SCRIPT = r"""
set -e
b=/sys/kernel/config/target/core/$1
[ -d "$b" ] || exit 0
for g in "$b"/alua/*; do
  if [ -d "$g" ] && [ "${g##*/}" != default_tg_pt_gp ]; then rmdir "$g"; fi
done
rmdir "$b"
"""


def tpg_name(index: int) -> str:
    """The TPG of the ``index``-th portal (0-based): ``tpgt_1``, ``tpgt_2``, ..."""
    return f"tpgt_{index + 1}"


def alua_group(name_prefix: str, tpg: str) -> str:
    """The ALUA target port group fabricqa makes in each backstore for the LUNs of ``tpg``."""
    return f"{name_prefix}_{tpg}"


@dataclass(frozen=True)
class LioLun:
    """A LUN: its number, the lab device behind it, the backstore that serves it and the unit serial number the
    backstore reports (VPD page 0x80, and the NAA identifier of page 0x83 that initiators take as the WWID)."""

    lun: int
    backing: str
    path: str
    backstore: str  # "<name_prefix>_<device>"
    serial: str
    writable: bool = False
    destructive_ok: bool = False


@dataclass(frozen=True)
class LioPlan:
    """Everything to create on one LIO target for one protocol."""

    iqn: str
    address: str
    port: int
    iser: bool
    luns: tuple[LioLun, ...]
    acls: tuple[str, ...]  # initiator IQNs; empty means demo mode (generate_node_acls)
    chap: IscsiChap | None = None  # where the CHAP secrets are read (never the secrets: a plan is shown in messages)
    cmdsn_depth: int | None = None  # the TPG's default_cmdsn_depth (LIO's 64 when None)
    more_addresses: tuple[str, ...] = ()  # further portals on the same port, one more path each (``paths: all``)

    @property
    def portal(self) -> str:
        """The first portal's configfs name: ADDR:PORT, or [ADDR]:PORT for IPv6."""
        return portal_name(self.address, self.port)

    @property
    def portals(self) -> tuple[str, ...]:
        """Every portal's configfs name, one per path."""
        return tuple(portal_name(a, self.port) for a in (self.address, *self.more_addresses))

    @property
    def tpgs(self) -> tuple[str, ...]:
        """The TPG of each portal, in :attr:`portals`' order."""
        return tuple(tpg_name(i) for i in range(len(self.portals)))

    def tpg_of(self, address: str) -> str:
        """The TPG serving the portal at ``address``; ValueError when no portal is there."""
        portal = portal_name(address, self.port)
        if portal not in self.portals:
            raise ValueError(f"no portal at {portal} (the portals are {', '.join(self.portals)})")
        return self.tpgs[self.portals.index(portal)]


def plan_from_lab(lab: LabModel, model: TargetModel, protocol: str) -> LioPlan:
    """The LIO plan a lab declares for ``protocol`` (iscsi or iser)."""
    assert model.iscsi is not None
    where = f"targets[{target_index(lab, model)}]"
    luns = []
    for lun, name in enumerate(model.iscsi.luns):
        backstore = f"{model.name_prefix}_{name}"
        if not _BACKSTORE_NAME.match(backstore):
            raise ProvisionError(
                model.host or lab.name,
                f"backstore name {backstore!r} (name_prefix + device name) is not a valid LIO name",
                f"use letters, digits, '_', '.' and '-' in {where}.name_prefix and the device names",
            )
        dev = model.devices[name]
        serial = unit_serial(model.name_prefix, model.iscsi.iqn, name)
        luns.append(LioLun(lun, name, dev.path, backstore, serial, dev.writable, dev.destructive_ok))
    acls = model.iscsi.acls or tuple(
        iqn for n in lab.hosts_with("initiator") if (iqn := lab.hosts[n].initiator_iqn) is not None
    )
    for iqn in (model.iscsi.iqn, *acls):
        if problem := iqn_problem(iqn):
            raise ProvisionError(
                model.host or lab.name,
                f"{iqn!r} is not an iSCSI qualified name: {problem}",
                "use iqn.yyyy-mm.reverse.domain:name, lower case",
            )
    addresses = lab.target_addresses(model)
    return LioPlan(
        model.iscsi.iqn,
        addresses[0],
        model.iscsi.port,
        protocol_spec(protocol).transport == "iser",
        tuple(luns),
        tuple(acls),
        chap=model.iscsi.chap,
        cmdsn_depth=model.iscsi.cmdsn_depth,
        more_addresses=addresses[1:],
    )


@dataclass
class LioSnapshot:
    """The LIO configfs tree as :data:`SNAPSHOT_SCRIPT` printed it."""

    loaded: bool = True
    hbas: list[str] = field(default_factory=list)
    backstores: dict[str, dict[str, str]] = field(default_factory=dict)  # "iblock_0/name" -> udev_path, enable
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)  # iqn -> tpgs -> luns/nps/acls

    def backstore_named(self, name: str) -> str | None:
        """The "hba/name" key of the backstore called ``name``, if any."""
        return next((key for key in self.backstores if key.split("/", 1)[1] == name), None)

    def lun_backstores(self, iqn: str) -> list[str]:
        """The backstore names behind every LUN of target ``iqn``."""
        return [
            link.rstrip("/").rsplit("/", 1)[-1]
            for tpg in self.targets.get(iqn, {}).values()
            for link in tpg["luns"].values()
        ]


def parse_snapshot(text: str) -> LioSnapshot:
    """Parse :data:`SNAPSHOT_SCRIPT` output."""
    snap = LioSnapshot()
    for line in text.splitlines():
        parts = line.split("\t") + [""] * 5
        tag = parts[0]
        if tag == "NOCONFIGFS":
            snap.loaded = False
        elif tag == "H":
            snap.hbas.append(parts[1])
        elif tag == "B":
            snap.backstores[parts[1]] = {"udev_path": parts[2], "enable": parts[3]}
        elif tag == "T":
            snap.targets[parts[1]] = {}
        elif tag == "G" and parts[1] in snap.targets:
            snap.targets[parts[1]][parts[2]] = {"enable": parts[3], "luns": {}, "portals": {}, "acls": []}
        elif tag in ("L", "N", "A") and parts[2] in snap.targets.get(parts[1], {}):
            tpg = snap.targets[parts[1]][parts[2]]
            if tag == "L":
                tpg["luns"][parts[3]] = parts[4]
            elif tag == "N":
                tpg["portals"][parts[3]] = parts[4]
            else:
                tpg["acls"].append(parts[3])
    return snap


class LioTarget(ConfigfsTarget):
    """LIO on a lab host, driven through configfs over the host's transport."""

    kind = "lio"

    def __init__(self, lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> None:
        assert model.iscsi is not None
        super().__init__(lab, model, hosts)
        self.prefix = f"{model.name_prefix}_"

    def snapshot(self) -> LioSnapshot:
        """Read the target's LIO tree in one command."""
        return parse_snapshot(self.host.run(["sh", "-c", SNAPSHOT_SCRIPT]).stdout)

    # -- provision ------------------------------------------------------------------------------------------
    def provision(self, protocol: str, undo: UndoStack) -> Export:
        """Create backstores, the target, its LUNs, the portal (iSER on for iser), ACLs; enable the TPG."""
        spec = protocol_spec(protocol)
        if "lio" not in spec.target_modules:
            raise self._fail(f"LIO does not serve {protocol} here", f"serve {protocol} with another target kind")
        plan = plan_from_lab(self.lab, self.model, protocol)
        modules = list(spec.target_modules["lio"])
        result = self.host.run(["modprobe", "-a", *modules], check=False)
        if not result.ok:
            raise self._fail(
                f"cannot load kernel modules {', '.join(modules)} ({result.stderr.strip() or 'no message'})",
                "install the kernel's LIO target modules",
            )
        snap = self.snapshot()
        if not snap.loaded:
            raise self._fail(f"{ROOT}/core is missing", "mount configfs: mount -t configfs none /sys/kernel/config")
        self._check(plan, snap)
        hbas = self._pick_hbas(plan, snap)
        state = {
            "kind": "lio",
            "owner": f"pid {os.getpid()}",
            "hbas": sorted(hbas.values()),
            "backstores": [f"{hbas[lun.lun]}/{lun.backstore}" for lun in plan.luns],
            "targets": [plan.iqn],
        }
        undo.push(f"remove {self.state_file}", self._remove_state_if_clean)
        self._write_state(state)
        for lun in plan.luns:
            hbas[lun.lun] = self._make_backstore(lun, hbas[lun.lun], snap, undo, state)
        self._make_target(plan, hbas, undo, state)
        units = tuple(
            ExportedUnit(plan.iqn, lun.lun, lun.backing, lun.path, lun.writable, lun.destructive_ok)
            for lun in plan.luns
        )
        return Export(
            protocol, spec.transport, plan.address, plan.port, units, self.host.name, more_addresses=plan.more_addresses
        )

    def _check(self, plan: LioPlan, snap: LioSnapshot) -> None:
        if plan.iqn in snap.targets:
            raise self._fail(
                f"iSCSI target {plan.iqn} already exists and was not created by fabricqa",
                f"remove it on the target or use another IQN in {self.where}.iscsi.iqn",
            )
        for lun in plan.luns:
            if not remote.is_block_device(self.host, lun.path):
                raise self._fail(
                    f"backing device {lun.backing} ({lun.path}) does not exist",
                    f"fix {self.where}.devices.{lun.backing}.path in the lab file or attach the device",
                )
            users = [k for k, v in snap.backstores.items() if v["udev_path"] == lun.path and v["enable"] == "1"]
            if users:
                raise self._fail(
                    f"backing device {lun.path} is already exported by LIO backstore {users[0]} (not fabricqa's)",
                    "remove that backstore or give the lab another device",
                )
        self._refuse_busy_port(plan.port, "iscsi.port", " (tgtd, scst?)")

    def _pick_hbas(self, plan: LioPlan, snap: LioSnapshot) -> dict[int, str]:
        # One HBA per backstore (as rtslib does), at indexes derived from the backstore's name: two sessions with
        # different marks never pick the same, and nobody else's tool counts up that far.
        return {lun.lun: self._next_hba(lun, snap, set()) for lun in plan.luns}

    def _next_hba(self, lun: LioLun, snap: LioSnapshot, tried: set[str]) -> str:
        low, high = HBA_INDEXES
        start = mark_number(self.model.name_prefix, lun.backstore, low, high)
        for step in range(high - low):
            name = f"iblock_{low + (start - low + step) % (high - low)}"
            if name not in snap.hbas and name not in tried:
                return name
        raise self._fail("no free LIO HBA index", "remove unused HBAs under /sys/kernel/config/target/core")

    def _make_backstore(self, lun: LioLun, hba: str, snap: LioSnapshot, undo: UndoStack, state: dict[str, Any]) -> str:
        """Create an HBA and the backstore in it; the HBA actually used (the planned one may have been taken)."""
        host = self.host
        tried: set[str] = set()
        while True:
            hba_path = f"{ROOT}/core/{hba}"
            discard = undo.push(f"remove HBA {hba}", partial(remote.rmdir_if, host, hba_path))
            if self._create(f"cannot create HBA {hba}", hba_path):
                break
            # Made by someone else since the snapshot: not ours to use, remove or list. Take the next index.
            discard()
            tried.add(hba)
            if len(tried) >= HBA_TRIES:
                raise self._fail(
                    f"LIO HBAs {', '.join(sorted(tried))} were each taken while fabricqa created them",
                    "another session or tool is creating HBAs on this target; run one at a time",
                )
            new = self._next_hba(lun, snap, tried)
            state["hbas"] = sorted({*state["hbas"], new} - {hba})
            state["backstores"] = [b for b in state["backstores"] if b != f"{hba}/{lun.backstore}"]
            state["backstores"].append(f"{new}/{lun.backstore}")
            self._write_state(state)
            hba = new
        path = f"{hba_path}/{lun.backstore}"
        undo.push(f"remove backstore {lun.backstore}", partial(remove_backstore, host, f"{hba}/{lun.backstore}"))
        self._step(f"cannot create backstore {lun.backstore}", partial(remote.mkdir, host, path))
        self._step(
            f"cannot point backstore {lun.backstore} at {lun.path}",
            partial(remote.write, host, f"{path}/control", f"udev_path={lun.path}"),
        )
        self._step(
            f"cannot record udev_path of {lun.backstore}", partial(remote.write, host, f"{path}/udev_path", lun.path)
        )
        self._step(
            f"cannot open {lun.path} for backstore {lun.backstore}",
            partial(remote.write, host, f"{path}/enable", "1"),
            f"check that {lun.path} is not mounted, held by device-mapper or exported exclusively elsewhere",
        )
        # targetcli (rtslib) gives every backstore a serial; configfs alone gives none, and LIO then reports no VPD
        # pages: the LUNs show initiators no WWID, and multipath leaves them out (seen on the virtual lab). Before
        # the LUN link: LIO refuses a new serial while the backstore is exported.
        self._step(
            f"cannot set the unit serial of backstore {lun.backstore}",
            partial(remote.write, host, f"{path}/wwn/vpd_unit_serial", lun.serial),
        )
        return hba

    def _make_target(self, plan: LioPlan, hbas: dict[int, str], undo: UndoStack, state: dict[str, Any]) -> None:
        host = self.host
        target = f"{ROOT}/iscsi/{plan.iqn}"
        # The iscsi fabric group appears on first mkdir (it loads iscsi_target_mod); it is shared, never removed.
        self._step("cannot register the iSCSI fabric in configfs", partial(host.run, ["mkdir", "-p", f"{ROOT}/iscsi"]))
        discard = undo.push(f"remove iSCSI target {plan.iqn}", partial(remove_target, host, plan.iqn))
        if not self._create(f"cannot create iSCSI target {plan.iqn}", target):
            # Created by someone else since the snapshot: neither ours to remove now nor at the next start.
            discard()
            state["targets"] = [t for t in state["targets"] if t != plan.iqn]
            self._write_state(state)
            raise self._fail(
                f"iSCSI target {plan.iqn} appeared while fabricqa was creating it (another session or tool)",
                f"let the other session finish, or use another IQN in {self.where}.iscsi.iqn",
            )
        for index, address in enumerate((plan.address, *plan.more_addresses)):
            self._make_tpg(plan, hbas, index, address)

    def _make_tpg(self, plan: LioPlan, hbas: dict[int, str], index: int, address: str) -> None:
        """The ``index``-th portal's TPG: its LUNs (each in the TPG's ALUA group when there are several paths),
        the portal, the attributes and ACLs; enabled last."""
        host = self.host
        tpgt, name = plan.tpgs[index], plan.portals[index]
        tpg = f"{ROOT}/iscsi/{plan.iqn}/{tpgt}"
        self._step(f"cannot create {tpgt} of {plan.iqn}", partial(remote.mkdir, host, tpg))
        for lun in plan.luns:
            lun_dir = f"{tpg}/lun/lun_{lun.lun}"
            backstore = f"{ROOT}/core/{hbas[lun.lun]}/{lun.backstore}"
            self._step(f"cannot create LUN {lun.lun} of {plan.iqn} {tpgt}", partial(remote.mkdir, host, lun_dir))
            self._step(
                f"cannot map backstore {lun.backstore} to LUN {lun.lun}",
                partial(remote.link, host, backstore, f"{lun_dir}/{lun.backstore}"),
            )
            if len(plan.portals) > 1:
                # Removed with the backstore (remove_backstore), after the target and its LUNs.
                group = alua_group(self.model.name_prefix, tpgt)
                self._step(
                    f"cannot create ALUA group {group} in backstore {lun.backstore}",
                    partial(remote.mkdir, host, f"{backstore}/{ALUA_FOLDER}/{group}"),
                )
                self._step(
                    f"cannot number ALUA group {group} of {lun.backstore}",
                    partial(remote.write, host, f"{backstore}/{ALUA_FOLDER}/{group}/tg_pt_gp_id", str(index + 1)),
                )
                self._step(
                    f"cannot put LUN {lun.lun} of {tpgt} in ALUA group {group}",
                    partial(remote.write, host, f"{lun_dir}/alua_tg_pt_gp", group),
                )
        portal = f"{tpg}/np/{name}"
        self._step(
            f"cannot open the iSCSI portal {name}",
            partial(remote.mkdir, host, portal),
            f"check that {address} is an address of the target and TCP port {plan.port} is free "
            f"({self.where}.iscsi.port)",
        )
        if plan.iser:
            self._step(
                f"cannot switch on iSER on portal {name}",
                partial(remote.write, host, f"{portal}/iser", "1"),
                "check that ib_isert is loaded and an RDMA device (rxe or a NIC) sits on the portal's "
                "interface (`rdma link`)",
            )
        attrib = f"{tpg}/attrib"
        chap = "1" if plan.chap is not None else "0"
        self._step(
            f"cannot set authentication {chap} (CHAP)", partial(remote.write, host, f"{attrib}/authentication", chap)
        )
        if plan.cmdsn_depth is not None:
            # Before the ACLs: an explicit ACL takes its cmdsn_depth from the TPG's default when it is created.
            self._step(
                f"cannot set default_cmdsn_depth {plan.cmdsn_depth}",
                partial(remote.write, host, f"{attrib}/default_cmdsn_depth", str(plan.cmdsn_depth)),
                f"LIO takes 1 to 512 ({self.where}.iscsi.cmdsn_depth)",
            )
        if plan.acls:
            for iqn in plan.acls:
                acl = f"{tpg}/acls/{iqn}"
                self._step(f"cannot create the ACL for {iqn}", partial(remote.mkdir, host, acl))
                for lun in plan.luns:
                    mapped = f"{acl}/lun_{lun.lun}"
                    self._step(f"cannot map LUN {lun.lun} for {iqn}", partial(remote.mkdir, host, mapped))
                    self._step(
                        f"cannot map LUN {lun.lun} for {iqn}",
                        partial(remote.link, host, f"{tpg}/lun/lun_{lun.lun}", f"{mapped}/lun_{lun.lun}"),
                    )
                if plan.chap is not None:
                    self._set_chap(plan.chap, f"{acl}/auth", iqn)
        else:
            # No initiator IQNs declared: demo mode, every initiator sees every LUN, writable.
            for setting, value in (
                ("generate_node_acls", "1"),
                ("cache_dynamic_acls", "1"),
                ("demo_mode_write_protect", "0"),
            ):
                self._step(f"cannot set {setting}", partial(remote.write, host, f"{attrib}/{setting}", value))
        self._step(f"cannot enable {plan.iqn} {tpgt}", partial(remote.write, host, f"{tpg}/enable", "1"))

    def _set_chap(self, chap: IscsiChap, auth: str, iqn: str) -> None:
        """The ACL's CHAP credentials: the name and secret its initiator must give, and for mutual CHAP the target's
        own. Secrets go through stdin (:func:`remote.write_secret`), read from where the lab says only now."""
        sides = [("userid", "password", chap.initiator)]
        if chap.target is not None:
            sides.append(("userid_mutual", "password_mutual", chap.target))
        for user_attr, secret_attr, credentials in sides:
            self._step(
                f"cannot set the CHAP {user_attr} of {iqn}",
                partial(remote.write, self.host, f"{auth}/{user_attr}", credentials.user),
            )
            self._step(
                f"cannot set the CHAP {secret_attr} of {iqn} (read from {credentials.secret.where})",
                partial(remote.write_secret, self.host, f"{auth}/{secret_attr}", credentials.secret.reveal()),
                "LIO takes secrets of up to 255 characters",
            )

    # -- stale state and leftovers -------------------------------------------------------------------------
    def _ours(self, snap: LioSnapshot) -> tuple[list[str], list[str], list[str], bool]:
        """Ours, checked twice: recorded in this lab's state file *and* carrying our mark.

        - a backstore: recorded, and named ``<prefix>_`` (its mark);
        - an iSCSI target: recorded, and every LUN of it is backed by a backstore of ours (a target with no LUN yet,
          what a run killed between its mkdir and its first LUN leaves, has nothing of anyone's behind it);
        - an HBA: recorded (it holds only backstores, and ``rmdir`` refuses one that holds any).
        """
        state = self._read_state()
        recorded = state or {}
        backstores = [k for k in recorded.get("backstores", []) if k in snap.backstores and self._marked(k)]
        targets = [
            iqn
            for iqn in recorded.get("targets", [])
            if iqn in snap.targets and all(self._marked(n) for n in snap.lun_backstores(iqn))
        ]
        hbas = [h for h in recorded.get("hbas", []) if h in snap.hbas]
        return targets, backstores, hbas, state is not None

    def _marked(self, backstore: str) -> bool:
        """A backstore (``hba/name``) named with our mark."""
        return backstore.rsplit("/", 1)[-1].startswith(self.prefix)

    def _left_alone(self, snap: LioSnapshot, targets: list[str]) -> list[str]:
        """One sentence per iSCSI target that is half ours: recorded but backed by another's backstore, or backed
        only by ours but listed in no record of this lab."""
        recorded = (self._read_state() or {}).get("targets", [])
        lines = [
            f"{self.host.name}: left iSCSI target {iqn} alone: this lab's record lists it, but a LUN of it is backed "
            "by a backstore that is not the lab's (another session or tool made it since)"
            for iqn in recorded
            if iqn in snap.targets and iqn not in targets
        ]
        for iqn in snap.targets:
            names = snap.lun_backstores(iqn)
            if iqn not in targets and iqn not in recorded and names and all(self._marked(n) for n in names):
                lines.append(
                    f"{self.host.name}: left iSCSI target {iqn} alone: its LUNs carry this lab's mark "
                    f"({self.prefix!r}) but no record of this lab lists it (remove it by hand if it is yours)"
                )
        return lines

    def cleanup_stale(self) -> list[str]:
        """Remove the targets, backstores and HBAs an earlier run left, then its state file."""
        snap = self.snapshot()
        removed: list[str] = []
        if snap.loaded:
            targets, backstores, hbas, has_state = self._ours(snap)
            removed += self._left_alone(snap, targets)
            for iqn in targets:
                remove_target(self.host, iqn)
                removed.append(f"{self.host.name}: removed iSCSI target {iqn}")
            for key in backstores:
                remove_backstore(self.host, key)
                removed.append(f"{self.host.name}: removed LIO backstore {key}")
            for hba in hbas:
                if self.host.run(["rmdir", f"{ROOT}/core/{hba}"], check=False).ok:
                    removed.append(f"{self.host.name}: removed LIO HBA {hba}")
        else:
            has_state = self._read_state() is not None
        return removed + self._drop_stale_state(has_state)

    def leftovers(self) -> list[str]:
        """Targets, backstores and HBAs this plugin created that are still there, and its state file."""
        snap = self.snapshot()
        targets, backstores, hbas, has_state = self._ours(snap) if snap.loaded else ([], [], [], False)
        if not snap.loaded:
            has_state = self._read_state() is not None
        found = [f"{self.host.name}: iSCSI target {t} is still configured" for t in targets]
        found += [f"{self.host.name}: LIO backstore {b} is still configured" for b in backstores]
        found += [f"{self.host.name}: LIO HBA {h} is still configured" for h in hbas]
        if has_state:
            found.append(f"{self.host.name}: state file {self.state_file} is still there")
        return found


def remove_backstore(host: Host, key: str) -> None:
    """Remove backstore ``key`` ("hba/name") with the ALUA groups in it (idempotent)."""
    host.run(["sh", "-c", REMOVE_BACKSTORE_SCRIPT, "sh", key])


def remove_target(host: Host, iqn: str) -> None:
    """Remove iSCSI target ``iqn`` with its TPGs, ACLs, LUNs and portals (idempotent)."""
    host.run(["sh", "-c", REMOVE_TARGET_SCRIPT, "sh", iqn])
