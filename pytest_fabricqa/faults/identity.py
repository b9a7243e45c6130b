"""An identity the target must refuse, tried from one initiator (issue 31: does the target refuse a host it should?).

The initiator presents an identity that no access list of the lab names, to one subsystem or target of the fabric
at its first portal, and the target must refuse it:

- NVMe-oF: a connect with a host NQN and host ID made up for the try, its options written to the kernel's
  ``/dev/nvme-fabrics`` as nvme-cli does (:data:`NVME_TRY` says why not nvme-cli itself): ``/etc/nvme/hostnqn`` is
  never read or changed, so the host's own identity stays what it was.
- iSCSI/iSER: a login through an open-iscsi iface record of the plugin's own (``<name_prefix>_unlisted``) that
  carries a made-up initiator name (``iface.initiatorname``); ``/etc/iscsi/initiatorname.iscsi`` is never changed.

The try is recorded on the initiator before it is made, like a fault (:class:`~pytest_fabricqa.faults.inject.
_RecordedFault`), and its restore removes what an admitted try made: the controllers whose host NQN is the made-up
one, or the session, node record and iface of the try's own iface record. So a run killed during the try is cleaned
at the next start (:mod:`pytest_fabricqa.faults.stale`), and nothing else is touched: the restore knows controllers
only by the made-up NQN it recorded, and open-iscsi records only through the try's own iface.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from pytest_fabricqa.core.export import Export, portal_name
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.faults.inject import CLOCK, STARTED, _RecordedFault
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import CommandResult, Host

UNLISTED_NQN = "nqn.2026-11.io.fabricqa:unlisted-"
"""How a made-up host NQN begins (a UUID follows, the host ID sent with it)."""
UNLISTED_IQN = "iqn.2026-11.io.fabricqa:unlisted-"
"""How a made-up initiator name begins (random hex follows)."""
SAID_LINES = 3
"""The last lines of what the connect or login printed, kept to name the refusal."""

# argv: trtype, traddr, trsvcid, subsystem NQN, host NQN, host ID. The connect made through the kernel's own fabrics
# interface (the options written to /dev/nvme-fabrics in one write, as nvme-cli does): nvme-cli 2.3 with libnvme 1.3
# (Debian 12) answers "already connected" without asking the kernel when the host already has a controller to the
# subsystem at that address, whatever --hostnqn and --duplicate-connect say (seen on the virtual lab). What the write
# said and its exit code ("instance=N,..." when a controller was made), the kernel's refusals of this host NQN (the
# initiator logs "Connect for subsystem S is not allowed, hostnqn: H" when the target answers Connect Invalid Host),
# then how many controllers carry the host NQN (an admitted connect made one).
NVME_TRY = (
    STARTED
    + r"""opts="transport=$1,traddr=$2,trsvcid=$3,nqn=$4,hostnqn=$5,hostid=$6,duplicate_connect"
out=$( { exec 3<>/dev/nvme-fabrics && printf '%s' "$opts" >&3 && head -n 1 <&3; } 2>&1 ); rc=$?
printf '%s\n' "$out" | tail -n """
    + str(SAID_LINES)
    + r""" | sed 's/^/said /'
echo "rc $rc"
echo "refusals $(dmesg | tail -n 200 | grep -c "is not allowed, hostnqn: $5\$")"
n=0
for c in /sys/class/nvme/nvme*; do [ "$(cat "$c/hostnqn" 2>/dev/null)" != "$5" ] || n=$((n + 1)); done
echo "made $n"
"""
    + CLOCK
)
# argv: host NQN. Every controller carrying it disconnected, then none may be left.
NVME_UNDO = (
    r"""for c in /sys/class/nvme/nvme*; do
  [ "$(cat "$c/hostnqn" 2>/dev/null)" != "$1" ] || nvme disconnect -d "${c##*/}" >/dev/null 2>&1
done
for c in /sys/class/nvme/nvme*; do
  [ "$(cat "$c/hostnqn" 2>/dev/null)" != "$1" ] || { echo "controller ${c##*/} with host NQN $1 is still there" >&2; exit 1; }
