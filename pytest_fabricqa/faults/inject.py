"""Faults injected into a live fabric, each with a guaranteed restore (issue 13, "Faults while fio writes").

A fault breaks one path and puts it back: an initiator's storage link down and up (:class:`LinkDown`), a target
port taken away and given back (:class:`NvmetPortDown`, :class:`LioPortalDown` with the port's link in a
:class:`PortOff`, :class:`SpdkListenerDown`), an
nvmet ANA group made inaccessible and optimized again (:class:`AnaStateChange`, :class:`SpdkAnaChange`), a LIO
ALUA target port group made unavailable and Active/Optimized again (:class:`LioAluaChange`), an initiator's iSCSI
session logged out and in again (:class:`SessionRelogin`). Each satisfies
:class:`FaultInjector` structurally; :func:`target_port_down`, :func:`ana_change` and :func:`alua_change` pick the
class for a lab's target.

Restore is guaranteed three ways:

- :meth:`FaultInjector.inject` pushes the restore on the caller's :class:`~pytest_fabricqa.targets.base.UndoStack`
  and writes a record (what, where, how to restore) to ``/run/fabricqa/<name_prefix>-faults.json`` on the host it
  changes, both *before* the command that breaks anything runs; a failed inject is restored by the same undo.
- Restores are idempotent (a link already up, a port already linked, a portal already there: nothing to do), and
  the record goes only once the restore succeeded.
- :func:`~pytest_fabricqa.faults.stale.restore_stale` (run by :func:`pytest_fabricqa.fabric.provision.cleanup_stale`) restores what a killed run left
  from those records; :func:`~pytest_fabricqa.faults.stale.leftover_faults` lists records still present for the leftovers gate.

Only objects this plugin made may be faulted: the lab's own storage interface of a host, and ports, portals and
listeners of subsystems and targets the drivers' state files list as theirs. Anything else is refused in one line
(:class:`FaultRefused`) before a record is written or an undo registered.

Timing: inject and restore return the host's clock (``date +%s.%N``, Unix seconds) read in the same command that
changed the path, so :func:`fault_window` can put the fault on fio's log clock: fio's logs written with
``log_unix_epoch=1`` carry Unix *milliseconds*.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, Self, TypeVar

from pytest_fabricqa.core import proc
from pytest_fabricqa.core.commands import command_tail
from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.core.export import portal_name
from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.initiators import iscsi
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.targets import lio, remote
from pytest_fabricqa.targets.nvmet.snapshot import SNAPSHOT_SCRIPT as NVMET_SNAPSHOT
from pytest_fabricqa.targets.nvmet.snapshot import parse_snapshot as parse_nvmet
from pytest_fabricqa.targets.spdk.jsonrpc import RpcClient, SpdkRpcError, SpdkUnreachable, result_of
from pytest_fabricqa.transport.base import CommandError, CommandResult, Host


@dataclass(frozen=True)
class Fault:
    """A fault injected while fio ran: what it was and when, in ms on the clock of fio's logs."""

    name: str
    """What was broken, in the engineer's words: ``vnode1 path 10.10.20.17 link down``."""
    start_ms: int
    end_ms: int
    """When the fault was undone (the link up again); equal to ``start_ms`` for a fault that is not undone."""

    def __post_init__(self) -> None:
        if self.end_ms < self.start_ms:
            raise ValueError(f"fault {self.name!r} ends ({self.end_ms} ms) before it starts ({self.start_ms} ms)")


STATE_KIND = "faults"
# How long arming a fault waits for another lab's fault in place on the same host to be restored (a failover case's
# outage lasts seconds to a minute), and how often it looks.
OTHER_LAB_WAIT_S = 300.0
OTHER_LAB_POLL_S = 2.0
ANA_STATES = ("optimized", "non-optimized", "inaccessible", "persistent-loss", "change")
"""What nvmet's ``ports/N/ana_groups/G/ana_state`` takes (drivers/nvme/target/configfs.c, Linux 6.1)."""
SPDK_ANA_STATES = ("optimized", "non_optimized", "inaccessible")
"""What ``nvmf_subsystem_listener_set_ana_state`` takes (SPDK 23.01, lib/nvmf/nvmf_rpc.c)."""
ANA_DEFAULT_GROUP = 1
"""The ANA group every nvmet port has from its creation (NVMET_DEFAULT_ANA_GRPID) and every namespace is in."""
NVMET = "/sys/kernel/config/nvmet"
CLOCK = "date +%s.%N"
STARTED = 'echo "started $(' + CLOCK + ')"\n'
"""Printed first by each script that breaks a path: the host's time before it changed anything, the fault's start.
The time after the break is no start: on an emulated guest a break of several commands (tc's three) took 350-470 ms,
and fio's last completion came that long before it (the full run of 2e765a0: a brief outage's stall was not the
fault's, so the case said the fault had stopped no I/O)."""

# Every script is fixed text; interface names, port IDs, NQNs, IQNs and portals travel as positional arguments.
# Each ends by printing the host's clock: the moment the path changed (or came back), read in the same command; one
# that breaks a path also prints it first (STARTED).
LINK_DOWN = STARTED + 'ip link set dev "$1" down && ' + CLOCK
# The kernel drops a link's IPv6 addresses when it goes down (unless keep_addr_on_down): those the link had at
# inject are added back if missing, or the path would stay broken with the link up.
LINK_UP = (
    r"""
set -e
i=$1
shift
ip link set dev "$i" up
for a; do ip -o addr show dev "$i" | grep -qF " $a " || ip addr add "$a" dev "$i"; done
"""
    + CLOCK
)
# Every frame in and out of the link dropped, the link itself left up: tc's clsact qdisc, a matchall filter on each
# side whose action is drop. The restore removes the qdisc (and with it both filters) if it is there.
LINK_DROP = (
    STARTED
    + r"""
set -e
tc qdisc add dev "$1" clsact
tc filter add dev "$1" ingress matchall action drop
tc filter add dev "$1" egress matchall action drop
"""
    + CLOCK
)
# The host's RDMA links (`rdma -j link show`, one JSON line), then "HW <device>" for each RDMA device that sits on
# hardware: a device under /sys/devices/virtual (Soft-RoCE's rxe, soft iWARP's siw) has no `device` link.
RDMA_LINKS = r"""
rdma -j link show 2>/dev/null || echo '[]'
for d in /sys/class/infiniband/*; do [ -e "$d/device" ] && echo "HW ${d##*/}"; done
true
"""


def offloading_rdma(text: str, interface: str) -> list[str]:
    """The hardware RDMA devices (RNICs) on ``interface``, from :data:`RDMA_LINKS`' output: their RoCE traffic
    bypasses the kernel's network stack, so tc never sees it. Soft-RoCE (rxe) runs inside that stack."""
    lines = text.strip().splitlines()
    try:
        links = json.loads(lines[0]) if lines else []
    except ValueError:
        links = []
    hardware = {line.split()[1] for line in lines[1:] if line.startswith("HW ") and len(line.split()) == 2}
    names = [
        str(link.get("ifname", "")) for link in links if isinstance(link, dict) and link.get("netdev") == interface
    ]
    return [name for name in names if name in hardware]


LINK_UNDROP = (
    r"""
set -e
if tc qdisc show dev "$1" | grep -q "^qdisc clsact "; then tc qdisc del dev "$1" clsact; fi
"""
    + CLOCK
)
NVMET_UNLINK = (
    STARTED
    + r"""
set -e
p=/sys/kernel/config/nvmet/ports/$1
shift
for n; do rm "$p/subsystems/$n"; done
"""
    + CLOCK
)
# A port or subsystem that is gone (a teardown or clean-up removed it) has nothing left to restore.
NVMET_RELINK = (
    r"""
set -e
r=/sys/kernel/config/nvmet
p=$r/ports/$1
shift
if [ -d "$p" ]; then
  for n; do
    [ -d "$r/subsystems/$n" ] || continue
    [ -L "$p/subsystems/$n" ] || ln -s "$r/subsystems/$n" "$p/subsystems/$n"
  done
fi
"""
    + CLOCK
)
# An iSCSI session logged out (its SCSI disk goes; dm-multipath fails that path), then in again through the node
# record discovery made (a new session and disk; multipathd adds it to the map). $1 the IQN, $2 the portal.
ISCSI_LOGOUT = STARTED + 'iscsiadm -m node -T "$1" -p "$2" --logout >&2 && ' + CLOCK
# A node record that is gone (a teardown removed it) has nothing left to restore; a session logged in already
# (iscsiadm's 15, ISCSI_ERR_SESS_EXISTS) is restored.
ISCSI_LOGIN = (
    r"""
set -e
if iscsiadm -m node -T "$1" -p "$2" >/dev/null 2>&1; then
  iscsiadm -m node -T "$1" -p "$2" --login >&2 || [ $? = 15 ]
fi
"""
    + CLOCK
)
ANA_READ = 'cat "/sys/kernel/config/nvmet/ports/$1/ana_groups/$2/ana_state"'
ANA_WRITE = STARTED + 'printf %s "$3" > "/sys/kernel/config/nvmet/ports/$1/ana_groups/$2/ana_state" && ' + CLOCK
ANA_RESTORE = (
    r"""
set -e
f=/sys/kernel/config/nvmet/ports/$1/ana_groups/$2/ana_state
[ ! -e "$f" ] || printf %s "$3" > "$f"
"""
    + CLOCK
)
LIO_NP_REMOVE = (
    STARTED
    + r"""
set -e
n=/sys/kernel/config/target/iscsi/$1/$2/np/$3
[ ! -f "$n/iser" ] || [ "$(cat "$n/iser")" = 0 ] || echo 0 > "$n/iser"
rmdir "$n"
"""
    + CLOCK
)
LIO_NP_RESTORE = (
    r"""
set -e
t=/sys/kernel/config/target/iscsi/$1/$2
if [ -d "$t" ]; then
  [ -d "$t/np/$3" ] || mkdir "$t/np/$3"
  [ "$4" != 1 ] || [ "$(cat "$t/np/$3/iser")" = 1 ] || echo 1 > "$t/np/$3/iser"
fi
"""
    + CLOCK
)
# $1 the ALUA state's number, $2 the group, then each backstore ("hba/name") whose group it is.
# $1 the group, $2 the backstore: its ALUA access state, then its access type (1 implicit, 2 explicit, 3 both), as
# numbers, one a line.
LIO_ALUA_READ = 'd="/sys/kernel/config/target/core/$2/alua/$1"; cat "$d/alua_access_state" "$d/alua_access_type"'
# $1 the state, $2 the group, $3 the access type during the fault, then the backstores. The type first: implicit
# only, so that an initiator's SET TARGET PORT GROUPS cannot undo the fault (scsi_dh_alua sends one when
# dm-multipath reinstates the path; LIO then made the group Active/Optimized 0.2 s into the fault and the path
# carried I/O through it: the full run of 6a6b080, iSCSI on LIO).
LIO_ALUA_WRITE = (
    STARTED
    + r"""
set -e
s=$1 g=$2 t=$3
shift 3
for b; do
  d="/sys/kernel/config/target/core/$b/alua/$g"
  printf %s "$t" > "$d/alua_access_type"
  printf %s "$s" > "$d/alua_access_state"
done
"""
    + CLOCK
)
# $1 the state, $2 the group, $3 the access type to put back ("" for a record that kept none), then the backstores.
# A backstore or group that is gone (a teardown removed it) has nothing left to restore.
LIO_ALUA_RESTORE = (
    r"""
set -e
s=$1 g=$2 t=$3
shift 3
for b; do
  d=/sys/kernel/config/target/core/$b/alua/$g
  if [ -e "$d/alua_access_state" ]; then
    printf %s "$s" > "$d/alua_access_state"
    if [ -n "$t" ]; then printf %s "$t" > "$d/alua_access_type"; fi
  fi
done
"""
    + CLOCK
)
ALUA_IMPLICIT_ONLY = "1"
"""LIO's ``alua_access_type`` for implicit transitions only (the target's own, as configfs makes them): an explicit
one (SET TARGET PORT GROUPS from an initiator) is refused."""
ALUA_STATES = {
    "active-optimized": 0,
    "active-non-optimized": 1,
    "standby": 2,
    "unavailable": 3,
    "offline": 14,
    "transitioning": 15,
}
"""SCSI ALUA's asymmetric access states by name, and the number LIO's ``alua_access_state`` takes (SPC-4 6.37)."""
# The SPDK client's JSON, then a newline, then the clock; the client's exit code is kept.
TIMED = STARTED + '"$@"; rc=$?; echo; ' + CLOCK + "; exit $rc"


