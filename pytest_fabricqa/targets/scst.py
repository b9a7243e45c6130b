"""SCST 3.x through its sysfs interface (``/sys/kernel/scst_tgt``): vdisk devices, an iSCSI target with LUNs, ACLs
and QueuedCommands, served over TCP by iscsi-scst and over RDMA by isert-scst.

scstadmin is a Perl tool many hosts lack; sysfs is what it writes in the end, so this module writes sysfs directly:
``handlers/vdisk_*/mgmt`` (add_device), ``targets/iscsi/mgmt`` (add_target, add_target_attribute allowed_portal),
the target's ``luns/mgmt`` or, with initiator IQNs, an ``ini_groups`` group of them with its own LUNs,
``QueuedCommands``, ``enabled``. Each device gets a unit serial (``usn``).

iscsi-scstd, SCST's user-space half, must run before a target can be added, and it listens for iSER only when
isert_scst was loaded before it started. When it exits the kernel deletes every iSCSI target, everyone's: the
plugin stops a daemon it started (``scst.daemon: start``) only when no foreign target is left on it.

Ownership: devices are named ``<name_prefix>_<device>`` and carry a serial derived from the mark; the state file
``/run/fabricqa/<name_prefix>-scst.json`` lists the devices and the target IQN this plugin is about to create,
written before the first exists, and the pid of an iscsi-scstd it started. An object is ours only when both say so
(checked twice, issue 28): a device the state file lists that carries our serial; a target the state file lists
whose every LUN is one of our devices. A device that is only one of the two is named by the stale clean-up and never
touched. SCST takes the serial after ``add_device``, so a device whose serial is still SCST's own (nobody set one)
counts as marked: that is what a run killed between the two leaves. Anything else is never touched either.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pytest_fabricqa.core.commands import command_tail
from pytest_fabricqa.core.export import Export
from pytest_fabricqa.core.kinds import REGISTRY
from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.lab.model import LabModel, ScstSettings, TargetModel
from pytest_fabricqa.targets import remote
from pytest_fabricqa.targets.configfs import ConfigfsTarget
from pytest_fabricqa.targets.scsi import ScsiLun, ScsiPlan, daemon_pid, plan_from_lab, unit_serial
from pytest_fabricqa.transport.base import CommandError, Host

ROOT = "/sys/kernel/scst_tgt"
ISCSI = f"{ROOT}/targets/iscsi"
DAEMON = "iscsi-scstd"
DAEMON_PID_FILE = "/run/iscsi-scstd.pid"  # iscsi-scstd writes it itself (iscsi_scstd.c), always there
STOP_TIMEOUT_S = 15.0
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

SNAPSHOT_SCRIPT = r"""
r=/sys/kernel/scst_tgt
[ -d "$r" ] || { echo NOSCST; exit 0; }
a() { head -n 1 "$1" 2>/dev/null; }
for d in "$r"/devices/*; do
  [ -d "$d" ] || continue
  h=$(readlink "$d/handler" 2>/dev/null)
  k=; grep -qx '\[key\]' "$d/usn" 2>/dev/null && k=set
  printf 'D\t%s\t%s\t%s\t%s\t%s\n' "${d##*/}" "${h##*/}" "$(a "$d/filename")" "$(a "$d/usn")" "$k"
done
i=$r/targets/iscsi
[ -d "$i" ] || { echo NOISCSI; exit 0; }
printf 'I\t%s\t%s\n' "$(a "$i/open_state")" "$(a "$i/enabled")"
for t in "$i"/*; do
  [ -d "$t" ] || continue
  q=${t##*/}
  printf 'T\t%s\t%s\t%s\n' "$q" "$(a "$t/enabled")" "$(a "$t/QueuedCommands")"
  for p in "$t"/allowed_portal*; do [ -f "$p" ] && printf 'P\t%s\t%s\t%s\n' "$q" "${p##*/}" "$(a "$p")"; done
  for l in "$t"/luns/*; do
    [ -d "$l" ] || continue
    k=$(readlink "$l/device")
    printf 'L\t%s\t%s\t%s\n' "$q" "${l##*/}" "${k##*/}"
  done
  for g in "$t"/ini_groups/*; do
    [ -d "$g" ] || continue
    printf 'G\t%s\t%s\n' "$q" "${g##*/}"
    for l in "$g"/luns/*; do
      [ -d "$l" ] || continue
      k=$(readlink "$l/device")
      printf 'GL\t%s\t%s\t%s\t%s\n' "$q" "${g##*/}" "${l##*/}" "${k##*/}"
    done
    for n in "$g"/initiators/*; do
      [ -e "$n" ] && [ "${n##*/}" != mgmt ] && printf 'GI\t%s\t%s\t%s\n' "$q" "${g##*/}" "${n##*/}"
    done
  done
  for s in "$t"/sessions/*; do [ -d "$s" ] && printf 'S\t%s\t%s\n' "$q" "${s##*/}"; done
