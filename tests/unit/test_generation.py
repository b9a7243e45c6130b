"""Write generations (issue 30, item 1) on a file with the real fio: what fio's pattern writes, that its read-back
fails on a block of an earlier write (which crc32c's verify_only passes), and what :func:`classify` names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_fabricqa.fio import generation as gen

BS = 8192
SIZE = 16 * BS
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")


def fio(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["fio", "--name=g", f"--filename={path}", f"--size={SIZE}", f"--bs={BS}", "--rw=write", "--ioengine=psync",
         "--continue_on_error=verify", *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def write(path: Path, written: gen.Written) -> None:
    done = fio(path, "--verify=pattern", f"--verify_pattern={gen.pattern(written.generation)}", "--do_verify=0")
    assert done.returncode == 0, done.stderr


def failed_offsets(path: Path, written: gen.Written) -> list[int]:
    done = fio(path, "--verify=pattern", f"--verify_pattern={gen.pattern(written.generation)}", "--verify_only=1")
    text = done.stdout + done.stderr
    return [
        int(m)
        for m in re.findall(r"verify failed at file \S+ offset \d+, length \d+ \(requested block: offset=(\d+)", text)
    ]


def block(path: Path, offset: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read(BS)


def put(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)


def test_the_pattern_is_the_generation_then_the_block_offset_repeated() -> None:
    assert gen.pattern(0x12345678) == "0x12345678%o"
    # As fio 3.33 wrote 0x12345678%o at offset 8192 of a file (xxd): 1234 5678 0020 0000 0000 0000, again and again.
    assert gen.expected_block(0x12345678, 8192, 24) == bytes.fromhex("123456780020000000000000") * 2
    with pytest.raises(ValueError, match="32-bit"):
        gen.pattern(1 << 32)


def test_generations_are_unique_in_a_run_and_count_each_regions_writes() -> None:
    run = gen.Generations(run_tag=0x3A7F)
    first, other, second = run.new("vnode1", 0), run.new("vnode2", SIZE), run.new("vnode2", 0)
    assert len({first.generation, other.generation, second.generation}) == 3
    assert (first.number, other.number, second.number) == (1, 1, 2)
    assert first.generation >> 16 == 0x3A7F


@needs_fio
def test_fio_writes_what_expected_block_says(tmp_path: Path) -> None:
    path = tmp_path / "disk"
    written = gen.Generations().new("vnode1", 0)
    write(path, written)
    for offset in (0, BS, SIZE - BS):
        assert block(path, offset) == gen.expected_block(written.generation, offset, BS)
    assert failed_offsets(path, written) == []


def stale_behind(path: Path, offset: int, keep: int = BS) -> tuple[gen.Written, gen.Written, gen.Finding | None]:
    """vnode1 writes the region, vnode2 writes it again, then the first ``keep`` bytes of vnode1's block at
    ``offset`` are put back (what a target that lost the later write, or served a stale copy, returns); the
    later write's read-back must fail there alone. (earlier, later, what :func:`gen.classify` says of the block)."""
    run = gen.Generations()
    earlier, later = run.new("vnode1", 0), run.new("vnode2", 0)
    write(path, earlier)
    stale = block(path, offset)
    write(path, later)
    put(path, offset, stale[:keep])
    assert failed_offsets(path, later) == [offset]
    return earlier, later, gen.classify(block(path, offset), expected=later, offset=offset, written=run.written)


@needs_fio
def test_a_block_of_an_earlier_write_fails_the_read_back_and_is_named_a_lost_write(tmp_path: Path) -> None:
    earlier, later, found = stale_behind(tmp_path / "disk", 5 * BS)
    assert found is not None and found.kind == "earlier-write"
    assert found.text == (
        f"it holds vnode1's write 1 of the region at 0 (generation "
        f"0x{earlier.generation:08x}), not the later vnode2's write 2 of the region at 0 (generation "
        f"0x{later.generation:08x}): a lost write or a stale read"
    )


@needs_fio
def test_a_block_that_kept_one_page_of_the_later_write_is_named_a_torn_block_of_the_earlier_write(
    tmp_path: Path,
) -> None:
    # What LIO over iSCSI returned on the virtual lab when the earlier write's block was put back behind it: the
    # first 4 KiB page of the earlier write, the second of the later one (342 of 683 units held the earlier write).
    earlier, later, found = stale_behind(tmp_path / "disk", 3 * BS, keep=4096)
    assert found is not None and found.kind == "torn"
    assert found.text == (
        f"it holds vnode1's write 1 of the region at 0 (generation 0x{earlier.generation:08x}) in 342 of 683 "
        f"pattern units (bytes 0 to 4103 of the block) and the later vnode2's write 2 of the region at 0 "
        f"(generation 0x{later.generation:08x}) in the rest: a torn block, part of a lost write or a stale read"
    )