done
"""
    + CLOCK
)
# argv: iface, initiator name, transport (tcp or iser), target IQN, portal, CHAP name ("" for none; its secret then
# comes on stdin, never in a command line). The iface record and its node record made, with CHAP when asked (a
# failure there is the try's, not the target's: "setup"), then the login; what iscsiadm said, its exit code, and
# how many sessions run through the iface.
ISCSI_TRY = (
    STARTED
    + r"""i=$1
if ! { iscsiadm -m iface -I "$i" -o new && iscsiadm -m iface -I "$i" -o update -n iface.transport_name -v "$3" &&
       iscsiadm -m iface -I "$i" -o update -n iface.initiatorname -v "$2" &&
       iscsiadm -m node -T "$4" -p "$5" -I "$i" -o new &&
       if [ -n "$6" ]; then
         IFS= read -r pw &&
         iscsiadm -m node -T "$4" -p "$5" -I "$i" -o update -n node.session.auth.authmethod -v CHAP &&
         iscsiadm -m node -T "$4" -p "$5" -I "$i" -o update -n node.session.auth.username -v "$6" &&
         iscsiadm -m node -T "$4" -p "$5" -I "$i" -o update -n node.session.auth.password -v "$pw"
       fi; } > /dev/null 2> "/tmp/$i.err"; then
  tail -n 2 "/tmp/$i.err" | sed 's/^/setup /'
fi
rm -f "/tmp/$i.err"
out=$(iscsiadm -m node -T "$4" -p "$5" -I "$i" --login 2>&1); rc=$?
printf '%s\n' "$out" | tail -n """
    + str(SAID_LINES)
    + r""" | sed 's/^/said /'
echo "rc $rc"
echo "made $(iscsiadm -m session -P 1 2>/dev/null | grep -c "Iface Name: $i\$")"
"""
    + CLOCK
)
# argv: iface, target IQN, portal. Logged out and deleted through the iface only, then nothing of it may be left.
ISCSI_UNDO = (
    r"""i=$1
iscsiadm -m node -T "$2" -p "$3" -I "$i" --logout > /dev/null 2>&1
iscsiadm -m node -T "$2" -p "$3" -I "$i" -o delete > /dev/null 2>&1
iscsiadm -m iface -I "$i" -o delete > /dev/null 2>&1
if iscsiadm -m session -P 1 2>/dev/null | grep -q "Iface Name: $i\$"; then
  echo "a session through iface $i is still logged in" >&2; exit 1
