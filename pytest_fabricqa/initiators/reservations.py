"""Persistent reservation commands on an initiator's device: SCSI-3 PR with sg_persist (mpathpersist on a
dm-multipath map), NVMe reservations with nvme-cli, their outputs read into one :class:`ReservationState`, and
the keys this plugin registers (:func:`reservation_key`: marked "fabqa", unique to the run).

What a cluster does with them (the integrity suite's fencing) is :mod:`pytest_fabricqa.integrity.reservations`;
the record of each key registered, swept after a killed run, is :mod:`pytest_fabricqa.faults.registrations`.
Nothing here imports pytest.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from pytest_fabricqa.core.kinds import REGISTRY
from pytest_fabricqa.transport.base import CommandError, CommandResult, Host

WRITE_EXCLUSIVE = 1
"""Reservation type 1 in both SPC-3 (PROUT TYPE) and NVMe (RTYPE): only the holder writes, everyone reads."""
SCSI_WRITE_EXCLUSIVE_REGISTRANTS_ONLY = 5
"""SPC-3 PROUT TYPE 5: every registered I_T nexus writes; what a cluster reserves on a dm-multipath map."""
KEY_BASE = 0x6661627161000000  # "fabqa" and zeros: keys a person can tell apart from a cluster's
CONFLICT = "Invalid exchange"
"""strerror(EBADE): Linux's BLK_STS_NEXUS, what a write refused for a reservation conflict returns (SCSI
RESERVATION CONFLICT status and NVMe status 0x83 alike)."""

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


KEY_MARK_MASK = 0xFFFFFFFFFF000000
"""The top five bytes of a key: :data:`KEY_BASE`'s "fabqa" on every key this plugin registers."""


def run_token() -> int:
    """A number (1-65535) for this run's keys: two runs, or a killed run and the next, never register the same key,
    so a key left by a killed run is told from the new run's own."""
    return secrets.randbelow(0xFFFF) + 1


def reservation_key(index: int, run: int = 0) -> int:
    """The key the ``index``-th initiator (0, 1, ...) registers in run ``run`` (:func:`run_token`): "fabqa", the
    run's two bytes, the initiator's byte (0x6661627161 RRRR II)."""
    if not 0 <= run <= 0xFFFF or not 0 <= index < 0xFF:
        raise ValueError(f"a reservation key needs a run of 0-65535 and an initiator index of 0-254: {run}, {index}")
    return KEY_BASE | run << 8 | (index + 1)


def is_ours(key: int) -> bool:
    """Whether ``key`` carries this plugin's mark (some run of it registered it), not a cluster's or a person's."""
    return key & KEY_MARK_MASK == KEY_BASE


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

    REPLACE_ADVANCES: ClassVar[bool | None]
    UNREGISTER_ADVANCES: ClassVar[bool | None]

    def forget_stale_prkey(self, host: Host, path: str) -> None: ...

    def fencing_type(self, path: str) -> tuple[int, str]: ...
    def register(self, host: Host, path: str, key: int) -> None: ...
    def register_ignore(self, host: Host, path: str, key: int) -> None: ...
    def replace(self, host: Host, path: str, old: int, new: int) -> None: ...
    def unregister(self, host: Host, path: str, key: int) -> None: ...
    def reserve(self, host: Host, path: str, key: int, rtype: int) -> None: ...
    def reserve_probe(self, host: Host, path: str, key: int, rtype: int) -> None: ...
    def release(self, host: Host, path: str, key: int, rtype: int) -> None: ...
    def preempt(self, host: Host, path: str, key: int, victim: int, rtype: int, *, abort: bool = False) -> None: ...
    def clear(self, host: Host, path: str, key: int) -> None: ...
    def report(self, host: Host, path: str) -> ReservationState: ...


SG_RES_CONFLICT = 24
"""sg3_utils' exit status for a RESERVATION CONFLICT (SG_LIB_CAT_RES_CONFLICT)."""
MPATH_PR_RESERV_CONFLICT = 11
"""mpathpersist's exit status for a reservation conflict (libmpathpersist's MPATH_PR_RESERV_CONFLICT)."""


