"""Writes in flight while an initiator is fenced (preempt-and-abort): what the victim was told, and what is on the
device after.

A cluster fences a node that may still be writing. The victim's writes already on their way when the preempt
lands may complete or fail, but every write it was told succeeded must be on the device, none it was told failed
may be (a write that landed after the fence corrupts what the survivor now owns), and once a write was refused no
later one may succeed.

:data:`WRITER` is one writer loop on the victim: it writes 4 KiB blocks, each stamped with the writer, its sequence
number and its block (``FABQA-PAA <run> <writer> <seq> <block>``: a stamp of an earlier run is not this one's), round robin over its own few blocks, direct I/O, one
``dd`` per write, and logs each write's outcome (``<seq> <block> ok`` or ``<seq> <block> fail <dd's error>``) until
a stop file appears or its time is up (a killed run's loops end by themselves). :data:`READ_STAMPS` reads each
block's stamp back from another initiator. :func:`judge` compares the two.
Nothing here imports pytest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

STAMP = "FABQA-PAA"
WRITERS = 4
BLOCKS_PER_WRITER = 4
BLOCK = 4096
FOLDER = "/tmp/fabricqa-paa"
"""The writers' logs on the victim (one folder per device: ``FOLDER-<n>``), removed by the undo."""
MOST_S = 180
"""How long a writer loop runs at the most when nobody stops it."""

# $1 device, $2 first block, $3 blocks, $4 writer, $5 folder, $6 seconds at the most, $7 the run. The loop's own log
# lines, then "done" in its own file once it ended.
WRITER = r"""
dev=$1; first=$2; n=$3; w=$4; dir=$5; end=$(( $(date +%s) + $6 )); run=$7
i=0
while [ ! -e "$dir/stop" ] && [ "$(date +%s)" -lt "$end" ]; do
  b=$((first + i % n))
  if printf '%s %s %s %d %d\n' FABQA-PAA "$run" "$w" "$i" "$b" | dd of="$dev" bs=4096 count=1 seek="$b" conv=sync,notrunc \
       iflag=fullblock oflag=direct status=none 2>"$dir/e$w"; then
    echo "$i $b ok" >> "$dir/w$w"
  else
    echo "$i $b fail $(tail -n 1 "$dir/e$w")" >> "$dir/w$w"
  fi
  i=$((i + 1))
done
echo done > "$dir/d$w"
"""

# $1 folder, $2 device, $3 first block, $4 blocks per writer, $5 writers, $6 seconds at the most, $7 the writer's
# script, $8 the run: a fresh folder, then every writer loop started in the background (setsid: they outlive this
# command's SSH session).
START = r"""
dir=$1; rm -rf "$dir"; mkdir -p "$dir"
w=0
while [ "$w" -lt "$5" ]; do
  setsid sh -c "$7" sh "$2" $(( $3 + w * $4 )) "$4" "$w" "$dir" "$6" "$8" </dev/null >/dev/null 2>&1 &
  w=$((w + 1))
done
echo started
"""

# $1 folder: each writer's log, framed (@@w N), and whether it ended (@@d N).
COLLECT = r"""
for f in "$1"/w*; do [ -f "$f" ] && { echo "@@w ${f##*/w}"; cat "$f"; }; done
for f in "$1"/d*; do [ -f "$f" ] && echo "@@d ${f##*/d}"; done
true
"""

# $1 device, $2 first block, $3 blocks: each block's first 64 bytes as one line (NULs dropped), direct I/O.
READ_STAMPS = r"""
b=$2; last=$(( $2 + $3 ))
while [ "$b" -lt "$last" ]; do
  printf '%d ' "$b"
  dd if="$1" bs=4096 count=1 skip="$b" iflag=direct status=none | head -c 64 | tr -d '\000\n'
  echo
  b=$((b + 1))
done
"""


def start_argv(folder: str, device: str, first_block: int, run: int, seconds: int = MOST_S) -> list[str]:
    """The command that starts the writer loops on the victim; ``run``: the run's token, in every stamp."""
    return ["sh", "-c", START, "sh", folder, device, str(first_block), str(BLOCKS_PER_WRITER), str(WRITERS),
            str(seconds), WRITER, f"{run:04x}"]  # fmt: skip


def stop_argv(folder: str) -> list[str]:
    """The command that asks the loops to end (each finishes the write it is in)."""
    return ["sh", "-c", 'mkdir -p "$1" && touch "$1/stop"', "sh", folder]


def undo_argv(folder: str) -> list[str]:
    """The undo: the loops asked to end, then killed if still there (matched by their folder), the folder gone. The
    folder is given in two parts and matched as ``/tmp/[f]abricqa-paa-...``, so the pattern never matches this
    command's own line."""
    head, _, tail = folder.rpartition("/")
    pattern = f"{head}/[{tail[:1]}]{tail[1:]}"
    script = 'd="$1/$2"; touch "$d/stop" 2>/dev/null; sleep 1; pkill -f -- "$3"; rm -rf "$d"; true'
    return ["sh", "-c", script, "sh", head, tail, pattern]


def read_argv(device: str, first_block: int) -> list[str]:
    """The command that reads every writer's blocks' stamps back."""
    return ["sh", "-c", READ_STAMPS, "sh", device, str(first_block), str(WRITERS * BLOCKS_PER_WRITER)]


@dataclass(frozen=True)
class Write:
    """One write a loop made: its sequence number, its block, and what it was told (ok, or dd's error)."""

    writer: int
    seq: int
    block: int
    ok: bool
    said: str = ""


