"""Kill a lab's QEMU guests and switch when the process that owns the lab dies (pytest SIGKILLed, say).

Started by :meth:`VirtualLab.start` as ``python -m pytest_fabricqa.vlab.watchdog RUN_DIR`` in its own session,
so a signal to pytest's process group does not take it down too. It polls every 2 s and exits when the lab
is stopped (state file gone) or after it cleaned the lab up.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pytest_fabricqa.vlab.procs import alive, cleanup_stale, read_state

POLL_S = 2.0


def watch(run_dir: Path, poll_s: float = POLL_S) -> int:
    """Poll ``run_dir``'s lab until it is stopped or its owner dies; returns an exit code."""
    while True:
        state = read_state(run_dir)
        if state is None or state.owner is None:
            return 0
        if not alive(state.owner):
            for line in cleanup_stale(run_dir):
                print(f"fabricqa-vlab watchdog: owner died, killed {line}", file=sys.stderr)
            return 0
        # The watchdog starts before the first process is recorded: only an emptied lab ends the watch.
        if state.processes and not any(alive(p) for p in state.processes):
            return 0
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    """Entry point: one argument, the lab's run dir."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pytest_fabricqa.vlab.watchdog RUN_DIR", file=sys.stderr)
        return 2
    return watch(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