def test_a_torn_block_with_a_byte_of_neither_write_is_corrupted_data() -> None:
    run = gen.Generations()
    earlier, later = run.new("vnode1", 0), run.new("vnode2", 0)
    data = bytearray(
        gen.expected_block(earlier.generation, BS, 4096) + gen.expected_block(later.generation, BS, BS)[4096:]
    )
    data[5000] ^= 0x80
    found = gen.classify(bytes(data), expected=later, offset=BS, written=run.written)
    assert found is not None and found.kind == "corrupt"


@needs_fio
def test_a_block_written_to_another_offset_is_named_a_misdirected_write(tmp_path: Path) -> None:
    path = tmp_path / "disk"
    run = gen.Generations()
    written = run.new("vnode1", 0)
    write(path, written)
    put(path, 9 * BS, block(path, 3 * BS))
    assert failed_offsets(path, written) == [9 * BS]
    found = gen.classify(block(path, 9 * BS), expected=written, offset=9 * BS, written=run.written)
    assert found is not None and found.kind == "misdirected"
    assert f"holds the block written for offset {3 * BS} (vnode1's write 1" in found.text


@needs_fio
def test_a_flipped_bit_fails_the_read_back_and_is_named_with_where_it_is(tmp_path: Path) -> None:
    path = tmp_path / "disk"
    run = gen.Generations()
    written = run.new("vnode1", 0)
    write(path, written)
    data = bytearray(block(path, 2 * BS))
    data[100] ^= 0x04
    put(path, 2 * BS, bytes(data))
    assert failed_offsets(path, written) == [2 * BS]
    found = gen.classify(bytes(data), expected=written, offset=2 * BS, written=run.written)
    assert found is not None and found.kind == "corrupt"
    assert "in 1 bit(s) of 1 byte(s), the first at byte 100 of the block" in found.text


@needs_fio
def test_a_block_of_an_earlier_write_passes_fios_crc32c_verify_only_which_is_why_generations_exist(
    tmp_path: Path,
) -> None:
    # What the issue found, kept as a fact: crc32c checks a block against itself, and verify_only takes the seed
    # its header carries, so an earlier write's block (another randseed, other bytes) reads back clean.
    path = tmp_path / "disk"
    crc = ("--verify=crc32c",)
    assert fio(path, *crc, "--randseed=11", "--do_verify=0").returncode == 0
    stale = block(path, 5 * BS)
    assert fio(path, *crc, "--randseed=22", "--do_verify=0").returncode == 0
    assert block(path, 5 * BS) != stale
    put(path, 5 * BS, stale)
    done = fio(path, *crc, "--randseed=22", "--verify_only=1")
    assert "verify failed" not in done.stdout + done.stderr and "bad header" not in done.stdout + done.stderr


def test_a_block_of_a_generation_this_run_never_wrote_is_named_so() -> None:
    run = gen.Generations(run_tag=1)
    written = run.new("vnode1", 0)
    foreign = gen.expected_block(0xDEADBEEF, BS, BS)
    found = gen.classify(foreign, expected=written, offset=BS, written=run.written)
    assert found is not None and found.kind == "unknown-write"
    assert "generation 0xdeadbeef, which this run never wrote" in found.text
    assert gen.classify(gen.expected_block(written.generation, BS, BS), expected=written, offset=BS,
                        written=run.written) is None  # fmt: skip


@needs_fio
def test_the_integrity_check_names_a_lost_write_read_back_on_another_host(tmp_path: Path) -> None:
    # The check's own path on a file with the real fio (two local "initiators"): vnode1 writes its region, vnode2
    # writes it again, the target "loses" one block of vnode2's write (vnode1's block put back), and vnode1's read
    # back names the block, the write it holds and the one it should.
    from pytest_fabricqa.integrity import checks as ig
    from pytest_fabricqa.transport.local import LocalHost

    disk = tmp_path / "disk.img"
    with disk.open("wb") as f:
        f.truncate(ig.BASE_OFFSET + ig.REGION_BYTES)
    one, two = LocalHost("vnode1"), LocalHost("vnode2")
    device = ig.SharedDevice("ram0", "nqn.x", 1, disk.stat().st_size, {"vnode1": str(disk), "vnode2": str(disk)})
    written = ig.region(0, BS, 16 * BS)
    outcome = ig.Outcome()
    ig._write(outcome, one, device, [written])
    earlier = block(disk, written.offset + 3 * BS)
    ig._write(outcome, two, device, [written])
    assert outcome.problems == []
    put(disk, written.offset + 3 * BS, earlier)
    ig._verify_on(outcome, [one], device, [written])
    (problem,) = outcome.problems
    assert problem.startswith(f"vnode1: {disk} byte offset {written.offset + 3 * BS} (8192-byte block): pattern: ")
    assert "it holds vnode1's write 1 of the region" in problem and "not the later vnode2's write 2" in problem
    assert problem.endswith("(written by vnode2); it holds vnode1's write 1 of the region at "
                            f"{written.offset} (generation 0x{outcome.generations.written[min(outcome.generations.written)].generation:08x}), "
                            f"not the later vnode2's write 2 of the region at {written.offset} (generation "
                            f"0x{outcome.last[written].generation:08x}): a lost write or a stale read")  # fmt: skip


