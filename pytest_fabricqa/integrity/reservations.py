"""Persistent reservations across initiators (cluster fencing): SCSI-3 PR with sg_persist, NVMe with nvme-cli.

A cluster fences a node by taking its right to write the shared disk away. :func:`fencing` drives what a
cluster does, on two initiators A and B that see the same namespace or LUN, each step a check, the target's report
read after every action (keys, holder, type and the generation: a new registration and PREEMPT must advance it,
RESERVE and RELEASE must leave it, as SPC-4's PRgeneration and NVMe's GEN say; where the targets read the standards
differently the generation is shown, not judged: NVMe's key replace (the driver's ``REPLACE_ADVANCES``) and SCSI's
unregister (``UNREGISTER_ADVANCES``)):

1. nothing is registered before (a key there is another initiator's or a killed run's: named, left alone, and the
   case stops);
2. B, never registered, asks for the reservation (down one path) and is refused with a reservation conflict (or
   LIO's NOT READY, said as such), and nothing is held after;
3. A registers; B registers-and-ignores-existing-key, then replaces that key with its own;
4. A takes the reservation, releases it, takes it again; A writes; B's write fails with a reservation conflict
   (Linux: ``EBADE``, "Invalid exchange"); B still reads;
5. while A's four stamped writers write (:mod:`pytest_fabricqa.integrity.inflight`), B preempts A's key and aborts
   its commands (a plain preempt where the target refuses that, said): B holds the reservation, A's registration
   is gone, every write A was told succeeded is on the device and none it was refused; B writes; A's write fails
   with a reservation conflict;
6. B unregisters: no key and no holder is left.

The keys are :func:`~pytest_fabricqa.initiators.reservations.reservation_key` of the run's token: marked "fabqa",
unique to the run. The type is the driver's :meth:`Reservations.fencing_type` for A's device. On a dm-multipath map
it is Write Exclusive, *registrants only*, as fence_mpath, fence_scsi and every cluster on dm-multipath use: each
path is an I_T nexus of its own, and a plain Write Exclusive is held by the one nexus that reserved, so the holder's
own writes down another path (another target port: LIO's TPG per portal) meet a reservation conflict (the CI run of
5962dc0, iser-lio). Under registrants only every registered nexus writes, so in step 4 "A writes and B,
registered, writes too"; the fence is step 5, where the preempt took A's registrations away on every path.

Each key is recorded on its host before it is sent (the ``ledger``:
:class:`pytest_fabricqa.faults.registrations.KeyLedger`, swept at the next start after a SIGKILL). The undo,
registered before the first key, unregisters each of our keys the target still lists from its own host, never a
CLEAR (which would take a cluster's registrations too), and raises when one stays: the case fails.

Whether a target kind implements reservations is one fact, its ``no_reservations`` in
:data:`pytest_fabricqa.targets.REGISTRY`; a kind without them is a skip naming the kind, never a pass.
Nothing here imports pytest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.initiators.reservations import (
    CONFLICT,
    KEY_BASE,
    NVME_TYPES,
    SCSI_TYPES,
    SCSI_WRITE_EXCLUSIVE_REGISTRANTS_ONLY,
    WRITE_EXCLUSIVE,
    NvmeReservations,
    Reservations,
    ReservationState,
    ScsiReservations,
    driver_for,
    is_conflict,
    is_ours,
    is_unsupported,
    parse_nvme_resv_report,
    parse_sg_read_keys,
    parse_sg_read_reservation,
    reservation_key,
    run_token,
    scsi_argv,
    unsupported,
)
from pytest_fabricqa.integrity import inflight
from pytest_fabricqa.integrity.checks import BASE_OFFSET, SharedDevice, suite_case
from pytest_fabricqa.report.model import Case, Check
from pytest_fabricqa.transport.base import CommandError, Host

__all__ = [  # the commands' names, imported from here before they moved to initiators.reservations
    "CONFLICT",
    "KEY_BASE",
    "NVME_TYPES",
    "SCSI_TYPES",
    "SCSI_WRITE_EXCLUSIVE_REGISTRANTS_ONLY",
    "WRITE_EXCLUSIVE",
    "Fencing",
    "NvmeReservations",
    "ReservationState",
    "Reservations",
    "ReservationsLeft",
    "ScsiReservations",
    "driver_for",
    "fencing",
    "is_ours",
    "parse_nvme_resv_report",
    "parse_sg_read_keys",
    "parse_sg_read_reservation",
    "reservation_case",
    "reservation_key",
    "run_token",
    "scsi_argv",
    "unregister_ours",
    "unsupported",
]

PROBE_BYTE = BASE_OFFSET
"""Where the write and read probes go: the first block of the integrity area (never block 0)."""
PROBE_BYTES = 4096
SG_NOT_READY = 2
"""sg3_utils' exit status for a NOT READY sense key (SG_LIB_CAT_NOT_READY)."""
WRITERS_START_S = 60.0
"""How long the victim's writers get to make their first writes (a dd a write, emulated guests)."""
WRITERS_FENCED_S = 20.0
"""How long after the preempt the victim's writers get to meet the fence (each of them a refused write)."""
WRITERS_END_S = 60.0
"""How long the writers get to end once asked (each finishes the write it is in)."""