class FaultError(ProvisionError):
    """A fault could not be injected or restored: one line naming the host, what failed and how to fix it."""


class FaultRefused(FaultError):
    """A fault on an object this plugin did not make (or cannot safely break) was refused before anything ran."""


NVME_PATH_RE = re.compile(r"^nvme\d+c(\d+)n\d+$")
"""An NVMe multipath path device, ``nvme<subsystem>c<controller>n<namespace>``."""


def controller_of(path: str) -> str:
    """The NVMe controller (``nvme2``) of a multipath path device (``nvme1c2n1``)."""
    found = NVME_PATH_RE.match(path)
    if found is None:
        raise ValueError(f"{path} is no NVMe multipath path device (nvmeXcYnZ)")
    return f"nvme{found.group(1)}"


def reset_controller(host: Host, controller: str) -> tuple[float, float]:
    """Reset ``controller`` (``nvme2``) on ``host`` as ``nvme reset`` does (NVME_IOCTL_RESET, which waits for the
    reset to finish and fails unless the controller is live again: the fabrics drivers tear its queues down and
    connect them again); (host time just before, host time just after). Nothing to undo: the kernel brings the
    controller back itself, or gives it up after its ``ctrl_loss_tmo``. :class:`FaultError` when the reset fails."""
    done = host.run(["sh", "-c", TIMED, "sh", "nvme", "reset", f"/dev/{controller}"], check=False, timeout=180)
    if not done.ok:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise FaultError(
            host.name,
            f"nvme reset /dev/{controller} failed (exit {done.exit_code}: {said[-1] if said else 'no message'})",
            "the controller must be live to be reset, and come back live (see the kernel log)",
        )
    return _started(done, f"nvme reset /dev/{controller}"), _clock(done, f"nvme reset /dev/{controller}")


class FaultInjector(Protocol):
    """A fault on one host: break a path, put it back. Members satisfy it structurally.

    ``name`` says what breaks in the engineer's words (``vnode1 storage link eth1 down``); ``key`` names the
    faulted object in the host's record file, one record per object.
    """

    name: str
    host: Host
    key: str

    def inject(self, undo: UndoStack) -> float:
        """Record the fault, push its restore on ``undo``, then break the path; the host's Unix time as it broke
        (:meth:`fire`)."""
        ...

    def arm(self, undo: UndoStack) -> None:
        """Everything :meth:`inject` does before the break (check, restore registered, record written)."""
        ...

    def fire(self) -> float:
        """Break the path (after :meth:`arm`); the host's Unix time as it broke: just before its break began."""
        ...

    def restore(self) -> float:
        """Put the path back (idempotent), then drop the record; the host's Unix time just after the restore."""
        ...


def fault_window(name: str, injected: float, restored: float) -> Fault:
    """The fault as :mod:`pytest_fabricqa.failover.figures` measures it: host Unix seconds -> Unix milliseconds, the clock
    of fio's logs written with ``log_unix_epoch=1`` (the host's and fio's clocks must agree: fio runs there)."""
    return Fault(name, round(injected * 1000), round(restored * 1000))


# -- records ----------------------------------------------------------------------------------------------------


def records_path(name_prefix: str) -> str:
    """Where a host keeps the records of the faults made under ``name_prefix``: /run/fabricqa/<prefix>-faults.json.

    /run is a tmpfs: a reboot restores every fault and forgets the records with it."""
    return remote.state_path(name_prefix, STATE_KIND)


def _records(host: Host, path: str) -> dict[str, dict[str, Any]]:
    state = remote.read_state(host, path) or {}
    faults = state.get("faults")
    return {k: v for k, v in faults.items() if isinstance(v, dict)} if isinstance(faults, dict) else {}


def _write_records(host: Host, path: str, faults: Mapping[str, Mapping[str, Any]]) -> None:
    if faults:
        remote.write_state(host, path, {"kind": STATE_KIND, "faults": dict(faults)})
    else:
        remote.remove_state(host, path)


# argv: the lock directory. Takes the fault records' lock on the host (mkdir is atomic: of two sessions or xdist
# workers updating records there, one waits), its folder made first (a fresh host has no /run/fabricqa); a lock
# older than a minute is a killed holder's and is broken. Gives
# up after 20 s, printing HELD.
RECORDS_LOCK = r"""
i=0
mkdir -p "${1%/*}"
until mkdir "$1" 2>/dev/null; do
  if [ -n "$(find "$1" -maxdepth 0 -mmin +1 2>/dev/null)" ]; then rmdir "$1" 2>/dev/null; continue; fi
  i=$((i+1))
  [ "$i" -lt 200 ] || { echo HELD; exit 0; }
  sleep 0.1
done
echo TAKEN
"""


def records_lock_path(path: str) -> str:
    """The lock of every fault records file in ``path``'s folder (a directory, made and removed)."""
    return f"{path.rsplit('/', 1)[0]}/faults.lock"


@contextmanager
def records_locked(host: Host, path: str) -> Iterator[None]:
    """Hold the lock of the fault records on ``host`` while the records file ``path`` is read, changed and written
    back. One lock per host, not per file: a fault is armed only after the host's other labs' records were read
    under the same lock (:meth:`_RecordedFault.arm`), so two labs never break the same host's paths at once."""
    lock = records_lock_path(path)
    if host.run(["sh", "-c", RECORDS_LOCK, "sh", lock]).stdout.strip() != "TAKEN":
        raise FaultError(
            host.name,
            f"the fault records {path} stayed locked for 20 s (another session is injecting or restoring a fault)",
            f"try again; if no session runs, remove {lock}",
        )
    try:
        yield
    finally:
        host.run(["rmdir", lock], check=False)


def update_records(
    host: Host, path: str, change: Callable[[dict[str, dict[str, Any]]], object]
) -> dict[str, dict[str, Any]]:
    """Read the records, ``change`` them in place, write them back: all under the records' lock, so two updates
    never lose each other's record. Returns the records as written."""
    with records_locked(host, path):
        faults = _records(host, path)
        before = json.dumps(faults, sort_keys=True)
        change(faults)
        if json.dumps(faults, sort_keys=True) != before:
            _write_records(host, path, faults)
        return faults


def _owner(lab: str) -> dict[str, Any]:
    pid = os.getpid()
    return {"lab": lab, "controller": proc.machine(), "user": proc.user(), "pid": pid, "started": proc.start_ticks(pid)}


def owner_alive(owner: Any) -> bool:
    """Whether the run that recorded a fault still runs on this machine (this very process, or another xdist
    worker of the session): its fault is live, not stale, and is its own undo's to restore."""
    if not isinstance(owner, dict) or owner.get("controller") != proc.machine():
        return False
    pid, started = owner.get("pid"), owner.get("started")
    return isinstance(pid, int) and proc.running(pid, started if isinstance(started, int) else None)


def whose(record: Mapping[str, Any], lab_name: str) -> Literal["live", "other lab", "killed"]:
    """Whose a record is, for a start's clean-up: a run still running here (``live``: its own undo restores it),
    another lab's run (``other lab``: left alone and named), or a killed run of this lab (or of an older version
    that named none: ``killed``, restored now)."""
    if owner_alive(record.get("owner")):
        return "live"
    return "other lab" if _owner_lab(record) not in (lab_name, None) else "killed"


def _owner_text(owner: Any) -> str:
    if isinstance(owner, dict) and owner.get("pid"):
        lab = f"lab {owner['lab']!r}, " if owner.get("lab") else ""
        user = f" of user {owner['user']}" if owner.get("user") else ""
        return f"{lab}pid {owner['pid']}{user} on {owner.get('controller', '?')}"
    return "an unknown run"


def _owner_lab(record: Mapping[str, Any]) -> str | None:
    owner = record.get("owner")
    lab = owner.get("lab") if isinstance(owner, dict) else None
    return lab if isinstance(lab, str) else None


def other_labs_faults(host: Host, lab_name: str, own_path: str) -> list[tuple[str, dict[str, Any]]]:
    """The fault records on ``host`` (every records file of its state folder) that another lab's run made: those
    naming another lab, and, in a records file other than ``own_path``, those naming none (an older version's):
    (records file, record), in file order."""
    found = []
    for path, data in remote.records(host):
        faults = data.get("faults") if data.get("kind") == STATE_KIND else None
        for record in faults.values() if isinstance(faults, dict) else ():
            lab = _owner_lab(record) if isinstance(record, dict) else lab_name
            if lab not in (lab_name, None) or (lab is None and path != own_path):
                found.append((path, record))
    return found