done
exit 0
"""

MGMT_RESULT = f"{ROOT}/last_sysfs_mgmt_res"
MGMT_WAIT_S = 300  # how long a queued command is waited for
# One management command ($1) into a mgmt file or attribute ($2); $3: SCST's last_sysfs_mgmt_res, $4: seconds to
# wait. SCST answers EAGAIN when a command takes longer than 15 s, meaning "queued": last_sysfs_mgmt_res then gives
# the outcome once it is known, and reading it answers EAGAIN while it is pending (scst/README,
# "last_sysfs_mgmt_res"). The write goes through coreutils' printf (``env printf``): dash's builtin reports every
# failed write as "I/O error", coreutils' prints strerror, "Resource temporarily unavailable" for EAGAIN
# (tests/data/scst/README.md has both, recorded). A queued command is waited for, so what it makes is ours.
# A command carrying a secret (CHAP's IncomingUser) is "-": it comes on stdin, goes through cat (coreutils' too,
# same messages) and is named in messages by $5, never shown.
MGMT_SCRIPT = r"""
label=${5:-$1}
if [ "$1" = - ]; then
  IFS= read -r cmd
  if out=$(printf %s "$cmd" | cat 2>&1 > "$2"); then exit 0; fi
elif out=$(env printf %s "$1" 2>&1 > "$2"); then exit 0; fi
case "$out" in *"temporarily unavailable"*) ;; *) printf '%s\n' "$out" >&2; exit 1;; esac
i=0
while :; do
  if res=$(cat "$3" 2>&1); then
    [ "$res" = 0 ] && exit 0
    printf 'SCST answered %s to "%s"\n' "$res" "$label" >&2; exit 1
  fi
  case "$res" in *"temporarily unavailable"*) ;; *) printf '%s\n' "$res" >&2; exit 1;; esac
  i=$((i+1))
  [ "$i" -lt "$4" ] || { printf 'SCST still busy with "%s" after %s s\n' "$label" "$4" >&2; exit 1; }
  sleep 1
done
"""

# argv: pid, state file. STARTED when process $1 started at or after the state file was last written (so after the
# "daemon: starting" marker that precedes our start of iscsi-scstd), else EARLIER. The clock is read before the
# process's age: however long the host keeps the script waiting in between, the start it works out is never later
# than the true one, so a wait can only make another's daemon look older, never ours (it once read the clock after,
# and a host slow by 4 s between the two made a daemon started before the marker look started after it).
STARTED_SCRIPT = r"""
n=$(date +%s)
e=$(ps -o etimes= -p "$1" 2>/dev/null | tr -d ' ')
m=$(stat -c %Y "$2" 2>/dev/null)
[ -n "$e" ] && [ -n "$m" ] || { echo EARLIER; exit 0; }
[ $(( n - e )) -ge $(( m - 1 )) ] && echo STARTED || echo EARLIER
"""

# Whether the iscsi-scstd of pid $1 holds /dev/isert_scst open: it opens it at start, when isert_scst is loaded.
ISER_SCRIPT = 'ls -l "/proc/$1/fd" 2>/dev/null | grep -q isert_scst && echo yes || echo no'


@dataclass
class ScstIscsiTarget:
    """One iSCSI target of SCST as the snapshot lists it."""

    iqn: str
    enabled: str = ""
    queued_commands: str = ""
    portals: dict[str, str] = field(default_factory=dict)  # attribute name -> value
    luns: dict[int, str] = field(default_factory=dict)  # LUN -> device name
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # group -> {"luns": {}, "initiators": []}
    sessions: list[str] = field(default_factory=list)

    def devices(self) -> list[str]:
        """Every device behind a LUN of this target, its groups' LUNs included."""
        names = list(self.luns.values())
        names += [d for g in self.groups.values() for d in g["luns"].values()]
        return names


