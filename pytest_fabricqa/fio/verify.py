"""fio's data verification: writing a verifiable pattern, reading it back, and reading fio's verify failures.

A region is written sequentially with ``verify=crc32c``: fio puts a header in every block (magic, length, the
block's offset, a CRC of the header) and a CRC32C of the block's data, reads each block back while writing
(``verify_backlog``) and the whole region at the end (``do_verify``). ``verify_only`` reads the region back
later, from the same or another host, without writing: what fio checks then is what the fabric kept.

Facts of fio 3.33 found while recording ``tests/data/fio/verify`` shape this module:

- ``verify_only`` together with ``verify_backlog`` read a region with two corrupted blocks and reported no
  mismatch at all (``verify-only-backlog-misses-8k``): a verify that cannot fail. The backlog is used only while
  writing; a verify-only job never gets it.
- fio stops a job at the first failed batch unless ``continue_on_error=verify``; with it, every bad block is named
  and the job ends with ``error`` 84 (EILSEQ) and ``total_err`` = the number of bad blocks, and fio **exits 0**. So
  success is never read from the exit code: the mismatches are read from fio's messages and checked against
  ``total_err``.
- fio names a bad block by the start of its verify interval (the block), not by the corrupted byte.
- fio saves a verify state file in its working folder on exit unless ``verify_state_save=0``.
- ``crc32c`` checks a block against itself only: a block of an earlier write of the same offset reads back clean
  (:mod:`pytest_fabricqa.fio.generation`). Given each region's generation, a run writes and checks that generation's
  pattern instead (``verify=pattern``), and every block that fails is read from the device and said what it holds.
- With ``verify=pattern`` fio 3.33 prints the failed block's offset as its length too (``offset 40960, length
  40960``); the length is read from ``(requested block: offset=..., length=...)``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pytest_fabricqa.fio import generation
from pytest_fabricqa.fio.model import FioResult
from pytest_fabricqa.fio.parse import FioOutputError, fio_messages, parse_fio_output
from pytest_fabricqa.report.model import Mismatch
from pytest_fabricqa.transport.base import CommandResult, Host

VERIFY = "crc32c"
"""fio's verify method: CRC32C of each block's data, with fio's header (magic, length, offset, header CRC)."""
VERIFY_IODEPTH = 8
VERIFY_BACKLOG = 64
"""At most this many blocks written before fio reads them back while writing (only ever with writes; see the module
docstring); a region of fewer than four times as many blocks reads back every quarter of it (:func:`backlog_for`)."""


