"""The Linux SCSI target framework (Debian's ``tgt``): iSCSI and iSER through ``tgtadm`` against a running ``tgtd``.

tgtd is a user-space daemon. The lab says whether it runs already (``tgt.daemon: attach``, the default: the host's
tgt service) or the plugin starts it for the fabric (``start``: listening on the lab's portal only, stopped after
the fabric). A target is created with the lab's IQN under a target ID (tid) derived from the mark, far from the low
numbers tgt-admin and hand-made targets use; LUNs from 1 (tgt keeps LUN 0 for its controller), each with its
backing store and a unit serial (``--params scsi_sn=``); ACLs bind the lab's initiator IQNs, or every initiator.

Ownership: the state file ``/run/fabricqa/<name_prefix>-tgt.json`` lists every (tid, IQN) this plugin is about to
create, written before the first one exists. A target is ours only when both say so (checked twice, issue 28):
the state file lists it with that tid and IQN, *and* every disk LUN of it carries a serial this plugin derives. A
target that is only one of the two is named by the stale clean-up and never touched. tgt takes a LUN's serial in
the command after the LUN's, so a LUN that still has tgt's own default serial (nobody set one) counts as marked:
that is what a run killed between the two leaves. A tgtd the plugin started is known by its pid file, ``/run/fabricqa/<name_prefix>-tgtd.pid``. Anything else
is never touched; tgtd itself refuses to stop while it serves targets, so a foreign target keeps the daemon up.
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
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.lab.model import ChapCredentials, IscsiChap, LabModel, TargetModel, TgtSettings
from pytest_fabricqa.targets import remote
from pytest_fabricqa.targets.base import mark_number
from pytest_fabricqa.targets.configfs import ConfigfsTarget
from pytest_fabricqa.targets.scsi import ScsiPlan, daemon_pid, plan_from_lab, unit_serial
from pytest_fabricqa.transport.base import CommandError, CommandResult, Host

# Target IDs are derived from the mark in this range (tgt-admin and hand-made targets number from 1 up).
TIDS = (10_000, 1_000_000)
TID_TRIES = 16
FIRST_LUN = 1  # LUN 0 is tgt's controller
START_TIMEOUT_S = 15.0
# tgtadm's answer when the daemon is not there (errno ENOTCONN on its management socket).
NOT_RUNNING_EXIT = 107
COMMAND_NOT_FOUND = 127  # tgt not installed on the host

_TARGET = re.compile(r"^Target (\d+): (\S+)$")
_LUN = re.compile(r"^LUN: (\d+)$")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z /_-]*): ?(.*)$")
_LLD = re.compile(r"^(\w+): (\w+)$")

TGT_ISER_PORT = 3260  # where tgtd listens for iSER; it cannot be moved (see _start_daemon)


ACCOUNT_NEW = 'IFS= read -r secret; exec "$@" --password "$secret"'
"""argv: the tgtadm command that makes a CHAP account, without its password, which comes on stdin: tgtadm takes it
only as an argument, so it is in no command line of ours and in no failed command's message."""


@dataclass
class TgtLun:
    """One logical unit as ``tgtadm --op show`` lists it."""

    lun: int
    kind: str = ""  # "controller", "disk"
    serial: str = ""
    bstype: str = ""
    path: str = ""


@dataclass
class TgtTargetInfo:
    """One target as ``tgtadm --op show`` lists it."""

    tid: int
    iqn: str
    driver: str = ""
    state: str = ""
    nexuses: int = 0
    luns: dict[int, TgtLun] = field(default_factory=dict)
    acls: list[str] = field(default_factory=list)

    def disk_serials(self) -> list[str]:
        """The unit serials of every LUN but the controller."""
        return [lun.serial for lun in self.luns.values() if lun.kind != "controller"]


@dataclass
class TgtSnapshot:
    """Every target of one tgtd (``loaded`` is False when no tgtd answers)."""

    loaded: bool = True
    targets: dict[int, TgtTargetInfo] = field(default_factory=dict)

    def tid_of(self, iqn: str) -> int | None:
        """The tid of the target named ``iqn``, if any."""
        return next((t.tid for t in self.targets.values() if t.iqn == iqn), None)


