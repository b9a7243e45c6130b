"""An identity the target must refuse (issue 31, pytest_fabricqa.faults.identity): the try recorded before it is made,
told apart as refused by the target's access check, admitted, or failed for another reason, and what it made undone
by its restore or by the next run's start. The try's shell scripts ran for real on the virtual lab (every pair of
labs/vlab.yaml: suites/test_connectivity.py's access check); here a scripted initiator answers them."""

from __future__ import annotations

import json

import pytest
from test_faults import DEAD, RECORDS, FaultHost, lab

from pytest_fabricqa.core.export import Export, ExportedUnit
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.faults import identity, stale
from pytest_fabricqa.faults.inject import FaultRefused

NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
IQN = "iqn.2026-11.io.fabricqa:vstor"
STARTED = "started 1764445200.25\n"
CLOCK = "1764445201.5\n"
# What vnode1 printed for a refused connect (nvme-tcp to nvmet, allow_any_host 0; the virtual lab, 2026-12-07): the
# write to /dev/nvme-fabrics failed with EIO and the kernel logged the refusal.
REFUSED_NVME = "said sh: 1: printf: I/O error\nrc 1\nrefusals 1\nmade 0\n"
# The same try against a subsystem that allows any host: a controller was made.
ADMITTED_NVME = "said instance=4,cntlid=2\nrc 0\nrefusals 0\nmade 1\n"
# LIO's answer to an initiator no ACL names (iscsiadm's last lines, the virtual lab), and SCST's and tgt's.
REFUSED_LIO = (
    "said iscsiadm: initiator reported error (24 - iSCSI login failed due to authorization failure)\n"
    "said iscsiadm: Could not log into all portals\nrc 24\nmade 0\n"
)
REFUSED_SCST = (
    "said iscsiadm: initiator reported error (19 - encountered non-retryable iSCSI login failure)\nrc 19\nmade 0\n"
)


class IdentityHost(FaultHost):
    """vnode1 answering the try's scripts with ``answer`` (the try's lines) and keeping the controllers (by host NQN)
    and sessions (by iface) an admitted try made, which the restore removes."""

    def __init__(self, answer: str, *, made: str = "") -> None:
        super().__init__()
        self.reply = answer
        self.made = made
        self.controllers: set[str] = set()
        self.ifaces: set[str] = set()

    def answer(self, argv: tuple[str, ...]):  # type: ignore[no-untyped-def]
        script = argv[2] if argv[:2] == ("sh", "-c") else ""
        if script in (identity.NVME_TRY, identity.ISCSI_TRY):
            self._event("break", script)
            if script == identity.ISCSI_TRY:
                self.ifaces.add(argv[4])
            if self.made:
                self.controllers.add(self.made)
            return STARTED + self.reply + CLOCK
        if script == identity.NVME_UNDO:
            self._event("restore", script)
            self.controllers.discard(argv[4])
            return CLOCK
        if script == identity.ISCSI_UNDO:
            self._event("restore", script)
            self.ifaces.discard(argv[4])
            self.controllers.clear()
            return CLOCK
        return super().answer(argv)


def export(protocol: str = "nvme-tcp", transport: str = "tcp", port: int = 4420, name: str = NQN) -> Export:
    return Export(protocol, transport, "10.10.10.19", port, (ExportedUnit(name, 1, "ram0", "/dev/ram0"),), "vstor")


def nvme_try(host: IdentityHost, made_up: str = identity.UNLISTED_NQN + "1") -> identity.UnlistedIdentity:
    return identity.UnlistedIdentity(lab(), host, "fabricqa", export(), "nvme", NQN, made_up, "1")


def iscsi_try(host: IdentityHost) -> identity.UnlistedIdentity:
    made_up = identity.UNLISTED_IQN + "abc"
    return identity.UnlistedIdentity(lab(), host, "fabricqa", export("iscsi", "tcp", 3260, IQN), "scsi", IQN, made_up)


def tried(fault: identity.UnlistedIdentity) -> list[str]:
    undo = UndoStack()
    fault.arm(undo)
    fault.fire()
    assert undo.unwind() == []
    return identity.attempt_problems("nvmet (nvmet)", fault)


def test_a_refused_connect_is_recorded_before_it_is_made_and_leaves_nothing() -> None:
    host = IdentityHost(REFUSED_NVME)
    fault = nvme_try(host)
    assert tried(fault) == []
    (what, records), (undone, _) = host.events
    assert what == "break" and records[f"unlisted:{identity.UNLISTED_NQN}1"]["params"]["subsystem"] == NQN
    assert undone == "restore" and host.records() == {}  # the record was there before the try, gone after it


def test_a_target_that_admits_a_made_up_host_nqn_fails_the_case_and_its_controller_is_removed() -> None:
    made_up = identity.UNLISTED_NQN + "1"
    host = IdentityHost(ADMITTED_NVME, made=made_up)
    (problem,) = tried(nvme_try(host, made_up))
    assert f"target nvmet (nvmet) admitted the host NQN {made_up}" in problem and "allow_any_host: false" in problem
    assert host.controllers == set() and host.records() == {}


def test_a_connect_that_failed_for_another_reason_proves_nothing() -> None:
    host = IdentityHost("said sh: 1: printf: Connection refused\nrc 1\nrefusals 0\nmade 0\n")
    (problem,) = tried(nvme_try(host))
    assert "not as a refusal by target nvmet (nvmet)'s access check" in problem and "Connection refused" in problem