def backlog_for(region: Region) -> int:
    """``verify_backlog`` for a write of ``region``: :data:`VERIFY_BACKLOG` blocks, or a quarter of the region's
    blocks where that is fewer (at least one), so that some are read back while the rest are still written."""
    return min(VERIFY_BACKLOG, max(1, region.size // region.bs // 4))


EILSEQ = 84
"""The errno fio ends a job with when a verify failed."""
TIMEOUT_S = 600.0
"""How long the SSH command waits for a verify run."""
BOUND_S = 540
"""How long fio may run on the host before ``timeout`` stops it (TERM, then KILL 10 s later): less than
:data:`TIMEOUT_S`, so that a run the transport gives up on never goes on writing on the host. One did once, after a
lost nvme-rdma I/O, and wrote into the next case's region when the I/O was retried (fresh-clone CI of 921f925)."""
BOUND_EXITS = (124, 137)
"""``timeout``'s exit codes when it stopped the command (TERM took; KILL was needed)."""

# "crc32c: verify failed at file /dev/x offset 1089536, length 8192 (requested block: ...)" and
# "verify: bad magic header 0, wanted acca at file /dev/x offset 1122304, length 8192 (requested block: ...)".
_FAILED = re.compile(
    r"^(?P<what>[A-Za-z0-9_]+: .*?)\s*at file (?P<file>\S+) offset (?P<offset>\d+), length (?P<length>\d+)"
)
_REQUESTED = re.compile(r"\(requested block: offset=(?P<offset>\d+), length=(?P<length>\d+)")
# With verify=pattern, just before the failure line: "fio: got pattern '04', wanted '00'. Bad bits 1" and
# "fio: bad pattern block offset 100" (the first differing byte of the block).
_GOT = re.compile(
    r"^fio: got pattern '(?P<received>[0-9a-fA-F]+)', wanted '(?P<expected>[0-9a-fA-F]+)'\. Bad bits (?P<bits>\d+)"
)
_AT_BYTE = re.compile(r"^fio: bad pattern block offset (?P<byte>\d+)")
_WANTED = re.compile(r"^(?P<what>.*?) (?P<received>\S+), wanted (?P<expected>\S+)$")
_CRC = re.compile(r"^\s*(?P<which>Expected|Received) CRC:\s*(?P<value>\S+)")
_SERVER_PREFIX = re.compile(r"^<[^>]*>\s?")


@dataclass(frozen=True)
class Region:
    """A byte range of a device: ``size`` bytes from ``offset``, written and read in blocks of ``bs`` bytes."""

    offset: int
    size: int
    bs: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.size <= 0 or self.bs <= 0 or self.size % self.bs or self.offset % self.bs:
            raise ValueError(f"region {self}: offset and size must be whole blocks of {self.bs} bytes, size > 0")

    @property
    def end(self) -> int:
        """The first byte after the region."""
        return self.offset + self.size

    def block_at(self, byte: int) -> int:
        """The offset of the block holding ``byte`` (what fio names when that block fails)."""
        if not self.offset <= byte < self.end:
            raise ValueError(f"byte {byte} is outside the region {self.offset}..{self.end}")
        return byte - (byte - self.offset) % self.bs

    def overlaps(self, other: Region) -> bool:
        """True when the two regions share a byte."""
        return self.offset < other.end and other.offset < self.end


def verify_argv(
    device: str,
    regions: Sequence[Region],
    *,
    write: bool,
    iodepth: int = VERIFY_IODEPTH,
    fio: str = "fio",
    generations: Sequence[int] | None = None,
) -> list[str]:
    """fio writing each region with a verifiable pattern and reading it back (``write``), or only reading each
    back and checking it (``verify_only``); one job per region, all at once, JSON output. ``generations``: each
    region's write generation (:func:`generation.pattern`, ``verify=pattern``), else ``crc32c``."""
    if not regions:
        raise ValueError("a verify run needs at least one region")
    if generations is not None and len(generations) != len(regions):
        raise ValueError(f"{len(regions)} region(s) need as many generations, got {len(generations)}")
    if not device or "\n" in device:
        raise ValueError(f"not a device path: {device!r}")
    argv = [
        fio,
        "--output-format=json",
        "--ioengine=libaio",
        "--direct=1",
        "--rw=write",
        f"--iodepth={iodepth}",
        f"--verify={VERIFY if generations is None else generation.VERIFY_PATTERN}",
        "--verify_state_save=0",
        "--continue_on_error=verify",
    ]
    if write:
        argv += ["--do_verify=1"]
    else:
        argv += ["--verify_only=1"]
    for index, region in enumerate(regions):
        argv += [
            f"--name=region{index}",
            f"--filename={device}",
            f"--offset={region.offset}",
            f"--size={region.size}",
            f"--bs={region.bs}",
        ]
        if write:
            argv.append(f"--verify_backlog={backlog_for(region)}")
        if generations is not None:
            argv.append(f"--verify_pattern={generation.pattern(generations[index])}")
    return argv


def parse_mismatches(text: str, *, host: str) -> tuple[Mismatch, ...]:
    """Every block fio's messages (its stderr; client/server lines with their ``<host>`` prefix) name as failed,
    with what was expected and what was read when fio says it."""
    found: list[Mismatch] = []
    lines = [_SERVER_PREFIX.sub("", line) for line in text.splitlines()]
    for index, line in enumerate(lines):
        match = _FAILED.match(line.strip())
        if match is None:
            continue
        what = match["what"].strip().rstrip(",")
        expected = received = ""
        wanted = _WANTED.match(what)
        if wanted is not None:
            what, expected, received = wanted["what"], wanted["expected"], wanted["received"]
        elif what.startswith("pattern:"):
            before = [line.strip() for line in lines[max(0, index - 2) : index]]
            got = next((m for m in map(_GOT.match, before) if m), None)
            at = next((m for m in map(_AT_BYTE.match, before) if m), None)
            if got is not None:
                where = f" at byte {at['byte']} of the block" if at is not None else ""
                expected = f"0x{got['expected']}{where}"
                received = f"0x{got['received']} ({got['bits']} bit(s) differ there)"
        else:
            for follow in lines[index + 1 : index + 3]:
                crc = _CRC.match(follow)
                if crc is None:
                    break
                if crc["which"] == "Expected":
                    expected = f"CRC {crc['value']}"
                else:
                    received = f"CRC {crc['value']}"
        offset, length = int(match["offset"]), int(match["length"])
        requested = _REQUESTED.search(line)
        if requested is not None and int(requested["offset"]) == offset:
            length = int(requested["length"])
        found.append(Mismatch(host, match["file"], offset, length, what, expected, received))
    return tuple(found)


@dataclass(frozen=True)
class VerifyRun:
    """One fio verify run on one host: what it wrote and read back, and every block it found wrong."""

    host: str
    device: str
    regions: tuple[Region, ...]
    bytes_written: int
    bytes_verified: int
    """The bytes fio checked (:func:`checked_bytes`), not merely read."""
    mismatches: tuple[Mismatch, ...]
    fio_errors: int
    """fio's ``total_err`` summed over the jobs (with ``continue_on_error=verify``: the failed verifies)."""
    problems: tuple[str, ...] = ()
    """What went wrong besides mismatches: fio failing, an errno other than a verify's, counts that disagree."""
    result: FioResult | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when every byte of every region was read back as written and fio reported nothing else."""
        expected = sum(r.size for r in self.regions)
        return not self.mismatches and not self.problems and self.bytes_verified >= expected


def read_verify(command: CommandResult, device: str, regions: Sequence[Region]) -> VerifyRun:
    """Read a finished verify run: its figures from fio's JSON, its mismatches from fio's messages."""
    host = command.host
    mismatches = parse_mismatches(command.stderr + "\n" + command.stdout, host=host)
    try:
        result = parse_fio_output(command.stdout, host=host)
    except FioOutputError as exc:
        said = "; ".join(fio_messages((), command.stderr)[:4]) or str(exc).splitlines()[0]
        problem = f"{host}: fio on {device} exited {command.exit_code} without a report: {said}"
        return VerifyRun(host, device, tuple(regions), 0, 0, mismatches, 0, (problem,))
    fio_errors = sum(job.total_err for job in result.jobs)
    problems: list[str] = []
    for job in result.jobs:
        if job.error and not (job.error == EILSEQ and mismatches):
            problems.append(f"{host}: fio job {job.name} on {device} ended with error {job.error}")
    if fio_errors != len(mismatches) and (fio_errors or not mismatches):
        problems.append(
            f"{host}: fio counted {fio_errors} failed verify(s) on {device} but named {len(mismatches)} block(s)"
        )
    if not command.ok:
        tail = "; ".join(fio_messages(result.notes, command.stderr)[:3])
        problems.append(f"{host}: fio on {device} exited {command.exit_code}" + (f" ({tail})" if tail else ""))
    return VerifyRun(
        host,
        device,
        tuple(regions),
        result.write.io_bytes if not _verify_only(result) else 0,
        checked_bytes(result),
        mismatches,
        fio_errors,
        tuple(problems),
        result,
    )


def run_verify(
    host: Host, device: str, regions: Sequence[Region], *, write: bool, generations: Sequence[int] | None = None
) -> VerifyRun:
    """Write ``regions`` of ``device`` on ``host`` with a verifiable pattern and read them back (``write``), or
    only read them back and check them (with ``generations``: each region's, see :func:`verify_argv`); never raises
    for a mismatch (it is in the result)."""
    argv = ["timeout", "--kill-after=10", str(BOUND_S)]
    argv += verify_argv(device, regions, write=write, generations=generations)
    command = host.run(argv, check=False, timeout=TIMEOUT_S)
    run = read_verify(command, device, regions)
    if command.exit_code in BOUND_EXITS:
        stopped = f"{host.name}: fio on {device} was stopped after {BOUND_S} s on the host (fio.verify.BOUND_S)"
        run = replace(run, problems=(stopped, *run.problems))
    return run


def checked_bytes(result: FioResult) -> int:
    """The bytes fio checked, job by job: fio reports bytes read, not bytes verified, so a job's reads count only
    where each of them is a verify. A job with no verify method checks nothing; ``verify_only`` with
    ``verify_backlog`` read a damaged region and checked nothing (fio 3.33, recorded:
    ``tests/data/fio/verify/verify-only-backlog-misses-8k``); a writing job without ``do_verify`` or a backlog reads
    nothing back. Otherwise every byte read is a verify read: ``verify_only`` reads each written block once, a
    writing job reads back what it wrote (the backlog's reads and ``do_verify``'s)."""
    total = 0
    for job in result.jobs:
        options = {**dict(result.global_options), **dict(job.options)}
        if options.get("verify", "0") in ("0", "none", ""):
            continue
        backlog = options.get("verify_backlog", "0") not in ("0", "")
        if options.get("verify_only") == "1":
            if backlog:
                continue
        elif options.get("do_verify", "1") == "0" and not backlog:
            continue
        total += job.read.io_bytes
    return total


def _verify_only(result: FioResult) -> bool:
    # fio reports a verify_only job's replayed writes as written bytes although nothing was written.
    return result.options.get("verify_only") == "1"


# Each block at $3, $4, ... of $1 ($2 bytes), read with direct I/O and printed as one base64 line.
READ_BLOCKS = r"""
d=$1 bs=$2
shift 2
for o; do dd if="$d" bs="$bs" skip=$((o / bs)) count=1 iflag=direct status=none | base64 -w0; echo; done
"""


def read_blocks(host: Host, device: str, offsets: Sequence[int], bs: int) -> list[bytes]:
    """The blocks of ``bs`` bytes at ``offsets`` of ``device`` on ``host``, as the host reads them now."""
    if any(o % bs for o in offsets):
        raise ValueError(f"block offsets must be multiples of {bs}: {list(offsets)}")
    done = host.run(["sh", "-c", READ_BLOCKS, "sh", device, str(bs), *map(str, offsets)], timeout=120)
    lines = done.stdout.splitlines()
    if len(lines) != len(offsets):
        raise ValueError(f"{host.name}: read {len(lines)} of {len(offsets)} block(s) of {device}")
    return [base64.b64decode(line) for line in lines]