def parse_show(text: str) -> TgtSnapshot:
    """``tgtadm --mode target --op show`` output -> targets (all drivers: tgtd lists iscsi and iser alike)."""
    snap = TgtSnapshot()
    target: TgtTargetInfo | None = None
    lun: TgtLun | None = None
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if match := _TARGET.match(raw):
            target = TgtTargetInfo(int(match[1]), match[2])
            snap.targets[target.tid] = target
            lun, section = None, ""
            continue
        if target is None:
            continue
        if line.endswith("information:") and raw.startswith("    ") and not raw.startswith("     "):
            section, lun = line.removesuffix(" information:"), None
            continue
        if section == "ACL":
            target.acls.append(line)
        elif section == "I_T nexus" and line.startswith("I_T nexus:"):
            target.nexuses += 1
        elif section == "LUN":
            if match := _LUN.match(line):
                lun = TgtLun(int(match[1]))
                target.luns[lun.lun] = lun
            elif lun is not None and (match := _FIELD.match(line)):
                key, value = match[1], match[2].strip()
                if key == "Type":
                    lun.kind = value
                elif key == "SCSI SN":
                    lun.serial = value
                elif key == "Backing store type":
                    lun.bstype = value
                elif key == "Backing store path":
                    lun.path = "" if value == "None" else value
        elif section == "System" and (match := _FIELD.match(line)):
            if match[1] == "Driver":
                target.driver = match[2].strip()
            elif match[1] == "State":
                target.state = match[2].strip()
    return snap


def parse_lld_states(text: str) -> dict[str, str]:
    """``tgtadm --mode sys --op show`` -> each low-level driver's state ({"iscsi": "ready", "iser": "error"})."""
    states: dict[str, str] = {}
    in_llds = False
    for raw in text.splitlines():
        if not raw.startswith(" "):
            in_llds = raw.strip() == "LLDs:"
            continue
        if in_llds and (match := _LLD.match(raw.strip())):
            states[match[1]] = match[2]
    return states


