"""Path parity (issue 13, "throughput per path when all are up"): each path's throughput alone, and the Windows
HLK multiport rule over them (the slowest path at most ``max_path_imbalance_pct`` below the fastest; 10% in the
HLK).

A namespace reached over several paths is one device on the initiator (native NVMe multipath), and the kernel
picks the path, so a path is measured by leaving it the only usable one: every other path's target port is made
ANA-inaccessible (:func:`faults.ana_change`; nothing is disconnected, the initiators learn it from an ANA change
event and route to the optimized path at once), the same short read-only fio runs on every initiator at once, and
the change is undone before the next path. Where the host holds ANA states (``ana_state`` on its path devices) the
run waits until it holds the change; where it does not (Debian 6.1's host with nvmet showed none) the first read
the inaccessible port fails moves the I/O, so a few reads go first. The path devices' own counters
(``nvmeXcZnY/stat``, read before and after fio) prove which path carried the reads: a path that did not (beyond
a few retried reads) is a problem, not a figure.

A LUN over several iSCSI/iSER portals is a dm-multipath map of one disk per path (``sdb``, ``sdc``), and each disk
is a device of its own: a path is measured by reading that path's disk directly, every initiator at once
(:func:`measure_member_paths`; read-only, beside the map, which keeps its own I/O). Nothing on the target changes.

What a suite calls (``suites/test_failover.py``); no pytest here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from pytest_fabricqa.core.cases import PARITY
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.failover.figures import PARITY_PCT, imbalance_violations, path_imbalance_pct
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.fio.parse import FioOutputError, parse_fio_output
from pytest_fabricqa.initiators.nvme import traddr as traddr_of
from pytest_fabricqa.lab.thresholds import Thresholds
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

__all__ = ["PARITY", "ParityResult", "imbalance", "measure_member_paths", "measure_paths", "parity_problems"]

RUNTIME_S = 4
SETTLE_S = 0.5
"""After the ANA change, before asking the initiators whether they hold it (:func:`wait_for_ana`)."""

# Each path device of the NVMe multipath head $1: its completed reads and writes so far, its controller's address
# and the ANA state the initiator holds for it ("-" without ANA), tab-separated. $2: the sysfs block folder, for
# tests.
PATH_COUNTS = r"""
r=${2:-/sys/class/block}
d=$(basename "$(readlink -f "$1")")
for f in "$r/${d%n*}"c*n"${d##*n}"; do
  [ -e "$f/stat" ] || continue
  printf '%s\t%s\t%s\t%s\n' "${f##*/}" "$(awk '{print $1 + $5}' "$f/stat")" \
    "$(tr '\n' ' ' < "$f/device/address" 2>/dev/null)" "$(cat "$f/ana_state" 2>/dev/null || echo -)"
done
"""
PRIME = 'dd if="$1" of=/dev/null bs=4096 count=32 iflag=direct status=none'
STRAY = 16
"""Completions another path may show during a path's run (I/O the kernel retried there), or 1% of the path's."""
ANA_WAIT_S = 30
"""How long the initiators may take to see an ANA change (an event, then the ANA log page read) before fio."""


def fio_argv(device: str, runtime_s: int = RUNTIME_S) -> list[str]:
    """A short read-only random read of ``device``: what one path can carry (4 KiB, queue depth 8)."""
    return [
        "fio", "--output-format=json", "--name=parity", f"--filename={device}", "--readonly", "--direct=1",
        "--ioengine=libaio", "--rw=randread", "--bs=4k", "--iodepth=8", "--time_based=1", f"--runtime={runtime_s}",
        "--size=64M",
    ]  # fmt: skip


def parse_path_counts(text: str) -> dict[str, tuple[int, str]]:
    """:data:`PATH_COUNTS`'s output -> path device -> (completions so far, target address ``traddr``)."""
    return {path: (count, traddr) for path, (count, traddr, _) in _paths(text).items()}


def parse_ana_states(text: str) -> dict[str, str]:
    """:data:`PATH_COUNTS`'s output -> target address -> the ANA state the initiator holds for that path ("-":
    the controller has no ANA)."""
    return {traddr: state for _, (_, traddr, state) in _paths(text).items()}