@dataclass
class ScstSnapshot:
    """SCST's sysfs tree as :data:`SNAPSHOT_SCRIPT` printed it."""

    loaded: bool = True  # /sys/kernel/scst_tgt exists
    iscsi: bool = True  # iscsi_scst is loaded
    open_state: str = ""  # "open" while iscsi-scstd runs
    driver_enabled: str = ""
    devices: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> handler, filename, usn
    targets: dict[str, ScstIscsiTarget] = field(default_factory=dict)


def parse_snapshot(text: str) -> ScstSnapshot:
    """:data:`SNAPSHOT_SCRIPT` output -> :class:`ScstSnapshot`."""
    snap = ScstSnapshot()
    for line in text.splitlines():
        parts = line.split("\t") + [""] * 5
        tag = parts[0]
        if tag == "NOSCST":
            snap.loaded = snap.iscsi = False
        elif tag == "NOISCSI":
            snap.iscsi = False
        elif tag == "D":
            # usn_set: "set" when someone set the unit serial (SCST's sysfs shows "[key]" under a value that is not
            # its default, vdev_sysfs_usn_show); "" while it is SCST's own.
            snap.devices[parts[1]] = {"handler": parts[2], "filename": parts[3], "usn": parts[4], "usn_set": parts[5]}
        elif tag == "I":
            snap.open_state, snap.driver_enabled = parts[1], parts[2]
        elif tag == "T":
            snap.targets[parts[1]] = ScstIscsiTarget(parts[1], parts[2], parts[3])
        elif parts[1] in snap.targets:
            target = snap.targets[parts[1]]
            if tag == "P":
                target.portals[parts[2]] = parts[3]
            elif tag == "L" and parts[2].isdigit():
                target.luns[int(parts[2])] = parts[3]
            elif tag == "G":
                target.groups[parts[2]] = {"luns": {}, "initiators": []}
            elif tag == "GL" and parts[2] in target.groups and parts[3].isdigit():
                target.groups[parts[2]]["luns"][int(parts[3])] = parts[4]
            elif tag == "GI" and parts[2] in target.groups:
                target.groups[parts[2]]["initiators"].append(parts[3])
            elif tag == "S":
                target.sessions.append(parts[2])
    return snap


def mgmt(host: Host, path: str, command: str, *, secret: str | None = None) -> None:
    """Send one SCST management command (or attribute value) to ``path``, waiting out SCST's EAGAIN. With
    ``secret``, ``command`` is what messages show and the command itself, ``command`` with ``<secret>`` replaced by
    the secret, goes on stdin (never in a command line)."""
    if secret is None:
        host.run(["sh", "-c", MGMT_SCRIPT, "sh", command, path, MGMT_RESULT, str(MGMT_WAIT_S)])
        return
    argv = ["sh", "-c", MGMT_SCRIPT, "sh", "-", path, MGMT_RESULT, str(MGMT_WAIT_S), command]
    host.run(argv, stdin=command.replace("<secret>", secret) + "\n")


