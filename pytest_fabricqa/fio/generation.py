"""Write generations: content unique to each write of a region, and what a block that does not hold it holds.

Why (issue 30): fio 3.33's ``verify=crc32c`` checks that each block is consistent with itself. A region rewritten
with fio's fixed default seed gets the same bytes every time (up to a header timestamp fio never checks), and a
``verify_only`` read takes the header's seed as the one it wants (a job that does not write, ``verify.c``), so a block
from an earlier write of the region verifies clean: a lost write, or a stale read, passes. Tried on a file: a
block of an earlier write with a different ``randseed`` put back after a new write, and ``verify_only`` reported
nothing.

A generation is a 32-bit number unique to one write of one region in one run. That write uses ``verify=pattern``
with ``verify_pattern=0x<generation>%o``: every block is a 12-byte unit -- the generation (4 bytes, in the order
written) and the block's offset (fio's ``%o``, 8 bytes little-endian) -- repeated over the block and cut at its end
(fio 3.33 on a file: ``0x12345678%o`` at offset 8192 gives ``12 34 56 78 00 20 00 00 00 00 00 00``, again and
again). The read-back with the same pattern fails on any byte that differs (``pattern: verify failed at file ...
offset O``, after ``fio: got pattern '11', wanted '22'``), and :func:`classify` says what the failed block holds:

- a well-formed block of an earlier write of the same offset: a lost write or a stale read, naming the write;
- a well-formed block of another offset: a misdirected write, naming the offset it was meant for;
- a torn block: every byte is either the expected write's or an earlier write's of the same offset (a page of the
  later write kept and the rest lost, as LIO over iSCSI returned on the virtual lab), naming the earlier write and how
  many pattern units hold it;
- none of these: corrupted data, the number of bits that differ from what was written and where the first one is.

No pytest here; :class:`Generations` is what a case keeps of the writes it made.
"""

from __future__ import annotations

import itertools
import secrets
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

UNIT = 12
"""Bytes of one pattern unit: the generation (4) and the block's offset (8)."""
VERIFY_PATTERN = "pattern"
"""fio's ``verify`` method for a generation's write and read-back: the block must equal the pattern, every byte."""


def pattern(generation: int) -> str:
    """fio's ``verify_pattern`` for a write of ``generation``: the generation, then the block's offset."""
    if not 0 <= generation < 1 << 32:
        raise ValueError(f"a generation is a 32-bit number, got {generation}")
    return f"0x{generation:08x}%o"


def expected_block(generation: int, offset: int, bs: int) -> bytes:
    """The ``bs`` bytes a write of ``generation`` puts in the block at ``offset`` (what fio's pattern makes)."""
    unit = struct.pack(">I", generation) + struct.pack("<Q", offset)
    return (unit * (bs // UNIT + 1))[:bs]


@dataclass(frozen=True)
class Written:
    """One write of a region: who wrote it, the region's offset, and its number among the region's writes."""

    generation: int
    host: str
    region_offset: int
    number: int

    def text(self) -> str:
        return f"{self.host}'s write {self.number} of the region at {self.region_offset} (generation 0x{self.generation:08x})"


@dataclass
class Generations:
    """The generations of one run: each new write of a region gets the next, unique to the run (a random 16-bit
    run tag, then a counter), so a block left by an earlier run is no write of this one."""

    run_tag: int = field(default_factory=lambda: secrets.randbits(16))
    written: dict[int, Written] = field(default_factory=dict)
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new(self, host: str, region_offset: int) -> Written:
        """The generation of ``host``'s next write of the region at ``region_offset``."""
        count = next(self._counter)
        if count >= 1 << 16:
            raise ValueError("a run writes at most 65,535 generations")
        number = 1 + sum(1 for w in self.written.values() if w.region_offset == region_offset)
        write = Written((self.run_tag << 16) | count, host, region_offset, number)
        self.written[write.generation] = write
        return write


@dataclass(frozen=True)
class Finding:
    """What a block that failed the read-back holds: ``kind`` one of ``earlier-write``, ``torn``, ``misdirected``,
    ``unknown-write``, ``corrupt``, and a sentence saying what it holds (``it holds ...``)."""

    kind: str
    text: str


def classify(block: bytes, *, expected: Written, offset: int, written: Mapping[int, Written]) -> Finding | None:
    """What ``block``, read at ``offset`` where ``expected`` was the last write, holds instead (None: what was
    written), as a sentence about the block (``it holds ...``). ``written``: every write of the run by generation."""
    bs = len(block)
    want = expected_block(expected.generation, offset, bs)
    if block == want:
        return None
    at = "it"
    if bs >= UNIT:
        generation = struct.unpack(">I", block[:4])[0]
        held = struct.unpack("<Q", block[4:UNIT])[0]
        if block == expected_block(generation, held, bs):
            write = written.get(generation)
            whose = write.text() if write else f"generation 0x{generation:08x}, which this run never wrote"
            if held == offset:
                if write is None:
                    return Finding("unknown-write", f"{at} holds a write of {whose}, not {expected.text()}")
                return Finding(
                    "earlier-write",
                    f"{at} holds {whose}, not the later {expected.text()}: a lost write or a stale read",
                )
            return Finding(
                "misdirected",
                f"{at} holds the block written for offset {held} ({whose}): a misdirected write",
            )
        torn = _torn(block, want, expected=expected, offset=offset, written=written)
        if torn is not None:
            return torn
    differing = [i for i, (a, b) in enumerate(zip(block, want, strict=True)) if a != b]
    bits = sum(bin(block[i] ^ want[i]).count("1") for i in differing)
    return Finding(
        "corrupt",
        f"{at} differs from {expected.text()} in {bits} bit(s) of {len(differing)} byte(s), the first at byte "
        f"{differing[0]} of the block: corrupted data",
    )


def _torn(
    block: bytes, want: bytes, *, expected: Written, offset: int, written: Mapping[int, Written]
) -> Finding | None:
    """A block whose every byte is either ``want``'s or that of one earlier generation's block at ``offset`` (the
    generation found most often among its whole units), as a ``torn`` finding; None if it is not such a block."""
    bs = len(block)
    seen: dict[int, int] = {}
    for start in range(0, bs - UNIT + 1, UNIT):
        generation, held = (
            struct.unpack(">I", block[start : start + 4])[0],
            struct.unpack("<Q", block[start + 4 : start + UNIT])[0],
        )
        if held == offset and generation != expected.generation:
            seen[generation] = seen.get(generation, 0) + 1
    if not seen:
        return None
    generation = max(seen, key=lambda g: seen[g])
    other = expected_block(generation, offset, bs)
    if any(a != w and a != o for a, w, o in zip(block, want, other, strict=True)):
        return None
    units = [
        start // UNIT
        for start in range(0, bs, UNIT)
        if any(a != w for a, w in zip(block[start : start + UNIT], want[start : start + UNIT], strict=True))
    ]
    total = -(-bs // UNIT)
    write = written.get(generation)
    whose = write.text() if write else f"generation 0x{generation:08x}, which this run never wrote"
    return Finding(
        "torn",
        f"it holds {whose} in {len(units)} of {total} pattern units (bytes {units[0] * UNIT} to "
        f"{min(bs, (units[-1] + 1) * UNIT) - 1} of the block) and the later {expected.text()} in the rest: a torn "
        f"block, part of a lost write or a stale read",
    )
