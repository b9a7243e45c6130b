"""Persistent reservations across initiators (cluster fencing): SCSI-3 PR with sg_persist, NVMe with nvme-cli.

A cluster fences a node by taking its right to write the shared disk away. :func:`fencing` drives what a
cluster does, on two initiators A and B that see the same namespace or LUN:

1. both register a key (A: :func:`reservation_key` 0, B: 1); the target lists both keys and no holder;
2. A takes a Write Exclusive reservation; the target names A's key as holder;
3. A writes; B's write fails with a reservation conflict (Linux: ``EBADE``, "Invalid exchange"); B still reads;
4. B preempts A's key: B holds the reservation, A's registration is gone;
5. B writes; A's write fails with a reservation conflict.

The type is the driver's :meth:`Reservations.fencing_type` for A's device. On a dm-multipath map it is Write
Exclusive, *registrants only*, as fence_mpath, fence_scsi and every cluster on dm-multipath use: each path is an
I_T nexus of its own, and a plain Write Exclusive is held by the one nexus that reserved, so the holder's own writes
down another path (another target port: LIO's TPG per portal) meet a reservation conflict (the CI run of 5962dc0,
iser-lio). Under registrants only every registered nexus writes, so step 3 becomes "A writes and B, registered,
writes too"; the fence is step 5, where the preempt took A's registrations away on every path.

The release (a CLEAR with whichever key is still registered, which drops every registration and the
reservation) is registered as an undo *before* the first registration, so it runs after a failure too.

Whether a target kind implements reservations is one fact, its ``no_reservations`` in
:data:`pytest_fabricqa.targets.REGISTRY`; a kind without them is a skip naming the kind, never a pass.
Nothing here imports pytest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.core.kinds import REGISTRY
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.integrity.checks import BASE_OFFSET, SharedDevice, suite_case
from pytest_fabricqa.report.model import Case, Check
from pytest_fabricqa.transport.base import CommandError, Host

WRITE_EXCLUSIVE = 1
"""Reservation type 1 in both SPC-3 (PROUT TYPE) and NVMe (RTYPE): only the holder writes, everyone reads."""
SCSI_WRITE_EXCLUSIVE_REGISTRANTS_ONLY = 5
"""SPC-3 PROUT TYPE 5: every registered I_T nexus writes; what a cluster reserves on a dm-multipath map."""
KEY_BASE = 0x6661627161000000  # "fabqa" and zeros: keys a person can tell apart from a cluster's
CONFLICT = "Invalid exchange"
"""strerror(EBADE): Linux's BLK_STS_NEXUS, what a write refused for a reservation conflict returns (SCSI
RESERVATION CONFLICT status and NVMe status 0x83 alike)."""
PROBE_BYTE = BASE_OFFSET
"""Where the write and read probes go: the first block of the integrity area (never block 0)."""
PROBE_BYTES = 4096

SCSI_TYPES = {
    1: "Write Exclusive",
    3: "Exclusive Access",
    5: "Write Exclusive, registrants only",
    6: "Exclusive Access, registrants only",
    7: "Write Exclusive, all registrants",
    8: "Exclusive Access, all registrants",
}
"""sg_persist's words for a PR type (sg3_utils' pr_type_strs)."""
NVME_TYPES = {
    0: "none",
    1: "Write Exclusive",
    2: "Exclusive Access",
    3: "Write Exclusive, registrants only",
    4: "Exclusive Access, registrants only",
    5: "Write Exclusive, all registrants",
    6: "Exclusive Access, all registrants",
}
"""NVMe base specification's reservation types (RTYPE) in sg_persist's words, so both families read alike."""


def unsupported(kind: str) -> str | None:
    """Why target kind ``kind`` cannot take part (``not supported by nvmet: ...``), or None when it can: the
    kind's ``no_reservations`` in the target registry, the one place that says it."""
    entry = REGISTRY.get(kind)
    if entry is None:
        return f"not supported by {kind}: this plugin does not know the target kind {kind!r}"
    return None if entry.no_reservations is None else f"not supported by {kind}: {entry.no_reservations}"


def reservation_key(index: int) -> int:
    """The key the ``index``-th initiator (0, 1, ...) registers."""
    return KEY_BASE + index + 1


