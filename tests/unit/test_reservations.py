"""Persistent reservations: the parsers (on samples written from the tools' source, see
tests/data/reservations/README.md), the capability fact, and the fencing sequence against a target that keeps
reservation state as SPC-3 and NVMe say, including the release after a failure."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import ScriptedHost

from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.initiators.reservations import FIRST_PATH
from pytest_fabricqa.integrity import inflight, reservations
from pytest_fabricqa.integrity.checks import SharedDevice
from pytest_fabricqa.integrity.reservations import (
    CONFLICT,
    SCSI_TYPES,
    NvmeReservations,
    ReservationState,
    ScsiReservations,
    fencing,
    is_conflict,
    is_ours,
    parse_nvme_resv_report,
    parse_sg_read_keys,
    parse_sg_read_reservation,
    reservation_case,
    reservation_key,
    run_token,
    scsi_argv,
    unsupported,
)
from pytest_fabricqa.transport.base import CommandResult, Host

DATA = Path(__file__).parent.parent / "data" / "reservations"
KA, KB = reservation_key(0), reservation_key(1)


def test_sg_persist_keys_and_reservation_are_read() -> None:
    assert parse_sg_read_keys((DATA / "sg_persist-read-keys-two.FROM-SOURCE.txt").read_text()) == (2, (KA, KB))
    assert parse_sg_read_keys((DATA / "sg_persist-read-keys-none.FROM-SOURCE.txt").read_text()) == (0, ())
    held = parse_sg_read_reservation((DATA / "sg_persist-read-reservation-held.FROM-SOURCE.txt").read_text())
    assert held == (3, KA, "Write Exclusive")
    none = parse_sg_read_reservation((DATA / "sg_persist-read-reservation-none.FROM-SOURCE.txt").read_text())
    assert none == (2, None, "")
    with pytest.raises(ValueError, match="PR generation"):
        parse_sg_read_keys("sg_persist: error opening file: /dev/sdz")


def test_nvme_resv_report_names_the_holder_by_rcsts() -> None:
    """Recorded from SPDK 23.01 on the virtual lab (see the data's README): a killed run's key holding Write
    Exclusive beside a person's 0x111, then 0x111 alone after the next start's sweep."""
    killed = 0x666162716169EE01
    state = parse_nvme_resv_report((DATA / "nvme-resv-report-eds-spdk-23.01-held.json").read_text())
    assert state == ReservationState(2, (killed, 0x111), killed, "Write Exclusive")
    assert parse_nvme_resv_report((DATA / "nvme-resv-report-eds-spdk-23.01-foreign.json").read_text()) == (
        ReservationState(3, (0x111,))
    )
    with pytest.raises(ValueError, match="not JSON"):
        parse_nvme_resv_report("NVMe status: Host Identifier Inconsistent Format(0x18)")


def test_the_capability_is_one_fact_and_a_kind_without_it_says_so() -> None:
    assert unsupported("lio") is None
    assert (unsupported("nvmet") or "").startswith("not supported by nvmet: Linux nvmet implements NVMe reservations")
    assert (unsupported("netapp") or "").startswith("not supported by netapp")


class Target:
    """Reservation state as a target keeps it (registrations, holder, type 1 or 5, the generation as SPC-4 says:
    every REGISTER form, PREEMPT and CLEAR advance it, RESERVE and RELEASE do not), fed by sg_persist,
    mpathpersist and dd argv from two hosts. ``broken`` lets one host's write through whatever the reservation
    says (a target that does not fence it); ``generation_on``: the PROUT actions that advance the generation
    (a target that gets it wrong); ``grant_unregistered``: a reserve from a host with no key is granted."""

    ADVANCING = frozenset({"--register", "--register-ignore", "--preempt", "--preempt-abort", "--clear"})

    def __init__(
        self,
        *,
        broken: str = "",
        refuse_preempt: bool = False,
        generation_on: frozenset[str] = ADVANCING,
        grant_unregistered: bool = False,
        stuck_key: str = "",
        late: bool = False,
    ) -> None:
        self.writing, self.stopped, self.first, self.late = "", False, 0, late  # late: a refused write lands
        self.keys: dict[str, int] = {}
        self.holder: str | None = None
        self.type = 0
        self.broken = broken
        self.refuse_preempt = refuse_preempt
        self.generation_on = generation_on
        self.grant_unregistered = grant_unregistered
        self.stuck_key = stuck_key  # a host whose unregister the target acknowledges and ignores
        self.generation = 0

    def host(self, name: str) -> Host:
        return ScriptedHost(name, lambda argv: self.answer(name, argv))

    def writers(self, who: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
        """The victim's stamped writer loops (integrity.inflight), as a target that fences ``who`` once its key is
        gone: two acknowledged writes each before, then a refused one."""
        script = argv[2]
        if script == inflight.START:
            self.writing, self.stopped, self.first, self.run = who, False, int(argv[6]), argv[-1]
            return 0, "started\n", ""
        if 'touch "$1/stop"' in script:
            self.stopped = True
            return 0, "", ""
        fenced = self.writing not in self.keys and self.writing != self.broken
        if script == inflight.COLLECT:
            lines = []
            for w in range(inflight.WRITERS):
                lines.append(f"@@w {w}")
                base = self.first + w * inflight.BLOCKS_PER_WRITER
                lines += [f"0 {base} ok", f"1 {base + 1} ok"]
                if fenced:
                    lines.append(f"2 {base + 2} fail dd: error writing '/dev/x': {CONFLICT}")
            lines += [f"@@d {w}" for w in range(inflight.WRITERS)] if self.stopped else []
            return 0, "\n".join(lines) + "\n", ""
        if script == inflight.READ_STAMPS:
            out = []
            for block in range(self.first, self.first + inflight.WRITERS * inflight.BLOCKS_PER_WRITER):
                w, index = divmod(block - self.first, inflight.BLOCKS_PER_WRITER)
                out.append(
                    f"{block} FABQA-PAA {self.run} {w} {index} {block}"
                    if index < 2 or (index == 2 and self.late)
                    else f"{block} "
                )
            return 0, "\n".join(out) + "\n", ""
        return 0, "", ""  # the undo

    def answer(self, who: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
        if argv[:3] == ("sh", "-c", FIRST_PATH):
            return 0, "sdc\n", ""  # the map's first path device
        if argv[:2] == ("sh", "-c"):
            return self.writers(who, argv)
        if argv[0] == "dd":
            if argv[1].startswith("if=/dev/zero"):  # a write
                registrant = self.type == 5 and who in self.keys
                allowed = self.holder in (None, who) or registrant or who == self.broken
                return (0, "", "") if allowed else (1, "", f"dd: error writing '{argv[2][3:]}': {CONFLICT}\n")
            return 0, "", ""
        args = dict(a.split("=", 1) for a in argv if a.startswith(("--param", "--prout")))
        conflict = (11 if argv[0] == "mpathpersist" else 24, "", "persistent reserve out: Reservation Conflict\n")
        action = next((a for a in argv if a in self.ADVANCING | {"--reserve", "--release"}), "")
        action = "--preempt" if action == "--preempt-abort" else action
        if action == "--register":
            rk, sark = int(args.get("--param-rk", "0"), 16), int(args.get("--param-sark", "0"), 16)
            if who in self.keys and self.keys[who] != rk:
                return conflict
            if sark == 0:
                if who != self.stuck_key:
                    self.keys.pop(who, None)
                    self.holder = None if self.holder == who else self.holder
            else:
                self.keys[who] = sark
        elif action == "--register-ignore":
            self.keys[who] = int(args["--param-sark"], 16)
        elif action == "--reserve":
            if who not in self.keys and not self.grant_unregistered:
                return conflict
            self.holder, self.type = who, int(args["--prout-type"])
        elif action == "--release":
            self.holder = None if self.holder == who else self.holder
        elif action in ("--preempt", "--preempt-abort"):
            if self.refuse_preempt:
                return 24, "", "PR out: command failed\n"
            victim = int(args["--param-sark"], 16)
            self.keys = {h: k for h, k in self.keys.items() if k != victim}
            self.holder, self.type = who, int(args["--prout-type"])
        elif action == "--clear":
            self.keys, self.holder = {}, None
        elif "--read-keys" in argv:
            keys = sorted(self.keys.values())
            body = "".join(f"    {k:#x}\n" for k in keys)
            head = (
                f"{len(keys)} registered reservation keys follow:\n"
                if keys
                else "there are NO registered reservation keys\n"
            )
            return 0, f"  PR generation={self.generation:#x}, {head}{body}", ""
        elif "--read-reservation" in argv:
            if self.holder is None:
                return 0, f"  PR generation={self.generation:#x}, there is NO reservation held\n", ""
            key = self.keys.get(self.holder, 0)
            return (
                0,
                f"  PR generation={self.generation:#x}, Reservation follows:\n    Key={key:#x}\n    scope: LU_SCOPE,  "
                f"type: {SCSI_TYPES[self.type]}\n",
                "",
            )
        if action in self.generation_on:
            self.generation += 1
        return 0, "", ""


DEVICE = SharedDevice("ram0", "iqn.x", 0, 512 << 20, {"vnode1": "/dev/sdb", "vnode2": "/dev/sdc"})


RUN = 0x1234
K1, K2 = reservation_key(0, RUN), reservation_key(1, RUN)


def _fence(target: Target, undo: UndoStack | None = None, ledger: object = None, device: SharedDevice = DEVICE):
    a, b = target.host("vnode1"), target.host("vnode2")
    return (
        fencing(ScsiReservations(), a, b, device, UndoStack() if undo is None else undo, run=RUN, ledger=ledger),
        a,
        b,
    )  # type: ignore[arg-type]


def test_two_initiators_fence_each_other_every_action_checked_and_nothing_is_left() -> None:
    target = Target()
    undo = UndoStack()
    result, a, b = _fence(target, undo)
    assert result.problems == []
    names = [c.name for c in result.checks]
    assert names[:2] == ["nothing registered before", "vnode2, never registered, is refused a reservation"]
    assert "vnode2's write to /dev/sdc is refused" in names and "vnode1's write to /dev/sdb is refused" in names
    assert f"after vnode2's preempt-and-abort: keys {K2:#x}, {K2:#x} holds Write Exclusive" in names
    assert "vnode1's writes in flight at the fence: acknowledged ones on the device, refused ones not" in names
    for action in ("register", "register-and-ignore", "replace", "reserve", "release", "second reserve", "unregister"):
        assert any(n.startswith("after vnode") and f"'s {action}:" in n for n in names), action
    sent = {argv[3] for argv in a.commands + b.commands if argv[1] == "--out"}
    assert sent == {"--register", "--register-ignore", "--reserve", "--release", "--preempt-abort"}
    assert target.keys == {} and target.holder is None and target.generation == 5  # B unregistered as a step
    assert undo.unwind() == []
    case = reservation_case("n", "iscsi-reservations", "iscsi", result)
    assert case.suite == "integrity" and case.integrity is None and all(c.verdict == "passed" for c in case.checks)


def test_the_keys_are_unique_to_the_run_and_marked_as_ours() -> None:
    assert reservation_key(0, 1) != reservation_key(0, 2) and reservation_key(0, 1) != reservation_key(1, 1)
    assert f"{reservation_key(1, 0xBEEF):#x}" == "0x6661627161beef02"  # "fabqa", the run, the initiator
    assert is_ours(reservation_key(3, run_token())) and not is_ours(0x111) and not is_ours(0x6661627162000001)
    assert len({run_token() for _ in range(50)}) > 40  # random, not fixed
    with pytest.raises(ValueError):
        reservation_key(0, 0x10000)


def test_a_target_that_does_not_fence_fails_the_case() -> None:
    target = Target(broken="vnode2")
    result, _, _ = _fence(target)
    assert result.problems == [
        "vnode2's write to /dev/sdc is refused: the write succeeded: the reservation did not fence this initiator"
    ]


@pytest.mark.parametrize(
    ("generation_on", "said"),
    [
        (Target.ADVANCING - {"--register-ignore"}, "after vnode2's register-and-ignore: "),
        (Target.ADVANCING | {"--reserve"}, "after vnode1's reserve: "),
        (Target.ADVANCING - {"--preempt"}, "after vnode2's preempt-and-abort: "),
    ],
)
def test_a_generation_that_does_not_move_as_the_standards_say_fails_the_case(
    generation_on: frozenset[str], said: str
) -> None:
    result, _, _ = _fence(Target(generation_on=generation_on))
    (problem,) = [p for p in result.problems if p.startswith(said)]
    assert "the generation" in problem, result.problems


def test_a_reservation_granted_to_a_host_that_never_registered_fails_the_case() -> None:
    result, _, _ = _fence(Target(grant_unregistered=True))
    assert result.problems[0] == "vnode2, never registered, is refused a reservation: the target granted it"


def test_keys_already_on_the_device_stop_the_case_and_are_never_touched() -> None:
    target = Target()
    target.keys = {"vnode1": 0x111, "vnode2": reservation_key(0, 7)}  # a cluster's, and a killed run's
    undo = UndoStack()
    result, a, b = _fence(target, undo)
    assert len(result.problems) == 1 and result.problems[0].startswith("nothing registered before: the target already")
    assert (
        "0x111, " in result.problems[0]
        and f"{reservation_key(0, 7):#x} (a killed run of this plugin's)" in result.problems[0]
    )
    assert undo.unwind() == []
    assert target.keys == {"vnode1": 0x111, "vnode2": reservation_key(0, 7)}
    assert not [argv for argv in a.commands + b.commands if "--out" in argv]


def test_a_failed_step_stops_the_sequence_and_the_undo_unregisters_ours_from_their_own_hosts() -> None:
    target = Target(refuse_preempt=True)
    undo = UndoStack()
    result, a, b = _fence(target, undo)
    assert len(result.problems) == 1
    assert result.problems[0].startswith(
        "vnode2 preempts vnode1 and aborts its commands, vnode1's writes in flight: `sg_persist --out"
    )
    assert "PR out: command failed" in result.problems[0]
    assert target.holder == "vnode1"
    assert undo.unwind() == []
    assert target.keys == {} and target.holder is None
    assert not [argv for argv in a.commands + b.commands if "--clear" in argv]  # never a CLEAR
    assert (
        "sg_persist",
        "--out",
        "--no-inquiry",
        "--register",
        f"--param-rk={K1:#x}",
        "--param-sark=0x0",
        "/dev/sdb",
    ) in a.commands


def test_a_key_that_stays_after_the_clean_up_fails_the_case() -> None:
    target = Target(refuse_preempt=True, stuck_key="vnode1")
    undo = UndoStack()
    _fence(target, undo)
    (left,) = undo.unwind()
    assert left.startswith("unregister our reservation keys on ram0") and f"key {K1:#x} is still registered" in left


class Ledger:
    def __init__(self, target: Target) -> None:
        self.target, self.events = target, []

    def add(self, host: Host, device: str, key: int) -> None:
        assert key not in self.target.keys.values(), "recorded after it was sent"
        self.events.append(("add", host.name, key))

    def drop(self, host: Host, device: str, key: int) -> None:
        assert key not in self.target.keys.values(), "dropped while the target still lists it"
        self.events.append(("drop", host.name, key))


def test_each_key_is_recorded_before_it_is_sent_and_dropped_once_gone() -> None:
    target = Target()
    ledger = Ledger(target)
    result, _, _ = _fence(target, ledger=ledger)
    assert result.problems == []
    first = reservation_key(2, RUN)
    assert ledger.events == [
        ("add", "vnode1", K1), ("add", "vnode2", first), ("add", "vnode2", K2), ("drop", "vnode2", first),
        ("drop", "vnode1", K1), ("drop", "vnode2", K2),
    ]  # fmt: skip


def test_the_nvme_commands_name_the_namespace_and_keys() -> None:
    host = ScriptedHost("vnode1", lambda argv: (DATA / "nvme-resv-report-eds-spdk-23.01-held.json").read_text())
    nvme = NvmeReservations(nsid=1)
    nvme.register(host, "/dev/nvme1n1", KA)
    nvme.preempt(host, "/dev/nvme1n1", KB, KA, nvme.fencing_type("/dev/nvme1n1")[0])
    nvme.clear(host, "/dev/nvme1n1", KB)
    assert nvme.report(host, "/dev/nvme1n1").holder == 0x666162716169EE01
    nvme.register_ignore(host, "/dev/nvme1n1", KB)
    nvme.replace(host, "/dev/nvme1n1", KB, KA)
    nvme.unregister(host, "/dev/nvme1n1", KA)
    nvme.release(host, "/dev/nvme1n1", KA, 1)
    nvme.preempt(host, "/dev/nvme1n1", KB, KA, 1, abort=True)
    assert host.commands[0] == ("nvme", "resv-register", "/dev/nvme1n1", "--namespace-id=1", f"--nrkey={KA:#x}",
                                "--rrega=0")  # fmt: skip
    assert host.commands[1][-4:] == (f"--crkey={KB:#x}", f"--prkey={KA:#x}", "--rtype=1", "--racqa=1")
    assert host.commands[2][-2:] == ("--rtype=1", "--rrela=1")
    assert host.commands[3][-2:] == ("--eds", "--output-format=json")
    assert host.commands[4][-3:] == (f"--nrkey={KB:#x}", "--rrega=0", "--iekey")
    assert host.commands[5][-3:] == (f"--crkey={KB:#x}", f"--nrkey={KA:#x}", "--rrega=2")
    assert host.commands[6][-2:] == (f"--crkey={KA:#x}", "--rrega=1")
    assert host.commands[7][-3:] == (f"--crkey={KA:#x}", "--rtype=1", "--rrela=0")
    assert host.commands[8][-1] == "--racqa=2"


def test_real_sg_persist_output_from_lio_in_the_virtual_lab_parses() -> None:
    # Recorded by tests/vlab/test_integrity_vlab.py (LIO over iSCSI, sg3-utils 1.46 in the bookworm guest) after
    # vnode2 preempted vnode1: one key left ("1 registered reservation key follows", singular), vnode2's hold.
    assert parse_sg_read_keys((DATA / "sg_persist-read-keys-one.txt").read_text()) == (3, (KB,))
    held = parse_sg_read_reservation((DATA / "sg_persist-read-reservation-held.txt").read_text())
    assert held == (3, KB, "Write Exclusive")


def test_a_dm_multipath_map_is_reserved_with_mpathpersist_whose_per_path_keys_read_once() -> None:
    """sg_persist on a map registers the one path it goes down; mpathpersist registers every path, and lists each
    key once per path (recorded on vnode1, see the data's README)."""
    assert scsi_argv("/dev/mapper/3600140", "--in", "--read-keys") == [
        "mpathpersist", "--in", "--read-keys", "/dev/mapper/3600140"
    ]  # fmt: skip
    assert scsi_argv("/dev/sdc", "--in", "--read-keys")[:3] == ["sg_persist", "--in", "--no-inquiry"]
    assert parse_sg_read_keys((DATA / "mpathpersist-read-keys-two.txt").read_text()) == (4, (0x111, 0x222))
    assert parse_sg_read_keys((DATA / "mpathpersist-read-keys-none.txt").read_text()) == (5, ())
    held = parse_sg_read_reservation((DATA / "mpathpersist-read-reservation-held.txt").read_text())
    assert held == (4, 0x111, "Write Exclusive")
    assert parse_sg_read_reservation((DATA / "mpathpersist-read-reservation-none.txt").read_text()) == (5, None, "")


MAP = SharedDevice("ram0", "iqn.x", 0, 512 << 20, {"vnode1": "/dev/mapper/3600140a", "vnode2": "/dev/mapper/3600140a"})


def test_on_a_multipath_map_the_fence_is_registrants_only_and_the_preempt_is_what_fences() -> None:
    """A map is a nexus per path; Write Exclusive would refuse the holder's own writes down its other path (CI of
    5962dc0, iser-lio, two LIO TPGs), so a map is reserved registrants only: B, registered, writes while A holds;
    after B's preempt A's write is refused."""
    target = Target()
    undo = UndoStack()
    a, b = target.host("vnode1"), target.host("vnode2")
    result = fencing(ScsiReservations(), a, b, MAP, undo)
    assert result.problems == []
    names = [c.name for c in result.checks]
    assert any(
        n.startswith("after vnode1's reserve:") and n.endswith("holds Write Exclusive, registrants only") for n in names
    )
    assert names.count("vnode2 writes /dev/mapper/3600140a") == 2
    assert "vnode1's write to /dev/mapper/3600140a is refused" in names
    reserve = next(argv for argv in a.commands if "--reserve" in argv)
    assert reserve[0] == "mpathpersist" and "--prout-type=5" in reserve
    # The unregistered host's reserve goes down one path device of its map, where the target answers it.
    probe = next(argv for argv in b.commands if "--reserve" in argv)
    assert probe[0] == "sg_persist" and probe[-1] == "/dev/sdc"
    undo.unwind()
    assert target.keys == {} and target.holder is None


def test_on_a_map_a_preempted_host_that_still_writes_fails_the_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reservations, "WRITERS_FENCED_S", 0.0)
    target = Target(broken="vnode1")
    result = fencing(ScsiReservations(), target.host("vnode1"), target.host("vnode2"), MAP, UndoStack())
    assert result.problems == [
        "vnode1's writes in flight at the fence: acknowledged ones on the device, refused ones not: "
        + "; ".join(f"vnode1: writer {w}'s writes all succeeded (2): it was never fenced" for w in range(4)),
        "vnode1's write to /dev/mapper/3600140a is refused: the write succeeded: the reservation did not fence this "
        "initiator",
    ]


def test_a_refused_write_of_the_fenced_host_that_landed_fails_the_case() -> None:
    result, _, _ = _fence(Target(late=True))
    assert [p for p in result.problems if "a write landed after the fence" in p], result.problems


def test_only_a_reservation_conflict_counts_as_the_target_refusing() -> None:
    def result(argv0: str, code: int, err: str = "") -> CommandResult:
        return CommandResult("vnode2", (argv0, "--out"), code, "", err)

    assert is_conflict(result("sg_persist", 24)) and not is_conflict(result("sg_persist", 1))
    assert is_conflict(result("mpathpersist", 11)) and not is_conflict(result("mpathpersist", 1, "syntax error"))
    # nvme-cli 2.x's words for NVMe status 0x83 (nvme_status_to_string)
    assert is_conflict(result("nvme", 131, "NVMe status: Reservation Conflict: The command was aborted due to a "
                              "conflict with a reservation held on the accessed namespace(0x83)"))  # fmt: skip
    assert not is_conflict(result("nvme", 127, "sh: 1: nvme: not found"))


def test_an_unregistered_reserve_that_fails_for_another_reason_stops_the_case() -> None:
    class Missing(Target):
        def answer(self, who: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
            if "--reserve" in argv and who not in self.keys:
                return 127, "", "sh: 1: sg_persist: not found\n"
            return super().answer(who, argv)

    result, _, _ = _fence(Missing())
    (problem,) = result.problems
    assert problem.startswith("vnode2, never registered, is refused a reservation: the reserve failed, but not with")
    assert "install sg3-utils on the initiator" in problem


def test_a_unit_attention_is_reported_once_and_the_command_sent_again() -> None:
    """SCST and tgt report the other host's RELEASE or PREEMPT to this nexus as a UNIT ATTENTION on its next command
    (sg_persist exit 6, 2026-12-07); the report clears it, so the command is sent once more, not given up."""

    class Attention(Target):
        def __init__(self) -> None:
            super().__init__()
            self.pending = {"vnode1", "vnode2"}

        def answer(self, who: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
            if argv[0] == "sg_persist" and "--in" in argv and who in self.pending:
                self.pending.discard(who)
                return 6, "", "sg_persist failed: Unit attention\n"
            return super().answer(who, argv)

    result, a, _ = _fence(Attention())
    assert result.problems == []
    assert a.commands.count(("sg_persist", "--in", "--no-inquiry", "--read-keys", "/dev/sdb")) >= 2


def test_a_target_without_preempt_and_abort_is_fenced_with_a_preempt_and_says_so() -> None:
    class NoAbort(Target):
        def answer(self, who: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
            if "--preempt-abort" in argv:
                return 5, "", "persistent reserve out: Illegal request, Invalid field in cdb\n"
            return super().answer(who, argv)

    result, _, b = _fence(NoAbort())
    assert result.problems == []
    (said,) = [c for c in result.checks if c.name.startswith("vnode2 preempts vnode1 and aborts")]
    assert said.verdict == "passed" and said.detail.startswith("the target does not implement preempt-and-abort")
    assert any("--preempt" in argv for argv in b.commands)


def test_a_replace_that_leaves_the_generation_fails_where_judged_and_is_shown_where_not() -> None:
    """SPDK 23.01 leaves GEN on a key replace: SCSI (SPC-4) judges it, NVMe's driver shows it (REPLACE_ADVANCES)."""

    class StillOnReplace(Target):
        def answer(self, who: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
            replacing = "--register" in argv and who in self.keys and not argv[-2].endswith("=0x0")
            before = self.generation
            answer = super().answer(who, argv)
            if replacing and "--param-rk" in " ".join(argv):
                self.generation = before
            return answer

    result, _, _ = _fence(StillOnReplace())
    assert [p for p in result.problems if p.startswith("after vnode2's replace: ")], result.problems

    class ShownOnly(ScsiReservations):
        REPLACE_ADVANCES = None

    target = StillOnReplace()
    result = fencing(ShownOnly(), target.host("vnode1"), target.host("vnode2"), DEVICE, UndoStack(), run=RUN)
    assert result.problems == []
    (shown,) = [c for c in result.checks if c.name.startswith("after vnode2's replace: ")]
    assert shown.detail.endswith("(the generation is not judged here)")
    assert NvmeReservations.REPLACE_ADVANCES is None and ScsiReservations.REPLACE_ADVANCES is True


def test_lio_refusing_an_unregistered_reserve_with_not_ready_is_a_refusal_said_as_it_was() -> None:
    """LIO on 6.1 answered the unregistered host's RESERVE with NOT READY (sg_persist exit 2), logging "Unable to
    locate PR_REGISTERED *pr_reg for RESERVE" (vstor, 2026-12-07): refused, and the detail says it was not a
    conflict; the report after it must still show no holder."""

    class Lio(Target):
        def answer(self, who: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
            if "--reserve" in argv and who not in self.keys:
                return 2, "", "sg_persist failed: Device not ready\n"
            return super().answer(who, argv)

    result, _, _ = _fence(Lio())
    assert result.problems == []
    (said,) = [c for c in result.checks if c.name == "vnode2, never registered, is refused a reservation"]
    assert said.detail.startswith("refused, with NOT READY rather than SPC-4's RESERVATION CONFLICT")


def test_a_preempted_key_multipathd_still_holds_for_the_map_is_forgotten_and_a_foreign_one_is_not() -> None:
    """mpathpersist refuses a REGISTER whose key is not multipathd's for the map: the host preempted in an earlier
    case kept its old key there (LIO over iSER after iSCSI, 2026-12-07). Ours is unset; a cluster's stays."""

    class Multipathd(Target):
        def __init__(self, prkeys: dict[str, int]) -> None:
            super().__init__()
            self.prkeys = prkeys

        def answer(self, who: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
            if argv[:2] == ("multipathd", "getprkey"):
                return 0, f"{self.prkeys[who]:#x}\n" if who in self.prkeys else "none\n", ""
            if argv[:2] == ("multipathd", "unsetprkey"):
                self.prkeys.pop(who, None)
                return 0, "ok\n", ""
            return super().answer(who, argv)

    target = Multipathd({"vnode1": reservation_key(0, 0x079E)})
    result, a, _ = _fence(target, device=MAP)
    assert result.problems == [] and ("multipathd", "unsetprkey", "map", "3600140a") in a.commands
    foreign = Multipathd({"vnode1": 0x111})
    _, a, _ = _fence(foreign, device=MAP)
    assert not [argv for argv in a.commands if argv[:2] == ("multipathd", "unsetprkey")]
