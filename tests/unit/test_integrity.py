"""Integrity checks: fio verify jobs, fio's verify failures read from recorded real output, the corruption detector
firing on it, the scenarios' bookkeeping, and the results model, JUnit and HTML carrying the figures."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from fakes import ScriptedHost

from pytest_fabricqa.fio import verify
from pytest_fabricqa.fio.verify import Region, read_verify, verify_argv
from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabError
from pytest_fabricqa.report.gather import flat_properties
from pytest_fabricqa.report.html import integrity_summary
from pytest_fabricqa.report.model import case_from_dict, case_to_dict
from pytest_fabricqa.transport.base import CommandResult
from pytest_fabricqa.transport.local import LocalHost

LABS = Path(__file__).resolve().parents[2] / "labs"

DATA = Path(__file__).parent.parent / "data" / "fio" / "verify"
FILE = "/tmp/fqa-verify/dev.img"
RECORDED = Region(1 << 20, 2 << 20, 8192)  # what record.sh wrote


def recorded(name: str, host: str = "vnode2") -> CommandResult:
    return CommandResult(
        host,
        ("fio",),
        int((DATA / f"{name}.rc").read_text()),
        (DATA / f"{name}.out").read_text(),
        (DATA / f"{name}.stderr").read_text(),
    )


# -- job building -------------------------------------------------------------------------------------------


def test_the_write_job_writes_a_verifiable_pattern_and_reads_it_back_while_writing() -> None:
    argv = verify_argv("/dev/sdb", [Region(128 << 20, 8 << 20, 8192)], write=True)
    assert "--verify=crc32c" in argv and "--do_verify=1" in argv
    assert "--direct=1" in argv and "--rw=write" in argv and "--continue_on_error=verify" in argv
    assert "--verify_state_save=0" in argv
    assert argv[-6:] == ["--name=region0", "--filename=/dev/sdb", f"--offset={128 << 20}", f"--size={8 << 20}",
                         "--bs=8192", "--verify_backlog=64"]  # fmt: skip
    # A region of few blocks reads back every quarter of it while writing, one block at the least.
    assert verify.backlog_for(Region(0, 8 << 20, 1 << 20)) == 2 and verify.backlog_for(Region(0, 8192, 8192)) == 1


def test_a_verify_only_job_never_carries_the_backlog_that_made_fio_miss_every_mismatch() -> None:
    """fio 3.33 with verify_only and verify_backlog read a damaged region and found nothing (recorded)."""
    blind = read_verify(recorded("verify-only-backlog-misses-8k"), FILE, [RECORDED])
    # fio read the whole region and named nothing: it checked nothing, so the run is no pass (issue 30, item 2)
    assert blind.mismatches == () and blind.result is not None and blind.result.read.io_bytes == RECORDED.size
    assert blind.bytes_verified == 0 and not blind.ok
    outcome = ig.Outcome()
    outcome.add(blind)
    assert outcome.problems == [
        f"vnode2: fio checked 0 of the {RECORDED.size:,} bytes written to {FILE} (it read {RECORDED.size:,})"
    ]
    argv = verify_argv("/dev/sdb", [Region(0, 1 << 20, 4096), Region(1 << 20, 1 << 20, 4096)], write=False)
    assert "--verify_only=1" in argv
    assert not any(a.startswith(("--verify_backlog", "--do_verify")) for a in argv)
    assert argv.count("--filename=/dev/sdb") == 2  # one job per region


def test_a_verify_that_outlasts_its_bound_is_stopped_on_the_host_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run for real on this machine with a "fio" that never ends: the host's own ``timeout`` stops it at the bound,
    long before the transport would give up on the command (over SSH, that would leave fio running)."""
    fake = tmp_path / "fio"
    fake.write_text(f"#!/bin/sh\necho $$ > {tmp_path}/pid\nexec sleep 120\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(verify, "BOUND_S", 1)
    began = time.monotonic()
    run = verify.run_verify(LocalHost("vnode1"), "/dev/null", [Region(0, 1 << 20, 4096)], write=False)
    assert time.monotonic() - began < 60
    assert not run.ok
    assert run.problems[0] == "vnode1: fio on /dev/null was stopped after 1 s on the host (fio.verify.BOUND_S)"
    pid = int((tmp_path / "pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "sleep" not in Path(f"/proc/{pid}/cmdline").read_text()


def test_a_region_is_whole_blocks_and_names_the_block_a_byte_falls_in() -> None:
    region = Region(1 << 20, 2 << 20, 8192)
    assert region.block_at((1 << 20) + 5 * 8192 + 4096) == 1089536
    with pytest.raises(ValueError, match="whole blocks"):
        Region(1000, 8192, 8192)
    with pytest.raises(ValueError, match="outside"):
        region.block_at(0)


# -- fio's verify output (recorded) ---------------------------------------------------------------------------


def test_a_clean_write_and_a_clean_verify_read_back_every_byte() -> None:
    wrote = read_verify(recorded("write-verify-8k", "vnode1"), FILE, [RECORDED])
    assert wrote.ok and wrote.bytes_written == 2 << 20 and wrote.bytes_verified == 2 << 20
    checked = read_verify(recorded("verify-only-clean-8k"), FILE, [RECORDED])
    assert checked.ok and checked.bytes_written == 0 and checked.bytes_verified == 2 << 20


def test_every_changed_block_is_named_with_offset_and_what_was_expected() -> None:
    run = read_verify(recorded("verify-only-corrupt-8k"), FILE, [RECORDED])
    assert not run.ok and run.problems == () and run.fio_errors == 2  # exit code 0: only the messages tell
    data, header = run.mismatches
    assert (data.host, data.device, data.offset, data.length) == ("vnode2", FILE, 1089536, 8192)
    assert (
        data.what == "crc32c: verify failed" and data.expected.startswith("CRC ") and data.received.startswith("CRC ")
    )
    assert (header.offset, header.what, header.expected, header.received) == (
        1122304, "verify: bad magic header", "acca", "0"
    )  # fmt: skip
    text = ig.describe(data, "vnode1")
    assert text.startswith("vnode2: /tmp/fqa-verify/dev.img byte offset 1089536 (8192-byte block): crc32c")
    assert "expected CRC" in text and text.endswith("(written by vnode1)")


def test_a_verify_that_stopped_early_is_a_problem_besides_its_mismatches() -> None:
    run = read_verify(recorded("verify-only-corrupt-8k-stops"), FILE, [RECORDED])
    assert len(run.mismatches) == 2
    assert any("exited 1" in p for p in run.problems)
    outcome = ig.Outcome()
    outcome.add(run)
    assert not any("read back" in p for p in outcome.problems)  # fio failing says it first
    assert len([p for p in outcome.problems if "byte offset" in p]) == 2


def test_output_without_a_report_is_a_problem_not_a_crash() -> None:
    run = read_verify(CommandResult("vnode1", ("fio",), 1, "", "fio: no such file\n"), "/dev/sdz", [RECORDED])
    assert not run.ok and "without a report" in run.problems[0] and "no such file" in run.problems[0]


# -- the corruption detector on real fio output ----------------------------------------------------------------


class Lab:
    """vnode1 writes, vstor's backing device is changed, vnode2 verifies: answers from the recording."""

    def __init__(self, verify: str) -> None:
        self.vnode1 = ScriptedHost("vnode1", lambda argv: self.fio("write-verify-8k", argv))
        self.vnode2 = ScriptedHost("vnode2", lambda argv: self.fio(verify, argv) if "fio" in argv[:4] else "")
        self.vstor = ScriptedHost("vstor", lambda argv: "")

    def fio(self, name: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
        result = recorded(name)
        return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def recorded_layout(monkeypatch: pytest.MonkeyPatch) -> ig.SharedDevice:
    """The integrity area where record.sh wrote: region 0 is 2 MiB at 1 MiB."""
    monkeypatch.setattr(ig, "BASE_OFFSET", 1 << 20)
    monkeypatch.setattr(ig, "REGION_BYTES", 2 << 20)
    return ig.SharedDevice("ram0", "nqn.x", 1, 512 << 20, {"vnode1": FILE, "vnode2": FILE})


def test_the_detector_fires_where_the_bytes_were_changed(recorded_layout: ig.SharedDevice) -> None:
    lab = Lab("verify-only-corrupt-8k")
    outcome, found = ig.corruption_detected(lab.vnode1, lab.vnode2, lab.vstor, recorded_layout, "/dev/ram0")
    assert found is not None and found.offset == 1089536 and found.host == "vnode2"
    assert outcome.expected == [found]
    # zeroed on the target: the second half of block 5, with direct I/O, then every cache dropped
    (corrupt,) = lab.vstor.commands
    assert corrupt[-3:] == ("/dev/ram0", "4096", str(((1 << 20) + 5 * 8192 + 4096) // 4096))
    assert "oflag=direct" in corrupt[2] and "drop_caches" in corrupt[2]
    # the recording changed a second block (9's header): that one is not expected, and says so
    assert len(outcome.problems) == 1 and "byte offset 1122304" in outcome.problems[0]
    done = outcome.integrity()
    # verified twice: read back while writing, then by the reader
    assert (done.expected_mismatches, len(done.mismatches), done.bytes_verified) == (1, 2, 4 << 20)


def test_the_detector_fails_when_the_verify_finds_nothing(recorded_layout: ig.SharedDevice) -> None:
    lab = Lab("verify-only-clean-8k")
    outcome, found = ig.corruption_detected(lab.vnode1, lab.vnode2, lab.vstor, recorded_layout, "/dev/ram0")
    assert found is None
    assert outcome.problems[0].startswith("vnode2: the verify of /tmp/fqa-verify/dev.img missed the 4096 bytes")
    assert "byte offset 1093632 of vstor:/dev/ram0 (the 8192-byte block at 1089536)" in outcome.problems[0]


def test_the_corruption_is_aligned_for_direct_io() -> None:
    with pytest.raises(ValueError, match="aligned"):
        ig.corrupt_argv("/dev/ram0", 1000)


# -- the scenarios' bookkeeping --------------------------------------------------------------------------------


def _device(host: str, path: str, *, writable: bool = True, address: int = 1) -> FabricDevice:
    return FabricDevice(host, path, "ram0", "nqn.x", address, 512 << 20, 512, writable, False)


def test_shared_devices_group_what_every_initiator_sees() -> None:
    found = ig.shared_devices(
        [_device("vnode1", "/dev/nvme1n1"), _device("vnode2", "/dev/nvme2n1"),
         _device("vnode1", "/dev/nvme1n2", writable=False, address=2)]
    )  # fmt: skip
    assert found == [
        ig.SharedDevice("ram0", "nqn.x", 1, 512 << 20, {"vnode1": "/dev/nvme1n1", "vnode2": "/dev/nvme2n1"})
    ]
    assert ig.room_problem(found[0], 3) is None
    small = ig.SharedDevice("ram0", "nqn.x", 1, 64 << 20, {})
    assert "is 67,108,864 bytes" in (ig.room_problem(small, 1) or "")


def test_cross_verify_reads_each_region_on_every_other_initiator() -> None:
    def clean(argv: tuple[str, ...]) -> tuple[int, str, str]:
        name = "write-verify-8k" if "--do_verify=1" in argv else "verify-only-clean-8k"
        result = recorded(name)
        return result.exit_code, result.stdout, result.stderr

    hosts = [ScriptedHost("vnode1", clean), ScriptedHost("vnode2", clean)]
    device = ig.SharedDevice("ram0", "nqn.x", 1, 512 << 20, {"vnode1": "/dev/sdb", "vnode2": "/dev/sdc"})
    outcome = ig.cross_verify(hosts, device, 8192)

    def offset(argv: tuple[str, ...]) -> str:
        return next(a for a in argv if a.startswith("--offset="))

    kinds = [(h.name, "write" if "--do_verify=1" in c else "verify", offset(c)) for h in hosts for c in h.commands]
    first, second = f"--offset={ig.BASE_OFFSET}", f"--offset={ig.BASE_OFFSET + ig.stride()}"
    assert sorted(kinds) == sorted(
        [("vnode1", "write", first), ("vnode2", "verify", first), ("vnode2", "write", second),
         ("vnode1", "verify", second)]
    )  # fmt: skip
    assert outcome.writers == {ig.region(0, 8192): "vnode1", ig.region(1, 8192): "vnode2"}
    # the recorded runs are 2 MiB regions, these 4 MiB: the shortfall is named
    assert any("fio checked 2,097,152 of the 4,194,304 bytes" in p for p in outcome.problems)


# -- results.json, JUnit, HTML -----------------------------------------------------------------------------------


def test_an_integrity_case_round_trips_and_shows_in_junit_and_html(recorded_layout: ig.SharedDevice) -> None:
    lab = Lab("verify-only-corrupt-8k")
    outcome, _ = ig.corruption_detected(lab.vnode1, lab.vnode2, lab.vstor, recorded_layout, "/dev/ram0")
    case = ig.integrity_case("suites/test_integrity.py::t[iscsi]", "iscsi-integrity-corruption", "iscsi", outcome)
    assert case_from_dict(case_to_dict(case)) == case
    assert "integrity" in case_to_dict(case) and case.suite == "integrity"
    props = dict(flat_properties(case))
    assert props["integrity.bytes_verified"] == 4 << 20 and props["integrity.mismatches"] == 2
    assert props["integrity.expected_mismatches"] == 1
    (write,) = outcome.generations.written.values()
    assert case.integrity is not None and len(case.integrity.writes) == 1
    assert props[f"integrity.generation.{write.host}.{write.region_offset}.1"] == f"0x{write.generation:08x}"
    assert integrity_summary(case.integrity) == (
        "2 MiB written, 4 MiB verified, 1 mismatch; 1 changed block(s) detected as expected; generations "
        f"0x{write.generation:08x} ({write.host}'s write 1 at byte {write.region_offset:,})"
    )


def test_a_case_over_every_device_reports_every_devices_writes_with_their_generations() -> None:
    first, second = ig.Outcome(), ig.Outcome()
    one = first.new_write("vnode1", ig.region(0, 8192))
    two = second.new_write("vnode2", ig.region(0, 8192))
    third = ig.Outcome().merge(first).merge(second)
    writes = [(w.host, w.generation) for w in third.integrity().writes]
    assert writes == [("vnode1", one), ("vnode2", two)]


def test_the_labs_region_size_sets_every_checks_region_and_the_room_it_needs(tmp_path: Path) -> None:
    """integrity.region_mb: the regions of every check (and the room they need) follow the lab's size."""
    text = (LABS / "vlab.yaml").read_text()
    assert load_lab(LABS / "vlab.yaml").integrity.region_bytes == 1 << 20  # the virtual lab's own choice
    (tmp_path / "lab.yaml").write_text(text.replace("integrity: {region_mb: 1}", "integrity: {region_mb: 8}"))
    size = load_lab(tmp_path / "lab.yaml").integrity.region_bytes
    assert size == 8 << 20
    assert ig.region(2, 4096, size) == Region(ig.BASE_OFFSET + 2 * size, size, 4096)
    assert ig.region(0, 4096).size == ig.REGION_BYTES == 4 << 20  # the default, when a lab says nothing
    device = ig.SharedDevice("ram0", "nqn.x", 1, ig.BASE_OFFSET + 3 * size, {"vnode1": "/dev/nvme0n1"})
    assert ig.room_problem(device, 3, size) is None
    assert "4 region(s) of 8 MiB" in (ig.room_problem(device, 4, size) or "")
    (tmp_path / "lab.yaml").write_text(text.replace("integrity: {region_mb: 1}", "integrity: {region_mb: 0}"))
    with pytest.raises(LabError, match=r"lab.yaml:\d+: integrity.region_mb: .*greater than or equal to 1"):
        load_lab(tmp_path / "lab.yaml")


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
@pytest.mark.parametrize("bs", sorted(ig.BLOCK_SIZES.values()))
def test_every_block_size_reads_blocks_back_while_the_rest_are_still_written(tmp_path: Path, bs: int) -> None:
    # Issue 30, item 3: the claim "each block read back while writing" is what runs. fio's own I/O log of the write
    # job, on a file with the real fio: reads of the region appear before its last write, at 4 KiB, 8 KiB and 1 MiB
    # alike -- with the virtual lab's 1 MiB regions, 1 MiB blocks were one block and nothing was read back early.
    disk, log = tmp_path / "disk.img", tmp_path / "io.log"
    written = ig.region(0, bs, 1 << 20)
    with disk.open("wb") as f:
        f.truncate(written.end)
    argv = verify_argv(str(disk), [written], write=True, generations=[0x1234ABCD])
    argv = [a for a in argv if a not in ("--ioengine=libaio", "--direct=1")] + [f"--write_iolog={log}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    # fio's iolog version 3: "<ms> <file> <action> <offset> <length>"
    ios = [line.split() for line in log.read_text().splitlines()]
    kinds = [w[2] for w in ios if len(w) >= 3 and w[1] == str(disk) and w[2] in ("read", "write")]
    last_write = len(kinds) - 1 - kinds[::-1].index("write")
    assert written.size // bs >= ig.MIN_BLOCKS
    assert kinds.count("write") == written.size // bs
    assert "read" in kinds[:last_write], kinds
    assert kinds.count("read") == written.size // bs  # every block read back once: while writing, or at the end