class Ledger(Protocol):
    """Where each key is recorded before it is registered and forgotten once gone
    (:class:`pytest_fabricqa.faults.registrations.KeyLedger`)."""

    def add(self, host: Host, device: str, key: int) -> None: ...
    def drop(self, host: Host, device: str, key: int) -> None: ...


class NoLedger:
    """Records nothing (a caller that sweeps by other means, and the unit tests' scripted targets)."""

    def add(self, host: Host, device: str, key: int) -> None:
        return None

    def drop(self, host: Host, device: str, key: int) -> None:
        return None


def write_probe_argv(path: str) -> list[str]:
    """One direct 4 KiB write of zeros at :data:`PROBE_BYTE` (inside the integrity area)."""
    return ["dd", "if=/dev/zero", f"of={path}", f"bs={PROBE_BYTES}", "count=1", f"seek={PROBE_BYTE // PROBE_BYTES}",
            "oflag=direct", "conv=notrunc", "status=none"]  # fmt: skip


def read_probe_argv(path: str) -> list[str]:
    """One direct 4 KiB read at :data:`PROBE_BYTE`."""
    return ["dd", f"if={path}", "of=/dev/null", f"bs={PROBE_BYTES}", "count=1", f"skip={PROBE_BYTE // PROBE_BYTES}",
            "iflag=direct", "status=none"]  # fmt: skip


@dataclass
class Fencing:
    """The steps of :func:`fencing` as checks (name, verdict, what was seen), and its problems."""

    checks: list[Check] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def check(self, name: str, problem: str | None, detail: str = "") -> None:
        """Record one step: passed when ``problem`` is None, else failed with ``problem`` as its detail."""
        self.checks.append(Check(name, "passed" if problem is None else "failed", problem or detail))
        if problem is not None:
            self.problems.append(f"{name}: {problem}")


@dataclass
class Registered:
    """The keys a fencing run registered and the target may still list: (host, device, key), in order."""

    driver: Reservations
    ledger: Ledger
    keys: list[tuple[Host, str, int]] = field(default_factory=list)

    def add(self, host: Host, path: str, key: int) -> None:
        """Before ``key`` is registered: recorded on the host, and here for the undo."""
        self.ledger.add(host, path, key)
        self.keys.append((host, path, key))

    def gone(self, host: Host, path: str, key: int) -> None:
        """Once the target no longer lists ``key``."""
        self.ledger.drop(host, path, key)
        if (host, path, key) in self.keys:
            self.keys.remove((host, path, key))