class _OtherLabsFault(FabricQAError):
    """Raised inside the records lock when another lab's fault is in place on the host (waited on outside it)."""

    def __init__(self, path: str, record: dict[str, Any]) -> None:
        super().__init__(path)
        self.path, self.record = path, record


def _started(result: CommandResult, what: str) -> float:
    """The host's Unix time a break script printed before it changed anything (:data:`STARTED`); for one that prints
    only the time after (SPDK's RPC), that."""
    for line in result.stdout.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "started":
            try:
                return float(words[1])
            except ValueError:
                break
    return _clock(result, what)


def _clock(result: CommandResult, what: str) -> float:
    """The host's Unix time that a fault command printed on its last line."""
    lines = result.stdout.strip().splitlines()
    try:
        return float(lines[-1])
    except (IndexError, ValueError):
        raise FaultError(
            result.host,
            f"{what}: the host printed no time (`{CLOCK}` gave {lines[-1] if lines else 'nothing'!r})",
            "install GNU coreutils' date on the host (busybox date has no %N)",
        ) from None


# -- the shared life cycle ------------------------------------------------------------------------------------


class _RecordedFault:
    """inject/restore around a record: subclasses say what they check, how they break and how they restore."""

    kind: ClassVar[str] = ""
    name: str
    key: str
    #: The lab whose run makes the fault: its record carries it, another lab's run never restores it, and while it
    #: is in place no other lab's fault is armed on the host. Set by the functions that build faults from a lab.
    lab: str = ""

    def __init__(self, host: Host, name_prefix: str) -> None:
        self.host = host
        self.name_prefix = name_prefix
        self.path = records_path(name_prefix)
        self.params: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # hooks
    def _check(self) -> None:
        """Raise :class:`FaultRefused` unless the object is ours and in the state the fault starts from; fill
        :attr:`params` with what the restore needs (read now, before anything changes)."""
        raise NotImplementedError

    def _inject(self) -> CommandResult:
        raise NotImplementedError

    def _restore(self) -> CommandResult:
        raise NotImplementedError

    def how(self) -> str:
        """How to restore by hand, for the record and for messages."""
        raise NotImplementedError

    def _refuse(self, what: str, fix: str) -> FaultRefused:
        return FaultRefused(self.host.name, f"refused to inject '{self.name}': {what}", fix)

    # the life cycle
    def inject(self, undo: UndoStack) -> float:
        """Check the object is ours, register the restore, write the record, then break the path; the host's
        Unix time (s) as it broke (:meth:`fire`)."""
        self.arm(undo)
        return self.fire()

    def arm(self, undo: UndoStack) -> None:
        """Everything :meth:`inject` does before the break: check, register the restore, write the record. A
        caller that must break paths at a given moment arms first (several commands), then :meth:`fire` s (one)."""
        self._check()
        record = {
            "kind": self.kind,
            "what": self.name,
            "host": self.host.name,
            "restore": self.how(),
            "params": self.params,
            "owner": _owner(self.lab),
        }

        def add(faults: dict[str, dict[str, Any]]) -> None:
            # Under the host's records lock: no other lab's fault may be in place on this host (it breaks the
            # paths this fault's run measures, and this fault would break the other run's).
            other = other_labs_faults(self.host, self.lab, self.path)
            if other:
                raise _OtherLabsFault(*other[0])
            existing = faults.get(self.key)
            if existing is not None:
                raise self._refuse(
                    f"a fault on it is already recorded in {self.path} ({existing.get('what', '?')}, by "
                    f"{_owner_text(existing.get('owner'))}) and not restored",
                    "restore that one first (it restores itself when its run ends; a killed run's at the next start)",
                )
            # Registered before anything is written or broken: each step below may fail half-way, and the restore
            # copes with a fault that never happened.
            undo.push(f"restore {self.name} on {self.host.name}", self._restore_quietly)
            faults[self.key] = record

        deadline = time.monotonic() + OTHER_LAB_WAIT_S
        while True:
            try:
                update_records(self.host, self.path, add)
                return
            except _OtherLabsFault as busy:
                owner = busy.record.get("owner")
                if owner_alive(owner) or (isinstance(owner, dict) and owner.get("controller") != proc.machine()):
                    if time.monotonic() < deadline:
                        time.sleep(OTHER_LAB_POLL_S)
                        continue
                    raise self._refuse(
                        f"another lab's fault '{busy.record.get('what', '?')}' has been in place for over "
                        f"{OTHER_LAB_WAIT_S:.0f} s ({_owner_text(owner)}; record {busy.path})",
                        "run the two labs' failover cases one after the other",
                    ) from None
                raise self._refuse(
                    f"another lab's fault '{busy.record.get('what', '?')}' is in place and its run is gone "
                    f"({_owner_text(owner)}; record {busy.path})",
                    f"that lab's next run restores it; or restore it by hand ({busy.record.get('restore', '?')}) "
                    "and remove its record",
                ) from None

    def fire(self) -> float:
        """Break the path (after :meth:`arm`); the host's Unix time (s) just before the break began (just after it
        where the break's script cannot say: :func:`_started`)."""
        try:
            return _started(self._inject(), f"inject '{self.name}'")
        except CommandError as exc:
            raise FaultError(
                self.host.name,
                f"cannot inject '{self.name}' ({command_tail(exc)})",
                "the restore runs with the caller's undo stack",
            ) from None

    def _restore_quietly(self) -> None:
        self.restore()

    def restore(self) -> float:
        """Put the path back (nothing to do when it is back already), then drop the record; the host's Unix time
        (s) just after. A failed restore keeps the record: the next start retries it, the leftovers gate sees it."""
        try:
            when = _clock(self._restore(), f"restore '{self.name}'")
        except (CommandError, SpdkRpcError, SpdkUnreachable) as exc:
            tail = command_tail(exc) if isinstance(exc, CommandError) else exc.what
            raise FaultError(
                self.host.name,
                f"cannot restore '{self.name}' ({tail})",
                f"restore it by hand ({self.how()}) and remove its record from {self.path}",
            ) from None
        update_records(self.host, self.path, lambda faults: faults.pop(self.key, None))
        return when


# -- an initiator's storage link --------------------------------------------------------------------------------


class LinkDown(_RecordedFault):
    """A host's storage link down, then up: ``ip link set dev IFACE down|up`` on one of the lab's
    ``hosts.NAME.storage`` interfaces (default: the first), and only those.

    Refused when the interface is not a storage interface of the host in the lab, is down already (bringing it up
    later would undo someone else's change), or carries the address fabricqa reaches the host by (the restore could
    never arrive).
    """

    kind = "link"

    def __init__(self, lab: LabModel, host: Host, name_prefix: str, interface: str | None = None) -> None:
        super().__init__(host, name_prefix)
        self.lab = lab.name
        model = lab.hosts.get(host.name)
        self.storage = model.storage if model is not None else ()
        self.management = model.address if model is not None else None
        self.interface = interface or (self.storage[0].interface if self.storage else "")
        self.name = f"{host.name} storage link {self.interface} down"
        self.key = f"link:{self.interface}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> Self:
        """The fault a record describes, to restore it (a :class:`LinkDrop`'s too)."""
        fault = cls(lab, host, name_prefix, str(record["params"]["interface"]))
        fault.params = dict(record["params"])
        return fault

    def how(self) -> str:
        return f"ip link set dev {self.interface} up"

    def _check(self) -> None:
        if not self.storage:
            raise self._refuse(
                f"the lab declares no storage link for {self.host.name}",
                f"set hosts.{self.host.name}.storage (interface, address) in the lab file",
            )
        ours = [p.interface for p in self.storage]
        if self.interface not in ours:
            raise self._refuse(
                f"{self.interface} is not a storage interface of {self.host.name} in the lab ({', '.join(ours)})",
                f"fabricqa brings down only the interfaces of hosts.{self.host.name}.storage",
            )
        # The same listing the prerequisites read (prereq.interface_problems), recorded in tests/data/vlab.
        result = self.host.run(["ip", "-j", "addr", "show", "dev", self.interface], check=False)
        try:
            links = json.loads(result.stdout) if result.ok else None
        except ValueError:
            links = None
        link = next((item for item in links or [] if item.get("ifname") == self.interface), None)
        if link is None:
            raise self._refuse(
                f"interface {self.interface} cannot be read (`ip -j addr show dev {self.interface}`: "
                f"{command_tail(CommandError(result)) if not result.ok else 'no such interface in its output'})",
                f"check hosts.{self.host.name}.storage.interface",
            )
        if "UP" not in link.get("flags", []):
            raise self._refuse(
                f"{self.interface} is down already, and not by fabricqa",
                f"bring it up (ip link set dev {self.interface} up)",
            )
        # What the link carries now, but for link-local addresses (the kernel makes those again on up).
        addresses = [
            f"{a.get('local')}/{a.get('prefixlen')}"
            for a in link.get("addr_info", [])
            if a.get("local") and a.get("scope") not in ("link", "host")
        ]
        if self.management and _is_ip(self.management):
            taken = [a for a in addresses if a.split("/")[0] == ipaddress.ip_address(self.management).compressed]
            if taken:
                raise self._refuse(
                    f"{self.interface} carries {self.management}, the address fabricqa reaches {self.host.name} by, "
                    "so the restore could never arrive",
                    "give the host a management address on another interface (hosts.NAME.address)",
                )
        self.params = {"interface": self.interface, "addresses": addresses}

    def _inject(self) -> CommandResult:
        return self.host.run(["sh", "-c", LINK_DOWN, "sh", self.interface])

    def _restore(self) -> CommandResult:
        addresses = [str(a) for a in self.params.get("addresses", [])]
        return self.host.run(["sh", "-c", LINK_UP, "sh", self.interface, *addresses])