class TgtTarget(ConfigfsTarget):
    """tgt on a lab host, driven with tgtadm over the host's transport.

    It shares the configfs kinds' base for what is not configfs at all -- the host, the lab key for messages,
    one-line failures and the state file -- rather than copying those.
    """

    kind = "tgt"

    def __init__(self, lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> None:
        assert model.iscsi is not None
        super().__init__(lab, model, hosts)
        self.settings = model.tgt or TgtSettings()
        self.pid_file = f"{remote.STATE_DIR}/{model.name_prefix}-tgtd.pid"

    # -- tgtadm -----------------------------------------------------------------------------------------------
    def adm(self, *args: str) -> list[str]:
        """A tgtadm command line on this target's control port."""
        return ["tgtadm", "--control-port", str(self.settings.control_port), *args]

    def _adm(self, *args: str, check: bool = False) -> CommandResult:
        return self.host.run(self.adm(*args), check=check)

    def snapshot(self) -> TgtSnapshot:
        """Every target tgtd serves, in one command; ``loaded`` False when no tgtd answers."""
        result = self._adm("--lld", "iscsi", "--mode", "target", "--op", "show")
        if not result.ok:
            if result.exit_code in (NOT_RUNNING_EXIT, COMMAND_NOT_FOUND) or "not connected" in result.stderr:
                return TgtSnapshot(loaded=False)  # no tgtd (or no tgt at all): no target of anyone's
            raise CommandError(result, "could not list tgt targets")
        return parse_show(result.stdout)

    def lld_states(self) -> dict[str, str] | None:
        """Each tgtd driver's state, or None when no tgtd answers."""
        return self._lld_states(self._adm("--mode", "sys", "--op", "show"))

    @staticmethod
    def _lld_states(result: CommandResult) -> dict[str, str] | None:
        return parse_lld_states(result.stdout) if result.ok else None

    # -- provision ------------------------------------------------------------------------------------------
    def provision(self, protocol: str, undo: UndoStack) -> Export:
        """Start or find tgtd, create the target under a derived tid, its LUNs with serials, and its ACLs."""
        if protocol not in REGISTRY[self.kind].serves:
            raise self._fail(f"tgt does not serve {protocol}", f"serve {protocol} with another target kind")
        plan = plan_from_lab(self.lab, self.model, protocol, FIRST_LUN)
        lld = "iser" if plan.iser else "iscsi"
        binds = self._acl_binds(plan)
        state: dict[str, Any] = {"kind": "tgt", "owner": f"pid {os.getpid()}", "targets": []}
        undo.push(f"remove {self.state_file}", self._remove_state_if_clean)
        if self.settings.daemon == "start":
            self._start_daemon(plan, undo)
        answer = self._adm("--mode", "sys", "--op", "show")
        states = self._lld_states(answer)
        if states is None and answer.exit_code == COMMAND_NOT_FOUND:
            # Not "tgtd is not running": starting it would not help (issue 28).
            raise self._fail(
                f"tgtadm is not installed ({command_tail(CommandError(answer))})",
                "install Debian's tgt (apt-get install tgt) on the target host, or serve the protocol with another "
                "target kind",
            )
        if states is None:
            raise self._fail(
                f"tgtd is not running (no answer on control port {self.settings.control_port})",
                f"start it (systemctl start tgt) or set {self.where}.tgt.daemon: start",
            )
        if states.get(lld) != "ready":
            raise self._fail(
                f"tgtd's {lld} driver is {states.get(lld, 'missing')}, not ready",
                "load the RDMA modules (rdma_ucm, ib_uverbs) and add an RDMA link before tgtd starts, then restart it"
                if lld == "iser"
                else "restart tgtd",
            )
        snap = self.snapshot()
        self._check(plan, snap)
        if not plan.iser:
            self._check_portal(plan)
        tid = self._next_tid(plan, snap, set())
        state["targets"] = [{"tid": tid, "iqn": plan.iqn}]
        self._write_state(state)
        tid = self._make_target(plan, lld, tid, snap, undo, state)
        for lun in plan.luns:
            self._tgtadm(
                f"cannot add LUN {lun.lun} ({lun.path}) to {plan.iqn}",
                "--lld", lld, "--mode", "logicalunit", "--op", "new", "--tid", str(tid), "--lun", str(lun.lun),
                "--backing-store", lun.path, "--bstype", self.settings.bstype,
                fix=f"check that {lun.path} exists and is not held exclusively ({self.where}.devices.{lun.backing})",
            )  # fmt: skip
            self._tgtadm(
                f"cannot set the unit serial of LUN {lun.lun} of {plan.iqn}",
                "--lld", lld, "--mode", "logicalunit", "--op", "update", "--tid", str(tid), "--lun", str(lun.lun),
                "--params", f"scsi_sn={lun.serial}",
            )  # fmt: skip
        for option, initiator in binds:
            self._tgtadm(
                f"cannot admit {initiator} to {plan.iqn}",
                "--lld", lld, "--mode", "target", "--op", "bind", "--tid", str(tid), option, initiator,
            )  # fmt: skip
        if plan.chap is not None:
            self._make_chap(plan.chap, lld, tid, plan.iqn, undo)
        return plan.export(protocol, self.host.name)

    def _delete_account(self, lld: str, user: str) -> None:
        self._adm("--lld", lld, "--mode", "account", "--op", "delete", "--user", user, check=True)

    def _make_chap(self, chap: IscsiChap, lld: str, tid: int, iqn: str, undo: UndoStack) -> None:
        """tgtd's CHAP: an account per side, bound to the target (the target side ``--outgoing``: what tgtd answers
        with for mutual CHAP). An account is tgtd's, not the target's, so each is removed with the fabric; one that
        exists already is someone else's and refused. The secret goes on stdin (:data:`ACCOUNT_NEW`)."""
        sides: list[tuple[ChapCredentials, tuple[str, ...]]] = [(chap.initiator, ())]
        if chap.target is not None:
            sides.append((chap.target, ("--outgoing",)))
        for credentials, outgoing in sides:
            user = credentials.user
            argv = ["sh", "-c", ACCOUNT_NEW, "sh", *self.adm("--lld", lld, "--mode", "account", "--op", "new",
                                                             "--user", user)]  # fmt: skip
            made = self.host.run(argv, check=False, stdin=credentials.secret.reveal() + "\n")
            if not made.ok:
                raise self._fail(
                    f"cannot make tgt's CHAP account {user} (its secret read from {credentials.secret.where}) "
                    f"({command_tail(CommandError(made))})",
                    "an account of that name that exists already is someone else's: give the lab another "
                    "targets[].iscsi.chap user",
                )
            undo.push(f"delete tgt's CHAP account {user}", partial(self._delete_account, lld, user))
            self._tgtadm(
                f"cannot bind tgt's CHAP account {user} to {iqn}",
                "--lld", lld, "--mode", "account", "--op", "bind", "--tid", str(tid), "--user", user, *outgoing,
            )  # fmt: skip

    def _acl_binds(self, plan: ScsiPlan) -> list[tuple[str, str]]:
        """The ``tgtadm --op bind`` options that admit the lab's initiators: their names (or every initiator).

        tgt's iSCSI login admits an initiator that matches an address OR a name rule; its iSER login before tgt
        1.0.95 (commit b73c64d, "Fix IP and initiator ACL testing logic ...") demands an address AND a name rule,
        and its iSER SendTargets lists only targets with an address rule matching the initiator (seen on vstor:
        a name rule alone answers the login "target not found", class 2 detail 3). So for iSER the initiators'
        storage addresses are bound beside their names: on every tgt release that admits exactly them.
        """
        if not plan.acls:
            if plan.iser:
                raise self._fail(
                    "tgt's iSER login (before tgt 1.0.95) admits only initiators named in its ACL, and the lab "
                    "names none",
                    f"give every initiator host its hosts.NAME.initiator_iqn, or list them in {self.where}.iscsi.acls",
                )
            return [("--initiator-address", "ALL")]
        binds = [("--initiator-name", iqn) for iqn in plan.acls]
        if plan.iser:
            ports = [self.lab.hosts[n].storage for n in self.lab.hosts_with("initiator")]
            binds += (
                [("--initiator-address", str(p.address)) for host_ports in ports for p in host_ports]
                if all(ports)
                else [("--initiator-address", "ALL")]  # before tgt 1.0.95 the names still decide
            )
        return binds

    def _tgtadm(self, what: str, *args: str, fix: str = "") -> None:
        try:
            self._adm(*args, check=True)
        except CommandError as exc:
            raise self._fail(f"{what} ({command_tail(exc)})", fix or "see tgtd's messages in the system log") from None

    def _check(self, plan: ScsiPlan, snap: TgtSnapshot) -> None:
        tid = snap.tid_of(plan.iqn)
        if tid is not None:
            raise self._fail(
                f"tgt target {plan.iqn} (tid {tid}) already exists and was not created by fabricqa",
                f"remove it (tgtadm --lld iscsi --mode target --op delete --tid {tid}) or use another IQN in "
                f"{self.where}.iscsi.iqn",
            )
        for lun in plan.luns:
            if not self.host.run(["test", "-b", lun.path, "-o", "-f", lun.path], check=False).ok:
                raise self._fail(
                    f"backing device {lun.backing} ({lun.path}) does not exist",
                    f"fix {self.where}.devices.{lun.backing}.path in the lab file or attach the device",
                )

    def _portals(self) -> list[str]:
        out = self._adm("--lld", "iscsi", "--mode", "portal", "--op", "show").stdout
        return [
            line.split(":", 1)[1].strip().rsplit(",", 1)[0] for line in out.splitlines() if line.startswith("Portal:")
        ]

    def _check_portal(self, plan: ScsiPlan) -> None:
        """tgtd must listen for iSCSI/TCP on every portal of the lab's (or on every address at its port). The
        tgtd this plugin started gets the further paths' portals here (``tgtadm --mode portal --op new``); they go
        with it when it stops."""
        portals = self._portals()
        started = self.settings.daemon == "start"
        # A tgtd that cannot bind the portal it was started with (an address the host lacks, a port taken) falls
        # back to every address on port 3260, and says so nowhere but here (tests/data/tgt/portal-fallback.stdout).
        if started and plan.portal not in portals:
            raise self._fail(
                f"the tgtd fabricqa started could not listen on {plan.portal} (it fell back to "
                f"{', '.join(portals) or 'nothing'})",
                f"check that {plan.address} is an address of this host and TCP port {plan.port} is free "
                f"({self.where}.iscsi.port; a LIO or SCST portal holds it with no process to show)",
            )
        if started:
            for portal in plan.portals[1:]:
                if portal not in portals:
                    self._tgtadm(
                        f"cannot listen on the further path's portal {portal}",
                        "--lld", "iscsi", "--mode", "portal", "--op", "new", "--param", f"portal={portal}",
                        fix=f"check that {portal.rsplit(':', 1)[0]} is an address of this host and the port is free",
                    )  # fmt: skip
            portals = self._portals()
        anywhere = {f"0.0.0.0:{plan.port}", f"[::]:{plan.port}"}
        for portal in plan.portals:
            if portal not in portals and (started or not anywhere & set(portals)):
                raise self._fail(
                    f"tgtd does not listen on {portal} (its portals: {', '.join(portals) or 'none'})",
                    f"add it (tgtadm --lld iscsi --mode portal --op new --param portal={portal}) or set "
                    f"{self.where}.tgt.daemon: start",
                )

    def _next_tid(self, plan: ScsiPlan, snap: TgtSnapshot, tried: set[int]) -> int:
        low, high = TIDS
        start = mark_number(self.model.name_prefix, plan.iqn, low, high)
        for step in range(high - low):
            tid = low + (start - low + step) % (high - low)
            if tid not in snap.targets and tid not in tried:
                return tid
        raise self._fail("no free tgt target ID", "remove unused tgt targets")

    def _make_target(
        self, plan: ScsiPlan, lld: str, tid: int, snap: TgtSnapshot, undo: UndoStack, state: dict[str, Any]
    ) -> int:
        """Create the target; the tid used (the planned one may have been taken since the snapshot)."""
        tried: set[int] = set()
        while True:
            discard = undo.push(f"remove tgt target {plan.iqn} (tid {tid})", partial(self.remove_target, tid, plan.iqn))
            result = self._adm(
                "--lld", lld, "--mode", "target", "--op", "new", "--tid", str(tid), "--targetname", plan.iqn
            )
            if result.ok:
                return tid
            discard()
            if "already exists" not in result.stderr:
                raise self._fail(
                    f"cannot create tgt target {plan.iqn} (tid {tid}) ({command_tail(CommandError(result))})",
                    "see tgtd's messages in the system log",
                )
            # The tid or the name was taken since the snapshot: a name taken is someone else's target.
            now = self.snapshot()
            if now.tid_of(plan.iqn) is not None:
                state["targets"] = []
                self._write_state(state)
                raise self._fail(
                    f"tgt target {plan.iqn} appeared while fabricqa was creating it (another session or tool)",
                    f"let the other session finish, or use another IQN in {self.where}.iscsi.iqn",
                )
            tried.add(tid)
            if len(tried) >= TID_TRIES:
                raise self._fail(
                    f"tgt target IDs {', '.join(map(str, sorted(tried)))} were each taken while fabricqa created them",
                    "another session or tool is creating tgt targets on this host; run one at a time",
                )
            tid = self._next_tid(plan, now, tried)
            state["targets"] = [{"tid": tid, "iqn": plan.iqn}]
            self._write_state(state)

    def remove_target(self, tid: int, iqn: str) -> None:
        """Delete target ``tid`` if it is still the one named ``iqn`` (idempotent; ``--force`` ends sessions)."""
        snap = self.snapshot()
        target = snap.targets.get(tid)
        if not snap.loaded or target is None or target.iqn != iqn:
            return
        self._adm(
            "--lld",
            target.driver or "iscsi",
            "--mode",
            "target",
            "--op",
            "delete",
            "--force",
            "--tid",
            str(tid),
            check=True,
        )

    # -- the daemon -----------------------------------------------------------------------------------------
    def _start_daemon(self, plan: ScsiPlan, undo: UndoStack) -> None:
        if self.daemon_pid() is not None:
            # Started by an earlier run and kept up by someone else's target since: ours to use and to stop.
            undo.push(f"stop the tgtd fabricqa started ({self.pid_file})", self.stop_daemon)
            return
        if self.lld_states() is not None:
            raise self._fail(
                f"a tgtd already answers on control port {self.settings.control_port}, and fabricqa did not start it",
                f"set {self.where}.tgt.daemon: attach to use it, or {self.where}.tgt.control_port to start another",
            )
        self._refuse_busy_port(plan.port, "iscsi.port", " (another iSCSI target?)")
        argv = [
            self.settings.binary,
            "--control-port", str(self.settings.control_port),
            "--pid-file", self.pid_file,
            "--iscsi", f"portal={plan.portal}",
        ]  # fmt: skip
        # Debian's tgtd 1.0.85 refuses every `--iser port=N` ("iser_param_parser(3595) invalid port supplied", seen
        # on this project's build host and on vstor) and listens for iSER on 3260, its default: no other port works.
        if plan.iser and plan.port != TGT_ISER_PORT:
            raise self._fail(
                f"tgtd serves iSER on port {TGT_ISER_PORT} only (its --iser port= option refuses every value), "
                f"not {plan.port}",
                f"set {self.where}.iscsi.port: {TGT_ISER_PORT} for iser on tgt",
            )
        undo.push(f"stop the tgtd fabricqa started ({self.pid_file})", self.stop_daemon)
        self.host.run(["mkdir", "-p", remote.STATE_DIR])
        result = self.host.run(argv, check=False)
        if not result.ok:
            why = (result.stderr or result.stdout).strip().splitlines()[:1] or [f"exit code {result.exit_code}"]
            raise self._fail(f"cannot start {self.settings.binary} ({why[0]})", "is Debian's tgt installed?")
        # tgtd exits 0 even when its portal cannot be bound (its child dies): whether it answers tells.
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.lld_states() is None:
            if time.monotonic() > deadline:
                raise self._fail(
                    f"{self.settings.binary} started but does not answer on control port "
                    f"{self.settings.control_port} after {START_TIMEOUT_S:.0f} s",
                    "see tgtd's messages in the system log (a portal address the host does not have?)",
                )
            time.sleep(0.2)

    def daemon_pid(self) -> int | None:
        """The pid of the tgtd this plugin started, when its pid file names a running tgtd."""
        return daemon_pid(self.host, self.pid_file, "tgtd")

    def stop_daemon(self) -> None:
        """Stop the tgtd this plugin started (idempotent). tgtd refuses while it serves any target: a foreign target
        keeps it running, and that is said in one line."""
        if self.daemon_pid() is None:
            self.host.run(["rm", "-f", self.pid_file])
            return
        result = self._adm("--mode", "system", "--op", "delete")
        if not result.ok:
            others = [f"{t.iqn} (tid {t.tid})" for t in self.snapshot().targets.values()]
            raise ProvisionError(
                self.host.name,
                f"the tgtd fabricqa started ({self.pid_file}) still serves {', '.join(others) or 'targets'}",
                "it stays up for them; stop it by hand (tgtadm --mode system --op delete) once they are gone",
            )
        self.host.run(["rm", "-f", self.pid_file])

    # -- stale state and leftovers -------------------------------------------------------------------------
    def _ours(self, snap: TgtSnapshot) -> tuple[list[TgtTargetInfo], bool]:
        """Ours, checked twice: recorded in this lab's state file (tid and IQN) *and* carrying our mark: every disk
        LUN's serial is one this lab gives (a target with no disk LUN yet has nothing of anyone's behind it)."""
        state = self._read_state()
        recorded = {(int(t["tid"]), t["iqn"]) for t in (state or {}).get("targets", []) if "tid" in t and "iqn" in t}
        ours = [t for t in snap.targets.values() if (t.tid, t.iqn) in recorded and self._marked(t)]
        return ours, state is not None

    def _marked(self, target: TgtTargetInfo) -> bool:
        """Every disk LUN carries a serial this lab gives, or still tgt's own default for its tid and LUN
        (``beaf<tid><lun>``, spc_lu_init): nobody set one yet, which is what a run killed between a LUN and its
        serial (two tgtadm calls: tgt takes no serial with the LUN) leaves. Someone else's serial is their mark."""
        ours = self._lab_serials().get(target.iqn, set())
        return all(
            lun.serial in ours or lun.serial == f"beaf{target.tid}{lun.lun}"
            for lun in target.luns.values()
            if lun.kind != "controller"
        )

    def _left_alone(self, snap: TgtSnapshot, ours: list[TgtTargetInfo]) -> list[str]:
        """One sentence per target that is half ours: recorded but not marked, or marked but recorded nowhere."""
        state = self._read_state() or {}
        recorded = {(int(t["tid"]), t["iqn"]) for t in state.get("targets", []) if "tid" in t and "iqn" in t}
        lines = []
        for target in snap.targets.values():
            if target in ours:
                continue
            if (target.tid, target.iqn) in recorded:
                lines.append(
                    f"{self.host.name}: left tgt target {target.iqn} (tid {target.tid}) alone: this lab's record "
                    "lists it, but a LUN of it has a serial that is not the lab's (another session or tool made it)"
                )
            elif any(s in self._lab_serials().get(target.iqn, ()) for s in target.disk_serials()) and self._marked(
                target
            ):
                lines.append(
                    f"{self.host.name}: left tgt target {target.iqn} (tid {target.tid}) alone: its LUNs carry this "
                    "lab's serials but no record of this lab lists it (remove it by hand if it is yours)"
                )
        return lines

    def _lab_serials(self) -> dict[str, set[str]]:
        assert self.model.iscsi is not None
        iqn = self.model.iscsi.iqn
        return {iqn: {unit_serial(self.model.name_prefix, iqn, name) for name in self.model.iscsi.luns}}

    def _owned_now(self) -> list[list[Any]]:
        snap = self.snapshot()
        targets = self._ours(snap)[0] if snap.loaded else []
        return [targets, [1] if self.daemon_pid() is not None else []]

    def cleanup_stale(self) -> list[str]:
        """Remove the targets an earlier run left, stop the tgtd it started, then drop its state file."""
        snap = self.snapshot()
        removed: list[str] = []
        has_state = self._read_state() is not None
        if snap.loaded:
            targets, has_state = self._ours(snap)
            removed += self._left_alone(snap, targets)
            for target in targets:
                self.remove_target(target.tid, target.iqn)
                removed.append(f"{self.host.name}: removed tgt target {target.iqn} (tid {target.tid})")
        if self.daemon_pid() is not None:
            try:
                self.stop_daemon()
                removed.append(f"{self.host.name}: stopped the tgtd an earlier run started")
            except ProvisionError:
                pass  # it serves someone else's targets now: it stays, and the leftovers gate names it
        return removed + self._drop_stale_state(has_state)

    def leftovers(self) -> list[str]:
        """Targets this plugin created that are still there, a tgtd it started that still runs, its state file."""
        snap = self.snapshot()
        targets, has_state = self._ours(snap) if snap.loaded else ([], False)
        if not snap.loaded:
            has_state = self._read_state() is not None
        found = [f"{self.host.name}: tgt target {t.iqn} (tid {t.tid}) is still configured" for t in targets]
        pid = self.daemon_pid()
        if pid is not None:
            found.append(f"{self.host.name}: the tgtd fabricqa started (pid {pid}) is still running")
        if has_state:
            found.append(f"{self.host.name}: state file {self.state_file} is still there")
        return found