fi
if iscsiadm -m iface -I "$i" > /dev/null 2>&1; then echo "iface $i is still there" >&2; exit 1; fi
"""
    + CLOCK
)


@dataclass(frozen=True)
class Attempt:
    """What the try saw: whether the target admitted the identity (a controller or session was made), the exit code
    of the connect or login, its last lines, a setup failure of the try itself (iSCSI's iface or node record), and
    (NVMe) how many of the initiator kernel's lines say the target refused this host NQN as not allowed."""

    admitted: bool
    exit_code: int | None
    said: tuple[str, ...]
    setup: tuple[str, ...] = ()
    refusals: int | None = None


def parse_attempt(text: str) -> Attempt:
    """:data:`NVME_TRY`'s or :data:`ISCSI_TRY`'s output as an :class:`Attempt`; an output without its ``made``
    line (the script did not get that far) admits nothing and has no exit code."""
    said: list[str] = []
    setup: list[str] = []
    refusals: int | None = None
    code: int | None = None
    made = 0
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "said":
            said.append(rest)
        elif word == "setup":
            setup.append(rest)
        elif word == "refusals" and rest.strip().isdigit():
            refusals = int(rest)
        elif word == "rc" and rest.strip().isdigit():
            code = int(rest)
        elif word == "made" and rest.strip().isdigit():
            made = int(rest)
    return Attempt(code == 0 or made > 0, code, tuple(said), tuple(setup), refusals)


def made_up_identity(family: str) -> tuple[str, str]:
    """(the identity, the NVMe host ID or "") made up for one try: a host NQN with a fresh UUID (also its host ID),
    or an initiator IQN with fresh random hex."""
    if family == "nvme":
        host_id = str(uuid.uuid4())
        return UNLISTED_NQN + host_id, host_id
    return UNLISTED_IQN + secrets.token_hex(6), ""


def made_up_secret() -> str:
    """A CHAP secret made up for one try (16 hex characters: within every target's 12-16 minimum and open-iscsi's
    limit), which no lab gives."""
    return secrets.token_hex(8)


class UnlistedIdentity(_RecordedFault):
    """One initiator tries ``identity`` against ``subsystem`` (an NQN or IQN of ``export``) at the export's first
    portal; :meth:`fire` makes the try, :attr:`attempt` holds what it saw, :meth:`restore` removes what it made.
    With ``listed`` the identity is the host's own, which the access list names, and the try gives a wrong CHAP
    secret (``chap``: name and secret) or none, which a target that checks CHAP must refuse all the same.

    Refused (before anything is tried) when the subsystem is not one the export serves: the try is made against the
    fabric this run connected, nothing else."""

    kind = "unlisted-identity"

    def __init__(
        self,
        lab: LabModel,
        host: Host,
        name_prefix: str,
        export: Export,
        family: str,
        subsystem: str,
        identity: str,
        host_id: str = "",
        *,
        chap: tuple[str, str] | None = None,
        label: str = "",
        listed: bool = False,
    ) -> None:
        super().__init__(host, name_prefix)
        self.lab = lab.name
        self.export = export
        self.family = family
        self.subsystem = subsystem
        self.identity = identity
        self.host_id = host_id
        self.iface = f"{name_prefix}_unlisted"
        self.portal = portal_name(export.address, export.port)
        what = "host NQN" if family == "nvme" else "initiator name"
        self.chap = chap  # (name, secret) to log in with; the secret is never recorded
        self.shown = label or f"the unlisted {what} {identity}"  # what is presented, for messages
        self.name = f"{host.name} presenting {self.shown} to {subsystem} at {self.portal}"
        self.key = f"unlisted:{identity}"
        self.attempt: Attempt | None = None
        self.identity_listed = listed  # the host's own, listed identity with a wrong or missing secret

    @classmethod
    def from_record(cls, lab: LabModel, host: Host, name_prefix: str, record: Mapping[str, Any]) -> Self:
        """The try a record describes, to undo what it made."""
        params = record["params"]
        address, port = str(params["address"]), int(params["port"])
        export = Export(str(params["protocol"]), str(params["transport"]), address, port, (), None)
        fault = cls(
            lab, host, name_prefix, export, str(params["family"]), str(params["subsystem"]), str(params["identity"])
        )
        fault.params = dict(params)
        return fault

    def how(self) -> str:
        if self.family == "nvme":
            return f"nvme disconnect -d <each controller whose hostnqn is {self.identity}>"
        return (
            f"iscsiadm -m node -T {self.subsystem} -p {self.portal} -I {self.iface} --logout, then -o delete, then "
            f"iscsiadm -m iface -I {self.iface} -o delete"
        )

    def _check(self) -> None:
        if self.subsystem not in self.export.subsystems:
            raise self._refuse(
                f"{self.subsystem} is not served by the fabric ({', '.join(self.export.subsystems)})",
                "try an identity against a subsystem or target of the fabric this run connected",
            )
        self.params = {
            "family": self.family,
            "protocol": self.export.protocol,
            "transport": self.export.transport,
            "address": self.export.address,
            "port": self.export.port,
            "subsystem": self.subsystem,
            "identity": self.identity,
            "iface": self.iface,
        }

    def _inject(self) -> CommandResult:
        if self.family == "nvme":
            argv = [self.export.transport, self.export.address, str(self.export.port), self.subsystem]
            result = self.host.run(
                ["sh", "-c", NVME_TRY, "sh", *argv, self.identity, self.host_id], check=False, timeout=120
            )
        else:
            user, secret = self.chap or ("", "")
            argv = [self.iface, self.identity, self.export.transport, self.subsystem, self.portal, user]
            result = self.host.run(
                ["sh", "-c", ISCSI_TRY, "sh", *argv], check=False, timeout=180, stdin=secret + "\n" if user else None
            )
        self.attempt = parse_attempt(result.stdout)
        return result

    def _restore(self) -> CommandResult:
        if self.family == "nvme":
            return self.host.run(["sh", "-c", NVME_UNDO, "sh", self.identity], timeout=120)
        return self.host.run(["sh", "-c", ISCSI_UNDO, "sh", self.iface, self.subsystem, self.portal], timeout=180)


def admitted_problem(target: str, attempt: Attempt, fault: UnlistedIdentity) -> str | None:
    """The sentence for a try whose identity the target admitted (None when it was refused): which identity, which
    host, which target and subsystem, and what the lab should look at."""
    if not attempt.admitted:
        return None
    if fault.identity_listed:
        return (
            f"{fault.host.name}: target {target} admitted {fault.shown} to {fault.subsystem} at {fault.portal}: it does not "
            "check CHAP; set targets[].iscsi.chap so that the plugin provisions it, or switch CHAP on in the array"
        )
    what = "host NQN" if fault.family == "nvme" else "initiator name"
    fix = (
        "set allow_any_host: false on its subsystems (only the initiators' host_nqn or allowed_hosts are admitted)"
        if fault.family == "nvme"
        else "give it an ACL of the initiators' initiator_iqn (no demo mode, no default LUNs every initiator sees)"
    )
    return (
        f"{fault.host.name}: target {target} admitted the {what} {fault.identity}, which no access list of the lab "
        f"names, to {fault.subsystem} at {fault.portal}: it is open to any host; {fix}"
    )


ISCSI_REFUSED = {24: "authorization failure", 19: "a non-retryable login failure"}
"""iscsiadm's exit codes for a login the target rejected with an initiator error: 24 (ISCSI_ERR_LOGIN_AUTH_FAILED:
LIO's answer to an initiator no ACL names) and 19 (ISCSI_ERR_FATAL_LOGIN: SCST's and tgt's answer, "target not
found" to an initiator no group or binding admits; both seen on the virtual lab). Any other exit (a timeout, a
transport error, no portal) means the try did not reach the target's access check, so it proves nothing."""
REFUSAL_LINES = (
    r"nvme\d+: Connect for subsystem \S+ is not allowed, hostnqn: " + UNLISTED_NQN,
    r"nvme\d+: failed to connect queue: 0 ret=(?:16772|388)\b",
)
"""The initiator kernel's lines a refused try logs (``fabricqa_kernel_expects``): the refusal itself and the failed
admin queue it leaves, whose status is Connect Invalid Host (0x184: 388 from SPDK, 16772 = 0x4184 with the
do-not-retry bit from nvmet; both on the virtual lab); nothing else a connect might log (a timeout, a reset) is
excused."""


def refused_because(family: str, attempt: Attempt) -> str | None:
    """Why the target refused the try, as a clause (None when the try does not show a refusal by the target's access
    check: admitted, or failed for another reason)."""
    if attempt.admitted:
        return None
    if family == "nvme":
        if attempt.refusals:
            return "the initiator's kernel logged the connect as not allowed for that host NQN"
        return None
    reason = ISCSI_REFUSED.get(attempt.exit_code) if attempt.exit_code is not None else None
    return None if reason is None or attempt.setup else f"the login was rejected ({reason})"


def try_it(fault: UnlistedIdentity, target: str) -> list[str]:
    """Make the try (recorded first) and undo what it made; everything wrong with it (:func:`attempt_problems`) and
    every undo step that failed, one sentence each. A try refused before it is made raises
    :class:`~pytest_fabricqa.faults.inject.FaultRefused`."""
    undo = UndoStack()
    try:
        fault.arm(undo)
        fault.fire()
    finally:
        failed = undo.unwind()
    return attempt_problems(target, fault) + failed


def attempt_problems(target: str, fault: UnlistedIdentity) -> list[str]:
    """What is wrong with a try, one sentence each: the target admitted the identity, or the try shows no refusal by
    the target's access check (it failed for another reason, or was never made), so it proves nothing."""
    attempt = fault.attempt
    if attempt is None:
        return [f"{fault.host.name}: {fault.name} was never tried"]
    admitted = admitted_problem(target, attempt, fault)
    if admitted is not None:
        return [admitted]
    if refused_because(fault.family, attempt) is not None:
        return []
    said = "; ".join(attempt.setup or attempt.said) or "nothing"
    return [
        f"{fault.host.name}: {fault.name} failed, but not as a refusal by target {target}'s access check (exit "
        f"{attempt.exit_code}, said: {said}), so the try proves nothing; check that the portal answers the "
        "initiator's own identity (test_every_initiator_is_connected)"
    ]