class LinkDrop(LinkDown):
    """A host's storage link losing every frame both ways while the link stays up (tc's clsact qdisc with a
    matchall drop filter on ingress and egress; the restore deletes the qdisc): what an initiator sees when the
    switch or the far end fails, with no link event on the host. The same interface rules as :class:`LinkDown`,
    and refused when the interface has a clsact or ingress qdisc already (deleting ours would take someone else's
    filters with it).

    Soft-RoCE is why the virtual lab uses it: after ``ip link set eth1 down`` and ``up`` on the initiators, rxe
    connections to the target failed for good (``rdma connection establishment failed (-104)``)."""

    kind = "drop"

    def __init__(self, lab: LabModel, host: Host, name_prefix: str, interface: str | None = None) -> None:
        super().__init__(lab, host, name_prefix, interface)
        self.name = f"{host.name} storage link {self.interface} dropping every frame"
        self.key = f"drop:{self.interface}"

    def how(self) -> str:
        return f"tc qdisc del dev {self.interface} clsact"

    def _check(self) -> None:
        super()._check()
        result = self.host.run(["tc", "qdisc", "show", "dev", self.interface], check=False)
        if not result.ok:
            raise self._refuse(
                f"the qdiscs of {self.interface} cannot be read (`tc qdisc show dev {self.interface}`: "
                f"{command_tail(CommandError(result))})",
                "install iproute2's tc on the host",
            )
        taken = [line for line in result.stdout.splitlines() if line.startswith(("qdisc clsact ", "qdisc ingress "))]
        if taken:
            raise self._refuse(
                f"{self.interface} has a qdisc fabricqa did not add ({taken[0].strip()})",
                f"remove it (tc qdisc del dev {self.interface} {taken[0].split()[1]}) or run on another interface",
            )
        rnics = offloading_rdma(self.host.run(["sh", "-c", RDMA_LINKS], check=False).stdout, self.interface)
        if rnics:
            raise self._refuse(
                f"{self.interface} carries the RDMA device {', '.join(rnics)}, whose RoCE traffic bypasses the "
                "kernel's network stack: tc would drop nothing of it, and the fault would change nothing",
                "set failover.outage_by: down in the lab file (the link itself goes down) for RDMA hardware; "
                "'drop' is for Soft-RoCE (rxe) and TCP",
            )

    def _inject(self) -> CommandResult:
        return self.host.run(["sh", "-c", LINK_DROP, "sh", self.interface])

    def _restore(self) -> CommandResult:
        return self.host.run(["sh", "-c", LINK_UNDROP, "sh", self.interface])


def link_outage(lab: LabModel, host: Host, name_prefix: str, interface: str | None = None) -> LinkDown:
    """The storage link fault the lab's ``failover.outage_by`` names on ``interface`` (default: the host's first
    storage interface): the link down, or every frame dropped."""
    if lab.failover.outage_by == "drop":
        return LinkDrop(lab, host, name_prefix, interface)
    return LinkDown(lab, host, name_prefix, interface)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# -- an initiator's iSCSI session ---------------------------------------------------------------------------------


class SessionRelogin(_RecordedFault):
    """An initiator's iSCSI session logged out, then in again (``iscsiadm -m node -T IQN -p PORTAL --logout``, then
    ``--login``): SCSI's counterpart of an NVMe controller reset. The session's disk is removed, so dm-multipath
    fails that path and the I/O goes on over the others; the login makes a new session and disk, which multipathd
    adds back to the map.

    Refused unless the IQN is one of the lab's targets (a session this plugin logs in) and a session to it through
    the portal at ``address`` is logged in. The record names the node (IQN and portal): a run killed between the
    logout and the login is logged in again at the next start (if the node record is still there). :meth:`new_session`
    proves the fault took effect: the session after the login is not the one before."""

    kind = "iscsi-session"

    def __init__(self, lab: LabModel, host: Host, name_prefix: str, iqn: str, address: str) -> None:
        super().__init__(host, name_prefix)
        self.lab = lab.name
        self.iqns = {t.iscsi.iqn for t in lab.targets if t.iscsi is not None}
        self.iqn = iqn
        self.address = address
        self.portal = ""
        self.name = f"{host.name} iSCSI session to {address} logged out and in"
        self.key = f"iscsi-session:{iqn}:{address}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> Self:
        """The fault a record describes, to restore it."""
        params = record["params"]
        fault = cls(lab, host, name_prefix, str(params["iqn"]), str(params["address"]))
        fault.portal = str(params["portal"])
        fault.params = dict(params)
        return fault

    def how(self) -> str:
        return f"iscsiadm -m node -T {self.iqn} -p {self.portal or self.address} --login"

    def _session(self) -> tuple[int, str] | None:
        """(session id, portal) of the session to :attr:`iqn` through :attr:`address`, None when there is none."""
        for session in iscsi.sessions(self.host):
            if session.iqn == self.iqn and session.portal.rsplit(":", 1)[0].strip("[]") == self.address:
                return session.sid, session.portal
        return None

    def _check(self) -> None:
        if self.iqn not in self.iqns:
            raise self._refuse(
                f"iSCSI target {self.iqn} is none of the lab's targets, so its sessions are not fabricqa's",
                "fault a session of the fabric fabricqa connected",
            )
        session = self._session()
        if session is None:
            raise self._refuse(
                f"no iSCSI session to {self.iqn} through {self.address} is logged in (nothing to log out)",
                "connect the fabric first (the fixture `fabric`), then fault its session",
            )
        sid, self.portal = session
        self.params = {"iqn": self.iqn, "address": self.address, "portal": self.portal, "sid": sid}

    def _inject(self) -> CommandResult:
        return self.host.run(["sh", "-c", ISCSI_LOGOUT, "sh", self.iqn, self.portal], timeout=120)

    def _restore(self) -> CommandResult:
        return self.host.run(["sh", "-c", ISCSI_LOGIN, "sh", self.iqn, self.portal], timeout=180)

    def new_session(self) -> int | None:
        """After the login: the new session's id, None when the session logged in is still the one logged out (or
        none is), i.e. the fault changed nothing."""
        session = self._session()
        if session is None or session[0] == self.params.get("sid"):
            return None
        return session[0]


# -- nvmet -------------------------------------------------------------------------------------------------------


def _nvmet_state(host: Host, name_prefix: str) -> dict[str, Any]:
    return remote.read_state(host, remote.state_path(name_prefix, "nvmet")) or {}


class NvmetPortDown(_RecordedFault):
    """An nvmet port taken from the subsystems, then given back: ``rm ports/N/subsystems/NQN`` and ``ln -s
    subsystems/NQN ports/N/subsystems/NQN`` for each of our subsystems linked there.

    Dropping the link deletes the controllers of that subsystem on that port at once (``nvmet_port_subsys_drop_link``
    -> ``nvmet_port_del_ctrls``) and, with the last one, disables the port: every live path through the port breaks,
    the other ports carry on. Refused unless the state file of the nvmet driver lists the port and the subsystems.
    """

    kind = "nvmet-port"

    def __init__(self, host: Host, name_prefix: str, portid: int, nqns: tuple[str, ...] = ()) -> None:
        super().__init__(host, name_prefix)
        self.portid = portid
        self.nqns = nqns
        self.name = f"{host.name} nvmet port {portid} down"
        self.key = f"nvmet-port:{portid}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> NvmetPortDown:
        """The fault a record describes, to restore it."""
        params = record["params"]
        fault = cls(host, name_prefix, int(params["portid"]), tuple(params["nqns"]))
        fault.params = dict(params)
        return fault

    def how(self) -> str:
        return (
            "; ".join(f"ln -s {NVMET}/subsystems/{n} {NVMET}/ports/{self.portid}/subsystems/{n}" for n in self.nqns)
            or f"nothing (port {self.portid} had no subsystem of ours linked)"
        )

    def _check(self) -> None:
        state = _nvmet_state(self.host, self.name_prefix)
        if self.portid not in [int(p) for p in state.get("ports", [])]:
            raise self._refuse(
                f"nvmet port {self.portid} was not made by fabricqa ({remote.state_path(self.name_prefix, 'nvmet')} "
                "does not list it)",
                "fault a port of the fabric fabricqa provisioned (faults.target_port_down)",
            )
        snap = parse_nvmet(self.host.run(["sh", "-c", NVMET_SNAPSHOT]).stdout)
        linked = snap.ports.get(self.portid, {}).get("subsystems", [])
        ours = [n for n in state.get("subsystems", []) if n in linked]
        wanted = list(self.nqns) or ours
        foreign = [n for n in wanted if n not in state.get("subsystems", [])]
        if foreign:
            raise self._refuse(
                f"nvmet subsystem {foreign[0]} was not made by fabricqa", "fault only the fabric's own subsystems"
            )
        missing = [n for n in wanted if n not in linked]
        if not wanted or missing:
            raise self._refuse(
                f"no subsystem of fabricqa is linked to nvmet port {self.portid}"
                if not wanted
                else f"{missing[0]} is not linked to nvmet port {self.portid} (nothing to take away)",
                "inject the fault while the fabric is connected",
            )
        self.nqns = tuple(wanted)
        self.params = {"portid": self.portid, "nqns": list(self.nqns)}

    def _inject(self) -> CommandResult:
        return self.host.run(["sh", "-c", NVMET_UNLINK, "sh", str(self.portid), *self.nqns])

    def _restore(self) -> CommandResult:
        return self.host.run(["sh", "-c", NVMET_RELINK, "sh", str(self.portid), *self.nqns])