@dataclass(frozen=True)
class ReservationState:
    """What the target reports: the generation, the registered keys, the holder's key and the type."""

    generation: int
    keys: tuple[int, ...]
    holder: int | None = None
    type: str = ""

    def describe(self) -> str:
        """``holder 0x...02 (Write Exclusive), keys 0x...01, 0x...02, generation 3``."""
        keys = ", ".join(f"{k:#x}" for k in self.keys) or "none"
        holder = f"holder {self.holder:#x} ({self.type})" if self.holder is not None else "no holder"
        return f"{holder}, keys {keys}, generation {self.generation}"


# -- sg_persist (sg3_utils) -------------------------------------------------------------------------------------
# sg_persist -n -i -k:  "  PR generation=0x2, 2 registered reservation keys follow:\n    0x1\n    0x2\n"
#                       "  PR generation=0x0, there are NO registered reservation keys\n"
# sg_persist -n -i -r:  "  PR generation=0x3, Reservation follows:\n    Key=0x1\n    scope: LU_SCOPE,  type: Write Exclusive\n"
#                       "  PR generation=0x3, there is NO reservation held\n"
# mpathpersist (multipath-tools 0.9.4, vnode1 2026-12-02) -i -k: "  PR generation=0x4, \t4 registered reservation
# keys follow:\n    0x111\n    0x111\n    0x222\n    0x222\n" (a key per path), "  PR generation=0x5, \t0 registered
# reservation key.\n"; -i -r: "  PR generation=0x4, Reservation follows:\n   Key = 0x111\n  scope = LU_SCOPE, type =
# Write Exclusive\n", "  PR generation=0x5, there is NO reservation held \n".
_GENERATION = re.compile(r"PR generation=(0x[0-9a-fA-F]+)")
_KEY_LINE = re.compile(r"^\s*(0x[0-9a-fA-F]+)\s*$")
_HOLDER = re.compile(r"Key\s*=\s*(0x[0-9a-fA-F]+)")
_TYPE = re.compile(r"type\s*[:=]\s*(.+?)\s*$", re.MULTILINE)


def _generation(text: str, what: str) -> int:
    match = _GENERATION.search(text)
    if match is None:
        raise ValueError(f"not sg_persist {what} output (no 'PR generation='): {text.strip()[:200]!r}")
    return int(match.group(1), 16)


def parse_sg_read_keys(text: str) -> tuple[int, tuple[int, ...]]:
    """``sg_persist --in --read-keys`` (or ``mpathpersist``'s) -> (generation, registered keys in the order listed,
    each once: mpathpersist lists a key once per path it was registered over)."""
    generation = _generation(text, "--read-keys")
    if "NO registered reservation keys" in text:
        return generation, ()
    after = text[text.index("PR generation=") :].splitlines()[1:]
    return generation, tuple(dict.fromkeys(int(m.group(1), 16) for m in map(_KEY_LINE.match, after) if m))


def parse_sg_read_reservation(text: str) -> tuple[int, int | None, str]:
    """``sg_persist --in --read-reservation`` -> (generation, holder's key or None, type in sg_persist's words)."""
    generation = _generation(text, "--read-reservation")
    if "NO reservation held" in text:
        return generation, None, ""
    holder = _HOLDER.search(text)
    kind = _TYPE.search(text)
    if holder is None or kind is None:
        raise ValueError(f"sg_persist --read-reservation output without a key or type: {text.strip()[:200]!r}")
    return generation, int(holder.group(1), 16), kind.group(1)


def parse_nvme_resv_report(text: str) -> ReservationState:
    """``nvme resv-report --eds -o json`` (nvme-cli 2.x) -> the state; the holder is the registrant whose
    ``rcsts`` has bit 0 set (NVMe base spec, Reservation Status data structure)."""
    try:
        document: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"nvme resv-report output is not JSON ({exc.msg}): {text.strip()[:200]!r}") from None
    if not isinstance(document, dict) or "gen" not in document:
        raise ValueError(f"nvme resv-report output has no 'gen': {text.strip()[:200]!r}")
    entries = document.get("regctlext") or document.get("regctls") or []
    if not isinstance(entries, list):
        raise ValueError(f"nvme resv-report output: registrants are not a list: {text.strip()[:200]!r}")
    keys = tuple(int(e["rkey"]) for e in entries if isinstance(e, dict) and "rkey" in e)
    holders = [int(e["rkey"]) for e in entries if isinstance(e, dict) and int(e.get("rcsts", 0)) & 1]
    rtype = int(document.get("rtype", 0))
    return ReservationState(
        int(document["gen"]),
        keys,
        holders[0] if holders else None,
        NVME_TYPES.get(rtype, f"type {rtype}") if holders else "",
    )


