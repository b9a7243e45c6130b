"""The fenced host's writes in flight (:mod:`pytest_fabricqa.integrity.inflight`): the judge on logs and stamps that
say what went wrong, and the writer loops, log collection and stamp read-back for real on this machine's shell over
a file, with a ``dd`` that starts refusing writes as a fenced initiator's do (Linux's EBADE, "Invalid exchange")."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pytest_fabricqa.integrity import inflight
from pytest_fabricqa.integrity.inflight import Logs, Write, judge
from pytest_fabricqa.transport.local import LocalHost

CONFLICT = "Invalid exchange"
FIRST = 100
RUN = 0xBEEF


def _logs(*, late_ok: bool = False) -> Logs:
    """Each writer: writes 0 and 1 acknowledged on its first two blocks, write 2 refused on its third."""
    logs = Logs()
    for w in range(inflight.WRITERS):
        base = FIRST + w * inflight.BLOCKS_PER_WRITER
        logs.writes[w] = [
            Write(w, 0, base, True),
            Write(w, 1, base + 1, True),
            Write(w, 2, base + 2, False, f"dd: error writing '/dev/sdb': {CONFLICT}"),
        ]
        if late_ok:
            logs.writes[w].append(Write(w, 3, base + 3, True))
    logs.ended = set(range(inflight.WRITERS))
    return logs


def _stamps() -> dict[int, tuple[int, int, int] | None]:
    stamps: dict[int, tuple[int, int, int] | None] = {}
    for w in range(inflight.WRITERS):
        base = FIRST + w * inflight.BLOCKS_PER_WRITER
        stamps.update({base: (w, 0, base), base + 1: (w, 1, base + 1), base + 2: None, base + 3: None})
    return stamps


def test_writes_as_acknowledged_and_refused_ones_absent_pass() -> None:
    assert judge(_logs(), _stamps(), FIRST, CONFLICT, "vnode1") == []


def test_a_refused_write_that_landed_is_named() -> None:
    stamps = _stamps()
    stamps[FIRST + 2] = (0, 2, FIRST + 2)
    (problem,) = judge(_logs(), stamps, FIRST, CONFLICT, "vnode1")
    assert problem == (
        f"vnode1: block {FIRST + 2} holds write 2, which was refused (dd: error writing '/dev/sdb': {CONFLICT}): a "
        "write landed after the fence"
    )


def test_an_acknowledged_write_lost_and_a_misdirected_one_are_named() -> None:
    stamps = _stamps()
    stamps[FIRST + 1] = None  # write 1 acknowledged, nothing there
    stamps[FIRST + 4] = (1, 1, FIRST + 5)  # writer 1's write for the next block, here
    problems = judge(_logs(), stamps, FIRST, CONFLICT, "vnode1")
    assert problems == [
        f"vnode1: block {FIRST + 1} holds no stamp; write 1 was acknowledged there",
        f"vnode1: block {FIRST + 4} holds writer 1's write 1 meant for block {FIRST + 5} (a misdirected write)",
    ]


def test_a_host_never_fenced_a_write_after_the_fence_and_another_error_are_named() -> None:
    logs = _logs(late_ok=True)
    logs.writes[1][2] = Write(1, 2, FIRST + 6, False, "dd: error writing '/dev/sdb': Input/output error")
    logs.writes[2] = [w for w in logs.writes[2] if w.ok]
    problems = judge(logs, _stamps(), FIRST, CONFLICT, "vnode1")
    assert "vnode1: writer 0's write 3 succeeded after its write 2 had been refused: the fence did not hold" in problems
    assert any(p.startswith("vnode1: writer 1's write 2 failed, but not with a reservation conflict") for p in problems)
    assert "vnode1: writer 2's writes all succeeded (3): it was never fenced" in problems


def test_stamps_of_an_earlier_run_are_not_this_runs() -> None:
    text = f"{FIRST} FABQA-PAA beef 0 0 {FIRST}\n{FIRST + 1} FABQA-PAA 0001 0 1 {FIRST + 1}\n{FIRST + 2} \n"
    assert inflight.parse_stamps(text, RUN) == {FIRST: (0, 0, FIRST), FIRST + 1: None, FIRST + 2: None}


def _wait(host: LocalHost, folder: str, enough: object, most_s: float = 30) -> Logs:
    deadline = time.monotonic() + most_s
    while True:
        logs = inflight.parse_logs(host.run(["sh", "-c", inflight.COLLECT, "sh", folder]).stdout)
        if enough(logs) or time.monotonic() > deadline:  # type: ignore[operator]
            return logs
        time.sleep(0.2)


def test_the_writer_loops_meet_a_fence_and_what_they_logged_is_what_the_file_holds(tmp_path: Path) -> None:
    device = tmp_path / "disk.img"
    device.write_bytes(bytes(1 << 20))
    fence = tmp_path / "fenced"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dd").write_text(
        '#!/bin/sh\nif [ -e "' + str(fence) + '" ]; then cat >/dev/null; '
        f'echo "dd: error writing \'{device}\': {CONFLICT}" >&2; exit 1; fi\nexec /bin/dd "$@"\n'
    )
    (fake / "dd").chmod(0o755)
    host = LocalHost("vnode1")
    folder = str(tmp_path / "fabricqa-paa-x")
    first = 16
    try:
        argv = inflight.start_argv(folder, str(device), first, RUN, seconds=60)
        assert host.run(["env", f"PATH={fake}:{os.environ['PATH']}", *argv]).stdout.strip() == "started"
        assert inflight.started_enough(_wait(host, folder, inflight.started_enough))
        fence.touch()  # the preempt lands
        assert inflight.refused_everywhere(_wait(host, folder, inflight.refused_everywhere))
        host.run(inflight.stop_argv(folder))
        logs = _wait(host, folder, inflight.ended)
        assert inflight.ended(logs)
        stamps = inflight.parse_stamps(host.run(inflight.read_argv(str(device), first)).stdout, RUN)
        assert judge(logs, stamps, first, CONFLICT, "vnode1") == []
        assert sum(1 for ws in logs.writes.values() for w in ws if w.ok) >= 2 * inflight.WRITERS
        # An earlier acknowledged write put back on a block: the read-back names it.
        block = first + 1
        (last,) = [w for w in logs.writes[0] if w.block == block and w.ok][-1:]
        earlier = (
            max(w.seq for w in logs.writes[0] if w.block == block and w.ok and w.seq < last.seq)
            if last.seq >= 4
            else None
        )
        with device.open("r+b") as f:  # what the target returned had it lost the last write: the one before
            f.seek(block * inflight.BLOCK)
            f.write(f"FABQA-PAA {RUN:04x} 0 {earlier if earlier is not None else 1000} {block}\n".encode())
        stamps = inflight.parse_stamps(host.run(inflight.read_argv(str(device), first)).stdout, RUN)
        (problem,) = judge(logs, stamps, first, CONFLICT, "vnode1")
        assert problem.startswith(f"vnode1: block {block} holds write ") and "an acknowledged write was lost" in problem
    finally:
        host.run(inflight.undo_argv(folder), check=False)
    assert not Path(folder).exists()