def _paths(text: str) -> dict[str, tuple[int, str, str]]:
    found: dict[str, tuple[int, str, str]] = {}
    for line in text.splitlines():
        parts = [*line.split("\t"), "-"]
        if len(parts) < 4 or not parts[1].isdigit():
            continue
        found[parts[0]] = (int(parts[1]), traddr_of(parts[2]), parts[3].strip() or "-")
    return found


def wait_for_ana(host: Host, device: str, path: str, *, wait_s: float = ANA_WAIT_S) -> str | None:
    """Poll until ``host`` holds ``path`` usable (optimized or non-optimized) and every other path of ``device``
    inaccessible; None then (or at once when its controllers have no ANA), else the problem."""
    deadline = time.monotonic() + wait_s
    while True:
        states = parse_ana_states(host.run(["sh", "-c", PATH_COUNTS, "sh", device]).stdout)
        if not states or "-" in states.values():
            return None
        others = [s for a, s in states.items() if a != path]
        if states.get(path) in ("optimized", "non-optimized") and all(s == "inaccessible" for s in others):
            return None
        if time.monotonic() >= deadline:
            shown = ", ".join(f"{a} {s}" for a, s in sorted(states.items()))
            return f"{host.name}: the ANA change did not reach it within {wait_s:g} s (it holds {shown})"
        time.sleep(0.5)


def carried_by(before: Mapping[str, tuple[int, str]], after: Mapping[str, tuple[int, str]]) -> dict[str, int]:
    """Target address -> completions between the two readings, per path."""
    moved: dict[str, int] = {}
    for path, (count, traddr) in after.items():
        moved[traddr] = moved.get(traddr, 0) + count - before.get(path, (count, traddr))[0]
    return moved