class AnaStateChange(_RecordedFault):
    """An nvmet port's ANA group set to ``state`` (inaccessible by default), then back to the state it had:
    ``ports/N/ana_groups/1/ana_state``. The initiators learn it from an ANA change event and move I/O to their
    other paths (native NVMe multipath); nothing is disconnected. Refused unless the nvmet driver's state file lists
    the port."""

    kind = "nvmet-ana"

    def __init__(
        self, host: Host, name_prefix: str, portid: int, state: str = "inaccessible", group: int = ANA_DEFAULT_GROUP
    ) -> None:
        super().__init__(host, name_prefix)
        self.portid = portid
        self.state = state
        self.group = group
        self.before = ""
        self.name = f"{host.name} nvmet port {portid} ANA group {group} {state}"
        self.key = f"nvmet-ana:{portid}:{group}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> AnaStateChange:
        """The fault a record describes, to restore it."""
        params = record["params"]
        fault = cls(host, name_prefix, int(params["portid"]), str(params["state"]), int(params["group"]))
        fault.before = str(params["before"])
        fault.params = dict(params)
        return fault

    def _file(self) -> str:
        return f"{NVMET}/ports/{self.portid}/ana_groups/{self.group}/ana_state"

    def how(self) -> str:
        return f"echo {self.before or 'optimized'} > {self._file()}"

    def _check(self) -> None:
        if self.state not in ANA_STATES:
            raise self._refuse(f"{self.state!r} is not an ANA state", f"use one of {', '.join(ANA_STATES)}")
        state = _nvmet_state(self.host, self.name_prefix)
        if self.portid not in [int(p) for p in state.get("ports", [])]:
            raise self._refuse(
                f"nvmet port {self.portid} was not made by fabricqa ({remote.state_path(self.name_prefix, 'nvmet')} "
                "does not list it)",
                "change the ANA state of a port of the fabric fabricqa provisioned (faults.ana_change)",
            )
        result = self.host.run(["sh", "-c", ANA_READ, "sh", str(self.portid), str(self.group)], check=False)
        before = result.stdout.strip()
        if not result.ok or before not in ANA_STATES:
            raise self._refuse(
                f"{self._file()} cannot be read ({command_tail(CommandError(result)) if not result.ok else before!r})",
                "use a kernel whose nvmet has ANA (4.20 or later) and an existing ANA group",
            )
        if before == self.state:
            raise self._refuse(f"ANA group {self.group} is {before} already", "pick another state")
        self.before = before
        self.params = {"portid": self.portid, "group": self.group, "state": self.state, "before": before}

    def _inject(self) -> CommandResult:
        return self.host.run(["sh", "-c", ANA_WRITE, "sh", str(self.portid), str(self.group), self.state])

    def _restore(self) -> CommandResult:
        return self.host.run(["sh", "-c", ANA_RESTORE, "sh", str(self.portid), str(self.group), self.before])


# -- LIO ---------------------------------------------------------------------------------------------------------


class LioPortalDown(_RecordedFault):
    """A LIO network portal removed, then made again with the iSER setting it had: ``rmdir
    iscsi/IQN/TPG/np/ADDR:PORT`` (the portal's own TPG: LIO gets one per portal), ``mkdir`` it and ``echo 1 >
    .../iser`` where it was on.

    Why the portal and not the TPG's ``enable``: ``enable`` 0 calls ``iscsit_tpg_disable_portal_group(tpg, 1)``,
    which forcibly closes every session of the TPG, whatever portal it came in by (one TPG served every portal
    when this was written; with a TPG per portal it would be one path's, an alternative not tried yet). Removing
    the portal touches only that portal; but in LIO (6.1:
    ``iscsit_tpg_release_np`` -> ``iscsit_del_np``) it stops the portal's login thread and releases its *listening*
    socket only: a session already logged in through it keeps its own connection and carries on. So this fault
    refuses new logins, discovery and reconnects on that portal; a failover case must also break the live sessions
    on it (a link fault does) for I/O to move. Refused unless the LIO driver's state file lists the target IQN.
    """

    kind = "lio-portal"

    def __init__(self, host: Host, name_prefix: str, iqn: str, portal: str, tpg: str = lio.TPG) -> None:
        super().__init__(host, name_prefix)
        self.iqn = iqn
        self.portal = portal
        self.tpg = tpg
        self.iser = False
        self.name = f"{host.name} LIO portal {portal} of {iqn} removed"
        self.key = f"lio-portal:{iqn}:{tpg}:{portal}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> LioPortalDown:
        """The fault a record describes, to restore it."""
        params = record["params"]
        fault = cls(host, name_prefix, str(params["iqn"]), str(params["portal"]), str(params["tpg"]))
        fault.iser = bool(params["iser"])
        fault.params = dict(params)
        return fault

    def how(self) -> str:
        np = f"{lio.ROOT}/iscsi/{self.iqn}/{self.tpg}/np/{self.portal}"
        return f"mkdir {np}" + (f"; echo 1 > {np}/iser" if self.iser else "")

    def _check(self) -> None:
        state_file = remote.state_path(self.name_prefix, "lio")
        state = remote.read_state(self.host, state_file) or {}
        if self.iqn not in state.get("targets", []):
            raise self._refuse(
                f"iSCSI target {self.iqn} was not made by fabricqa ({state_file} does not list it)",
                "fault a portal of the fabric fabricqa provisioned (faults.target_port_down)",
            )
        snap = lio.parse_snapshot(self.host.run(["sh", "-c", lio.SNAPSHOT_SCRIPT]).stdout)
        portals = snap.targets.get(self.iqn, {}).get(self.tpg, {}).get("portals", {})
        if self.portal not in portals:
            raise self._refuse(
                f"{self.iqn} {self.tpg} has no portal {self.portal} (nothing to take away)",
                f"use one of its portals: {', '.join(portals) or 'none'}",
            )
        self.iser = portals[self.portal].strip() == "1"
        self.params = {"iqn": self.iqn, "tpg": self.tpg, "portal": self.portal, "iser": self.iser}

    def _inject(self) -> CommandResult:
        return self.host.run(["sh", "-c", LIO_NP_REMOVE, "sh", self.iqn, self.tpg, self.portal])

    def _restore(self) -> CommandResult:
        iser = "1" if self.iser else "0"
        return self.host.run(["sh", "-c", LIO_NP_RESTORE, "sh", self.iqn, self.tpg, self.portal, iser])


class LioAluaChange(_RecordedFault):
    """The ALUA target port group of one LIO TPG (one path: :mod:`pytest_fabricqa.targets.lio` makes a TPG per
    portal and a group per TPG in every backstore) set to ``state`` (unavailable by default), then back to the state
    it had: ``core/HBA/BACKSTORE/alua/GROUP/alua_access_state`` in each backstore behind the TPG's LUNs. LIO makes
    it an implicit transition and tells the initiators with a unit attention (asymmetric access state changed);
    while it holds, the group takes implicit transitions only (``alua_access_type`` 1, set back after), so an
    initiator's SET TARGET PORT GROUPS cannot make it active again behind the fault's back; I/O
    through that port then ends in NOT READY (target port unavailable), and dm-multipath (``prio alua``) moves it
    to the other paths; nothing is logged out. Refused unless the LIO driver's state file lists the target IQN and
    the TPG's backstores have the group."""

    kind = "lio-alua"

    def __init__(self, host: Host, name_prefix: str, iqn: str, tpg: str, state: str = "unavailable") -> None:
        super().__init__(host, name_prefix)
        self.iqn = iqn
        self.tpg = tpg
        self.state = state
        self.group = lio.alua_group(name_prefix, tpg)
        self.backstores: list[str] = []
        self.before = ""
        self.before_type = ""
        self.name = f"{host.name} LIO {iqn} {tpg} ALUA group {state}"
        self.key = f"lio-alua:{iqn}:{tpg}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> LioAluaChange:
        """The fault a record describes, to restore it."""
        params = record["params"]
        fault = cls(host, name_prefix, str(params["iqn"]), str(params["tpg"]), str(params["state"]))
        fault.backstores = [str(b) for b in params["backstores"]]
        fault.before = str(params["before"])
        fault.before_type = str(params.get("before_type", ""))  # a record of an older version kept none
        fault.params = dict(params)
        return fault

    def how(self) -> str:
        number = ALUA_STATES.get(self.before, 0)
        steps = []
        for b in self.backstores or ["HBA/BACKSTORE"]:
            folder = f"{lio.ROOT}/core/{b}/{lio.ALUA_FOLDER}/{self.group}"
            steps.append(f"echo {number} > {folder}/alua_access_state")
            if self.before_type:
                steps.append(f"echo {self.before_type} > {folder}/alua_access_type")
        return "; ".join(steps)

    def _check(self) -> None:
        if self.state not in ALUA_STATES:
            raise self._refuse(f"{self.state!r} is not an ALUA state", f"use one of {', '.join(ALUA_STATES)}")
        state_file = remote.state_path(self.name_prefix, "lio")
        state = remote.read_state(self.host, state_file) or {}
        if self.iqn not in state.get("targets", []):
            raise self._refuse(
                f"iSCSI target {self.iqn} was not made by fabricqa ({state_file} does not list it)",
                "change the ALUA state of a TPG of the fabric fabricqa provisioned (faults.alua_change)",
            )
        snap = lio.parse_snapshot(self.host.run(["sh", "-c", lio.SNAPSHOT_SCRIPT]).stdout)
        links = snap.targets.get(self.iqn, {}).get(self.tpg, {}).get("luns", {})
        self.backstores = sorted({"/".join(link.rstrip("/").split("/")[-2:]) for link in links.values()})
        if not self.backstores:
            raise self._refuse(f"{self.iqn} has no {self.tpg} with LUNs", "fault a TPG of the provisioned fabric")
        result = self.host.run(["sh", "-c", LIO_ALUA_READ, "sh", self.group, self.backstores[0]], check=False)
        numbers = {str(v): k for k, v in ALUA_STATES.items()}
        read = result.stdout.split()
        before = numbers.get(read[0], "") if read else ""
        self.before_type = read[1] if len(read) > 1 and read[1].isdigit() else ""
        if not result.ok or not before:
            raise self._refuse(
                f"{self.backstores[0]} has no ALUA group {self.group} to change "
                f"({command_tail(CommandError(result)) if not result.ok else result.stdout.strip()!r})",
                "serve the target on several paths (targets[].paths: all): LIO then gets an ALUA group per path",
            )
        if before == self.state:
            raise self._refuse(f"ALUA group {self.group} is {before} already", "pick another state")
        self.before = before
        self.params = {
            "iqn": self.iqn,
            "tpg": self.tpg,
            "group": self.group,
            "backstores": self.backstores,
            "state": self.state,
            "before": before,
            "before_type": self.before_type,
        }

    def _inject(self) -> CommandResult:
        number = str(ALUA_STATES[self.state])
        argv = ["sh", "-c", LIO_ALUA_WRITE, "sh", number, self.group, ALUA_IMPLICIT_ONLY, *self.backstores]
        return self.host.run(argv)

    def _restore(self) -> CommandResult:
        number = str(ALUA_STATES.get(self.before, 0))
        argv = ["sh", "-c", LIO_ALUA_RESTORE, "sh", number, self.group, self.before_type, *self.backstores]
        return self.host.run(argv)