def unregister_ours(registered: Registered) -> None:
    """The undo of :func:`fencing`: each of our keys the target still lists unregistered from the host that
    registered it (the reservation goes with its holder's key), never a CLEAR, which would drop a cluster's
    registrations too. Raises :class:`ReservationsLeft` naming what stayed, after every key was tried: a case whose
    clean-up failed fails."""
    driver, problems = registered.driver, []
    for host, path, key in list(registered.keys):
        try:
            if key in driver.report(host, path).keys:
                driver.unregister(host, path, key)
            if key in driver.report(host, path).keys:
                problems.append(f"{host.name}: key {key:#x} is still registered on {path} after unregistering it")
                continue
        except (CommandError, ValueError) as exc:
            problems.append(f"{host.name}: key {key:#x} on {path} could not be unregistered: {_said(exc)}")
            continue
        registered.gone(host, path, key)
    if problems:
        raise ReservationsLeft("; ".join(problems))


class ReservationsLeft(FabricQAError):
    """The fencing run's keys could not all be unregistered."""


def fencing(
    driver: Reservations,
    a: Host,
    b: Host,
    device: SharedDevice,
    undo: UndoStack,
    *,
    run: int = 0,
    ledger: Ledger | None = None,
) -> Fencing:
    """Two initiators fence each other over ``device`` (see the module docstring); every step is a check. ``run``:
    the run's token in the keys (:func:`~pytest_fabricqa.initiators.reservations.run_token`); ``ledger``: where
    each key is recorded before it is sent."""
    out = Fencing()
    pa, pb = device.paths[a.name], device.paths[b.name]
    ka, kb, kb_first = reservation_key(0, run), reservation_key(1, run), reservation_key(2, run)
    registered = Registered(driver, ledger or NoLedger())
    undo.push(f"unregister our reservation keys on {device.label}", partial(unregister_ours, registered))

    def step(name: str, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except (CommandError, ValueError) as exc:
            out.check(name, _said(exc))
            raise _Stop from None

    def after(
        what: str, before: ReservationState, *, advances: bool | None, keys: set[int], holder: int | None
    ) -> ReservationState:
        state = step(f"report after {what}", lambda: driver.report(a, pa))
        problem = _expect(state, keys, holder, words if holder is not None else "")
        if problem is None and advances is True and state.generation <= before.generation:
            problem = f"the generation stayed {state.generation} (a {what} must advance it)"
        elif problem is None and advances is False and state.generation != before.generation:
            problem = f"the generation went from {before.generation} to {state.generation} (a {what} leaves it)"
        detail = state.describe() + ("" if advances is not None else " (the generation is not judged here)")
        out.check(f"after {what}: {_describe(keys, holder, words)}", problem, detail)
        return state

    rtype, words = driver.fencing_type(pa)
    try:
        state = step("report before", lambda: driver.report(a, pa))
        if state.keys or state.holder is not None:
            theirs = ", ".join(
                f"{k:#x}" + (" (a killed run of this plugin's)" if is_ours(k) else "") for k in state.keys
            )
            out.check(
                "nothing registered before",
                f"the target already lists {state.describe()}: keys {theirs or 'none'} belong to another initiator or a "
                "killed run; left alone, the case stops here",
            )
            raise _Stop
        out.check("nothing registered before", None, state.describe())
        name = f"{b.name}, never registered, is refused a reservation"
        try:
            driver.reserve_probe(b, pb, kb, rtype)
            out.check(name, "the target granted it")
        except CommandError as exc:
            if is_conflict(exc.result):
                out.check(name, None, f"reservation conflict: {_said(exc)}")
            elif exc.result.argv[:1] == ("sg_persist",) and exc.result.exit_code == SG_NOT_READY:
                # LIO on 6.1 refuses it (its log: "SPC-3 PR: Unable to locate PR_REGISTERED *pr_reg for RESERVE")
                # but answers NOT READY, not the RESERVATION CONFLICT SPC-4 asks for: refused, and said so; the
                # report after it must show no holder.
                out.check(name, None, f"refused, with NOT READY rather than SPC-4's RESERVATION CONFLICT: {_said(exc)}")
            else:  # refused by the tool, or not run at all: the target never said no
                out.check(name, f"the reserve failed, but not with a reservation conflict: {_said(exc)}")
                raise _Stop from None
        state = after(f"{b.name}'s refused reserve", state, advances=False, keys=set(), holder=None)

        step(f"{a.name}'s stale multipath key forgotten", lambda: driver.forget_stale_prkey(a, pa))
        step(f"{b.name}'s stale multipath key forgotten", lambda: driver.forget_stale_prkey(b, pb))
        registered.add(a, pa, ka)
        step(f"{a.name} registers {ka:#x}", lambda: driver.register(a, pa, ka))
        state = after(f"{a.name}'s register", state, advances=True, keys={ka}, holder=None)
        registered.add(b, pb, kb_first)
        step(f"{b.name} registers {kb_first:#x}, ignoring any key", lambda: driver.register_ignore(b, pb, kb_first))
        state = after(f"{b.name}'s register-and-ignore", state, advances=True, keys={ka, kb_first}, holder=None)
        registered.add(b, pb, kb)
        step(f"{b.name} replaces {kb_first:#x} with {kb:#x}", lambda: driver.replace(b, pb, kb_first, kb))
        state = after(f"{b.name}'s replace", state, advances=driver.REPLACE_ADVANCES, keys={ka, kb}, holder=None)
        registered.gone(b, pb, kb_first)

        step(f"{a.name} reserves ({words})", lambda: driver.reserve(a, pa, ka, rtype))
        state = after(f"{a.name}'s reserve", state, advances=False, keys={ka, kb}, holder=ka)
        step(f"{a.name} releases", lambda: driver.release(a, pa, ka, rtype))
        state = after(f"{a.name}'s release", state, advances=False, keys={ka, kb}, holder=None)
        step(f"{a.name} reserves again", lambda: driver.reserve(a, pa, ka, rtype))
        state = after(f"{a.name}'s second reserve", state, advances=False, keys={ka, kb}, holder=ka)
        _writes(out, a, pa, allowed=True)
        _writes(out, b, pb, allowed="registrants" in words)
        _reads(out, b, pb)

        folder = inflight.folder_for(pa)
        undo.push(f"stop {a.name}'s writers on {pa}", partial(_quietly, a, inflight.undo_argv(folder)))
        first = inflight.first_block(PROBE_BYTE)
        step(
            f"{a.name} starts {inflight.WRITERS} stamped writers",
            lambda: a.run(inflight.start_argv(folder, pa, first, run)),
        )
        logs = _wait_logs(a, folder, inflight.started_enough, WRITERS_START_S)
        if not inflight.started_enough(logs):
            out.check(
                f"{a.name}'s writers write before the fence",
                f"too few writes in {WRITERS_START_S:.0f} s: {logs.writes}",
            )
            raise _Stop
        name = f"{b.name} preempts {a.name} and aborts its commands, {a.name}'s writes in flight"
        try:
            driver.preempt(b, pb, kb, ka, rtype, abort=True)
            out.check(name, None, "preempt and abort")
        except CommandError as exc:
            if not is_unsupported(exc.result):
                out.check(name, _said(exc))
                raise _Stop from None
            # The target does not implement it (SPDK 23.01: Invalid Field): said, and the fence is a plain preempt,
            # judged the same way (nothing the victim was refused may land).
            out.check(name, None, f"the target does not implement preempt-and-abort ({_said(exc)}): a plain preempt")
            step(
                f"{b.name} preempts {a.name}, {a.name}'s writes in flight", lambda: driver.preempt(b, pb, kb, ka, rtype)
            )
        state = after(f"{b.name}'s preempt-and-abort", state, advances=True, keys={kb}, holder=kb)
        registered.gone(a, pa, ka)
        _wait_logs(a, folder, inflight.refused_everywhere, WRITERS_FENCED_S)
        a.run(inflight.stop_argv(folder))
        logs = _wait_logs(a, folder, inflight.ended, WRITERS_END_S)
        read = step(f"{b.name} reads the stamps back", lambda: b.run(inflight.read_argv(pb, first), timeout=120))
        stamps = inflight.parse_stamps(read.stdout, run)
        problems = inflight.judge(logs, stamps, first, CONFLICT, a.name)
        done = sum(len(w) for w in logs.writes.values())
        out.check(
            f"{a.name}'s writes in flight at the fence: acknowledged ones on the device, refused ones not",
            "; ".join(problems) or None,
            f"{done} writes by {inflight.WRITERS} writers, "
            f"{sum(1 for ws in logs.writes.values() for w in ws if not w.ok)} refused, every block as acknowledged",
        )
        _writes(out, b, pb, allowed=True)
        _writes(out, a, pa, allowed=False)
        # multipathd still holds A's preempted key for A's map: forgotten now, or A's next registration is refused.
        step(f"{a.name}'s preempted multipath key forgotten", lambda: driver.forget_stale_prkey(a, pa))

        step(f"{b.name} unregisters {kb:#x}", lambda: driver.unregister(b, pb, kb))
        state = after(f"{b.name}'s unregister", state, advances=driver.UNREGISTER_ADVANCES, keys=set(), holder=None)
        registered.gone(b, pb, kb)
    except _Stop:
        pass
    return out


def _quietly(host: Host, argv: list[str]) -> None:
    host.run(argv, check=False, timeout=60)


def _wait_logs(host: Host, folder: str, enough: Callable[[inflight.Logs], bool], most_s: float) -> inflight.Logs:
    """The victim's writer logs, read every half second until ``enough`` says so or ``most_s`` ran out."""
    deadline = time.monotonic() + most_s
    while True:
        logs = inflight.parse_logs(host.run(["sh", "-c", inflight.COLLECT, "sh", folder], timeout=60).stdout)
        if enough(logs) or time.monotonic() > deadline:
            return logs
        time.sleep(0.5)


def _describe(keys: set[int], holder: int | None, words: str) -> str:
    listed = ", ".join(f"{k:#x}" for k in sorted(keys)) or "none"
    return f"keys {listed}, " + (f"{holder:#x} holds {words}" if holder is not None else "no holder")


def _expect(state: ReservationState, keys: set[int], holder: int | None, words: str) -> str | None:
    if set(state.keys) == keys and state.holder == holder and (holder is None or state.type == words):
        return None
    return f"expected {_describe(keys, holder, words)}; the target reports {state.describe()}"


class _Stop(FabricQAError):
    """A reservation command failed: the later steps mean nothing."""


def _said(exc: BaseException) -> str:
    if isinstance(exc, CommandError):
        tail = (exc.result.stderr or exc.result.stdout).strip().splitlines()
        said = f"`{exc.result.command}` exited {exc.result.exit_code}" + (f" ({tail[-1].strip()})" if tail else "")
        if exc.result.exit_code == 127:
            said += f"; install {'sg3-utils' if 'sg_persist' in exc.result.command else 'nvme-cli'} on the initiator"
        return said
    return str(exc)


def _writes(out: Fencing, host: Host, path: str, *, allowed: bool) -> None:
    result = host.run(write_probe_argv(path), check=False, timeout=60)
    said = (result.stderr or result.stdout).strip().splitlines()
    last = said[-1].strip() if said else f"exit code {result.exit_code}"
    if allowed:
        name = f"{host.name} writes {path}"
        out.check(name, None if result.ok else f"the write failed: {last}", "written")
        return
    name = f"{host.name}'s write to {path} is refused"
    if result.ok:
        out.check(name, "the write succeeded: the reservation did not fence this initiator")
    elif CONFLICT not in last:
        out.check(name, f"the write failed, but not with a reservation conflict ({CONFLICT!r}): {last}")
    else:
        out.check(name, None, f"reservation conflict: {last}")


def _reads(out: Fencing, host: Host, path: str) -> None:
    result = host.run(read_probe_argv(path), check=False, timeout=60)
    said = (result.stderr or result.stdout).strip().splitlines()
    out.check(
        f"{host.name} still reads {path}",
        None if result.ok else f"the read failed: {said[-1].strip() if said else result.exit_code}",
        "read",
    )


def reservation_case(nodeid: str, case_id: str, protocol: str, result: Fencing) -> Case:
    """The report's case for :func:`fencing`: every step as a check, every problem as a violation."""
    return suite_case(nodeid, case_id, protocol, result.problems, checks=tuple(result.checks))