def is_conflict(result: CommandResult) -> bool:
    """Whether a failed reservation command was refused by the target with a reservation conflict (sg_persist's
    and mpathpersist's own exit statuses; nvme-cli names the NVMe status, "Reservation Conflict")."""
    tool = result.argv[0] if result.argv else ""
    if tool.endswith("sg_persist"):
        return result.exit_code == SG_RES_CONFLICT
    if tool.endswith("mpathpersist"):
        return result.exit_code == MPATH_PR_RESERV_CONFLICT
    return "reservation conflict" in f"{result.stdout} {result.stderr}".lower()


SG_UNIT_ATTENTION = 6
"""sg3_utils' exit status for a UNIT ATTENTION (SG_LIB_CAT_UNIT_ATTENTION); mpathpersist's MPATH_PR_SENSE_UNIT_ATTENTION
is the same number."""


UNIT_ATTENTIONS_MOST = 4
"""How many unit attentions a PR command is sent again for: a PREEMPT AND ABORT queues two for the other nexus on
SCST (reservations preempted, commands cleared by another initiator), each reported once."""


def _scsi(host: Host, argv: list[str]) -> CommandResult:
    """A PR command, sent again while it meets a UNIT ATTENTION: a SCSI target reports each unit
    attention (reservations released or preempted, registrations preempted: what the other initiator's last
    action told this one) on the next command of that I_T nexus, and that report clears it; the command itself was
    not run (SCST and tgt over iSCSI, 2026-12-07: exit 6 on the PRIN after the other host's RELEASE and
    PREEMPT AND ABORT). The block layer does the same for reads and writes; SG_IO leaves it to the caller."""
    result = host.run(argv, check=False, timeout=60)
    for _ in range(UNIT_ATTENTIONS_MOST):
        if result.exit_code != SG_UNIT_ATTENTION:
            break
        result = host.run(argv, check=False, timeout=60)
    if not result.ok:
        raise CommandError(result)
    return result


def is_unsupported(result: CommandResult) -> bool:
    """Whether a failed reservation command was refused as a request the target does not implement (SCSI ILLEGAL
    REQUEST: sg_persist's and mpathpersist's exit 5; NVMe's Invalid Field in Command), not as a conflict."""
    if result.argv and result.argv[0] in ("sg_persist", "mpathpersist"):
        return result.exit_code == 5
    return "invalid field in command" in f"{result.stdout} {result.stderr}".lower()