class PortOff:
    """One target port gone, made of several faults on the target host taken as one: every part armed (checked,
    recorded, its restore registered) before any fires, fired in order, restored in reverse order, each part
    restored even when another's restore failed. The window runs from the last part's break to the last part's
    restore, when the port is whole again.

    LIO's port (:func:`target_port_down`): its portal removed (:class:`LioPortalDown`: no new login, discovery or
    reconnect through it) and the target host's storage port carrying that portal losing every frame (or down, as
    ``failover.outage_by`` says), which breaks the sessions already logged in through it; the portal alone leaves
    those running (see :class:`LioPortalDown`). A SIGKILLed run leaves each part's own record, restored at the next
    start like any other."""

    def __init__(self, name: str, parts: list[Any]) -> None:
        if not parts:
            raise ValueError("a port fault needs at least one part")
        self.name = name
        self.parts = parts
        self.host: Host = parts[0].host
        self.key = "+".join(part.key for part in parts)

    def __repr__(self) -> str:
        return f"PortOff({self.name!r}, {self.parts!r})"

    def arm(self, undo: UndoStack) -> None:
        """Arm every part (each pushes its own restore, so the undo stack restores them in reverse order)."""
        for part in self.parts:
            part.arm(undo)

    def inject(self, undo: UndoStack) -> float:
        self.arm(undo)
        return self.fire()

    def fire(self) -> float:
        return [part.fire() for part in self.parts][-1]

    def restore(self) -> float:
        when: float | None = None
        failure: FaultError | None = None
        for part in reversed(self.parts):
            try:
                when = part.restore()
            except FaultError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        assert when is not None
        return when


# -- SPDK --------------------------------------------------------------------------------------------------------


def _recorded_rpc(host: Host, params: Mapping[str, Any]) -> RpcClient:
    """The JSON-RPC client an SPDK fault's record names (socket, mode, timeout), to restore it."""
    return RpcClient(host, str(params["socket"]), str(params["mode"]), float(params["timeout"]))


