"""Persistent reservations: the parsers (on samples written from the tools' source, see
tests/data/reservations/README.md), the capability fact, and the fencing sequence against a target that keeps
reservation state as SPC-3 and NVMe say, including the release after a failure."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import ScriptedHost

from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.integrity.checks import SharedDevice
from pytest_fabricqa.integrity.reservations import (
    CONFLICT,
    SCSI_TYPES,
    NvmeReservations,
    ReservationState,
    ScsiReservations,
    fencing,
    parse_nvme_resv_report,
    parse_sg_read_keys,
    parse_sg_read_reservation,
    reservation_case,
    reservation_key,
    scsi_argv,
    unsupported,
)
from pytest_fabricqa.transport.base import CommandError, CommandResult, Host

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
    state = parse_nvme_resv_report((DATA / "nvme-resv-report-eds-held.FROM-SOURCE.json").read_text())
    assert state == ReservationState(3, (KA, KB), KA, "Write Exclusive")
    assert parse_nvme_resv_report((DATA / "nvme-resv-report-eds-none.FROM-SOURCE.json").read_text()) == (
        ReservationState(0, ())
    )
    with pytest.raises(ValueError, match="not JSON"):
        parse_nvme_resv_report("NVMe status: Host Identifier Inconsistent Format(0x18)")


def test_the_capability_is_one_fact_and_a_kind_without_it_says_so() -> None:
    assert unsupported("lio") is None
    assert (unsupported("nvmet") or "").startswith("not supported by nvmet: Linux nvmet implements NVMe reservations")
    assert (unsupported("netapp") or "").startswith("not supported by netapp")


class Target:
    """Reservation state as a target keeps it (registrations, holder, type 1 or 5), fed by sg_persist,
    mpathpersist and dd argv from two hosts; ``broken`` lets one host's write through whatever the reservation
    says (a target that does not fence it)."""

    def __init__(self, *, broken: str = "", refuse_preempt: bool = False) -> None:
        self.keys: dict[str, int] = {}
        self.holder: str | None = None
        self.type = 0
        self.broken = broken
        self.refuse_preempt = refuse_preempt
        self.generation = 0

    def host(self, name: str) -> Host:
        return ScriptedHost(name, lambda argv: self.answer(name, argv))

    def answer(self, who: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
        if argv[0] == "dd":
            if argv[1].startswith("if=/dev/zero"):  # a write
                registrant = self.type == 5 and who in self.keys
                allowed = self.holder in (None, who) or registrant or who == self.broken
                return (0, "", "") if allowed else (1, "", f"dd: error writing '{argv[2][3:]}': {CONFLICT}\n")
            return 0, "", ""
        args = dict(a.split("=", 1) for a in argv if a.startswith(("--param", "--prout")))
        if "--register" in argv:
            self.keys[who] = int(args["--param-sark"], 16)
        elif "--reserve" in argv:
            self.holder, self.type = who, int(args["--prout-type"])
        elif "--preempt" in argv:
            if self.refuse_preempt:
                return 24, "", "PR out: command failed\n"
            victim = int(args["--param-sark"], 16)
            self.keys = {h: k for h, k in self.keys.items() if k != victim}
            self.holder, self.type = who, int(args["--prout-type"])
        elif "--clear" in argv:
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
            key = self.keys[self.holder]
            return (
                0,
                f"  PR generation={self.generation:#x}, Reservation follows:\n    Key={key:#x}\n    scope: LU_SCOPE,  "
                f"type: {SCSI_TYPES[self.type]}\n",
                "",
            )
        self.generation += 1
        return 0, "", ""


DEVICE = SharedDevice("ram0", "iqn.x", 0, 512 << 20, {"vnode1": "/dev/sdb", "vnode2": "/dev/sdc"})


def test_two_initiators_fence_each_other_and_everything_is_released() -> None:
    target = Target()
    undo = UndoStack()
    result = fencing(ScsiReservations(), target.host("vnode1"), target.host("vnode2"), DEVICE, undo)
    assert result.problems == []
    names = [c.name for c in result.checks]
    assert "vnode2's write to /dev/sdc is refused" in names and "vnode1's write to /dev/sdb is refused" in names
    assert "vnode2 holds Write Exclusive, vnode1's key gone" in names
    assert target.holder == "vnode2"
    assert undo.unwind() == [] and target.keys == {} and target.holder is None
    case = reservation_case("n", "iscsi-reservations", "iscsi", result)
    assert case.suite == "integrity" and case.integrity is None and all(c.verdict == "passed" for c in case.checks)


def test_a_target_that_does_not_fence_fails_the_case() -> None:
    target = Target(broken="vnode2")
    result = fencing(ScsiReservations(), target.host("vnode1"), target.host("vnode2"), DEVICE, UndoStack())
    assert result.problems == [
        "vnode2's write to /dev/sdc is refused: the write succeeded: the reservation did not fence this initiator"
    ]


def test_a_failed_step_stops_the_sequence_and_the_undo_still_releases() -> None:
    target = Target(refuse_preempt=True)
    undo = UndoStack()
    result = fencing(ScsiReservations(), target.host("vnode1"), target.host("vnode2"), DEVICE, undo)
    assert len(result.problems) == 1 and result.problems[0].startswith("vnode2 preempts vnode1: `sg_persist --out")
    assert "PR out: command failed" in result.problems[0]
    assert target.holder == "vnode1"
    undo.unwind()
    assert target.keys == {} and target.holder is None


def test_the_nvme_commands_name_the_namespace_and_keys() -> None:
    host = ScriptedHost("vnode1", lambda argv: (DATA / "nvme-resv-report-eds-held.FROM-SOURCE.json").read_text())
    nvme = NvmeReservations(nsid=1)
    nvme.register(host, "/dev/nvme1n1", KA)
    nvme.preempt(host, "/dev/nvme1n1", KB, KA, nvme.fencing_type("/dev/nvme1n1")[0])
    nvme.clear(host, "/dev/nvme1n1", KB)
    assert nvme.report(host, "/dev/nvme1n1").holder == KA
    assert host.commands[0] == ("nvme", "resv-register", "/dev/nvme1n1", "--namespace-id=1", f"--nrkey={KA:#x}",
                                "--rrega=0")  # fmt: skip
    assert host.commands[1][-4:] == (f"--crkey={KB:#x}", f"--prkey={KA:#x}", "--rtype=1", "--racqa=1")
    assert host.commands[2][-2:] == ("--rtype=1", "--rrela=1")
    assert host.commands[3][-2:] == ("--eds", "--output-format=json")


def test_release_tries_each_key_until_the_target_takes_one() -> None:
    calls: list[str] = []

    class Driver(ScsiReservations):
        def clear(self, host: Host, path: str, key: int) -> None:
            calls.append(host.name)
            if host.name == "vnode1":
                raise CommandError(CommandResult("vnode1", ("sg_persist",), 24, "", "reservation conflict"))

    from pytest_fabricqa.integrity.reservations import release

    release(Driver(), [(ScriptedHost("vnode1"), "/dev/sdb", KA), (ScriptedHost("vnode2"), "/dev/sdc", KB)])
    assert calls == ["vnode1", "vnode2"]


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
    assert "vnode1 holds Write Exclusive, registrants only" in names
    assert names.count("vnode2 writes /dev/mapper/3600140a") == 2
    assert "vnode1's write to /dev/mapper/3600140a is refused" in names
    reserve = next(argv for argv in a.commands if "--reserve" in argv)
    assert reserve[0] == "mpathpersist" and "--prout-type=5" in reserve
    undo.unwind()
    assert target.keys == {} and target.holder is None


def test_on_a_map_a_preempted_host_that_still_writes_fails_the_case() -> None:
    target = Target(broken="vnode1")
    result = fencing(ScsiReservations(), target.host("vnode1"), target.host("vnode2"), MAP, UndoStack())
    assert result.problems == [
        "vnode1's write to /dev/mapper/3600140a is refused: the write succeeded: the reservation did not fence this "
        "initiator"
    ]
