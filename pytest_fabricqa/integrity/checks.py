"""Data integrity over the fabric: what one initiator writes, every initiator reads back byte for byte.

The checks a certification suite's data integrity class makes, and the one Oracle RAC adds (every node reads
the same disk), as plain functions a suite calls (``suites/test_integrity.py``); no pytest here:

- :func:`write_and_verify`: write a region with a verifiable pattern and read it back on the same host;
- :func:`cross_verify`: each initiator writes its own region, every *other* initiator reads it back; then each
  region is overwritten by the next initiator and its first writer must read the new data (:func:`overwrite_seen`);
- :func:`concurrent_verify`: every initiator writes its own region at the same time, then each reads back all;
- :func:`verify_after_reconnect`: regions written, the fabric disconnected and connected again, read back; with
  :func:`write_and_flush`, regions written and flushed, the target restarted (``pytest_fabricqa.failover.survival``),
  read back;
- :func:`corruption_detected`: bytes changed on the target's backing device between the write and the verify,
  and the verify must name that block (proof the verify can fail at all).

Writes go only to devices the lab marks writable, at :data:`BASE_OFFSET` and beyond (block 0 and the first
allocation units, where the data-safety guard looks for ASM and other signatures, are never written), and only
after the suite passed the write guard. Each region is :data:`REGION_BYTES`: small enough for the virtual lab
(a 512 MiB RAM disk, ~20 MB/s under emulation) and still 1,024 blocks of 4 KiB.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.fio.generation import Finding, Generations, Written, classify
from pytest_fabricqa.fio.verify import Region, VerifyRun, read_blocks, run_verify
from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.report.model import Case, Integrity, Mismatch, Write
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

MiB = 1 << 20
BASE_OFFSET = 128 * MiB
"""Where the first region starts: far past block 0 and allocation unit 1 (ASM's backup header, AU <= 64 MiB)."""
REGION_BYTES = 4 * MiB
"""Each region by default (the lab's ``integrity.region_mb``): 1,024 blocks of 4 KiB, 512 of 8 KiB; 1 MiB blocks
get :data:`MIN_BLOCKS` of them."""
BLOCK_SIZES: dict[str, int] = {"4k": 4096, "8k": 8192, "1m": MiB}
"""The block sizes every check runs with: 4 KiB, the database's 8 KiB, 1 MiB."""
CORRUPT_BS = 8192
CORRUPT_BLOCK = 5
"""The corruption case changes the second half of this block of its region: its first bytes stay as written, so
fio must compare the whole block to find it (a changed start is the easier catch)."""
CORRUPT_BYTES = 4096


@dataclass(frozen=True)
class SharedDevice:
    """One exported namespace or LUN as every initiator sees it (the RAC shared disk)."""

    backing: str
    subsystem: str
    address: int
    size_bytes: int
    paths: dict[str, str]
    """Initiator name -> its block device for this namespace or LUN."""

    @property
    def label(self) -> str:
        """``ram0 (nqn...:vlab-ram0 #1)``: how messages name it."""
        return f"{self.backing} ({self.subsystem} #{self.address})"


def shared_devices(devices: Iterable[FabricDevice]) -> list[SharedDevice]:
    """The writable devices that carry load, each with the path every initiator sees it by, in export order."""
    grouped: dict[tuple[str, int], list[FabricDevice]] = {}
    for device in devices:
        if device.writable and device.load:
            grouped.setdefault((device.subsystem, device.address), []).append(device)
    return [
        SharedDevice(
            seen[0].backing,
            subsystem,
            address,
            min(d.size_bytes for d in seen),
            {d.initiator: d.path for d in seen},
        )
        for (subsystem, address), seen in grouped.items()
    ]


MIN_BLOCKS = 8
"""Every region holds at least this many blocks, so that blocks are read back while the rest are still written
(``verify_backlog``, :func:`pytest_fabricqa.fio.verify.backlog_for`): a 1 MiB region of 1 MiB blocks was one block,
read back only once written (the virtual lab's ``region_mb: 1``)."""


def stride(size: int | None = None) -> int:
    """How far apart the slots of the integrity area are for regions of ``size`` bytes (default
    :data:`REGION_BYTES`): room for the largest block size's region (:data:`MIN_BLOCKS` blocks at least)."""
    return max(REGION_BYTES if size is None else size, MIN_BLOCKS * max(BLOCK_SIZES.values()))


def region(slot: int, bs: int, size: int | None = None) -> Region:
    """The ``slot``-th region (0, 1, ...) of the integrity area, in blocks of ``bs`` bytes: ``size`` bytes (default
    :data:`REGION_BYTES`), or :data:`MIN_BLOCKS` blocks where that is more; slots are :func:`stride` apart."""
    size = REGION_BYTES if size is None else size
    return Region(BASE_OFFSET + slot * stride(size), max(size, MIN_BLOCKS * bs), bs)


def room_problem(device: SharedDevice, slots: int, size: int | None = None) -> str | None:
    """A sentence when ``device`` is too small for ``slots`` regions of ``size`` bytes (the integrity suite's: its
    :func:`stride`), else None."""
    size = REGION_BYTES if size is None else size
    needed = BASE_OFFSET + slots * size
    if device.size_bytes >= needed:
        return None
    return (
        f"{device.label} is {device.size_bytes:,} bytes; the integrity checks write {slots} region(s) of "
        f"{size // MiB} MiB from byte {BASE_OFFSET:,} on, {needed:,} bytes in all"
    )


@dataclass
class Outcome:
    """What a check wrote and read back, who wrote each region, and everything that went wrong."""

    runs: list[VerifyRun] = field(default_factory=list)
    writers: dict[Region, str] = field(default_factory=dict)
    expected: list[Mismatch] = field(default_factory=list)
    """Mismatches the check caused on purpose and found where it caused them (the corruption case)."""
    problems: list[str] = field(default_factory=list)
    generations: Generations = field(default_factory=Generations)
    """Every write's generation in this check (:mod:`pytest_fabricqa.fio.generation`)."""
    last: dict[Region, Written] = field(default_factory=dict)
    """Each region's last write: the generation its read-back wants."""
    findings: dict[tuple[str, int], Finding] = field(default_factory=dict)
    """(host, block offset) -> what a block that failed that host's read-back held (:func:`explain`)."""
    writes: list[Written] = field(default_factory=list)
    """Every write of this check in order, with those of the outcomes merged into it (for the report)."""

    def merge(self, other: Outcome) -> Outcome:
        """This outcome with ``other``'s (another device's) runs, writers, mismatches and problems added."""
        self.runs.extend(other.runs)
        self.writers.update(other.writers)
        self.expected.extend(other.expected)
        self.problems.extend(other.problems)
        self.findings.update(other.findings)
        self.writes.extend(other.writes)
        return self

    def new_write(self, host: str, written: Region) -> int:
        """The generation of ``host``'s next write of ``written``, kept as the one its read-backs want."""
        self.writers[written] = host
        self.last[written] = self.generations.new(host, written.offset)
        self.writes.append(self.last[written])
        return self.last[written].generation

    def wanted(self, regions: Sequence[Region]) -> list[int]:
        """The generation each of ``regions`` was last written with."""
        return [self.last[r].generation for r in regions]

    def add(self, run: VerifyRun, *, expect: Sequence[Region] = ()) -> VerifyRun:
        """Keep ``run``; every mismatch, shortfall and fio problem in it becomes a problem sentence."""
        self.runs.append(run)
        self.problems.extend(run.problems)
        for mismatch in run.mismatches:
            if mismatch not in self.expected:
                found = self.findings.get((mismatch.host, mismatch.offset))
                self.problems.append(describe(mismatch, self.writer_of(mismatch.offset), found))
        wanted = sum(r.size for r in run.regions)
        if not run.problems and run.bytes_verified < wanted:
            read = run.result.read.io_bytes if run.result is not None else 0
            self.problems.append(
                f"{run.host}: fio checked {run.bytes_verified:,} of the {wanted:,} bytes written to {run.device} "
                f"(it read {read:,})"
            )
        return run

    def writer_of(self, offset: int) -> str | None:
        """The host that wrote the region holding byte ``offset``, if this check wrote it."""
        for written, host in self.writers.items():
            if written.offset <= offset < written.end:
                return host
        return None

    def integrity(self) -> Integrity:
        """The report's figures: bytes written and verified, every mismatch, the expected ones counted, and every
        write with its generation."""
        return Integrity(
            bytes_written=sum(r.bytes_written for r in self.runs),
            bytes_verified=sum(r.bytes_verified for r in self.runs),
            mismatches=tuple(m for r in self.runs for m in r.mismatches),
            expected_mismatches=len(self.expected),
            fio_errors=sum(r.fio_errors for r in self.runs),
            writes=tuple(Write(w.host, w.region_offset, w.number, w.generation) for w in self.writes),
        )


def describe(mismatch: Mismatch, writer: str | None = None, finding: Finding | None = None) -> str:
    """``vnode2: /dev/sdb byte offset 135266304 (8192-byte block): crc32c: verify failed, expected CRC 4c65efc4,
    read CRC 45f9a0e9 (written by vnode1)``; with what the block held (:func:`explain`), that after fio's words."""
    text = f"{mismatch.host}: {mismatch.device} byte offset {mismatch.offset} ({mismatch.length}-byte block): "
    text += mismatch.what
    if mismatch.expected or mismatch.received:
        text += f", expected {mismatch.expected or '?'}, read {mismatch.received or '?'}"
    if writer is not None:
        text += f" (written by {writer})"
    if finding is not None:
        text += f"; {finding.text}"
    return text


def explain(outcome: Outcome, host: Host, device: str, run: VerifyRun) -> None:
    """Read every block ``run`` found wrong from ``device`` on ``host`` and keep what it holds instead of the
    region's last write (:func:`generation.classify`): an earlier write, a torn block, another offset's block,
    flipped bits. A block that cannot be read (a command's failure, a host gone, a short or garbled read) keeps fio's
    words alone, and the reason is a problem of its own; any other error is a bug and propagates (the host's read-back
    then fails as not run)."""
    if run.result is None or run.result.options.get("verify") != "pattern":
        return  # a block checked against itself (crc32c) holds no generation to say which write it was
    by_region = [(r, outcome.last[r]) for r in run.regions if r in outcome.last]
    wanted = {}
    for mismatch in run.mismatches:
        for written, last in by_region:
            if written.offset <= mismatch.offset < written.end:
                wanted[mismatch.offset] = (written, last)
    if not wanted:
        return
    for bs in sorted({w.bs for w, _ in wanted.values()}):
        offsets = sorted(o for o, (w, _) in wanted.items() if w.bs == bs)
        try:
            blocks = read_blocks(host, device, offsets, bs)
        except (FabricQAError, ValueError) as exc:  # a command failed or the host is gone, or the read came back short
            outcome.problems.append(f"{host.name}: the blocks fio found wrong on {device} could not be read: {exc}")
            continue
        for offset, block in zip(offsets, blocks, strict=True):
            found = classify(block, expected=wanted[offset][1], offset=offset, written=outcome.generations.written)
            if found is not None:
                outcome.findings[(host.name, offset)] = found


def _checked(outcome: Outcome, host: Host, device: str, run: VerifyRun) -> VerifyRun:
    """``run``, its failed blocks explained (:func:`explain`) before it is added."""
    if run.mismatches:
        explain(outcome, host, device, run)
    return run


def _write(outcome: Outcome, host: Host, device: SharedDevice, regions: Sequence[Region]) -> None:
    generations = [outcome.new_write(host.name, r) for r in regions]
    path = device.paths[host.name]
    outcome.add(_checked(outcome, host, path, run_verify(host, path, regions, write=True, generations=generations)))


def _read_back(outcome: Outcome, host: Host, path: str, regions: Sequence[Region]) -> VerifyRun:
    """``host`` reads back ``regions`` of ``path``, each wanting its last write's generation, explained."""
    run = run_verify(host, path, regions, write=False, generations=outcome.wanted(regions))
    return _checked(outcome, host, path, run)


def _verify_on(outcome: Outcome, hosts: Sequence[Host], device: SharedDevice, regions: Sequence[Region]) -> None:
    """Every host in ``hosts`` reads back every region, the hosts at the same time."""
    results = each(hosts, lambda host: _read_back(outcome, host, device.paths[host.name], regions), check=False)
    for name, result in results.items():
        if isinstance(result, BaseException):
            outcome.problems.append(f"{name}: the verify of {device.paths[name]} did not run: {result}")
        else:
            outcome.add(result)


def write_and_verify(host: Host, device: SharedDevice, bs: int, size: int | None = None) -> Outcome:
    """``host`` writes a region (each block read back while writing and at the end), then reads it all back."""
    outcome = Outcome()
    written = [region(0, bs, size)]
    _write(outcome, host, device, written)
    _verify_on(outcome, [host], device, written)
    return outcome


def cross_verify(hosts: Sequence[Host], device: SharedDevice, bs: int, size: int | None = None) -> Outcome:
    """Each initiator in turn writes its own region; every other initiator reads it back (both directions). Then
    each region is overwritten by the next initiator and read back by the one that wrote it first
    (:func:`overwrite_seen`)."""
    outcome = Outcome()
    written = [region(slot, bs, size) for slot in range(len(hosts))]
    for writer, mine in zip(hosts, written, strict=True):
        _write(outcome, writer, device, [mine])
        _verify_on(outcome, [h for h in hosts if h is not writer], device, [mine])
    if not outcome.problems:
        overwrite_seen(outcome, hosts, device, written)
    return outcome


def overwrite_seen(outcome: Outcome, hosts: Sequence[Host], device: SharedDevice, written: Sequence[Region]) -> None:
    """RAC coherence: the region ``hosts[i]`` wrote (``written[i]``) is written again by the next host with a
    generation of its own, and ``hosts[i]`` must read that one back -- not its own earlier write from a cache or a
    path that kept it (a stale read is named as such)."""
    if len(hosts) < 2:
        return
    for slot, first in enumerate(hosts):
        _write(outcome, hosts[(slot + 1) % len(hosts)], device, [written[slot]])
        _verify_on(outcome, [first], device, [written[slot]])


def concurrent_verify(hosts: Sequence[Host], device: SharedDevice, bs: int, size: int | None = None) -> Outcome:
    """Every initiator writes its own region at the same time (distinct offsets), then each reads back every one."""
    outcome = Outcome()
    mine = {host.name: [region(slot, bs, size)] for slot, host in enumerate(hosts)}
    generations = {name: [outcome.new_write(name, r) for r in regions] for name, regions in mine.items()}

    def write(host: Host) -> VerifyRun:
        path = device.paths[host.name]
        run = run_verify(host, path, mine[host.name], write=True, generations=generations[host.name])
        return _checked(outcome, host, path, run)

    results = each(hosts, write, check=False)
    for name, result in results.items():
        if isinstance(result, BaseException):
            outcome.problems.append(f"{name}: the write of {device.paths[name]} did not run: {result}")
        else:
            outcome.add(result)
    _verify_on(outcome, hosts, device, [r for regions in mine.values() for r in regions])
    return outcome


def write_before_reconnect(host: Host, device: SharedDevice, size: int | None = None) -> tuple[Outcome, list[Region]]:
    """``host`` writes one region per block size (:data:`BLOCK_SIZES`), each read back as written."""
    outcome = Outcome()
    written = [region(slot, bs, size) for slot, bs in enumerate(BLOCK_SIZES.values())]
    _write(outcome, host, device, written)
    return outcome, written


# The device $1 flushed: coreutils' sync of a file fsyncs it, and an fsync of a block device sends the device a
# cache flush (NVMe Flush, SCSI SYNCHRONIZE CACHE). fio's O_DIRECT writes were acknowledged; this asks the target
# to put them on stable media, which a restart must then keep.
FLUSH = 'sync -- "$1"'


def write_and_flush(host: Host, device: SharedDevice, size: int | None = None) -> tuple[Outcome, list[Region]]:
    """``host`` writes one region per block size (:data:`BLOCK_SIZES`), each read back as written, then flushes
    the device (:data:`FLUSH`); a failed flush is a problem."""
    outcome, written = write_before_reconnect(host, device, size)
    if not outcome.problems:
        path = device.paths[host.name]
        flushed = host.run(["sh", "-c", FLUSH, "sh", path], check=False, timeout=120)
        if not flushed.ok:
            said = (flushed.stderr.strip().splitlines() or [f"exit {flushed.exit_code}"])[-1]
            outcome.problems.append(
                f"{host.name}: the cache flush of {path} failed ({said}), so nothing is proven stable"
            )
    return outcome, written


def verify_after_reconnect(
    outcome: Outcome, hosts: Sequence[Host], device: SharedDevice, written: Sequence[Region]
) -> Outcome:
    """After the fabric was disconnected and connected again, or its target restarted (``device`` as found now),
    every initiator reads back what was written before."""
    _verify_on(outcome, hosts, device, written)
    return outcome


def corrupt_argv(backing_path: str, byte: int, length: int = CORRUPT_BYTES) -> list[str]:
    """``dd`` writing ``length`` zero bytes at ``byte`` of ``backing_path`` with direct I/O (no page cache holds a
    stale copy), then the target's caches dropped."""
    if byte % length or length % 512:
        raise ValueError(f"the corrupted range ({length} bytes at {byte}) must be aligned for direct I/O")
    script = (
        'dd if=/dev/zero of="$1" bs="$2" count=1 seek="$3" oflag=direct conv=notrunc,fsync status=none'
        " && sync && echo 3 > /proc/sys/vm/drop_caches"
    )
    return ["sh", "-c", script, "sh", backing_path, str(length), str(byte // length)]


def corruption_detected(
    writer: Host, reader: Host, target: Host, device: SharedDevice, backing_path: str, size: int | None = None
) -> tuple[Outcome, Mismatch | None]:
    """``writer`` writes a region of 8 KiB blocks over the fabric; 4 KiB of one block's data are zeroed directly on
    ``backing_path`` on ``target``; ``reader`` verifies the region. Returns the outcome and the mismatch found at
    the changed block (None when the verify missed it, which is then the first problem)."""
    outcome = Outcome()
    written = region(0, CORRUPT_BS, size)
    _write(outcome, writer, device, [written])
    if outcome.problems:
        return outcome, None
    byte = written.offset + CORRUPT_BLOCK * CORRUPT_BS + CORRUPT_BS // 2
    block = written.block_at(byte)
    target.run(corrupt_argv(backing_path, byte), timeout=120)
    reader.run(["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"], timeout=120)
    run = _read_back(outcome, reader, device.paths[reader.name], [written])
    found = next((m for m in run.mismatches if m.offset == block), None)
    if found is not None:
        outcome.expected.append(found)
    else:
        outcome.problems.append(
            f"{reader.name}: the verify of {device.paths[reader.name]} missed the {CORRUPT_BYTES} bytes zeroed at byte "
            f"offset {byte} of {target.name}:{backing_path} (the {CORRUPT_BS}-byte block at {block}); fio named "
            + (", ".join(str(m.offset) for m in run.mismatches) or "no block")
        )
    outcome.add(run)
    return outcome, found


def paths_now(devices: Iterable[FabricDevice], device: SharedDevice) -> SharedDevice:
    """``device`` as the initiators see it now (after a reconnect its paths may differ)."""
    for found in shared_devices(devices):
        if (found.subsystem, found.address) == (device.subsystem, device.address):
            return found
    raise LookupError(f"{device.label} is not connected on any initiator")


def hosts_by_name(hosts: Mapping[str, Host], names: Iterable[str]) -> list[Host]:
    """The transports of ``names``, in that order."""
    return [hosts[name] for name in names]


def suite_case(nodeid: str, case_id: str, protocol: str, problems: Iterable[str], **fields: Any) -> Case:
    """A case of the integrity suite, passed until the test's outcome says otherwise: ``problems`` as its
    violations, ``fields`` the rest (``integrity=...``, ``checks=...``)."""
    return Case(
        nodeid=nodeid,
        case_id=case_id,
        suite="integrity",
        verdict="passed",
        protocol=protocol,
        violations=tuple(problems),
        **fields,
    )


def integrity_case(nodeid: str, case_id: str, protocol: str, outcome: Outcome) -> Case:
    """The report's case for an integrity check: bytes written and verified, every mismatch, and as violations
    every problem (a mismatch names the host, the device, the offset and what was expected)."""
    return suite_case(nodeid, case_id, protocol, outcome.problems, integrity=outcome.integrity())