class SpdkListenerDown(_RecordedFault):
    """An SPDK listener removed from every subsystem of ours that has it, then added again:
    ``nvmf_subsystem_remove_listener`` and ``nvmf_subsystem_add_listener`` with the same ``listen_address``, one call
    per subsystem in one command, through the driver's JSON-RPC client: the port is down for every namespace it
    served, not only the first subsystem's (issue 29).

    Removing a listener disconnects the subsystem's qpairs that came in through that address
    (``spdk_nvmf_transport_stop_listen_async``): the path breaks, other listeners carry on. Refused unless the SPDK
    driver's state file lists every subsystem and the app holds the listener on at least one.
    """

    kind = "spdk-listener"

    def __init__(
        self, rpc: RpcClient, name_prefix: str, nqns: tuple[str, ...], listen_address: Mapping[str, str]
    ) -> None:
        super().__init__(rpc.host, name_prefix)
        self.rpc = rpc
        self.nqns = nqns
        self.address = {k: str(listen_address[k]) for k in ("trtype", "adrfam", "traddr", "trsvcid")}
        self.listening: tuple[str, ...] = ()
        """The subsystems that held the listener when the fault was armed: those it is removed from."""
        where = f"{self.address['trtype']} {self.address['traddr']}:{self.address['trsvcid']}"
        self.name = f"{rpc.host.name} SPDK listener {where} of {', '.join(nqns)} removed"
        self.key = f"spdk-listener:{self.address['trtype']}:{self.address['traddr']}:{self.address['trsvcid']}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> SpdkListenerDown:
        """The fault a record describes, to restore it (a record of one subsystem, ``nqn``, from before every
        subsystem's listener was taken, too)."""
        params = record["params"]
        nqns = tuple(params.get("nqns") or [params["nqn"]])
        fault = cls(_recorded_rpc(host, params), name_prefix, nqns, params["listen_address"])
        fault.listening = tuple(params.get("listening") or nqns)
        fault.params = dict(params)
        return fault

    def _listener_calls(self, method: str, nqns: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
        return [(method, {"nqn": n, "listen_address": dict(self.address)}) for n in nqns]

    def how(self) -> str:
        calls = json.dumps(
            [p for _, p in self._listener_calls("nvmf_subsystem_add_listener", self.listening or self.nqns)]
        )
        return f"rpc.py -s {self.rpc.socket} nvmf_subsystem_add_listener with each of {calls}"

    def _holding(self) -> dict[str, bool | None]:
        """Each of our subsystems: whether the app's subsystem has the listener; None when the app no longer has
        the subsystem."""
        subsystems = {s.get("nqn"): s for s in self.rpc.call("nvmf_get_subsystems") or [] if isinstance(s, dict)}
        found: dict[str, bool | None] = {}
        for nqn in self.nqns:
            sub = subsystems.get(nqn)
            found[nqn] = (
                None
                if sub is None
                else any(
                    all(str(a.get(k, "")).upper() == v.upper() for k, v in self.address.items())
                    for a in sub.get("listen_addresses", [])
                    if isinstance(a, dict)
                )
            )
        return found

    def _check(self) -> None:
        state_file = remote.state_path(self.name_prefix, "spdk")
        state = remote.read_state(self.host, state_file) or {}
        foreign = [n for n in self.nqns if n not in state.get("subsystems", [])]
        if not self.nqns or foreign or state.get("socket", self.rpc.socket) != self.rpc.socket:
            raise self._refuse(
                f"SPDK subsystem {foreign[0] if foreign else '(none)'} on {self.rpc.socket} was not made by fabricqa "
                f"({state_file} does not list it)",
                "fault a listener of the fabric fabricqa provisioned (faults.target_port_down)",
            )
        try:
            holding = self._holding()
        except (SpdkRpcError, SpdkUnreachable) as exc:
            raise self._refuse(f"the SPDK app cannot be asked ({exc.what})", exc.fix) from None
        self.listening = tuple(n for n in self.nqns if holding.get(n))
        if not self.listening:
            raise self._refuse(
                f"no subsystem of {', '.join(self.nqns)} has a listener {self.address['traddr']}:"
                f"{self.address['trsvcid']} (nothing to take away)",
                "inject the fault while the fabric is connected",
            )
        self.params = {
            "nqns": list(self.nqns),
            "listening": list(self.listening),
            "listen_address": dict(self.address),
            "socket": self.rpc.socket,
            "mode": self.rpc.mode,
            "timeout": self.rpc.timeout,
        }

    def _timed(self, calls: list[tuple[str, Mapping[str, Any]]]) -> CommandResult:
        """RPC ``calls`` in one command that then prints the host's clock; any of SPDK's error answers raises."""
        result = self.host.run(
            ["sh", "-c", TIMED, "sh", *self.rpc.argv(calls)], check=False, timeout=self.rpc.timeout + 30
        )
        body, _, when = result.stdout.rstrip("\n").rpartition("\n")
        first, _, rest = body.partition("\n")
        started = first if first.startswith("started ") else ""
        body = rest if started else body
        responses = self.rpc.responses(CommandResult(result.host, result.argv, result.exit_code, body, result.stderr))
        for (method, params), response in zip(calls, responses + [{}] * (len(calls) - len(responses)), strict=True):
            result_of(self.host.name, method, params, response, "")
        return CommandResult(result.host, result.argv, 0, (started and started + "\n") + when + "\n", result.stderr)

    def inject(self, undo: UndoStack) -> float:
        """As every fault's (:meth:`_RecordedFault.inject`); an SPDK error answer becomes one line too."""
        try:
            return super().inject(undo)
        except SpdkRpcError as exc:
            raise FaultError(self.host.name, f"cannot inject '{self.name}' ({exc.message})", exc.fix) from None

    def _inject(self) -> CommandResult:
        return self._timed(self._listener_calls("nvmf_subsystem_remove_listener", self.listening))

    def _restore(self) -> CommandResult:
        holding = self._holding()
        lost = [n for n in self.listening if holding.get(n) is False]  # not back yet, and the subsystem still there
        if not lost:
            return self.host.run(["sh", "-c", CLOCK])
        return self._timed(self._listener_calls("nvmf_subsystem_add_listener", lost))


class SpdkAnaChange(SpdkListenerDown):
    """An SPDK listener's ANA state set to ``state`` (inaccessible by default) for every ANA group of each of our
    subsystems it serves, then back to the state it had: ``nvmf_subsystem_listener_set_ana_state``, all in one
    command. The initiators learn it from an ANA change event and move I/O to their other paths (native NVMe
    multipath); nothing is disconnected. SPDK reports ANA only for a subsystem made with ``ana_reporting`` (the
    driver sets it when the target serves several paths); refused otherwise, and unless the SPDK driver's state
    file lists every subsystem."""

    kind = "spdk-ana"

    def __init__(
        self,
        rpc: RpcClient,
        name_prefix: str,
        nqns: tuple[str, ...],
        listen_address: Mapping[str, str],
        state: str = "inaccessible",
    ) -> None:
        super().__init__(rpc, name_prefix, nqns, listen_address)
        self.state = state
        self.before = ""
        where = f"{self.address['trtype']} {self.address['traddr']}:{self.address['trsvcid']}"
        self.name = f"{rpc.host.name} SPDK listener {where} ANA {state}"
        self.key = f"spdk-ana:{self.address['trtype']}:{self.address['traddr']}:{self.address['trsvcid']}"

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> SpdkAnaChange:
        """The fault a record describes, to restore it."""
        params = record["params"]
        rpc = _recorded_rpc(host, params)
        fault = cls(rpc, name_prefix, tuple(params["nqns"]), params["listen_address"], str(params["state"]))
        fault.before = str(params["before"])
        fault.params = dict(params)
        return fault

    def _calls(self, state: str) -> list[tuple[str, Mapping[str, Any]]]:
        return [
            (
                "nvmf_subsystem_listener_set_ana_state",
                {"nqn": n, "listen_address": dict(self.address), "ana_state": state},
            )
            for n in self.nqns
        ]

    def how(self) -> str:
        calls = json.dumps([params for _, params in self._calls(self.before or "optimized")])
        return f"rpc.py -s {self.rpc.socket} nvmf_subsystem_listener_set_ana_state with each of {calls}"

    def _states(self) -> dict[str, list[str] | None]:
        """Each of our subsystems' ANA states on the listener (one per ANA group); None for a subsystem the app does
        not hold or whose listing has no ANA states (ANA reporting off); no entry when it lacks the listener."""
        found: dict[str, list[str] | None] = {}
        subsystems = {s.get("nqn") for s in self.rpc.call("nvmf_get_subsystems") or [] if isinstance(s, dict)}
        for nqn in self.nqns:
            if nqn not in subsystems:
                found[nqn] = None
                continue
            for listener in self.rpc.call("nvmf_subsystem_get_listeners", {"nqn": nqn}) or []:
                address = listener.get("address", {}) if isinstance(listener, dict) else {}
                if all(str(address.get(k, "")).upper() == v.upper() for k, v in self.address.items()):
                    states = listener.get("ana_states")
                    found[nqn] = [str(g.get("ana_state")) for g in states] if isinstance(states, list) else None
        return found

    def _check(self) -> None:
        if self.state not in SPDK_ANA_STATES:
            raise self._refuse(
                f"{self.state!r} is not an ANA state SPDK sets", f"use one of {', '.join(SPDK_ANA_STATES)}"
            )
        state_file = remote.state_path(self.name_prefix, "spdk")
        state = remote.read_state(self.host, state_file) or {}
        foreign = [n for n in self.nqns if n not in state.get("subsystems", [])]
        if not self.nqns or foreign or state.get("socket", self.rpc.socket) != self.rpc.socket:
            raise self._refuse(
                f"SPDK subsystem {foreign[0] if foreign else '(none)'} on {self.rpc.socket} was not made by fabricqa "
                f"({state_file} does not list it)",
                "change the ANA state of a listener of the fabric fabricqa provisioned (faults.ana_change)",
            )
        try:
            states = self._states()
        except (SpdkRpcError, SpdkUnreachable) as exc:
            raise self._refuse(f"the SPDK app cannot be asked ({exc.what})", exc.fix) from None
        where = f"{self.address['traddr']}:{self.address['trsvcid']}"
        for nqn in self.nqns:
            if nqn not in states:
                raise self._refuse(f"{nqn} has no listener {where}", "inject the fault while the fabric is connected")
            if not states[nqn]:
                raise self._refuse(
                    f"{nqn} reports no ANA state on {where} (made without ana_reporting)",
                    "serve the target on several paths (targets[].paths: all): the driver then turns ANA reporting on",
                )
        seen = sorted({s for found in states.values() for s in found or ()})
        if len(seen) != 1:
            raise self._refuse(
                f"the listener {where} is in several ANA states at once ({', '.join(seen)})",
                "set them alike before faulting the listener",
            )
        if seen[0] == self.state:
            raise self._refuse(f"the listener {where} is {seen[0]} already", "pick another state")
        self.before = seen[0]
        self.params = {
            "nqns": list(self.nqns),
            "listen_address": dict(self.address),
            "state": self.state,
            "before": self.before,
            "socket": self.rpc.socket,
            "mode": self.rpc.mode,
            "timeout": self.rpc.timeout,
        }

    def _inject(self) -> CommandResult:
        return self._timed(self._calls(self.state))

    def _restore(self) -> CommandResult:
        states = self._states()
        if all(found is None or set(found) <= {self.before} for found in states.values()):
            return self.host.run(["sh", "-c", CLOCK])  # back already, or the subsystems (with the app) are gone
        return self._timed(self._calls(self.before))


# -- the initiators' path timeouts -------------------------------------------------------------------------------

# One line per NVMe-oF controller and per iSCSI session: what the timeouts are now. Recorded on the virtual lab
# (tests/data/failover/timeouts-*.txt). fast_io_fail_tmo and ctrl_loss_tmo read "off" when disabled (-1).
TIMEOUTS_READ = r"""
for c in /sys/class/nvme/nvme*; do
  [ -r "$c/subsysnqn" ] || continue
  printf 'nvme %s %s' "${c##*/}" "$(cat "$c/subsysnqn")"
  for a in transport state fast_io_fail_tmo reconnect_delay ctrl_loss_tmo kato; do
    printf ' %s=%s' "$a" "$(cat "$c/$a" 2>/dev/null || echo -)"
  done
  for q in "$c"/nvme*n*/queue/io_timeout; do
    [ -r "$q" ] || continue
    d=${q%/queue/io_timeout}
    printf ' io_timeout:%s=%s' "${d##*/}" "$(cat "$q")"
  done
  echo
done
for s in /sys/class/iscsi_session/session*; do
  [ -r "$s/targetname" ] || continue
  printf 'iscsi %s %s recovery_tmo=%s\n' "${s##*/}" "$(cat "$s/targetname")" "$(cat "$s/recovery_tmo")"
done
"""
# The first argument: how many seconds a refused write is tried again. Then quadruples file, value, guard file,
# guard value: a value is written only while the guard file (the controller's subsysnqn, the session's
# targetname) still says what it said when the value was read, so a controller or session number that a later
# connect reused is never touched. A file that is gone is skipped. An iSCSI session refuses its recovery_tmo
# (EBUSY) while it is FAILED or FREE, as it is after a long outage until iscsid has logged in again (seen over
# iSER on the virtual lab): the write is tried once a second until it takes or the wait is over.
TIMEOUTS_WRITE = (
    r"""
set -e
wait=$1
shift
while [ $# -ge 4 ]; do
  f=$1 v=$2 g=$3 w=$4
  shift 4
  t=0
  while [ -e "$f" ] && [ "$(cat "$g" 2>/dev/null)" = "$w" ]; do
    if [ "$t" -ge "$wait" ]; then printf %s "$v" > "$f"; break; fi
    if (printf %s "$v" > "$f") 2>/dev/null; then break; fi
    sleep 1
    t=$((t + 1))
  done
done
"""
    + CLOCK
)
RESTORE_WAIT_S = 120
"""How long a value that is set back may be refused (an iSCSI session logging in again after an outage)."""
NVME_CLASS = "/sys/class/nvme"
ISCSI_CLASS = "/sys/class/iscsi_session"


def parse_timeouts(text: str) -> dict[str, dict[str, Any]]:
    """:data:`TIMEOUTS_READ`'s output: ``nvme1`` / ``session3`` -> {"kind", "subsystem", attribute: value},
    io_timeout per path disk under ``io_timeout:<disk>``."""
    found: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3 or words[0] not in ("nvme", "iscsi"):
            continue
        entry: dict[str, Any] = {"kind": words[0], "subsystem": words[2]}
        for word in words[3:]:
            key, _, value = word.partition("=")
            entry[key] = value
        found[words[1]] = entry
    return found


def _sysfs_value(value: str) -> str:
    # What the kernel shows as "off" it takes as -1 (nvme_ctrl_fast_io_fail_tmo_store, ctrl_loss_tmo).
    return "-1" if value == "off" else value


class PathTimeouts(_RecordedFault):
    """The path timeouts of an initiator's controllers and sessions of one fabric set for a failover case, then
    set back: NVMe-oF ``fast_io_fail_tmo``, ``reconnect_delay``, ``ctrl_loss_tmo`` (always with
    ``reconnect_delay``: the kernel keeps it as a count of reconnects) and each path disk's ``queue/io_timeout``
    (ms in sysfs), iSCSI's session ``recovery_tmo``. A change, not a fault, but it needs the same guarantee: the
    old values are recorded on the host before anything is written, and a killed run's are written back at the
    next start (:func:`restore_stale`), where the controller or session is still the same.

    ``subsystems``: the fabric's NQNs or IQN; only controllers and sessions of those are touched. Refused when
    the host has none (nothing to set) or a value cannot be read.
    """

    kind = "path-timeouts"

    def __init__(
        self,
        host: Host,
        name_prefix: str,
        subsystems: tuple[str, ...],
        nvme: Mapping[str, int | None] | None = None,
        iscsi: Mapping[str, int | None] | None = None,
    ) -> None:
        super().__init__(host, name_prefix)
        self.subsystems = subsystems
        self.nvme = {k: v for k, v in (nvme or {}).items() if v is not None}
        self.iscsi = {k: v for k, v in (iscsi or {}).items() if v is not None}
        wanted = ", ".join(f"{k} {v}" for k, v in {**self.nvme, **self.iscsi}.items()) or "nothing"
        self.name = f"{host.name} path timeouts set ({wanted})"
        self.key = "path-timeouts"
        self.before: dict[str, dict[str, Any]] = {}

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> PathTimeouts:
        """The change a record describes, to set the old values back."""
        params = record["params"]
        change = cls(host, name_prefix, tuple(params["subsystems"]))
        change.params = dict(params)
        return change

    def how(self) -> str:
        writes = self.params.get("restore", [])
        return "; ".join(f"echo {v} > {f}" for f, v, _, _ in writes) or "nothing (no value was changed)"

    def _writes(self) -> tuple[list[list[str]], list[list[str]]]:
        """(new values, old values) as quadruples for :data:`TIMEOUTS_WRITE`, from :attr:`before`."""
        new: list[list[str]] = []
        old: list[list[str]] = []
        for name, entry in sorted(self.before.items()):
            if entry["subsystem"] not in self.subsystems:
                continue
            if entry["kind"] == "nvme":
                base = f"{NVME_CLASS}/{name}"
                guard = [f"{base}/subsysnqn", entry["subsystem"]]
                wanted: dict[str, str] = {}
                for attribute in ("fast_io_fail_tmo", "reconnect_delay"):
                    key = f"{attribute}_s"
                    if key in self.nvme:
                        wanted[f"{base}/{attribute}"] = str(self.nvme[key])
                        old.append([f"{base}/{attribute}", _sysfs_value(entry[attribute]), *guard])
                # The kernel keeps ctrl_loss_tmo as a number of reconnects (nvme_ctrl_loss_tmo_store:
                # max_reconnects = DIV_ROUND_UP(ctrl_loss_tmo, reconnect_delay); shown as their product), so a new
                # reconnect_delay alone changes the loss time (600 s at 10 s became 60 s at 1 s). Written after it,
                # the lab's value or the one in force before, and set back after reconnect_delay is.
                if "ctrl_loss_tmo_s" in self.nvme or "reconnect_delay_s" in self.nvme:
                    loss = self.nvme.get("ctrl_loss_tmo_s", _sysfs_value(entry["ctrl_loss_tmo"]))
                    wanted[f"{base}/ctrl_loss_tmo"] = str(loss)
                    old.append([f"{base}/ctrl_loss_tmo", _sysfs_value(entry["ctrl_loss_tmo"]), *guard])
                if "io_timeout_s" in self.nvme:
                    for key, value in entry.items():
                        if key.startswith("io_timeout:"):
                            path = f"{base}/{key.split(':', 1)[1]}/queue/io_timeout"
                            wanted[path] = str(self.nvme["io_timeout_s"] * 1000)
                            old.append([path, str(value), *guard])
                new.extend([path, value, *guard] for path, value in wanted.items())
            elif entry["kind"] == "iscsi" and "recovery_tmo_s" in self.iscsi:
                base = f"{ISCSI_CLASS}/{name}"
                guard = [f"{base}/targetname", entry["subsystem"]]
                new.append([f"{base}/recovery_tmo", str(self.iscsi["recovery_tmo_s"]), *guard])
                old.append([f"{base}/recovery_tmo", str(entry["recovery_tmo"]), *guard])
        return new, old

    def _check(self) -> None:
        result = self.host.run(["sh", "-c", TIMEOUTS_READ], check=False)
        self.before = parse_timeouts(result.stdout)
        ours = {k: v for k, v in self.before.items() if v["subsystem"] in self.subsystems}
        if not ours:
            raise self._refuse(
                f"no NVMe-oF controller or iSCSI session of {', '.join(self.subsystems)} is connected",
                "set the timeouts while the fabric is connected",
            )
        for name, entry in ours.items():
            if any(value in ("", "-") for key, value in entry.items() if key not in ("kind", "subsystem")):
                raise self._refuse(
                    f"a timeout of {name} cannot be read ({entry})",
                    "use Linux 5.10 or later (fast_io_fail_tmo) on the initiator, or lift failover.nvme/iscsi",
                )
        new, old = self._writes()
        self.params = {"subsystems": list(self.subsystems), "set": new, "restore": old, "read": ours}

    def _inject(self) -> CommandResult:
        return self.host.run(["sh", "-c", TIMEOUTS_WRITE, "sh", "0", *[w for q in self.params["set"] for w in q]])

    def _restore(self) -> CommandResult:
        restore = [w for q in self.params.get("restore", []) for w in q]
        return self.host.run(["sh", "-c", TIMEOUTS_WRITE, "sh", str(RESTORE_WAIT_S), *restore])


# -- choosing the fault for a lab's target ------------------------------------------------------------------------


_F = TypeVar("_F", bound="_RecordedFault")


def of_lab(lab: LabModel, fault: _F) -> _F:
    """``fault``, made by ``lab``'s run (its record names the lab)."""
    fault.lab = lab.name
    return fault


def link_down(lab: LabModel, hosts: Mapping[str, Host], host: str, *, name_prefix: str | None = None) -> LinkDown:
    """``host``'s storage link (``hosts.NAME.storage.interface``) down and up. Its record goes under
    ``name_prefix`` (default: the first target's, the prefix the lab's fabrics share in the common case)."""
    prefix = name_prefix or (lab.targets[0].name_prefix if lab.targets else "fabricqa")
    return LinkDown(lab, hosts[host], prefix)


def _nvmet_portid(host: Host, model: TargetModel, trtype: str, traddr: str, trsvcid: int) -> int:
    state = _nvmet_state(host, model.name_prefix)
    snap = parse_nvmet(host.run(["sh", "-c", NVMET_SNAPSHOT]).stdout)
    for portid in (int(p) for p in state.get("ports", [])):
        port = snap.ports.get(portid)
        if port and (port["trtype"], port["traddr"], str(port["trsvcid"])) == (trtype, traddr, str(trsvcid)):
            return portid
    raise FaultRefused(
        host.name,
        f"no nvmet port of fabricqa serves {trtype} {traddr}:{trsvcid} "
        f"({remote.state_path(model.name_prefix, 'nvmet')} lists {state.get('ports', [])})",
        "connect the fabric first (the fixture `fabric`), then fault its port",
    )


def _target(lab: LabModel, hosts: Mapping[str, Host], target: str, protocol: str) -> tuple[TargetModel, Host]:
    model = lab.target_for(protocol, target)
    if model.host is None:
        raise FaultRefused(
            model.address or lab.name,
            f"target {model.name} is an external array: fabricqa made none of its ports",
            "fault the initiators' links instead (faults.link_down)",
        )
    return model, hosts[model.host]


def _port_link(lab: LabModel, host: Host, name_prefix: str, traddr: str) -> LinkDown:
    """The link fault (``failover.outage_by``) of the target host's storage port that carries ``traddr``."""
    hosted = lab.hosts.get(host.name)
    interface = next((p.interface for p in (hosted.storage if hosted else ()) if str(p.address) == traddr), None)
    if interface is None:
        raise FaultRefused(
            host.name,
            f"{traddr} is not the address of a storage port of {host.name} in the lab: the sessions through it "
            "could not be broken",
            f"serve the portal on one of hosts.{host.name}.storage's addresses",
        )
    return link_outage(lab, host, name_prefix, interface)


def target_port_down(
    lab: LabModel,
    hosts: Mapping[str, Host],
    target: str,
    protocol: str,
    *,
    address: str | None = None,
    port: int | None = None,
) -> NvmetPortDown | PortOff | SpdkListenerDown:
    """The fault that takes target ``target``'s port for ``protocol`` away (at ``address``:``port``, by default
    the lab's portal): nvmet's port unlinked, LIO's portal removed together with its storage port's traffic
    (:class:`PortOff`), SCST's and tgt's storage port's traffic gone (their daemons listen on whatever is left),
    SPDK's listener removed."""
    model, host = _target(lab, hosts, target, protocol)
    spec = protocol_spec(protocol)
    traddr = address or lab.target_address(model)
    if model.kind == "nvmet":
        assert model.nvme is not None
        trsvcid = port or model.nvme.port
        return of_lab(
            lab, NvmetPortDown(host, model.name_prefix, _nvmet_portid(host, model, spec.transport, traddr, trsvcid))
        )
    if model.kind == "lio":
        assert model.iscsi is not None
        tpg = _lio_tpg(lab, model, protocol, traddr)
        portal = of_lab(
            lab,
            LioPortalDown(host, model.name_prefix, model.iscsi.iqn, portal_name(traddr, port or model.iscsi.port), tpg),
        )
        link = _port_link(lab, host, model.name_prefix, traddr)
        return PortOff(f"{portal.name} and {link.name}", [portal, link])
    if model.kind in ("scst", "tgt"):
        # Their daemons keep listening whatever happens to one address; the port's traffic is what goes.
        link = _port_link(lab, host, model.name_prefix, traddr)
        return PortOff(link.name, [link])
    if model.kind == "spdk":
        from pytest_fabricqa.targets.spdk import SpdkTarget

        assert model.nvme is not None
        rpc = SpdkTarget(lab, model, hosts).rpc()
        listen = {
            "trtype": spec.transport.upper(),
            "adrfam": "IPv6" if ":" in traddr else "IPv4",
            "traddr": traddr,
            "trsvcid": str(port or model.nvme.port),
        }
        nqns = tuple(sub.nqn for sub in model.nvme.subsystems)
        return of_lab(lab, SpdkListenerDown(rpc, model.name_prefix, nqns, listen))
    raise FaultRefused(
        host.name,
        f"no port fault for {model.kind} targets yet (target {model.name})",
        "fault an initiator's link (faults.link_down), or use a target kind fabricqa provisions",
    )


def _lio_tpg(lab: LabModel, model: TargetModel, protocol: str, traddr: str) -> str:
    """The TPG of LIO target ``model`` whose portal is at ``traddr`` (one TPG per portal)."""
    try:
        return lio.plan_from_lab(lab, model, protocol).tpg_of(traddr)
    except ValueError as exc:
        raise FaultRefused(model.host or lab.name, f"target {model.name}: {exc}", "fault one of its portals") from None


def alua_change(
    lab: LabModel,
    hosts: Mapping[str, Host],
    target: str,
    protocol: str,
    state: str = "unavailable",
    *,
    address: str | None = None,
) -> LioAluaChange:
    """LIO target ``target``'s ALUA group of the path at ``address`` (default: the lab's portal) for ``protocol``
    to ``state`` and back."""
    model, host = _target(lab, hosts, target, protocol)
    if model.kind != "lio":
        raise FaultRefused(
            host.name,
            f"ALUA state changes are LIO's here, target {model.name} is {model.kind}",
            "use a LIO target (or an nvmet or SPDK one for ANA: faults.ana_change)",
        )
    assert model.iscsi is not None
    tpg = _lio_tpg(lab, model, protocol, address or lab.target_address(model))
    return of_lab(lab, LioAluaChange(host, model.name_prefix, model.iscsi.iqn, tpg, state))


def ana_change(
    lab: LabModel,
    hosts: Mapping[str, Host],
    target: str,
    protocol: str,
    state: str = "inaccessible",
    *,
    address: str | None = None,
) -> AnaStateChange | SpdkAnaChange:
    """The nvmet target ``target``'s port, or the SPDK target's listener, for ``protocol`` at ``address`` (default:
    the lab's portal) to ANA ``state`` and back (SPDK spells non-optimized ``non_optimized``)."""
    model, host = _target(lab, hosts, target, protocol)
    if model.kind == "spdk":
        from pytest_fabricqa.targets.spdk import SpdkTarget

        assert model.nvme is not None
        spec = protocol_spec(protocol)
        traddr = address or lab.target_address(model)
        listen = {
            "trtype": spec.transport.upper(),
            "adrfam": "IPv6" if ":" in traddr else "IPv4",
            "traddr": traddr,
            "trsvcid": str(model.nvme.port),
        }
        rpc = SpdkTarget(lab, model, hosts).rpc()
        nqns = tuple(s.nqn for s in model.nvme.subsystems)
        return of_lab(lab, SpdkAnaChange(rpc, model.name_prefix, nqns, listen, state))
    if model.kind != "nvmet":
        raise FaultRefused(
            host.name,
            f"ANA state changes are nvmet's and SPDK's here, target {model.name} is {model.kind}",
            "use an nvmet or SPDK target",
        )
    assert model.nvme is not None
    traddr = address or lab.target_address(model)
    portid = _nvmet_portid(host, model, protocol_spec(protocol).transport, traddr, model.nvme.port)
    return of_lab(lab, AnaStateChange(host, model.name_prefix, portid, state))


__all__ = [
    "ALUA_STATES",
    "ANA_STATES",
    "AnaStateChange",
    "FaultError",
    "FaultInjector",
    "FaultRefused",
    "LinkDown",
    "LioAluaChange",
    "LioPortalDown",
    "NvmetPortDown",
    "PathTimeouts",
    "SpdkListenerDown",
    "alua_change",
    "ana_change",
    "fault_window",
    "link_down",
    "of_lab",
    "other_labs_faults",
    "owner_alive",
    "parse_timeouts",
    "records_path",
    "target_port_down",
]