class ScstTarget(ConfigfsTarget):
    """SCST on a lab host, driven through sysfs over the host's transport.

    sysfs here plays the part configfs plays for nvmet and LIO, so the configfs kinds' base serves: the host, the
    lab key for messages, one-line failures and the state file.
    """

    kind = "scst"

    def __init__(self, lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> None:
        assert model.iscsi is not None
        super().__init__(lab, model, hosts)
        self.settings = model.scst or ScstSettings()
        self.prefix = f"{model.name_prefix}_"

    def snapshot(self) -> ScstSnapshot:
        """Read SCST's devices and iSCSI targets in one command."""
        return parse_snapshot(self.host.run(["sh", "-c", SNAPSHOT_SCRIPT]).stdout)

    def device_name(self, backing: str) -> str:
        """The SCST device serving lab device ``backing``: the mark, then the lab's name."""
        return f"{self.prefix}{backing}"

    def handler_of(self, backing: str) -> tuple[str, bool]:
        """The vdisk handler and nv_cache setting for lab device ``backing``."""
        own = self.settings.devices.get(backing)
        handler = (own.handler if own else None) or self.settings.handler
        nv_cache = own.nv_cache if own is not None and own.nv_cache is not None else self.settings.nv_cache
        return handler, nv_cache

    def _mgmt(self, what: str, path: str, command: str, fix: str = "", *, secret: str | None = None) -> None:
        try:
            mgmt(self.host, path, command, secret=secret)
        except CommandError as exc:
            raise self._fail(
                f"{what} ({command_tail(exc)})", fix or "see the target's dmesg for SCST's reason"
            ) from None

    # -- provision ------------------------------------------------------------------------------------------
    def provision(self, protocol: str, undo: UndoStack) -> Export:
        """Load SCST, find or start iscsi-scstd, create the devices, the target, its LUNs and ACLs; enable it."""
        spec = protocol_spec(protocol)
        if protocol not in REGISTRY[self.kind].serves:
            raise self._fail(f"SCST does not serve {protocol} here", f"serve {protocol} with another target kind")
        plan = plan_from_lab(self.lab, self.model, protocol, 0)
        for lun in plan.luns:
            if not _DEVICE_NAME.match(self.device_name(lun.backing)):
                raise self._fail(
                    f"SCST device name {self.device_name(lun.backing)!r} (name_prefix + device name) is not valid",
                    f"use letters, digits, '_', '.' and '-' in {self.where}.name_prefix and the device names",
                )
        modules = list(spec.target_modules["scst"])
        result = self.host.run(["modprobe", "-a", *modules], check=False)
        if not result.ok:
            raise self._fail(
                f"cannot load SCST's kernel modules {', '.join(modules)} ({result.stderr.strip() or 'no message'})",
                "build and install SCST for this kernel (make scst iscsi, with isert-scst for iSER)",
            )
        state: dict[str, Any] = {"kind": "scst", "owner": f"pid {os.getpid()}", "devices": [], "targets": []}
        undo.push(f"remove {self.state_file}", self._remove_state_if_clean)
        if self.settings.daemon == "start":
            self._start_daemon(plan, undo, state)
        snap = self.snapshot()
        self._check_daemon(plan, snap)
        self._check(plan, snap)
        state["devices"] = [self.device_name(lun.backing) for lun in plan.luns]
        state["targets"] = [plan.iqn]
        self._write_state(state)
        for lun in plan.luns:
            self._make_device(lun, undo, state)
        self._make_target(plan, undo, state)
        if snap.driver_enabled != "1":
            undo.push("switch SCST's iscsi driver back off", partial(self._disable_driver, plan.iqn))
            self._step("cannot enable SCST's iscsi driver", partial(remote.write, self.host, f"{ISCSI}/enabled", "1"))
        return plan.export(protocol, self.host.name)

    def _check_daemon(self, plan: ScsiPlan, snap: ScstSnapshot) -> None:
        if not snap.loaded or not snap.iscsi:
            raise self._fail(
                f"{ISCSI} is missing after loading SCST's modules",
                "check dmesg: the SCST modules may not match this kernel",
            )
        if snap.open_state != "open":
            raise self._fail(
                f"{DAEMON} is not running (SCST's iscsi open_state is {snap.open_state or 'unknown'})",
                f"start it ({DAEMON}) or set {self.where}.scst.daemon: start",
            )
        if plan.iser:
            pid = daemon_pid(self.host, DAEMON_PID_FILE, DAEMON)
            listens = pid is not None and self.host.run(["sh", "-c", ISER_SCRIPT, "sh", str(pid)]).stdout.strip()
            if listens != "yes":
                raise self._fail(
                    f"{DAEMON} (pid {pid}) does not serve iSER: it was started before isert_scst was loaded",
                    f"restart {DAEMON} now that isert_scst is loaded, or set {self.where}.scst.daemon: start",
                )

    def _check(self, plan: ScsiPlan, snap: ScstSnapshot) -> None:
        if plan.iqn in snap.targets:
            raise self._fail(
                f"SCST iSCSI target {plan.iqn} already exists and was not created by fabricqa",
                f"remove it (echo 'del_target {plan.iqn}' > {ISCSI}/mgmt) or use another IQN in {self.where}.iscsi.iqn",
            )
        others = [t for t in snap.targets if t != plan.iqn]
        if snap.driver_enabled != "1" and others:
            raise self._fail(
                f"SCST's iscsi driver is switched off ({ISCSI}/enabled is 0) and it holds target {others[0]}, "
                "which is not fabricqa's",
                f"switching it on would open that target too; enable it by hand (echo 1 > {ISCSI}/enabled)",
            )
        for lun in plan.luns:
            name = self.device_name(lun.backing)
            if name in snap.devices:
                raise self._fail(
                    f"SCST device {name} already exists and was not created by fabricqa",
                    f"remove it or set another {self.where}.name_prefix",
                )
            handler, _ = self.handler_of(lun.backing)
            key = f"{self.where}.scst.devices.{lun.backing}.handler"
            if handler == "vdisk_blockio" and not remote.is_block_device(self.host, lun.path):
                exists = self.host.run(["test", "-e", lun.path], check=False).ok
                raise self._fail(
                    f"backing device {lun.backing} ({lun.path}) "
                    + ("is not a block device, which vdisk_blockio needs" if exists else "does not exist"),
                    f"set {key}: vdisk_fileio to serve a file"
                    if exists
                    else f"fix {self.where}.devices.{lun.backing}.path",
                )
            if handler == "vdisk_fileio" and not self.host.run(["test", "-e", lun.path], check=False).ok:
                raise self._fail(
                    f"backing file {lun.backing} ({lun.path}) does not exist",
                    f"create it (fallocate -l 10G {lun.path}, as seed 000 did) or fix {self.where}.devices.{lun.backing}.path",
                )
            users = [n for n, d in snap.devices.items() if d["filename"] == lun.path]
            if users:
                raise self._fail(
                    f"{lun.path} is already served by SCST device {users[0]} (not fabricqa's)",
                    "remove that device or give the lab another one",
                )

    def _make_device(self, lun: ScsiLun, undo: UndoStack, state: dict[str, Any]) -> None:
        name = self.device_name(lun.backing)
        handler, nv_cache = self.handler_of(lun.backing)
        params = f"filename={lun.path}" + ("; nv_cache=1" if nv_cache else "")
        discard = undo.push(f"remove SCST device {name}", partial(self.remove_device, name, handler))
        try:
            mgmt(self.host, f"{ROOT}/handlers/{handler}/mgmt", f"add_device {name} {params}")
        except CommandError as exc:
            if name in self.snapshot().devices:
                # Made by someone else since the snapshot: neither ours to remove now nor at the next start.
                discard()
                self._forget(state, "devices", name)
                raise self._fail(
                    f"SCST device {name} appeared while fabricqa was creating it (another session or tool)",
                    "let the other session finish, or set another name_prefix",
                ) from None
            raise self._fail(
                f"cannot add SCST device {name} ({handler}, {lun.path}) ({command_tail(exc)})",
                "see the target's dmesg for SCST's reason (a file on tmpfs needs vdisk_fileio?)",
            ) from None
        self._mgmt(f"cannot set the unit serial of {name}", f"{ROOT}/devices/{name}/usn", lun.serial)

    def _make_target(self, plan: ScsiPlan, undo: UndoStack, state: dict[str, Any]) -> None:
        target = f"{ISCSI}/{plan.iqn}"
        discard = undo.push(f"remove SCST iSCSI target {plan.iqn}", partial(self.remove_target, plan.iqn))
        try:
            mgmt(self.host, f"{ISCSI}/mgmt", f"add_target {plan.iqn}")
        except CommandError as exc:
            if plan.iqn in self.snapshot().targets:
                discard()
                self._forget(state, "targets", plan.iqn)
                raise self._fail(
                    f"SCST iSCSI target {plan.iqn} appeared while fabricqa was creating it (another session or tool)",
                    f"let the other session finish, or use another IQN in {self.where}.iscsi.iqn",
                ) from None
            raise self._fail(
                f"cannot add SCST iSCSI target {plan.iqn} ({command_tail(exc)})",
                f"check that {DAEMON} runs and see the target's dmesg",
            ) from None
        if self.settings.queued_commands is not None:
            self._mgmt(
                f"cannot set QueuedCommands {self.settings.queued_commands} on {plan.iqn}",
                f"{target}/QueuedCommands",
                str(self.settings.queued_commands),
                f"SCST takes 1 to 2048 ({self.where}.scst.queued_commands)",
            )
        # Only the lab's storage addresses (one per path): discovery elsewhere would offer portals iSER cannot
        # reach (README.iser), and a login anywhere else is refused.
        for address in plan.addresses:
            self._mgmt(
                f"cannot restrict {plan.iqn} to the portal {address}",
                f"{ISCSI}/mgmt",
                f"add_target_attribute {plan.iqn} allowed_portal {address}",
            )
        if plan.chap is not None:
            # iscsi-scstd checks IncomingUser at each login to the target; OutgoingUser is what it answers with
            # for mutual CHAP (iscsi-scst/README, "IncomingUser", "OutgoingUser").
            sides = [("IncomingUser", plan.chap.initiator)]
            if plan.chap.target is not None:
                sides.append(("OutgoingUser", plan.chap.target))
            for attribute, credentials in sides:
                self._mgmt(
                    f"cannot set CHAP's {attribute} {credentials.user} on {plan.iqn} (its secret read from "
                    f"{credentials.secret.where})",
                    f"{ISCSI}/mgmt",
                    f"add_target_attribute {plan.iqn} {attribute} {credentials.user} <secret>",
                    "iscsi-scstd takes secrets of 12 to 16 characters for Windows initiators, up to 255 otherwise",
                    secret=credentials.secret.reveal(),
                )
        if plan.acls:
            group = f"{target}/ini_groups/{self.model.name_prefix}"
            self._mgmt(
                f"cannot create the initiator group of {plan.iqn}",
                f"{target}/ini_groups/mgmt",
                f"create {self.model.name_prefix}",
            )
            luns, initiators = f"{group}/luns/mgmt", f"{group}/initiators/mgmt"
            for iqn in plan.acls:
                self._mgmt(f"cannot admit {iqn} to {plan.iqn}", initiators, f"add {iqn}")
        else:
            luns = f"{target}/luns/mgmt"  # the target's default LUNs: every initiator sees them
        for lun in plan.luns:
            self._mgmt(
                f"cannot map {self.device_name(lun.backing)} to LUN {lun.lun} of {plan.iqn}",
                luns,
                f"add {self.device_name(lun.backing)} {lun.lun}",
            )
        self._mgmt(f"cannot enable {plan.iqn}", f"{target}/enabled", "1")

    # -- removal --------------------------------------------------------------------------------------------
    def remove_target(self, iqn: str) -> None:
        """Disable and delete iSCSI target ``iqn`` with its LUNs, groups and sessions (idempotent)."""
        if iqn not in self.snapshot().targets:
            return
        self.host.run(["sh", "-c", '[ ! -f "$1" ] || printf 0 > "$1" || true', "sh", f"{ISCSI}/{iqn}/enabled"])
        mgmt(self.host, f"{ISCSI}/mgmt", f"del_target {iqn}")

    def remove_device(self, name: str, handler: str | None = None) -> None:
        """Delete SCST device ``name`` (idempotent)."""
        device = self.snapshot().devices.get(name)
        if device is None:
            return
        mgmt(self.host, f"{ROOT}/handlers/{device['handler'] or handler}/mgmt", f"del_device {name}")

    def _disable_driver(self, our_iqn: str) -> None:
        """Switch the iscsi driver off again, as it was before this run, unless other targets now use it."""
        snap = self.snapshot()
        if snap.iscsi and not [t for t in snap.targets if t != our_iqn]:
            remote.write(self.host, f"{ISCSI}/enabled", "0")

    # -- the daemon -----------------------------------------------------------------------------------------
    def _recorded_daemon(self, running: int | None) -> int | None:
        """The pid of the iscsi-scstd the state file says this plugin started: its ``daemon_pid``, or, when a run was
        killed between the ``daemon: starting`` marker and that pid, the ``running`` daemon if it started after the
        marker was written (nobody else starts one on a host while our marker says we are starting it)."""
        state = self._read_state() or {}
        recorded = state.get("daemon_pid")
        if isinstance(recorded, int):
            return recorded
        if state.get("daemon") == "starting" and running is not None:
            out = self.host.run(["sh", "-c", STARTED_SCRIPT, "sh", str(running), self.state_file], check=False)
            if out.stdout.strip() == "STARTED":
                return running
        return None

    def _start_daemon(self, plan: ScsiPlan, undo: UndoStack, state: dict[str, Any]) -> None:
        running = daemon_pid(self.host, DAEMON_PID_FILE, DAEMON)
        recorded = self._recorded_daemon(running)
        if running is not None and running == recorded:
            # Started by an earlier run and kept up by someone else's target since: ours to use and to stop.
            state["daemon_pid"] = running
            undo.push(f"stop the {DAEMON} fabricqa started", self.stop_daemon)
            return
        snap = self.snapshot()
        if snap.open_state == "open" or running is not None:
            raise self._fail(
                f"{DAEMON} is already running{f' (pid {running})' if running else ''} and fabricqa did not start it",
                f"set {self.where}.scst.daemon: attach to use it, or stop it",
            )
        self._refuse_busy_port(plan.port, "iscsi.port", " (another iSCSI target?)")
        undo.push(f"stop the {DAEMON} fabricqa started", self.stop_daemon)
        self._write_state({**state, "daemon": "starting"})
        # -a takes a space-separated list (iscsi_scstd.c): it listens on every path's address and nowhere else.
        argv = [self.settings.binary, "-p", str(plan.port), "-a", " ".join(plan.addresses)]
        self._step(
            f"cannot start {self.settings.binary}",
            partial(self.host.run, argv),
            f"is SCST's {DAEMON} installed, and TCP port {plan.port} free on {' and '.join(plan.addresses)} (a LIO "
            "portal holds it with no process to show)? Its reason is in the system log",
        )
        pid = daemon_pid(self.host, DAEMON_PID_FILE, DAEMON)
        if pid is None:
            raise self._fail(
                f"{self.settings.binary} exited right after it started", "see its messages in the system log"
            )
        state["daemon_pid"] = pid
        self._write_state(state)

    def stop_daemon(self) -> None:
        """Stop the iscsi-scstd this plugin started (idempotent) -- unless a foreign target is on it: its exit
        would delete every iSCSI target."""
        pid = daemon_pid(self.host, DAEMON_PID_FILE, DAEMON)
        if pid is None or pid != self._recorded_daemon(pid):
            return
        others = list(self.snapshot().targets)
        if others:
            raise ProvisionError(
                self.host.name,
                f"the {DAEMON} fabricqa started (pid {pid}) still serves {', '.join(others)}, not fabricqa's",
                "it stays up for them (its exit would delete them); stop it by hand once they are gone",
            )
        self.host.run(["kill", "-TERM", str(pid)])
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while daemon_pid(self.host, DAEMON_PID_FILE, DAEMON) == pid:
            if time.monotonic() > deadline:
                raise self._fail(f"{DAEMON} (pid {pid}) did not stop within {STOP_TIMEOUT_S:.0f} s", "kill it by hand")
            time.sleep(0.2)

    # -- stale state and leftovers -------------------------------------------------------------------------
    def _ours(self, snap: ScstSnapshot) -> tuple[list[str], list[str], bool]:
        """Ours, checked twice: recorded in this lab's state file *and* carrying our mark.

        - a device: recorded, and its unit serial (``usn``) is the one this lab gives it, or still SCST's own
          (nobody set one: SCST takes the serial after ``add_device``, and a run killed between the two leaves
          that); a serial someone else set is their mark;
        - an iSCSI target: recorded, and every device behind its LUNs is ours (one with no LUN yet has nothing of
          anyone's behind it).
        """
        state = self._read_state()
        recorded = state or {}
        serials = self._serials()
        devices = [
            d
            for d in recorded.get("devices", [])
            if d in snap.devices and (snap.devices[d]["usn"] == serials.get(d) or not snap.devices[d].get("usn_set"))
        ]
        targets = [
            t
            for t in recorded.get("targets", [])
            if t in snap.targets and all(n in devices for n in snap.targets[t].devices())
        ]
        return targets, devices, state is not None

    def _serials(self) -> dict[str, str]:
        """Device name -> the unit serial this lab gives it (the mark)."""
        assert self.model.iscsi is not None
        return {
            self.device_name(name): unit_serial(self.model.name_prefix, self.model.iscsi.iqn, name)
            for name in self.model.devices
        }

    def _left_alone(self, snap: ScstSnapshot, devices: list[str]) -> list[str]:
        """One sentence per device that is half ours: recorded but without our serial, or with it but recorded
        nowhere."""
        recorded = (self._read_state() or {}).get("devices", [])
        serials = self._serials()
        lines = [
            f"{self.host.name}: left SCST device {d} alone: this lab's record lists it, but its unit serial is "
            f"{snap.devices[d]['usn']!r}, set by someone else (another session or tool made it since)"
            for d in recorded
            if d in snap.devices and d not in devices
        ]
        lines += [
            f"{self.host.name}: left SCST device {d} alone: it carries this lab's unit serial but no record of this "
            "lab lists it (remove it by hand if it is yours)"
            for d, device in snap.devices.items()
            if d not in devices and d not in recorded and device["usn"] == serials.get(d)
        ]
        return lines

    def _owned_now(self) -> list[list[str]]:
        snap = self.snapshot()
        targets, devices, _ = self._ours(snap) if snap.loaded else ([], [], False)
        return [targets, devices, [str(p)] if (p := self._our_daemon()) else []]

    def _our_daemon(self) -> int | None:
        pid = daemon_pid(self.host, DAEMON_PID_FILE, DAEMON)
        return pid if pid is not None and pid == self._recorded_daemon(pid) else None

    def cleanup_stale(self) -> list[str]:
        """Remove the targets and devices an earlier run left, stop the iscsi-scstd it started, drop its state."""
        snap = self.snapshot()
        removed: list[str] = []
        has_state = self._read_state() is not None
        if snap.loaded:
            targets, devices, has_state = self._ours(snap)
            removed += self._left_alone(snap, devices)
            for iqn in targets:
                self.remove_target(iqn)
                removed.append(f"{self.host.name}: removed SCST iSCSI target {iqn}")
            for name in devices:
                self.remove_device(name)
                removed.append(f"{self.host.name}: removed SCST device {name}")
        pid = self._our_daemon()
        if pid is not None:
            try:
                self.stop_daemon()
                removed.append(f"{self.host.name}: stopped the {DAEMON} an earlier run started")
            except ProvisionError as exc:
                # Someone else's target is on it now: it stays up, and so does its record, the only thing that
                # says it is ours (the next run reuses it, the leftovers gate names it).
                self._write_state({"kind": "scst", "daemon_pid": pid})
                return [*removed, f"{self.host.name}: left the {DAEMON} an earlier run started running: {exc.what}"]
        return removed + self._drop_stale_state(has_state)

    def leftovers(self) -> list[str]:
        """Targets and devices this plugin created that are still there, its iscsi-scstd, its state file."""
        snap = self.snapshot()
        targets, devices, has_state = self._ours(snap) if snap.loaded else ([], [], False)
        if not snap.loaded:
            has_state = self._read_state() is not None
        found = [f"{self.host.name}: SCST iSCSI target {t} is still configured" for t in targets]
        found += [f"{self.host.name}: SCST device {d} is still configured" for d in devices]
        pid = self._our_daemon()
        if pid is not None:
            found.append(f"{self.host.name}: the {DAEMON} fabricqa started (pid {pid}) is still running")
        if has_state:
            found.append(f"{self.host.name}: state file {self.state_file} is still there")
        return found