@needs_fio
def test_cross_verify_overwrites_each_region_on_the_next_host_and_its_first_writer_reads_the_new_data(
    tmp_path: Path,
) -> None:
    from pytest_fabricqa.integrity import checks as ig
    from pytest_fabricqa.transport.local import LocalHost

    disk = tmp_path / "disk.img"
    size = 16 * BS
    with disk.open("wb") as f:
        f.truncate(ig.BASE_OFFSET + 2 * ig.stride(size))
    hosts = [LocalHost("vnode1"), LocalHost("vnode2")]
    device = ig.SharedDevice("ram0", "nqn.x", 1, disk.stat().st_size, {"vnode1": str(disk), "vnode2": str(disk)})
    outcome = ig.cross_verify(hosts, device, BS, size)
    assert outcome.problems == []
    # Each region: its own write, the other's read, the next host's overwrite, the first writer's read.
    written = sorted(outcome.generations.written.values(), key=lambda w: w.generation)
    assert [(w.host, w.region_offset, w.number) for w in written] == [
        ("vnode1", ig.BASE_OFFSET, 1),
        ("vnode2", ig.BASE_OFFSET + ig.stride(size), 1),
        ("vnode2", ig.BASE_OFFSET, 2),
        ("vnode1", ig.BASE_OFFSET + ig.stride(size), 2),
    ]
    assert outcome.integrity().bytes_verified == 2 * (2 + 2) * size  # each write read back, and each read after


@needs_fio
def test_a_host_that_still_reads_its_own_earlier_write_after_another_overwrote_it_is_named_a_stale_read(
    tmp_path: Path,
) -> None:
    # Two files stand for a fabric that is not coherent: what vnode2 writes never reaches what vnode1 reads (a cache
    # or a path that kept the old data).
    from pytest_fabricqa.integrity import checks as ig
    from pytest_fabricqa.transport.local import LocalHost

    size = 16 * BS
    paths = {}
    for name in ("vnode1", "vnode2"):
        paths[name] = str(tmp_path / f"{name}.img")
        with open(paths[name], "wb") as f:
            f.truncate(ig.BASE_OFFSET + ig.stride(size))
    one, two = LocalHost("vnode1"), LocalHost("vnode2")
    device = ig.SharedDevice("ram0", "nqn.x", 1, ig.BASE_OFFSET + ig.stride(size), paths)
    mine = ig.region(0, BS, size)
    outcome = ig.Outcome()
    ig._write(outcome, one, device, [mine])
    ig.overwrite_seen(outcome, [one, two], device, [mine, mine])
    stale = [p for p in outcome.problems if p.startswith("vnode1: ")]
    assert len(stale) == size // BS, outcome.problems  # every block of the region
    assert all("it holds vnode1's write 1 of the region" in p and "not the later vnode2's write 2" in p for p in stale)
    assert all(p.endswith("a lost write or a stale read") for p in stale)


@needs_fio
@pytest.mark.parametrize("fails", ["command", "bug"])
def test_a_block_that_cannot_be_read_again_keeps_fios_words_and_says_why_but_a_bug_propagates(
    tmp_path: Path, fails: str
) -> None:
    from pytest_fabricqa.core.commands import CommandResult
    from pytest_fabricqa.fio.verify import READ_BLOCKS
    from pytest_fabricqa.integrity import checks as ig
    from pytest_fabricqa.transport.local import LocalHost

    class Unreadable(LocalHost):
        def run(self, argv, **kwargs):  # type: ignore[no-untyped-def]
            if READ_BLOCKS in argv:
                if fails == "bug":
                    raise TypeError("a bug in the reading")
                return super().run(["sh", "-c", "echo 'dd: /dev/x: Input/output error' >&2; exit 1"], **kwargs)
            result: CommandResult = super().run(argv, **kwargs)
            return result

    disk = tmp_path / "disk.img"
    with disk.open("wb") as f:
        f.truncate(ig.BASE_OFFSET + ig.REGION_BYTES)
    one = Unreadable("vnode1")
    device = ig.SharedDevice("ram0", "nqn.x", 1, disk.stat().st_size, {"vnode1": str(disk)})
    written = ig.region(0, BS, 16 * BS)
    outcome = ig.Outcome()
    ig._write(outcome, one, device, [written])
    data = bytearray(block(disk, written.offset + 2 * BS))
    data[7] ^= 0x01
    put(disk, written.offset + 2 * BS, bytes(data))
    ig._verify_on(outcome, [one], device, [written])
    if fails == "bug":  # not taken for an unreadable block: the host's whole read-back fails the case
        assert outcome.problems == [f"vnode1: the verify of {disk} did not run: a bug in the reading"]
        return
    unreadable, mismatch = outcome.problems
    assert mismatch.startswith(f"vnode1: {disk} byte offset {written.offset + 2 * BS} (8192-byte block): pattern: ")
    assert "it holds" not in mismatch
    assert unreadable.startswith(f"vnode1: the blocks fio found wrong on {disk} could not be read: ")
    assert "Input/output error" in unreadable