FIRST_PATH = 'd=$(basename "$(readlink -f "$1")"); ls "/sys/block/$d/slaves" | head -n 1'
"""$1 a dm-multipath map: the name of its first path device (sdX)."""


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

    REPLACE_ADVANCES: ClassVar[bool | None] = True
    """SPC-4: every successful REGISTER advances PRgeneration, a key replaced too."""
    UNREGISTER_ADVANCES: ClassVar[bool | None] = None
    """Shown, not judged: SPC-4 has an unregister (REGISTER with a zero service action key) advance it, and SCST and
    tgt do, but LIO on 6.1 left PRgeneration as it was (7 before and after, the virtual lab, 2026-12-07)."""

    def forget_stale_prkey(self, host: Host, path: str) -> None:
        """On a dm-multipath map, unset multipathd's reservation key for it when it is one of ours (this plugin's
        mark) that a preempt took off the target: mpathpersist refuses every REGISTER whose key is not the one
        multipathd has for the map (exit 1, its usage printed; LIO over iSER after the iSCSI case preempted that
        host, 2026-12-07). A key of someone else's is left alone (the register then fails, as it should)."""
        if not _is_map(path):
            return
        name = path.rsplit("/", 1)[-1]
        shown = host.run(["multipathd", "getprkey", "map", name], check=False, timeout=60).stdout.split()
        try:
            key = int(shown[0], 16) if shown else 0
        except ValueError:
            return
        if key and is_ours(key) and key not in self.report(host, path).keys:
            host.run(["multipathd", "unsetprkey", "map", name], timeout=60)

    def _out(self, host: Host, path: str, *args: str) -> None:
        _scsi(host, scsi_argv(path, "--out", *args))

    def reserve_probe(self, host: Host, path: str, key: int, rtype: int) -> None:
        """PROUT RESERVE with sg_persist down one path (on a dm-multipath map: its first path device): what the
        target answers an initiator with no registration. mpathpersist refused it itself ("PR out: command
        failed", exit 2, before the target was asked) and sg_persist on the map answered "Device not ready" (LIO,
        2026-12-07); a path device is one I_T nexus, the target's own answer."""
        device = path
        if _is_map(path):
            listed = host.run(["sh", "-c", FIRST_PATH, "sh", path], timeout=60).stdout.split()
            if not listed:
                raise CommandError(CommandResult(host.name, ("sh", "-c", FIRST_PATH, path), 1, "", "no path device"))
            device = f"/dev/{listed[0]}"
        argv = ["sg_persist", "--out", "--no-inquiry", "--reserve", f"--param-rk={key:#x}", f"--prout-type={rtype}"]
        _scsi(host, [*argv, device])

    def fencing_type(self, path: str) -> tuple[int, str]:
        """Write Exclusive on a disk (one I_T nexus); registrants only on a dm-multipath map (a nexus per path:
        see the module docstring)."""
        rtype = SCSI_WRITE_EXCLUSIVE_REGISTRANTS_ONLY if _is_map(path) else WRITE_EXCLUSIVE
        return rtype, SCSI_TYPES[rtype]

    def register(self, host: Host, path: str, key: int) -> None:
        """PROUT REGISTER ``key`` for this initiator's I_T nexus (every path's, on a map)."""
        self._out(host, path, "--register", f"--param-sark={key:#x}")

    def register_ignore(self, host: Host, path: str, key: int) -> None:
        """PROUT REGISTER AND IGNORE EXISTING KEY: ``key`` registered whatever this nexus had registered before."""
        self._out(host, path, "--register-ignore", f"--param-sark={key:#x}")

    def replace(self, host: Host, path: str, old: int, new: int) -> None:
        """PROUT REGISTER with the registered ``old`` key as the reservation key and ``new`` as the service action
        key: the registration's key replaced."""
        self._out(host, path, "--register", f"--param-rk={old:#x}", f"--param-sark={new:#x}")

    def unregister(self, host: Host, path: str, key: int) -> None:
        """PROUT REGISTER with ``key`` and a service action key of zero: this nexus's registration goes (and the
        reservation with it when this nexus held it)."""
        self._out(host, path, "--register", f"--param-rk={key:#x}", "--param-sark=0x0")

    def reserve(self, host: Host, path: str, key: int, rtype: int) -> None:
        """PROUT RESERVE of type ``rtype`` with ``key``."""
        self._out(host, path, "--reserve", f"--param-rk={key:#x}", f"--prout-type={rtype}")

    def release(self, host: Host, path: str, key: int, rtype: int) -> None:
        """PROUT RELEASE of the reservation of type ``rtype`` that ``key`` holds; the registrations stay."""
        self._out(host, path, "--release", f"--param-rk={key:#x}", f"--prout-type={rtype}")

    def preempt(self, host: Host, path: str, key: int, victim: int, rtype: int, *, abort: bool = False) -> None:
        """PROUT PREEMPT (``abort``: PREEMPT AND ABORT, the victim's queued commands aborted too): ``key``'s holder
        takes the reservation (type ``rtype``) and ``victim``'s registration away."""
        action = "--preempt-abort" if abort else "--preempt"
        self._out(host, path, action, f"--param-rk={key:#x}", f"--param-sark={victim:#x}", f"--prout-type={rtype}")

    def clear(self, host: Host, path: str, key: int) -> None:
        """PROUT CLEAR with a registered ``key``: every registration and the reservation go."""
        self._out(host, path, "--clear", f"--param-rk={key:#x}")

    def report(self, host: Host, path: str) -> ReservationState:
        """PRIN READ KEYS and READ RESERVATION."""
        generation, keys = parse_sg_read_keys(_scsi(host, scsi_argv(path, "--in", "--read-keys")).stdout)
        _, holder, kind = parse_sg_read_reservation(_scsi(host, scsi_argv(path, "--in", "--read-reservation")).stdout)
        return ReservationState(generation, keys, holder, kind)