@dataclass
class ParityResult:
    """Per host: each path's IOPS alone (by target address), and what went wrong on the way."""

    iops: dict[str, dict[str, float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _one_path(host: Host, device: str, path: str, ana_wait_s: float) -> tuple[float | None, str | None]:
    late = wait_for_ana(host, device, path, wait_s=ana_wait_s)
    if late is not None:
        return None, late
    # A host that does not hold ANA states (Debian 6.1 with nvmet showed no ana_state on its path devices) learns a
    # port is inaccessible from the first I/O that port fails, then retries it on another path: a few reads first,
    # so that the failover is behind us before anything is counted.
    host.run(["sh", "-c", PRIME, "sh", device], check=False, timeout=120)
    before = parse_path_counts(host.run(["sh", "-c", PATH_COUNTS, "sh", device]).stdout)
    iops, problem = _read_iops(host, device, f"fio over path {path}")
    after = parse_path_counts(host.run(["sh", "-c", PATH_COUNTS, "sh", device]).stdout)
    if problem is not None:
        return None, problem
    moved = carried_by(before, after)
    others = sum(n for a, n in moved.items() if a != path)
    if moved.get(path, 0) <= 0 or others > max(STRAY, moved[path] // 100):
        shown = ", ".join(f"{a} {n}" for a, n in sorted(moved.items())) or "no path device counted any"
        return None, (
            f"{host.name}: with only {path} usable the reads did not go over it (completions per path: {shown}); "
            "the ANA change did not steer the I/O"
        )
    return iops, None


def _measure(
    host: Host, *, devices: Mapping[str, str], path: str, ana_wait_s: float
) -> tuple[float | None, str | None]:
    return _one_path(host, devices[host.name], path, ana_wait_s)


def measure_paths(
    hosts: Sequence[Host],
    devices: Mapping[str, str],
    paths: Sequence[str],
    away: Callable[[str], faults.FaultInjector],
    undo: UndoStack,
    *,
    settle_s: float = SETTLE_S,
    ana_wait_s: float = ANA_WAIT_S,
) -> ParityResult:
    """Each of ``paths`` (target addresses) alone: ``away(address)`` for every other one (armed, restored before
    the next path, its undo on ``undo`` too), then :func:`fio_argv` on every host at once. Per host and path the
    read IOPS; a path whose reads went elsewhere, or a failed run, is a problem instead of a figure."""
    result = ParityResult()
    for path in paths:
        changes = [away(other) for other in paths if other != path]
        try:
            for change in changes:
                change.inject(undo)
            time.sleep(settle_s)
            runs = each(hosts, partial(_measure, devices=devices, path=path, ana_wait_s=ana_wait_s), check=False)
        finally:
            for change in reversed(changes):
                try:
                    change.restore()
                except faults.FaultError as exc:
                    result.problems.append(str(exc))
        _collect(result, path, runs)
    return result


def _collect(
    result: ParityResult, path: str, runs: Mapping[str, tuple[float | None, str | None] | BaseException]
) -> None:
    """Each host's run over ``path`` into ``result``: its IOPS, or its problem."""
    for name, outcome in runs.items():
        if isinstance(outcome, BaseException):
            result.problems.append(f"{name}: the run over path {path} failed: {outcome}")
            continue
        iops, problem = outcome
        if problem is not None:
            result.problems.append(problem)
        elif iops is not None:
            result.iops.setdefault(name, {})[path] = round(iops, 1)


def member_disks(host: Host, device: str) -> dict[str, str]:
    """Target address -> the disk of that path (``/dev/sdb``) of the dm-multipath map ``device`` on ``host``: the
    map's slaves, each with its iSCSI session's connection address (:data:`pytest_fabricqa.failover.outage.ACTIVE_PATH`,
    sampled for no time)."""
    from pytest_fabricqa.failover.outage import ACTIVE_PATH

    found: dict[str, str] = {}
    for line in host.run(["sh", "-c", ACTIVE_PATH, "sh", device, "0"]).stdout.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] and not parts[0].startswith(("nvme", "dm-")):
            found.setdefault(traddr_of(parts[2]), f"/dev/{parts[0]}")
    return found


def _one_disk(host: Host, disk: str | None, path: str) -> tuple[float | None, str | None]:
    if disk is None:
        return None, f"{host.name}: no disk of the multipath map goes over path {path}"
    return _read_iops(host, disk, f"fio on {disk} (path {path})")


def _read_iops(host: Host, device: str, what: str) -> tuple[float | None, str | None]:
    """:func:`fio_argv` on ``device``: its read IOPS, or the problem (``what`` names the run in it)."""
    run = host.run(fio_argv(device), check=False, timeout=RUNTIME_S + 120)
    try:
        result = parse_fio_output(run.stdout, host=host.name)
    except FioOutputError as exc:
        return None, f"{host.name}: {what} gave no report ({exc})"
    if result.errors:
        return None, f"{host.name}: {what} saw errors: {'; '.join(result.errors[:2])}"
    return sum(job.read.iops for job in result.jobs), None


def measure_member_paths(hosts: Sequence[Host], devices: Mapping[str, str], paths: Sequence[str]) -> ParityResult:
    """Each of ``paths`` (portal addresses) alone for a dm-multipath map per host (``devices[host]``): the map's
    disk over that path read by :func:`fio_argv` on every host at once. Per host and path the read IOPS; a path
    without a disk, or a failed run, is a problem instead of a figure."""
    result = ParityResult()
    members = each(hosts, lambda h: member_disks(h, devices[h.name]), check=False)

    def over(path: str, host: Host) -> tuple[float | None, str | None]:
        disks = members[host.name]
        if isinstance(disks, BaseException):
            return None, f"{host.name}: the map's disks could not be read: {disks}"
        return _one_disk(host, disks.get(path), path)

    for path in paths:
        runs = each(hosts, partial(over, path), check=False)
        _collect(result, path, runs)
    return result


def with_default_limit(limits: Thresholds) -> Thresholds:
    """``limits`` with the HLK multiport rule's 10% (:data:`PARITY_PCT`) where the lab sets no
    ``max_path_imbalance_pct``: the parity case is always judged (issue 29: no limit was set anywhere, so it could
    never fail)."""
    if limits.max_path_imbalance_pct is not None:
        return limits
    return limits.model_copy(update={"max_path_imbalance_pct": PARITY_PCT})


def parity_problems(result: ParityResult, limits: Thresholds, paths: Sequence[str]) -> list[str]:
    """The rule over each host's paths, against ``max_path_imbalance_pct``; a host missing a path's figure fails."""
    problems = list(result.problems)
    for host, iops in sorted(result.iops.items()):
        missing = [p for p in paths if p not in iops]
        if missing:
            continue  # its problem is said already
        problems.extend(imbalance_violations(iops, limits, host=host))
    return problems


def imbalance(result: ParityResult) -> dict[str, float]:
    """Host -> its paths' imbalance (%), where every path was measured and one carried I/O."""
    found: dict[str, float] = {}
    for host, iops in result.iops.items():
        if len(iops) >= 2 and max(iops.values()) > 0:
            found[host] = round(path_imbalance_pct(iops), 1)
    return found
