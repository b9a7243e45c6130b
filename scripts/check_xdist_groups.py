"""CI check: in a ``pytest -n N --dist loadgroup -v`` log, every case that loads a target ran on one worker.

The suites that load a target (connectivity, performance) must never run on two workers at once: their cases
share the target host's devices and CPUs, and two workers provisioning one target collide (issue 16). pytest's
``-v`` lines under xdist name the worker (``[gw1] [ 45%] PASSED suites/test_performance.py::test_fio[...]``).
Usage: ``python scripts/check_xdist_groups.py LOG``; exit 1 with the offending workers, else a one-line summary.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\[(gw\d+)\] \[\s*\d+%\] (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")
LOADING = ("suites/test_connectivity.py::", "suites/test_performance.py::")


def workers_by_kind(text: str) -> tuple[dict[str, set[str]], int]:
    """Workers that ran target-loading cases (by protocol id prefix) and the number of read-only cases seen."""
    loading: dict[str, set[str]] = defaultdict(set)
    other = 0
    for line in text.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        worker, _, nodeid = match.groups()
        if nodeid.startswith(LOADING):
            loading["target-loading"].add(worker)
        else:
            other += 1
    return loading, other


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    loading, other = workers_by_kind(Path(argv[1]).read_text(errors="replace"))
    workers = loading.get("target-loading", set())
    if not workers:
        print(f"{argv[1]}: no target-loading case ran under xdist (is this a -n N -v log?)", file=sys.stderr)
        return 1
    if len(workers) != 1:
        print(f"{argv[1]}: target-loading cases ran on several workers: {', '.join(sorted(workers))}", file=sys.stderr)
        return 1
    print(f"xdist groups held: every target-loading case ran on {workers.pop()}; {other} other cases spread")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