@dataclass
class Logs:
    """The writers' logs as collected: each writer's writes in order, and which writers ended."""

    writes: dict[int, list[Write]] = field(default_factory=dict)
    ended: set[int] = field(default_factory=set)

    def oks(self, writer: int) -> int:
        return sum(1 for w in self.writes.get(writer, []) if w.ok)


_LINE = re.compile(r"^(\d+) (\d+) (ok|fail)\s?(.*)$")


def parse_logs(text: str) -> Logs:
    """:data:`COLLECT`'s output -> :class:`Logs` (a torn last line of a log is left out)."""
    logs = Logs()
    writer: int | None = None
    for line in text.splitlines():
        if line.startswith("@@w "):
            writer = int(line[4:])
            logs.writes.setdefault(writer, [])
        elif line.startswith("@@d "):
            logs.ended.add(int(line[4:]))
        elif writer is not None and (m := _LINE.match(line)):
            logs.writes[writer].append(Write(writer, int(m[1]), int(m[2]), m[3] == "ok", m[4].strip()))
    return logs


_STAMP = re.compile(rf"^(\d+) {STAMP} ([0-9a-f]+) (\d+) (\d+) (\d+)$")


def parse_stamps(text: str, run: int) -> dict[int, tuple[int, int, int] | None]:
    """:data:`READ_STAMPS`'s output -> block -> (writer, seq, block named in the stamp), None for a block with no
    stamp of run ``run``'s (none, or an earlier run's)."""
    found: dict[int, tuple[int, int, int] | None] = {}
    for line in text.splitlines():
        m = _STAMP.match(line.strip())
        if m and int(m[2], 16) == run:
            found[int(m[1])] = (int(m[3]), int(m[4]), int(m[5]))
        elif line.strip().split(" ", 1)[0].isdigit():
            found[int(line.strip().split(" ", 1)[0])] = None
    return found


def judge(
    logs: Logs, stamps: Mapping[int, tuple[int, int, int] | None], first_block: int, conflict: str, victim: str
) -> list[str]:
    """What the victim's writes and the device disagree on, one sentence each (empty: the fence held):

    - a writer that wrote nothing before the fence (nothing was in flight), or whose writes never failed after it;
    - a write refused for another reason than a reservation conflict (``conflict``, dd's words for one);
    - a write that succeeded after one of the same writer had been refused;
    - per block: its stamp not the last write the victim was told succeeded there (a refused write that landed, or
      an acknowledged one lost), or a stamp naming another block (misdirected).
    """
    problems: list[str] = []
    for writer in range(WRITERS):
        writes = logs.writes.get(writer, [])
        refused = [w for w in writes if not w.ok]
        if not any(w.ok for w in writes):
            problems.append(f"{victim}: writer {writer} had no write succeed before the fence: nothing was in flight")
            continue
        if not refused:
            problems.append(f"{victim}: writer {writer}'s writes all succeeded ({len(writes)}): it was never fenced")
            continue
        other = [w for w in refused if conflict not in w.said]
        if other:
            problems.append(
                f"{victim}: writer {writer}'s write {other[0].seq} failed, but not with a reservation conflict "
                f"({conflict!r}): {other[0].said or 'no message'}"
            )
        late = [w for w in writes if w.ok and w.seq > refused[0].seq]
        if late:
            problems.append(
                f"{victim}: writer {writer}'s write {late[0].seq} succeeded after its write {refused[0].seq} had "
                "been refused: the fence did not hold"
            )
    for block in range(first_block, first_block + WRITERS * BLOCKS_PER_WRITER):
        writer = (block - first_block) // BLOCKS_PER_WRITER
        writes = [w for w in logs.writes.get(writer, []) if w.block == block]
        acknowledged = [w for w in writes if w.ok]
        last = acknowledged[-1] if acknowledged else None
        stamp = stamps.get(block)
        if stamp is None:
            if last is not None:
                problems.append(f"{victim}: block {block} holds no stamp; write {last.seq} was acknowledged there")
            continue
        by, seq, named = stamp
        if named != block or by != writer:
            problems.append(
                f"{victim}: block {block} holds writer {by}'s write {seq} meant for block {named} (a misdirected write)"
            )
            continue
        told = next((w for w in writes if w.seq == seq), None)
        if told is not None and not told.ok:
            problems.append(
                f"{victim}: block {block} holds write {seq}, which was refused ({told.said or 'failed'}): a write "
                "landed after the fence"
            )
        elif last is None or seq != last.seq:
            what = f"not {last.seq}, the last write acknowledged there" if last else "which no write of the log made"
            problems.append(f"{victim}: block {block} holds write {seq}, {what}: an acknowledged write was lost")
    return problems


def first_block(probe_byte: int) -> int:
    """The writers' first block: 16 blocks past the probes' (inside the integrity area, never block 0)."""
    return probe_byte // BLOCK + 16


def folder_for(device: str) -> str:
    """The victim's log folder for ``device``."""
    return f"{FOLDER}-{device.strip('/').replace('/', '_')}"


def ended(logs: Logs) -> bool:
    return logs.ended >= set(range(WRITERS))


def started_enough(logs: Logs, writes: int = 2) -> bool:
    return all(logs.oks(w) >= writes for w in range(WRITERS))


def refused_everywhere(logs: Logs) -> bool:
    return all(any(not w.ok for w in logs.writes.get(n, [])) for n in range(WRITERS))