class Reservations(Protocol):
    """One family's reservation commands on one initiator's device (``path``; ``nsid`` for NVMe); ``rtype`` is the
    family's reservation type number, the first of :meth:`fencing_type`'s (number, words)."""

    def fencing_type(self, path: str) -> tuple[int, str]: ...
    def register(self, host: Host, path: str, key: int) -> None: ...
    def reserve(self, host: Host, path: str, key: int, rtype: int) -> None: ...
    def preempt(self, host: Host, path: str, key: int, victim: int, rtype: int) -> None: ...
    def clear(self, host: Host, path: str, key: int) -> None: ...
    def report(self, host: Host, path: str) -> ReservationState: ...


def _is_map(path: str) -> bool:
    """A dm-multipath map (a path per I_T nexus), as the initiators name it."""
    return path.startswith("/dev/mapper/")


def scsi_argv(path: str, direction: str, *args: str) -> list[str]:
    """The PR command for a SCSI device: ``sg_persist`` on a disk; multipath-tools' ``mpathpersist`` on a
    dm-multipath map, which sends a registration down every path of the map (each path is an I_T nexus of its own:
    sg_persist on a map registered the path it happened to use, the others' writes then met a reservation conflict,
    and its CLEAR could leave a reservation behind). mpathpersist's preempt and clear need multipathd to know the
    key: the host's multipath.conf says ``reservation_key file``, as for any cluster on dm-multipath.
    ``direction``: ``--in`` or ``--out``."""
    if _is_map(path):
        return ["mpathpersist", direction, *args, path]
    return ["sg_persist", direction, "--no-inquiry", *args, path]


class ScsiReservations:
    """SCSI-3 persistent reservations with sg3_utils' ``sg_persist`` (iSCSI, iSER), or ``mpathpersist`` on a
    dm-multipath map (:func:`scsi_argv`); both print alike."""

    def _out(self, host: Host, path: str, *args: str) -> None:
        host.run(scsi_argv(path, "--out", *args), timeout=60)

    def fencing_type(self, path: str) -> tuple[int, str]:
        """Write Exclusive on a disk (one I_T nexus); registrants only on a dm-multipath map (a nexus per path:
        see the module docstring)."""
        rtype = SCSI_WRITE_EXCLUSIVE_REGISTRANTS_ONLY if _is_map(path) else WRITE_EXCLUSIVE
        return rtype, SCSI_TYPES[rtype]

    def register(self, host: Host, path: str, key: int) -> None:
        """PROUT REGISTER ``key`` for this initiator's I_T nexus (every path's, on a map)."""
        self._out(host, path, "--register", f"--param-sark={key:#x}")

    def reserve(self, host: Host, path: str, key: int, rtype: int) -> None:
        """PROUT RESERVE of type ``rtype`` with ``key``."""
        self._out(host, path, "--reserve", f"--param-rk={key:#x}", f"--prout-type={rtype}")

    def preempt(self, host: Host, path: str, key: int, victim: int, rtype: int) -> None:
        """PROUT PREEMPT: ``key``'s holder takes the reservation (type ``rtype``) and ``victim``'s registration
        away."""
        self._out(host, path, "--preempt", f"--param-rk={key:#x}", f"--param-sark={victim:#x}", f"--prout-type={rtype}")

    def clear(self, host: Host, path: str, key: int) -> None:
        """PROUT CLEAR with a registered ``key``: every registration and the reservation go."""
        self._out(host, path, "--clear", f"--param-rk={key:#x}")

    def report(self, host: Host, path: str) -> ReservationState:
        """PRIN READ KEYS and READ RESERVATION."""
        generation, keys = parse_sg_read_keys(host.run(scsi_argv(path, "--in", "--read-keys"), timeout=60).stdout)
        _, holder, kind = parse_sg_read_reservation(
            host.run(scsi_argv(path, "--in", "--read-reservation"), timeout=60).stdout
        )
        return ReservationState(generation, keys, holder, kind)