@pytest.mark.parametrize("answer", [REFUSED_LIO, REFUSED_SCST], ids=["lio-authorization", "scst-tgt-not-found"])
def test_a_login_the_target_rejected_passes_and_its_iface_is_deleted(answer: str) -> None:
    host = IdentityHost(answer)
    assert tried(iscsi_try(host)) == []
    assert host.ifaces == set() and host.records() == {}


@pytest.mark.parametrize(
    "answer, said",
    [
        ("said iscsiadm: initiator reported error (8 - connection timed out)\nrc 8\nmade 0\n", "timed out"),
        ("setup iscsiadm: Could not create new interface\nrc 24\nmade 0\n", "Could not create"),
    ],
    ids=["timeout", "iface-not-made"],
)
def test_a_login_that_failed_before_the_access_check_proves_nothing(answer: str, said: str) -> None:
    (problem,) = tried(iscsi_try(IdentityHost(answer)))
    assert "proves nothing" in problem and said in problem


def test_an_admitted_login_fails_the_case() -> None:
    (problem,) = tried(iscsi_try(IdentityHost("said Login to [...] successful.\nrc 0\nmade 1\n")))
    assert "admitted the initiator name iqn.2026-11.io.fabricqa:unlisted-abc" in problem and "ACL" in problem


def test_a_try_against_a_subsystem_the_fabric_does_not_serve_is_refused_before_anything_happens() -> None:
    host = IdentityHost(REFUSED_NVME)
    fault = identity.UnlistedIdentity(lab(), host, "fabricqa", export(), "nvme", "nqn.2020-01.com.example:theirs", "x")
    with pytest.raises(FaultRefused, match="is not served by the fabric"):
        fault.arm(UndoStack())
    assert host.events == [] and host.records() == {}


def test_a_run_killed_with_an_admitted_controller_has_it_removed_at_the_next_start() -> None:
    made_up = identity.UNLISTED_NQN + "1"
    host = IdentityHost(ADMITTED_NVME, made=made_up)
    fault = nvme_try(host, made_up)
    fault.arm(UndoStack())
    fault.fire()  # killed here: the controller is there, the record too
    records = host.records()
    records[f"unlisted:{made_up}"]["owner"] = DEAD
    host.files[RECORDS] = json.dumps({"kind": "faults", "faults": records})
    (said,) = stale.restore_stale(lab(), {"vnode1": host})
    assert said.startswith(f"vnode1: restored 'vnode1 presenting the unlisted host NQN {made_up}")
    assert host.controllers == set() and host.records() == {}


def test_made_up_identities_are_fresh_and_marked() -> None:
    (nqn, host_id), (again, _) = identity.made_up_identity("nvme"), identity.made_up_identity("nvme")
    assert nqn == identity.UNLISTED_NQN + host_id and nqn != again
    iqn, none = identity.made_up_identity("scsi")
    assert iqn.startswith(identity.UNLISTED_IQN) and none == ""


def test_the_refusal_lines_excuse_only_the_refusal() -> None:
    import re

    patterns = [re.compile(p, re.IGNORECASE) for p in identity.REFUSAL_LINES]
    seen = [
        f"nvme nvme1: Connect for subsystem {NQN} is not allowed, hostnqn: {identity.UNLISTED_NQN}9d7c",
        "nvme nvme1: failed to connect queue: 0 ret=16772",
        "nvme nvme2: failed to connect queue: 0 ret=388",
    ]
    assert all(any(p.search(line) for p in patterns) for line in seen)
    others = ["nvme nvme1: failed to connect queue: 0 ret=-110", "nvme nvme0: I/O 12 QID 1 timeout, reset controller"]
    assert not any(p.search(line) for p in patterns for line in others)


def test_a_listed_name_with_a_wrong_secret_sends_it_on_stdin_and_never_records_it() -> None:
    host = IdentityHost(REFUSED_LIO)
    sent: list[tuple[tuple[str, ...], str | None]] = []
    original = host.run

    def run(argv, *, check=True, timeout=None, stdin=None):  # type: ignore[no-untyped-def]
        sent.append((tuple(argv), stdin))
        return original(argv, check=check, timeout=timeout, stdin=stdin)

    host.run = run  # type: ignore[method-assign]
    own = "iqn.2026-11.io.fabricqa:vnode1"
    fault = identity.UnlistedIdentity(
        lab(), host, "fabricqa", export("iscsi", "tcp", 3260, IQN), "scsi", IQN, own,
        chap=("vnodes", "0123456789abcdef"), label=f"its own initiator name {own} with a wrong CHAP secret", listed=True,
    )  # fmt: skip
    assert tried(fault) == []
    ((argv, stdin),) = [(a, s) for a, s in sent if a[:3] == ("sh", "-c", identity.ISCSI_TRY)]
    assert argv[-1] == "vnodes" and stdin == "0123456789abcdef\n"
    assert not [a for a, _ in sent if any("0123456789abcdef" in x for x in a)]
    assert "0123456789abcdef" not in json.dumps(host.events)  # the record, as it was when the try ran


def test_a_target_that_admits_a_wrong_secret_is_said_not_to_check_chap() -> None:
    own = "iqn.2026-11.io.fabricqa:vnode1"
    fault = identity.UnlistedIdentity(
        lab(), IdentityHost("said Login successful.\nrc 0\nmade 1\n"), "fabricqa", export("iscsi", "tcp", 3260, IQN),
        "scsi", IQN, own, label=f"its own initiator name {own} with a missing CHAP secret", listed=True,
    )  # fmt: skip
    (problem,) = tried(fault)
    assert "admitted its own initiator name" in problem and "missing CHAP secret" in problem
    assert "does not check CHAP" in problem