@dataclass(frozen=True)
class NvmeReservations:
    """NVMe reservations with nvme-cli (NVMe/TCP, NVMe/RDMA) on namespace ``nsid``."""

    nsid: int
    UNREGISTER_ADVANCES: ClassVar[bool | None] = True
    """Unregistering removes a registrant: GEN advances (SPDK 23.01 too)."""
    REPLACE_ADVANCES: ClassVar[bool | None] = None
    """Not judged: whether GEN moves when a registrant only replaces its key is not read the same way by every
    target (SPDK 23.01 bumps it only when a registrant is added or removed, lib/nvmf/subsystem.c; seen on the
    virtual lab 2026-12-07), while registering, unregistering and preempting advance it everywhere."""

    def _run(self, host: Host, command: str, path: str, *args: str) -> str:
        return host.run(["nvme", command, path, f"--namespace-id={self.nsid}", *args], timeout=60).stdout

    def fencing_type(self, path: str) -> tuple[int, str]:
        """Write Exclusive: NVMe reservations belong to the host (its Host Identifier), not to a controller, so
        one holder's writes go down every path of native multipath."""
        return WRITE_EXCLUSIVE, NVME_TYPES[WRITE_EXCLUSIVE]

    def register(self, host: Host, path: str, key: int) -> None:
        """Reservation Register, action 0 (register) with new key ``key``."""
        self._run(host, "resv-register", path, f"--nrkey={key:#x}", "--rrega=0")

    def register_ignore(self, host: Host, path: str, key: int) -> None:
        """Reservation Register, action 0 with Ignore Existing Key: ``key`` registered whatever was before."""
        self._run(host, "resv-register", path, f"--nrkey={key:#x}", "--rrega=0", "--iekey")

    def replace(self, host: Host, path: str, old: int, new: int) -> None:
        """Reservation Register, action 2 (replace): the registered ``old`` key becomes ``new``."""
        self._run(host, "resv-register", path, f"--crkey={old:#x}", f"--nrkey={new:#x}", "--rrega=2")

    def unregister(self, host: Host, path: str, key: int) -> None:
        """Reservation Register, action 1 (unregister) of ``key`` (the host's reservation goes with it)."""
        self._run(host, "resv-register", path, f"--crkey={key:#x}", "--rrega=1")

    def reserve(self, host: Host, path: str, key: int, rtype: int) -> None:
        """Reservation Acquire, action 0 (acquire), type ``rtype``."""
        self._run(host, "resv-acquire", path, f"--crkey={key:#x}", f"--rtype={rtype}", "--racqa=0")

    def forget_stale_prkey(self, host: Host, path: str) -> None:
        """Nothing to forget: nvme-cli keeps no key of its own."""

    def reserve_probe(self, host: Host, path: str, key: int, rtype: int) -> None:
        """The reserve an initiator with no registration sends (as :meth:`reserve`)."""
        self.reserve(host, path, key, rtype)

    def release(self, host: Host, path: str, key: int, rtype: int) -> None:
        """Reservation Release, action 0 (release) of the reservation of type ``rtype``; the registrations stay."""
        self._run(host, "resv-release", path, f"--crkey={key:#x}", f"--rtype={rtype}", "--rrela=0")

    def preempt(self, host: Host, path: str, key: int, victim: int, rtype: int, *, abort: bool = False) -> None:
        """Reservation Acquire, action 1 (preempt; ``abort``: 2, preempt and abort) of ``victim``'s key, type
        ``rtype``."""
        self._run(
            host, "resv-acquire", path, f"--crkey={key:#x}", f"--prkey={victim:#x}", f"--rtype={rtype}",
            f"--racqa={2 if abort else 1}",
        )  # fmt: skip

    def clear(self, host: Host, path: str, key: int) -> None:
        """Reservation Release, action 1 (clear): every registration and the reservation go."""
        self._run(host, "resv-release", path, f"--crkey={key:#x}", f"--rtype={WRITE_EXCLUSIVE}", "--rrela=1")

    def report(self, host: Host, path: str) -> ReservationState:
        """Reservation Report with the extended data structure (NVMe-oF hosts have 128-bit host identifiers)."""
        return parse_nvme_resv_report(self._run(host, "resv-report", path, "--eds", "--output-format=json"))


def driver_for(family: str, nsid: int) -> Reservations:
    """The reservation commands of a protocol family (``scsi`` or ``nvme``)."""
    return ScsiReservations() if family == "scsi" else NvmeReservations(nsid)