@dataclass(frozen=True)
class NvmeReservations:
    """NVMe reservations with nvme-cli (NVMe/TCP, NVMe/RDMA) on namespace ``nsid``."""

    nsid: int

    def _run(self, host: Host, command: str, path: str, *args: str) -> str:
        return host.run(["nvme", command, path, f"--namespace-id={self.nsid}", *args], timeout=60).stdout

    def fencing_type(self, path: str) -> tuple[int, str]:
        """Write Exclusive: NVMe reservations belong to the host (its Host Identifier), not to a controller, so
        one holder's writes go down every path of native multipath."""
        return WRITE_EXCLUSIVE, NVME_TYPES[WRITE_EXCLUSIVE]

    def register(self, host: Host, path: str, key: int) -> None:
        """Reservation Register, action 0 (register) with new key ``key``."""
        self._run(host, "resv-register", path, f"--nrkey={key:#x}", "--rrega=0")

    def reserve(self, host: Host, path: str, key: int, rtype: int) -> None:
        """Reservation Acquire, action 0 (acquire), type ``rtype``."""
        self._run(host, "resv-acquire", path, f"--crkey={key:#x}", f"--rtype={rtype}", "--racqa=0")

    def preempt(self, host: Host, path: str, key: int, victim: int, rtype: int) -> None:
        """Reservation Acquire, action 1 (preempt) of ``victim``'s key, type ``rtype``."""
        self._run(
            host, "resv-acquire", path, f"--crkey={key:#x}", f"--prkey={victim:#x}", f"--rtype={rtype}", "--racqa=1"
        )

    def clear(self, host: Host, path: str, key: int) -> None:
        """Reservation Release, action 1 (clear): every registration and the reservation go."""
        self._run(host, "resv-release", path, f"--crkey={key:#x}", f"--rtype={WRITE_EXCLUSIVE}", "--rrela=1")

    def report(self, host: Host, path: str) -> ReservationState:
        """Reservation Report with the extended data structure (NVMe-oF hosts have 128-bit host identifiers)."""
        return parse_nvme_resv_report(self._run(host, "resv-report", path, "--eds", "--output-format=json"))


def driver_for(family: str, nsid: int) -> Reservations:
    """The reservation commands of a protocol family (``scsi`` or ``nvme``)."""
    return ScsiReservations() if family == "scsi" else NvmeReservations(nsid)


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


def release(driver: Reservations, holders: Sequence[tuple[Host, str, int]]) -> None:
    """CLEAR with the first key the target still accepts (every registration and the reservation go); nothing
    registered is not an error. Idempotent: the undo of :func:`fencing`."""
    for host, path, key in holders:
        try:
            driver.clear(host, path, key)
        except CommandError:
            continue
        return


def fencing(driver: Reservations, a: Host, b: Host, device: SharedDevice, undo: UndoStack) -> Fencing:
    """Two initiators fence each other over ``device`` (see the module docstring); every step is a check."""
    out = Fencing()
    pa, pb = device.paths[a.name], device.paths[b.name]
    ka, kb = reservation_key(0), reservation_key(1)
    undo.push(f"clear the reservations on {device.label}", partial(release, driver, [(a, pa, ka), (b, pb, kb)]))

    def step(name: str, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except (CommandError, ValueError) as exc:
            out.check(name, _said(exc))
            raise _Stop from None

    rtype, words = driver.fencing_type(pa)
    try:
        step(f"{a.name} registers {ka:#x}", lambda: driver.register(a, pa, ka))
        step(f"{b.name} registers {kb:#x}", lambda: driver.register(b, pb, kb))
        state = step("report after registering", lambda: driver.report(a, pa))
        out.check(
            "both keys registered, no holder",
            None if set(state.keys) == {ka, kb} and state.holder is None else f"the target reports {state.describe()}",
            state.describe(),
        )
        step(f"{a.name} reserves ({words})", lambda: driver.reserve(a, pa, ka, rtype))
        state = step("report after reserving", lambda: driver.report(b, pb))
        out.check(f"{a.name} holds {words}", _holds(state, ka, {ka, kb}, words), state.describe())
        _writes(out, a, pa, allowed=True)
        _writes(out, b, pb, allowed="registrants" in words)
        _reads(out, b, pb)
        step(f"{b.name} preempts {a.name}", lambda: driver.preempt(b, pb, kb, ka, rtype))
        state = step("report after preempting", lambda: driver.report(b, pb))
        out.check(f"{b.name} holds {words}, {a.name}'s key gone", _holds(state, kb, {kb}, words), state.describe())
        _writes(out, b, pb, allowed=True)
        _writes(out, a, pa, allowed=False)
    except _Stop:
        pass
    return out


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


def _holds(state: ReservationState, key: int, keys: set[int], words: str) -> str | None:
    if state.holder == key and state.type == words and set(state.keys) == keys:
        return None
    want = ", ".join(f"{k:#x}" for k in sorted(keys))
    return f"expected holder {key:#x} ({words}) and keys {want}; the target reports {state.describe()}"


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
