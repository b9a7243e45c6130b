"""Paths down under I/O (issue 13, faults a to e): fio writing and verifying on every initiator, every
initiator's storage paths (or the one carrying its I/O) down at once, back up, and each host's failover figures
read from fio's IOPS log.

What a suite calls (``suites/test_failover.py``); no pytest here:

- :func:`path_outage`: sets the lab's path timeouts on every initiator (:class:`faults.PathTimeouts`), starts
  fio on each one in the background (its own region, at a distinct offset: ``verify=crc32c`` with
  ``verify_backlog``, ``continue_on_error=all``, ``write_iops_log`` at ``log_avg_msec=100`` on the host's Unix
  clock), waits until every device completes I/O, takes every storage path down (the lab's
  ``failover.outage_by``: :class:`faults.LinkDown` or :class:`faults.LinkDrop`, all hosts at once; for the
  one-path outage only the link of the path carrying the I/O, :func:`active_interface`) for the outage,
  brings them up, after a brief outage waits until I/O flows again (at most :data:`RESUME_WAIT_S`), lets fio run
  ``after_s`` more, ends it, and returns each host's :class:`failover.FailoverFigures` and IOPS series. Every change has its undo
  on the caller's stack before it is made, and a record on its host (a SIGKILLed run's are undone at the next
  start).
- :func:`outage_problems`: the verdict. The brief outage (shorter than the path timeout) must show no I/O or
  verify error and I/O after the fault; the long one (longer) must show I/O errors on every host, or the
  measurement cannot see errors at all -- unless the lab's hosts queue with no path left
  (``failover.long_outage: queue``): then, as for the brief one, no error, I/O stopped for the outage and resumed
  after it (:func:`queue_gaps` first names an NVMe controller whose timeouts in force would fail I/O). All are
  gated by the lab's limits for the outage's name (:data:`failover.OUTAGES`).
- :func:`usable_after`: after the long outage, every initiator reads its device again within the lab's
  ``failover.recover_s``, and :func:`verified_after`: each writes and verifies its region again.

fio runs detached on each initiator (``setsid``): one SSH channel per command, none held open while links are
down. A fio a killed run left behind ends by itself after its runtime (at most ``before_s + long_down_s +
after_s`` plus a second); its folder under /tmp stays.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_fabricqa.core.cases import ALUA, ANA, BRIEF, LONG, ONE_PATH, PORT, RELOGIN, RESET, RESTART, TARGET_OUTAGES
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.failover.figures import (
    FAULT_REACH_MS,
    FailoverFigures,
    count_errors,
    failover_violations,
    measure,
    throughput_points,
)
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.faults.inject import Fault
from pytest_fabricqa.fio.command import LOG_MARKER, split_logs
from pytest_fabricqa.fio.parse import FioOutputError, fio_messages, parse_fio_output
from pytest_fabricqa.fio.stalls import HostSeries, host_series
from pytest_fabricqa.fio.verify import VERIFY, VERIFY_BACKLOG, Region, run_verify
from pytest_fabricqa.initiators.nvme import traddr as traddr_of
from pytest_fabricqa.integrity.checks import Outcome
from pytest_fabricqa.lab.database import OracleSettings
from pytest_fabricqa.lab.model import FailoverSettings, LabModel
from pytest_fabricqa.lab.thresholds import Thresholds
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

INTERVAL_MS = 100
"""fio's ``log_avg_msec``: the IOPS log's window, what a stall is measured in (failover.py)."""
IODEPTH = 4
RATE_IOPS = FailoverSettings().rate_iops
"""The lab's default ``failover.rate_iops`` (:class:`~pytest_fabricqa.lab.model.FailoverSettings`: why 50)."""
WORKDIR = "/tmp"
RUNTIME_MARGIN_S = 60

# Starts fio detached in a fresh folder: the folder is printed; "start"/"end" hold the host's Unix ms around
# fio, "rc" its exit code, "pid" the leader of fio's own session (kill -- -PID stops it). Fixed text: the
# folder base and fio's argv arrive as "$@". Each marker is written aside and renamed into place: "end" is what
# the collector waits for, and a file the shell had created but date not yet filled was once read as empty
# (fresh-clone CI of 1b60a3b: "the run ends (-1 ms) before it starts").
FIO_START = r"""
set -e
d=$(mktemp -d "$1/fabricqa-failover.XXXXXX")
shift
cd "$d"
setsid sh -c 'date +%s%3N > .start; mv .start start; "$@" > fio.json 2> fio.err & echo $! > .fio.pid
  mv .fio.pid fio.pid; wait $!; echo $? > .rc; mv .rc rc; date +%s%3N > .end; mv .end end' sh "$@" \
  < /dev/null > /dev/null 2>&1 &
echo $! > pid
echo "$d"
"""
# Ends fio as Ctrl-C would (it writes its report and logs): the run lasts as long as the outage took.
FIO_END = r"""
d=$1
[ -e "$d/end" ] || [ ! -s "$d/fio.pid" ] || kill -INT "$(cat "$d/fio.pid")" 2>/dev/null || true
"""
# Waits for fio to end (up to $2 s), then prints its JSON and every other file after a log marker.
FIO_COLLECT = (
    r"""
d=$1
n=$(( $2 * 5 ))
while [ ! -e "$d/end" ] && [ "$n" -gt 0 ]; do sleep 0.2; n=$((n - 1)); done
[ -e "$d/end" ] || { echo "fio did not end within $2 s" >&2; exit 124; }
cd "$d"
cat fio.json
for f in *; do
  [ "$f" = fio.json ] && continue
  printf '\n%s %s\n' '"""
    + LOG_MARKER.strip()
    + r"""' "$f"
  cat "$f"
done
"""
)
# What a multipath device's paths completed, shared by the scripts below. ``paths``: a
# device-mapper map's slaves (sdb, sdc), an NVMe multipath head nvmeXnY's paths nvmeXcZnY (the head's own counters
# Linux 6.1 leaves at zero), else none. ``done_ok``: the I/Os a path completed without error. ``live``: whether its
# controller is live (SCSI disks and devices without one always are).
# "Without error": the kernel counts a failed request as completed in a disk's ``stat`` -- iSCSI fails a lost
# session's queued commands when its recovery timeout ends, and dm-multipath retries them on another path (full run
# of 2e6fa7a: 3 such "completions" on the downed iSER path late in its fault failed a one-path case) -- so a SCSI
# disk counts its device's commands done less those done with an error (``iodone_cnt - ioerr_cnt``; commands
# failed before reaching the transport are in neither); an NVMe path, which has no such counters and whose
# failed-over requests end without error on it, counts nothing over a span its controller is not ``live`` at both
# ends of. The two counters are read as a pair that no error came between (ioerr_cnt before and after iodone_cnt
# the same): read one after the other, a burst of failed commands between the reads (a lost session's queue failed
# at its recovery timeout) made one end of a sample short by the burst, and the sample count the burst as
# completions. The full run of 24f59b3 failed a vlab test so: the path a port fault kept away "carried I/O again".
# $3: the sysfs block folder, for tests.
PATH_COUNTERS = r"""
r=${3:-/sys/class/block}
d=$(basename "$(readlink -f "$1")")
paths() {
  case $d in
    dm-*) for f in "$r/$d"/slaves/*; do [ -e "$r/${f##*/}/stat" ] && echo "${f##*/}"; done ;;
    *) for f in "$r/${d%n*}"c*n"${d##*n}"; do [ -e "$f/stat" ] && echo "${f##*/}"; done ;;
  esac
}
done_ok() {
  s=$r/$1/device
  if [ -e "$s/iodone_cnt" ]; then
    i=0
    while :; do
      e0=$(cat "$s/ioerr_cnt"); io=$(cat "$s/iodone_cnt"); e1=$(cat "$s/ioerr_cnt")
      [ "$e0" = "$e1" ] || [ $i -ge 20 ] && break
      i=$((i + 1))
    done
    echo $(( io - e1 )); return
  fi
  awk '{print $1 + $5}' "$r/$1/stat"
}
live() { [ ! -e "$r/$1/device/state" ] || [ -e "$r/$1/device/iodone_cnt" ] || [ "$(cat "$r/$1/device/state")" = live ]; }
"""
# Waits (up to $2 s) until the block device $1 has completed a read or write since the script began: the fault
# fires only once I/O flows (fio's set-up took seconds on a loaded emulated guest, and a fault before the first
# completion measures nothing), and after a brief outage fio runs on until I/O flows again. Counted every 0.2 s
# where a completion is one fio sees: on a device-mapper map itself (dm-multipath retries a request failed on a
# path, so the map completes only what it hands back), on an NVMe multipath head's paths (its own counters Linux
# 6.1 leaves at zero; PATH_COUNTERS), a span counting only on a path whose controller is live at both its ends (a
# resetting controller's requests end without error on the path and fail over to the head), and on any other
# device itself. Not on a map's disks: their ``stat`` counts failed commands as completed, and their
# ``iodone_cnt`` multipathd's TUR checks. A target restart on LIO whose sessions were not back within their 5 s
# recovery timeout (iscsid's logins were refused while the TPGs were off, and retried seconds apart) failed both
# disks' queued commands; counted on the disks, the wait ended at once, fio was ended 2 s later, and dm-multipath,
# queueing with no path left, sent the I/O on once multipathd reinstated the paths 2-3 s after that: "I/O did not
# resume" (CI of b3ad4ac; on the lab, in 1 of 3 runs of LIO's pair, and with the iodone_cnt count in its place).
IO_FLOWING = (
    PATH_COUNTERS
    + r"""
snap() {
  ps=
  case $d in dm-*) ;; *) ps=$(paths) ;; esac
  for p in ${ps:-$d}; do
    if live "$p"; then n=$(awk '{print $1 + $5}' "$r/$p/stat"); live "$p" && echo "$p $n" && continue; fi
    echo "$p -"
  done
}
a=$(snap)
end=$(( $(date +%s) + $2 ))
while [ "$(date +%s)" -lt "$end" ]; do
  sleep 0.2
  b=$(snap)
  printf '%s\n%s\n' "$a" "$b" | awk '
    { if ($1 in was) { if (was[$1] != "-" && $2 != "-" && $2 > was[$1]) moved = 1 } else was[$1] = $2 }
    END { exit moved ? 0 : 1 }' && exit 0
  a=$b
done
exit 1
"""
)
# Which path of a multipath device ($1) carries the I/O: each path with the I/Os it completed without error over
# $2 s (PATH_COUNTERS; nothing over a sample its controller ends not live) and its target address
# ("traddr=...,trsvcid=...", tab-separated): an NVMe path's controller's, a dm-multipath slave's iSCSI session's
# connection's. $3: the sysfs block folder, $4 the iSCSI connections', for tests.
ACTIVE_PATH = (
    PATH_COUNTERS
    + r"""
c=${4:-/sys/class/iscsi_connection}
address() {
  if [ -e "$r/$1/device/address" ]; then tr '\n' ' ' < "$r/$1/device/address"; return; fi
  s=$(readlink -f "$r/$1/device")
  s=${s#*/session}
  s=${s%%/*}
  printf 'traddr=%s,trsvcid=%s' "$(cat "$c/connection$s:0/persistent_address" 2>/dev/null)" \
    "$(cat "$c/connection$s:0/persistent_port" 2>/dev/null)"
}
snap() {
  for p in $(paths); do printf '%s %s\n' "$p" "$(done_ok "$p")"; done
}
a=$(snap)
sleep "$2"
snap | while read -r p n; do
  was=$(printf '%s\n' "$a" | awk -v p="$p" '$1 == p {print $2}')
  live "$p" && moved=$((n - ${was:-0})) || moved=0
  printf '%s\t%s\t%s\n' "$p" "$moved" "$(address "$p")"
done
"""
)
ACTIVE_SAMPLE_S = 1


def _path_lines(text: str) -> list[tuple[str, int, str]]:
    """:data:`ACTIVE_PATH`'s output as (path device, I/Os completed in the sample, target address ``traddr``)."""
    lines = [line.split("\t") for line in text.splitlines()]
    # A SCSI disk's count is two counters: read apart, a failed command between the reads made a sample -1 (iSCSI
    # under the ALUA fault, before ACTIVE_PATH read them as a pair); should a pair still straddle one (20 retries
    # ran out), that is no completion, not a negative one.
    return [(p[0], max(0, int(p[1])), traddr_of(p[2])) for p in lines if len(p) >= 3 and p[1].lstrip("-").isdigit()]


def parse_active_path(text: str) -> tuple[str, str] | None:
    """:data:`ACTIVE_PATH`'s output -> (path device, target address ``traddr``) of the path that completed the most
    I/O in the sample; None when no path completed any."""
    best: tuple[int, str, str] | None = None
    for path, done, traddr in _path_lines(text):
        if done > 0 and (best is None or done > best[0]):
            best = (done, path, traddr)
    return None if best is None else (best[1], best[2])


def parse_path_counts(text: str) -> dict[str, int]:
    """:data:`ACTIVE_PATH`'s output -> target address ``traddr`` -> I/Os its paths completed in the sample."""
    counts: dict[str, int] = {}
    for _, done, traddr in _path_lines(text):
        counts[traddr] = counts.get(traddr, 0) + done
    return counts


TAKEN_SHARE = 0.5
"""With every path down in an outage that I/O resumes from (a brief one, or a long one the hosts queue through), I/O
must stop for at least this share of the outage (fio's log reads a stall up to two 100 ms intervals short, and the
outage's start and end are each read a command's time apart from the break): a brief outage whose fault stopped
nothing is a fault that did not happen, not a seamless one (issue 29). Measured: 3-7 s for a 2 s outage on the
virtual lab."""
LATE_SAMPLE_S = 2
"""How long, at the end of a one-path or target-side fault, each host's paths' completions are counted."""
LATE_MARGIN_S = 2
"""The late sample ends this long before the restore (the sampling command's own time, under emulation)."""
SETTLED_SAMPLES = 2
"""A one-path or target-side fault (of :data:`LATE_CHECKED`) ends before ``one_path_down_s`` once this many late
samples in a row, on every host, saw the faulted path complete nothing and the remaining paths complete at least
:data:`SETTLED_SHARE` of what every path completed in a sample just before the fault: the I/O has moved and flows
at its rate again, so the stall and the recovery are measured, and holding on measured nothing more (under emulation the
ANA and nvmet port faults move the I/O in under a second, iSCSI's in ~15 s, against a 30 s hold: ~3 min of CI's
main job). A fault that did not take the path away never settles and is held for ``one_path_down_s``."""
SETTLED_SHARE = FailoverSettings().settled_share
"""The lab's default ``failover.settled_share``: the share of the pre-fault sample's completions the remaining
paths must reach (the recovery figure itself is read from fio's log, not from these samples)."""
LATE_CHECKED = (ONE_PATH, ANA, PORT, ALUA)
"""The outages whose faulted path must be quiet at the end. ALUA's too: a disk whose target port is ALUA-unavailable
keeps being tried (multipathd's checker reinstates it, each command is refused with NOT READY and dm-multipath
retries it on the other path), and the disk's ``stat`` counts every refused command as completed (CI of a8a32a1:
118-124 late on iSCSI); but a refused command is an error in ``ioerr_cnt`` (``scsi_complete`` counts every command
with a result), so the count here, ``iodone_cnt - ioerr_cnt``, leaves it out: 0 in every sample of the fault on
iSCSI and iSER (full run of 24f59b3, 2026-12-06)."""
FAILBACK_WATCHED = (*LATE_CHECKED, RESET, RELOGIN)
"""The outages whose faulted path is watched for its failback once the fault is undone (:func:`watch_failback`):
the one-path and target-port faults', and the path whose controller was reset or whose session was logged out and
in (its new disk, at the same target address). Their paths' completions are counted in a sample just before the
fault, which tells whether the faulted path shared the I/O (then it must carry I/O again)."""


def path_counts(host: Host, device: str, sample_s: int = LATE_SAMPLE_S) -> dict[str, int]:
    """Target address -> I/Os the paths of ``device`` to it completed over ``sample_s`` seconds; a failed sample
    raises (:class:`CommandError`) rather than read as no I/O."""
    found = host.run(["sh", "-c", ACTIVE_PATH, "sh", device, str(sample_s)], timeout=60 + sample_s)
    return parse_path_counts(found.stdout)


def active_path(host: Host, device: str) -> tuple[str, str]:
    """(path device, target address) of the path of ``device`` (an NVMe multipath head or a dm-multipath map) that
    completed the most I/O over a second: the one carrying it now. :class:`faults.FaultError` when it cannot be
    told."""
    found = host.run(["sh", "-c", ACTIVE_PATH, "sh", device, str(ACTIVE_SAMPLE_S)], check=False, timeout=60)
    active = parse_active_path(found.stdout)
    if active is None:
        raise faults.FaultError(
            host.name,
            f"no path of {device} completed I/O in {ACTIVE_SAMPLE_S} s, so the path carrying it cannot be told",
            "a one-path outage needs a multipath device under I/O (an NVMe head nvmeXnY with paths nvmeXcZnY, or a "
            "dm-multipath map of iSCSI disks)",
        )
    return active


def active_interface(lab: LabModel, host: Host, device: str) -> str:
    """The storage interface of ``host`` the I/O to ``device`` (an NVMe multipath head) goes out of now: the
    :func:`active_path`'s target address and the host's port in that subnet."""
    return active_port(lab, host, device)[0]


def active_port(lab: LabModel, host: Host, device: str) -> tuple[str, str]:
    """(storage interface of ``host``, target address) of the path carrying the I/O to ``device`` now."""
    path, traddr = active_path(host, device)
    local = lab.local_port(host.name, traddr) if traddr else None
    port = next((p for p in lab.hosts[host.name].storage if str(p.address) == local), None)
    if port is None:
        raise faults.FaultError(
            host.name,
            f"the I/O to {device} goes over {path} to {traddr or 'an unknown address'}, which no storage port of "
            "the host in the lab reaches",
            f"list the host's port in that subnet in hosts.{host.name}.storage",
        )
    return port.interface, traddr


IO_FLOWING_WAIT_S = 60
"""How long fio may take from its start to its first completion before the case gives up."""
RESUME_WAIT_S = 60
"""After a brief outage, how long fio keeps running for I/O to resume before it is ended anyway (the stall and
the first I/O are then measured against the lab's limits; a device that never resumed fails the case)."""

# The undo: stop fio if it still runs, remove the folder. Idempotent.
FIO_STOP = r"""
d=$1
[ -d "$d" ] || exit 0
if [ ! -e "$d/end" ] && [ -s "$d/pid" ]; then
  kill -- -"$(cat "$d/pid")" 2>/dev/null || true
  n=50
  while [ ! -e "$d/end" ] && [ "$n" -gt 0 ]; do sleep 0.2; n=$((n - 1)); done
fi
rm -rf "$d"
"""


def fio_argv(
    host: str, device: str, region: Region, runtime_s: int, *, fio: str = "fio", rate_iops: int | None = RATE_IOPS
) -> list[str]:
    """fio writing ``region`` of ``device`` over and over for at most ``runtime_s`` seconds, each block verified soon
    after it was written (``verify_backlog``), going on after errors (so they are counted, not fatal), logging
    IOPS per :data:`INTERVAL_MS` on the Unix clock (the clock :func:`faults.fault_window` reads)."""
    return [
        fio,
        "--output-format=json",
        "--name=failover",
        f"--filename={device}",
        "--ioengine=libaio",
        "--direct=1",
        "--rw=write",
        f"--bs={region.bs}",
        f"--offset={region.offset}",
        f"--size={region.size}",
        f"--iodepth={IODEPTH}",
        *([f"--rate_iops={rate_iops}"] if rate_iops is not None else []),
        "--time_based=1",
        f"--runtime={runtime_s}",
        f"--verify={VERIFY}",
        f"--verify_backlog={VERIFY_BACKLOG}",
        "--verify_state_save=0",
        "--continue_on_error=all",
        f"--write_iops_log={host}",
        f"--log_avg_msec={INTERVAL_MS}",
        "--log_unix_epoch=1",
    ]


@dataclass(frozen=True)
class HostRun:
    """What one initiator's fio left: its output, its messages and logs, and when it ran (host Unix ms)."""

    host: str
    stdout: str
    logs: dict[str, str]
    start_ms: int
    end_ms: int
    exit_code: int


def start_fio(host: Host, argv: Sequence[str], undo: UndoStack) -> str:
    """Start ``argv`` detached on ``host``; returns its folder. The stop goes on ``undo`` as soon as the folder
    is known (a start that fails half-way leaves a fio that ends by itself after its runtime)."""
    folder = host.run(["sh", "-c", FIO_START, "sh", WORKDIR, *argv], timeout=60).stdout.strip().splitlines()[-1]

    def stop() -> None:
        host.run(["sh", "-c", FIO_STOP, "sh", folder], timeout=60)

    undo.push(f"stop fio in {folder} on {host.name}", stop)
    return folder


def wait_for_io(host: Host, device: str, wait_s: int = IO_FLOWING_WAIT_S) -> None:
    """Return once ``device`` on ``host`` completes I/O; :class:`faults.FaultError` if it did not within ``wait_s``."""
    result = host.run(["sh", "-c", IO_FLOWING, "sh", device, str(wait_s)], check=False, timeout=wait_s + 60)
    if not result.ok:
        raise faults.FaultError(
            host.name,
            f"no I/O completed on {device} within {wait_s} s of fio's start, so no fault was injected "
            f"(exit {result.exit_code})",
            "check the device answers (the connectivity suite) and fio's output in the case's raw files",
        )


def collect_fio(host: Host, folder: str, wait_s: int) -> HostRun:
    """Wait for the fio in ``folder`` to end and read everything it left."""
    result = host.run(["sh", "-c", FIO_COLLECT, "sh", folder, str(wait_s)], timeout=wait_s + 60)
    head, files = split_logs(result.stdout)

    def number(name: str) -> int:
        try:
            return int(files.get(name, "").strip())
        except ValueError:
            return -1

    return HostRun(host.name, head, files, number("start"), number("end"), number("rc"))


def series_of(run: HostRun, runtime_ms: int) -> HostSeries:
    """The host's IOPS series on its Unix clock. The run starts with its first logged interval (fio's set-up is
    no stall of the path) and ends ``runtime_ms`` later, or when fio ended if that was earlier."""
    series = host_series(run.host, run.logs, interval_ms=INTERVAL_MS, start_ms=run.start_ms, end_ms=run.end_ms)
    if series.intervals:
        start = series.intervals[0].start_ms
        end = min(run.end_ms, start + runtime_ms) if run.end_ms > 0 else start + runtime_ms
        series = HostSeries(series.host, series.interval_ms, series.intervals, start, max(end, start))
    return series


@dataclass
class OutageResult:
    """One outage on every initiator: each host's figures, what went wrong around them, the timeouts in force."""

    outage: str
    down_s: float
    figures: dict[str, FailoverFigures] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    timeouts: dict[str, Any] = field(default_factory=dict)
    """Per host: the timeouts read before the suite set its own (controller or session -> attribute -> value)."""
    wall_s: float = 0.0
    runs: dict[str, HostRun] = field(default_factory=dict)
    """What each host's fio left (its JSON, messages, logs), for the report's raw files."""
    series: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Per host: IOPS over time and the fault window (:func:`failover.throughput_points`), for the report's chart."""
    faulted: dict[str, str] = field(default_factory=dict)
    """Per host: the target address of the path a one-path or target-side fault took away."""
    late_ios: dict[str, int | None] = field(default_factory=dict)
    """Per host: I/Os that path completed in the fault's last :data:`LATE_SAMPLE_S` s (None: not counted). A path
    that was really taken away completes none; a fault that changed nothing would pass for a clean failover."""
    before_ios: dict[str, int | None] = field(default_factory=dict)
    """Per host: I/Os every path completed in a :data:`LATE_SAMPLE_S` s sample before the fault (what a fault's I/O
    must be back to for it to end early, :data:`SETTLED_SAMPLES`); None where not counted."""
    before_faulted: dict[str, int | None] = field(default_factory=dict)
    """Per host: what the path the fault takes away completed in that sample before the fault (None where not
    counted). 0 is a fault that takes nothing from the host: its I/O ran elsewhere (a target-side fault's port is
    the one carrying the first host's I/O)."""
    shared_before: dict[str, bool] = field(default_factory=dict)
    """Per host: the faulted path and another both completed I/O in the sample before the fault, so the faulted
    path must carry I/O again once the fault is undone (the failback, :func:`watch_failback`)."""
    samples: dict[str, list[tuple[int, int] | None]] = field(default_factory=dict)
    """Per host: each sample of the hold, (the faulted path's I/Os, the other paths'); None where it failed."""
    queued: bool = False
    """A long outage on hosts the lab says queue with no path left (``failover.long_outage: queue``)."""
    in_force: dict[str, Any] = field(default_factory=dict)
    """Per host, for a queued long outage: the NVMe controllers' timeouts read just before the fault."""
    cycles: list[OutageResult] = field(default_factory=list)
    """Path flapping (:mod:`pytest_fabricqa.failover.flapping`): each cycle, a one-path outage of its own."""

    def raw_files(self) -> dict[str, str]:
        """``host/file`` -> text of every host's fio output, with each host's fault times (Unix ms) as
        ``host/fault``: what a recorded run in tests/data/failover holds."""
        files: dict[str, str] = {}
        for host, run in self.runs.items():
            files[f"{host}/fio.json"] = run.stdout
            files.update({f"{host}/{name}": text for name, text in run.logs.items()})
            if host in self.figures:
                fault = self.figures[host].fault
                files[f"{host}/fault"] = f"{fault.start_ms} {fault.end_ms}\n"
            windows = [c.figures[host].fault for c in self.cycles if host in c.figures]
            if windows:  # path flapping: every cycle's fault, one line each
                files[f"{host}/faults"] = "".join(f"{f.start_ms} {f.end_ms}\n" for f in windows)
        return files


def _figures(
    run: HostRun, fault: Fault, reach_ms: int = FAULT_REACH_MS
) -> tuple[FailoverFigures | None, list[str], HostSeries | None]:
    try:
        result = parse_fio_output(run.stdout, host=run.host)
    except FioOutputError:
        said = "; ".join(fio_messages((), run.logs.get("fio.err", ""))[:3]) or "no output"
        return None, [f"{run.host}: fio exited {run.exit_code} without a report ({said})"], None
    runtime_ms = max((job.runtime_ms for job in result.jobs), default=0)
    errors = count_errors(result, run.logs.get("fio.err", "") + "\n" + run.stdout)
    series = series_of(run, runtime_ms)
    return measure(series, fault, errors, reach_ms=reach_ms), [], series


def _link_faults(lab: LabModel, host: Host, name_prefix: str) -> list[faults.LinkDown]:
    """One link fault per storage port the lab gives ``host`` (every path of it); a host without one gets the
    default fault, which refuses with what to set."""
    ports = lab.hosts[host.name].storage if host.name in lab.hosts else ()
    return [faults.link_outage(lab, host, name_prefix, p.interface) for p in ports] or [
        faults.link_outage(lab, host, name_prefix)
    ]


def _arm_all(links: list[faults.LinkDown], undo: UndoStack) -> None:
    for link in links:
        link.arm(undo)


def _restore_all(links: list[faults.LinkDown]) -> float:
    """Every link back, each tried even when another fails; the host's time when the first was back."""
    times: list[float] = []
    failed: BaseException | None = None
    for link in links:
        try:
            times.append(link.restore())
        except faults.FaultError as exc:
            failed = failed or exc
    if failed is not None:
        raise failed
    return min(times)


def apply_timeouts(
    lab: LabModel, hosts: Sequence[Host], name_prefix: str, subsystems: tuple[str, ...], family: str, undo: UndoStack
) -> dict[str, Any]:
    """The lab's ``failover`` path timeouts for ``family`` set on every host for the case (each recorded first, put
    back by ``undo``); per host, the values read before."""
    settings: FailoverSettings = lab.failover

    def set_timeouts(host: Host) -> dict[str, Any]:
        change = faults.of_lab(
            lab,
            faults.PathTimeouts(
                host,
                name_prefix,
                subsystems,
                nvme=settings.nvme.model_dump() if family == "nvme" else None,
                iscsi=settings.iscsi.model_dump() if family == "scsi" else None,
            ),
        )
        change.inject(undo)  # with no timeout to set, it reads what is in force and writes nothing
        return dict(change.params.get("read", {}))

    return _settled(each(hosts, set_timeouts, check=False))


def start_all(
    hosts: Sequence[Host],
    devices: Mapping[str, str],
    regions: Mapping[str, Region],
    runtime_s: int,
    rate_iops: int | None,
    undo: UndoStack,
) -> dict[str, str]:
    """fio writing and verifying each host's region (:func:`fio_argv`) started on every host, returned once I/O
    completes on every device; each host's fio folder. Each fio's stop goes on ``undo``."""
    folders = _settled(
        each(
            hosts,
            lambda h: start_fio(
                h, fio_argv(h.name, devices[h.name], regions[h.name], runtime_s, rate_iops=rate_iops), undo
            ),
        )
    )
    _settled(each(hosts, lambda h: wait_for_io(h, devices[h.name])))
    return folders


def count_before(result: OutageResult, hosts: Sequence[Host], devices: Mapping[str, str]) -> dict[str, int | None]:
    """Each host's paths counted over a :data:`LATE_SAMPLE_S` s sample before the fault, split by the path
    ``result.faulted`` names: what every path completed (returned, and :attr:`OutageResult.before_ios`), what the
    faulted one did (:attr:`~OutageResult.before_faulted`), and whether it shared the I/O with another
    (:attr:`~OutageResult.shared_before`: then it must carry I/O again after the fault); None where unread."""
    counted = each(hosts, lambda h: path_counts(h, devices[h.name]), check=False)
    split = {n: None if isinstance(v, BaseException) else _split(v, result.faulted[n]) for n, v in counted.items()}
    before = result.before_ios = {n: None if v is None else sum(v) for n, v in split.items()}
    result.before_faulted = {n: None if v is None else v[0] for n, v in split.items()}
    result.shared_before = {n: v is not None and v[0] > 0 and v[1] > 0 for n, v in split.items()}
    return before


def path_outage(
    lab: LabModel,
    hosts: Sequence[Host],
    devices: Mapping[str, str],
    regions: Mapping[str, Region],
    *,
    name_prefix: str,
    subsystems: tuple[str, ...],
    family: str,
    outage: str,
    undo: UndoStack,
    target_fault: Callable[[str], faults.FaultInjector] | None = None,
    target_restart: Callable[[], faults.FaultInjector] | None = None,
) -> OutageResult:
    """Paths down on every host at once while fio writes and verifies ``regions[host]`` of ``devices[host]``; each
    host's figures. :data:`failover.BRIEF` and :data:`failover.LONG`: every storage link of each host, for the
    outage's time; :data:`failover.ONE_PATH`: only the link of the path carrying the I/O once it flows
    (:func:`active_interface`), for ``one_path_down_s``; :data:`failover.TARGET_OUTAGES`:
    ``target_fault(address)`` on the target, for the port at the address carrying the first host's I/O (its ANA
    group inaccessible, its ALUA group unavailable, or the port itself taken away), for ``one_path_down_s``, each
    host's window read on its own clock just before and after; :data:`failover.RESTART`: ``target_restart()``, the
    whole target away on every path at once, for ``brief_down_s``, each host's window read the same way. The
    one-path and target-port kinds end sooner once the I/O settled on
    the remaining paths (:data:`SETTLED_SAMPLES`). ``family``: ``nvme`` or ``scsi`` (which timeouts of ``lab.failover`` apply). Every
    change is undone by ``undo`` (the caller unwinds it, also on failure); the links are up again and fio has ended
    on return."""
    settings: FailoverSettings = lab.failover
    down_s = {BRIEF: settings.brief_down_s, LONG: settings.long_down_s, RESTART: settings.brief_down_s}.get(
        outage, settings.one_path_down_s
    )
    if outage in TARGET_OUTAGES and target_fault is None:
        raise ValueError(f"the {outage} outage needs target_fault: the fault on the target, for a path's address")
    if outage == RESTART and target_restart is None:
        raise ValueError(f"the {outage} outage needs target_restart: the fault that restarts the target")
    result = OutageResult(outage, down_s)
    began = time.monotonic()
    # fio is ended (SIGINT) once the links are back for after_s; the runtime is only a bound. Under emulation a
    # command to a guest takes up to a second, so the outage's own commands add seconds.
    runtime_s = math.ceil(settings.before_s + down_s + settings.after_s) + RUNTIME_MARGIN_S

    result.timeouts = apply_timeouts(lab, hosts, name_prefix, subsystems, family, undo)
    result.queued = outage == LONG and settings.long_outage == QUEUE
    if result.queued and family == "nvme":
        read = each(hosts, lambda h: faults.parse_timeouts(h.run(["sh", "-c", faults.TIMEOUTS_READ]).stdout))
        for name, value in read.items():
            if isinstance(value, BaseException):
                result.problems.append(f"{name}: the timeouts in force could not be read: {value}")
            else:
                result.in_force[name] = value
                result.problems.extend(queue_gaps(name, value, subsystems))
    links: dict[str, list[faults.LinkDown]] = {}
    at_target: faults.FaultInjector | None = None
    if outage in (BRIEF, LONG):
        links = {h.name: _link_faults(lab, h, name_prefix) for h in hosts}
        _settled(each(hosts, lambda h: _arm_all(links[h.name], undo)))  # checked and recorded before fio starts
    folders = start_all(hosts, devices, regions, runtime_s, settings.rate_iops, undo)
    if outage == ONE_PATH:  # the path carrying the I/O is known only once it flows
        chosen = _settled(each(hosts, lambda h: active_port(lab, h, devices[h.name])))
        links = {h.name: [faults.link_outage(lab, h, name_prefix, chosen[h.name][0])] for h in hosts}
        result.faulted = {name: traddr for name, (_, traddr) in chosen.items()}
        _settled(each(hosts, lambda h: _arm_all(links[h.name], undo)))
    controllers: dict[str, str] = {}
    sessions: dict[str, faults.SessionRelogin] = {}
    if outage in (RESET, RELOGIN):  # the path carrying the I/O, on every host: its controller, or its iSCSI session
        chosen_paths = _settled(each(hosts, lambda h: active_path(h, devices[h.name])))
        result.faulted = {name: traddr for name, (_, traddr) in chosen_paths.items()}
    if outage == RELOGIN:
        sessions = {
            h.name: faults.SessionRelogin(lab, h, name_prefix, subsystems[0], result.faulted[h.name]) for h in hosts
        }
        _settled(each(hosts, lambda h: sessions[h.name].arm(undo)))
    if outage == RESET:
        for name, (path, _) in chosen_paths.items():
            try:
                controllers[name] = faults.controller_of(path)
            except ValueError as exc:
                raise faults.FaultError(name, str(exc), "a controller reset is made on NVMe multipath") from None
    if outage in TARGET_OUTAGES:
        assert target_fault is not None
        traddr = active_path(hosts[0], devices[hosts[0].name])[1]
        result.faulted = {h.name: traddr for h in hosts}
        at_target = target_fault(traddr)
        at_target.arm(undo)
    if outage == RESTART:
        assert target_restart is not None
        at_target = target_restart()
        at_target.arm(undo)
    waited_from = time.monotonic()
    before: dict[str, int | None] | None = None
    if outage in FAILBACK_WATCHED:  # what every path completes before the fault: the rate a settled fault is back to
        before = count_before(result, hosts, devices)
    time.sleep(max(0.0, settings.before_s - (time.monotonic() - waited_from)))
    down: dict[str, Any]
    up: dict[str, Any]
    if outage == RESET:
        # Each host's reset waits for its controller to be live again: the fault's window is the reset's own.
        reset = each(hosts, lambda h: faults.reset_controller(h, controllers[h.name]), check=False)
        down = {n: r if isinstance(r, BaseException) else r[0] for n, r in reset.items()}
        up = {n: r if isinstance(r, BaseException) else r[1] for n, r in reset.items()}
        taken = [r[1] - r[0] for r in reset.values() if not isinstance(r, BaseException)]
        result.down_s = down_s = round(max(taken, default=0.0), 1)
    elif outage == RELOGIN:
        # Logged out and straight in again on each host: the fault's window is the logout's start to the login's end.
        down = each(hosts, lambda h: sessions[h.name].fire(), check=False)
        up = each(hosts, lambda h: sessions[h.name].restore(), check=False)
        taken = [
            up[n] - down[n]
            for n in up
            if not isinstance(up[n], BaseException) and not isinstance(down[n], BaseException)
        ]
        result.down_s = down_s = round(max(taken, default=0.0), 1)
        renewed = each(hosts, lambda h: sessions[h.name].new_session(), check=False)
        result.problems.extend(unrenewed({n: (sessions[n].name, sid) for n, sid in renewed.items()}))
    elif at_target is None:
        # Every path of a host, one after the other: the fault begins as the first path's break begins (fio's I/O
        # may stop right there: on iSER under dm-multipath the in-flight I/O sat on the first dropped path and the
        # stall began 246 ms before the last path's break, outside the fault's lead, in the full run of e5b936b),
        # and ends when the first path is back.
        down = each(hosts, lambda h: min([link.fire() for link in links[h.name]]), check=False)
        if outage == LONG:
            # fio ends at the first I/O error (fio 3.33 does despite continue_on_error=all): the paths come back once
            # every host's fio has ended, or after long_down_s at the most. A timeout that fails I/O after 13 s
            # then costs 13 s, not the 45 s a slower protocol needs.
            down_s = _hold_until_fio_ends(hosts, folders, down_s)
            result.down_s = round(down_s, 1)
        elif outage == ONE_PATH:
            result.late_ios, down_s, result.samples = _hold_counting(
                hosts, devices, result.faulted, down_s, before, settings.settled_share
            )
            result.down_s = down_s
        else:
            time.sleep(down_s)
        up = each(hosts, lambda h: _restore_all(links[h.name]), check=False)
    else:
        # One change on the target for every host: each host's window on its own clock (fio's), read just before
        # the change and just after its restore, so it holds the change with at most a command's time to spare.
        down = each(hosts, _clock, check=False)
        fired = _attempt(at_target.fire)
        if outage == RESTART:  # every path is away: nothing to count, the target stays down for the brief time
            time.sleep(down_s)
        else:
            result.late_ios, down_s, result.samples = _hold_counting(
                hosts, devices, result.faulted, down_s, before if fired is None else None, settings.settled_share
            )
            result.down_s = down_s
        restored = _attempt(at_target.restore)
        up = each(hosts, _clock, check=False)
        for what, failure in (("made", fired), ("undone", restored)):
            if failure is not None:
                result.problems.append(f"{at_target.name} could not be {what}: {failure}")
    watched: dict[str, tuple[float | None, str] | BaseException] = {}
    watch_began = time.monotonic()
    if outage in FAILBACK_WATCHED and before is not None:
        watched = each(
            hosts,
            lambda h: watch_failback(
                h,
                devices[h.name],
                result.faulted[h.name],
                due=result.shared_before.get(h.name, False),
                wait_s=settings.failback_wait_s,
            ),
            check=False,
        )
    if outage in (BRIEF, RESTART) or result.queued:
        # fio runs on until I/O flows again on every host (bounded), so a slow resume is measured as the stall it
        # is rather than cut off by fio's end: a fixed after_s once ended fio while iSER was still logging in
        # again after a brief outage, and the case could only say "I/O did not resume".
        each(hosts, lambda h: wait_for_io(h, devices[h.name], RESUME_WAIT_S), check=False)
    time.sleep(max(0.0, settings.after_s - (time.monotonic() - watch_began)))
    each(hosts, lambda h: h.run(["sh", "-c", FIO_END, "sh", folders[h.name]]), check=False)
    for name in [h.name for h in hosts]:
        if outage == RESET:
            if isinstance(down[name], BaseException):
                result.problems.append(f"{name}: the controller reset failed: {down[name]}")
            continue
        if outage == RELOGIN:
            for what, outcome in (("logged out", down[name]), ("logged in again", up[name])):
                if isinstance(outcome, BaseException):
                    result.problems.append(f"{name}: the iSCSI session could not be {what}: {outcome}")
            continue
        for what, outcome in (("down", down[name]), ("up", up[name])):
            if isinstance(outcome, BaseException):
                result.problems.append(f"{name}: the storage link could not be brought {what}: {outcome}")
    runs = each(hosts, lambda h: collect_fio(h, folders[h.name], runtime_s + 120), check=False)
    if outage == RESET:
        label = f"the active path's controller reset ({', '.join(sorted(set(controllers.values())))})"
    elif outage == RELOGIN:
        label = f"the active path's iSCSI session ({', '.join(sorted(set(result.faulted.values())))}) logged out and in"
    elif outage == ONE_PATH:
        label = f"the active path's link ({', '.join(sorted({ls[0].interface for ls in links.values()}))}) down"
    elif at_target is not None:
        label = at_target.name
    else:
        label = "every storage link down"
    label += f" {result.down_s:g} s"
    for host in hosts:
        run, injected, restored = runs[host.name], down[host.name], up[host.name]
        if isinstance(run, BaseException):
            result.problems.append(f"{host.name}: fio's output could not be read: {run}")
            continue
        result.runs[host.name] = run
        if isinstance(injected, BaseException) or isinstance(restored, BaseException):
            continue
        fault = faults.fault_window(label, injected, restored)
        figures, problems, series = _figures(run, fault, round(settings.fault_reach_s * 1000))
        result.problems.extend(problems)
        seen = watched.get(host.name)
        if isinstance(seen, BaseException):
            result.problems.append(f"{host.name}: the faulted path could not be watched for its failback: {seen}")
        elif seen is not None and figures is not None:
            due = result.shared_before.get(host.name, False)
            figures = replace(figures, failback_s=seen[0], failback=seen[1], failback_due=due)
        if figures is not None:
            result.figures[host.name] = figures
        if series is not None:
            result.series[host.name] = throughput_points(series, fault)
    result.wall_s = time.monotonic() - began
    return result


def unrenewed(after: Mapping[str, tuple[str, int | BaseException | None]]) -> list[str]:
    """For a session logout and login, per host (the fault's name, the session id after it: None when it is the one
    before or there is none, an exception when it could not be read): a problem for each host where the fault
    changed nothing, or where that cannot be told."""
    problems = []
    for name, (fault, sid) in after.items():
        if isinstance(sid, BaseException) or sid is None:
            problems.append(
                f"{name}: {fault}, but the session after it is "
                f"{'unknown' if isinstance(sid, BaseException) else 'the one before or none'}: the fault "
                "changed nothing, so the case measured nothing"
            )
    return problems


FIO_ENDED = '[ -e "$1/end" ]'


def _hold_counting(
    hosts: Sequence[Host],
    devices: Mapping[str, str],
    faulted: Mapping[str, str],
    down_s: float,
    before: Mapping[str, int | None] | None = None,
    share: float = SETTLED_SHARE,
) -> tuple[dict[str, int | None], float, dict[str, list[tuple[int, int] | None]]]:
    """Hold a fault for ``down_s`` seconds at the most, sampling each host's paths (:data:`LATE_SAMPLE_S` s each)
    from the start; returns, per host, the I/Os the path to ``faulted[host]`` completed in the last sample (None
    where it could not be read), and the seconds held (rounded to 0.1). With ``before`` (per host, what every path
    completed in a sample before the fault), the hold ends once :func:`_settled_sample` holds
    :data:`SETTLED_SAMPLES` times in a row; otherwise, and while it does not, the last sample ends within
    :data:`LATE_MARGIN_S` + :data:`LATE_SAMPLE_S` s of the end. Third: per host, every sample as (the faulted
    path's I/Os, the other paths'), None for one that failed."""
    began = time.monotonic()
    in_a_row = 0
    trail: dict[str, list[tuple[int, int] | None]] = {h.name: [] for h in hosts}
    while True:
        counted = each(hosts, lambda h: path_counts(h, devices[h.name]), check=False)
        for name, counts in counted.items():
            trail[name].append(None if isinstance(counts, BaseException) else _split(counts, faulted[name]))
        in_a_row = in_a_row + 1 if before is not None and _settled_sample(counted, faulted, before, share) else 0
        if in_a_row >= SETTLED_SAMPLES:
            break
        if time.monotonic() - began + LATE_SAMPLE_S + LATE_MARGIN_S > down_s:
            time.sleep(max(0.0, down_s - (time.monotonic() - began)))
            break
    late = {name: None if taken[-1] is None else taken[-1][0] for name, taken in trail.items()}
    return late, round(time.monotonic() - began, 1), trail


def _split(counts: Mapping[str, int], faulted: str) -> tuple[int, int]:
    """(the faulted address's I/Os, every other address's) of one sample."""
    return counts.get(faulted, 0), sum(n for address, n in counts.items() if address != faulted)


def _settled_sample(
    counted: Mapping[str, Any],
    faulted: Mapping[str, str],
    before: Mapping[str, int | None],
    share: float = SETTLED_SHARE,
) -> bool:
    """Whether, on every host, the faulted path completed nothing in the sample and the others at least
    :data:`SETTLED_SHARE` of what all paths completed before the fault (a sample or a figure that could not be
    read settles nothing)."""
    for name, counts in counted.items():
        rate = before.get(name)
        if isinstance(counts, BaseException) or not isinstance(rate, int) or rate <= 0:
            return False
        still, moved = _split(counts, faulted[name])
        if still != 0 or moved < share * rate:
            return False
    return True


FAILBACK_SAMPLE_S = 1
"""Each failback sample: how long the faulted path's completions are counted."""
FAILBACK_MIN_IOS = 3
"""A failback sample counts when the faulted path completed at least this many I/Os in it: a SCSI disk's count
(``iodone_cnt``) includes multipathd's path checker, whose TEST UNIT READY completes once per polling interval on a
reinstated path that carries no I/O (iSCSI on LIO, the virtual lab: "1 I/Os in a 1 s sample" 5-8 s after the
restore); fio at the failover rate puts tens on a path that carries I/O."""


def watch_failback(host: Host, device: str, traddr: str, *, due: bool, wait_s: float) -> tuple[float | None, str]:
    """(seconds from now to the end of the first :data:`FAILBACK_SAMPLE_S` s sample in which the path of ``device``
    to ``traddr`` completed I/O (:data:`FAILBACK_MIN_IOS`), or None; what was seen, a clause). ``due``: the path shared the host's I/O before
    the fault, so it is watched for up to ``wait_s``; otherwise one sample is read (whether the I/O goes back to a
    path that carried it alone is the multipath policy's choice; NVMe's numa did, on the virtual lab)."""
    began = time.monotonic()
    while True:
        done = path_counts(host, device, FAILBACK_SAMPLE_S).get(traddr, 0)
        if done >= FAILBACK_MIN_IOS:
            took = round(time.monotonic() - began, 1)
            return took, (
                f"the path at {traddr} carried I/O again {took:g} s after the fault was undone ({done} I/Os in a "
                f"{FAILBACK_SAMPLE_S} s sample)"
            )
        if not due or time.monotonic() - began >= wait_s:
            break
    if due:
        return None, (
            f"the path at {traddr}, which shared the I/O with another path before the fault, carried none within "
            f"{wait_s:g} s of the fault being undone (failover.failback_wait_s)"
        )
    return None, (
        f"the path at {traddr}, which carried the I/O alone before the fault, carried none in a {FAILBACK_SAMPLE_S} s "
        "sample after it was undone: the multipath policy kept the I/O on the path it moved to"
    )


def _hold_until_fio_ends(hosts: Sequence[Host], folders: Mapping[str, str], most_s: float) -> float:
    """Seconds waited, polling each second, until fio has ended on every host or ``most_s`` have passed (hosts are
    asked over their management address, which the outage leaves alone)."""
    began = time.monotonic()
    while time.monotonic() - began < most_s:
        time.sleep(min(1.0, max(0.0, most_s - (time.monotonic() - began))))
        ended = each(
            hosts, lambda h: h.run(["sh", "-c", FIO_ENDED, "sh", folders[h.name]], check=False).ok, check=False
        )
        if all(value is True for value in ended.values()):
            break
    return time.monotonic() - began


def _clock(host: Host) -> float:
    """The host's Unix time (s), the clock fio's logs are on."""
    return float(host.run(["sh", "-c", faults.CLOCK]).stdout.split()[-1])


def _attempt(step: Callable[[], object]) -> faults.FaultError | None:
    try:
        step()
    except faults.FaultError as exc:
        return exc
    return None


def _settled(results: Mapping[str, Any]) -> dict[str, Any]:
    """Every host's result; the first host's exception raised after all finished (its undo is on the stack)."""
    for value in results.values():
        if isinstance(value, BaseException):
            raise value
    return dict(results)


QUEUE = "queue"
"""``failover.long_outage`` of a lab whose hosts queue I/O with no path left."""


def queue_gaps(host: str, read: Mapping[str, Mapping[str, Any]], subsystems: Sequence[str]) -> list[str]:
    """One sentence per NVMe-oF controller of ``subsystems`` in ``read`` (:func:`faults.parse_timeouts`) whose
    timeouts in force fail I/O with no path left: ``fast_io_fail_tmo`` (the kernel's multipath then gives the
    controller up as a path, 6.1's ``nvme_available_path``) or ``ctrl_loss_tmo`` not ``off``."""
    gaps = []
    for name, entry in sorted(read.items()):
        if entry.get("kind") != "nvme" or entry.get("subsystem") not in subsystems:
            continue
        for attribute in ("fast_io_fail_tmo", "ctrl_loss_tmo"):
            value = entry.get(attribute)
            if value != "off":
                gaps.append(
                    f"{host}: {name} has {attribute} {value} s in force, so it fails I/O with no path left instead "
                    f"of queueing as the lab's failover.long_outage: queue says (set failover.nvme.{attribute}_s: -1)"
                )
    return gaps


def outage_problems(
    result: OutageResult,
    limits: Thresholds,
    hosts: Sequence[str],
    *,
    database: OracleSettings | None = None,
) -> list[str]:
    """Every reason the outage's case fails, each naming the host, the fault and the figure against its limit.

    Brief outage and target restart (every path away for the brief time): no I/O error and no verify error
    (whatever the lab's limits say: an outage shorter than the path timeout must cost none), I/O stopped for at
    least :data:`TAKEN_SHARE` of the outage and resumed after it, and the lab's limits (``max_stall_s``, ...). Long outage:
    I/O errors seen on every host (else the measurement cannot see errors); the lab's limits but for the error
    counts and the stall, which the outage is there to cause. A long outage on hosts that queue
    (:attr:`OutageResult.queued`): no I/O error and no verify error, I/O stopped for the outage and resumed after
    it; the lab's limits but for the stall, the first I/O and the recovery, which last as long as the outage."""
    problems = list(result.problems)
    if result.queued:
        queued = {"max_io_errors": None, "max_verify_errors": 0.0, "max_stall_s": None}
        limits = limits.model_copy(update={**queued, "max_first_io_s": None, "max_recovery_s": None})
    elif result.outage in (BRIEF, ONE_PATH, RESET, RELOGIN, RESTART, *TARGET_OUTAGES):
        limits = limits.model_copy(update={"max_io_errors": 0.0, "max_verify_errors": 0.0})
    elif result.outage == LONG:
        lifted = {"max_io_errors": None, "max_verify_errors": None, "max_stall_s": None}
        limits = limits.model_copy(update=lifted)
    else:
        raise ValueError(f"unknown outage {result.outage!r}")
    for host in hosts:
        figures = result.figures.get(host)
        if figures is None:
            problems.append(f"{host}: no failover figures (fio's IOPS log could not be read)")
            continue
        label = f"{host}, fault {figures.fault.name}"
        if figures.pre_fault_iops is None:
            problems.append(f"{label}: no I/O completed before the fault, so nothing was measured")
        resumes = result.outage in (BRIEF, RESTART) or result.queued
        if result.outage in (RESET, RELOGIN) and figures.first_io_s is None:
            after = "the controller reset" if result.outage == RESET else "the session's logout and login"
            problems.append(f"{label}: I/O did not go on after {after} (no I/O completed after it)")
        if resumes and figures.first_io_s is None:
            back = "the target came back" if result.outage == RESTART else "the links came back"
            problems.append(f"{label}: I/O did not resume after {back} (no I/O completed after it)")
        if result.queued and figures.io_errors:
            problems.append(
                f"{label}: {figures.io_errors} I/O error(s) although the lab's hosts queue with no path left "
                "(failover.long_outage: queue): a path timeout failed the I/O (NVMe fast_io_fail_tmo or "
                "ctrl_loss_tmo, dm-multipath's no_path_retry, or a session's recovery_tmo without dm-multipath)"
            )
        if resumes and figures.stall_s < TAKEN_SHARE * result.down_s:
            problems.append(
                f"{label}: I/O stopped for {figures.stall_s:g} s only, though every path was down for "
                f"{result.down_s:g} s: the fault did not take the paths away, so the case measured no outage"
            )
        if result.outage in (ONE_PATH, *TARGET_OUTAGES) and (
            figures.first_io_s is None or figures.first_io_s >= result.down_s
        ):
            when = "at all" if figures.first_io_s is None else f"until the path came back ({figures.first_io_s:g} s)"
            problems.append(
                f"{label}: I/O did not move to a remaining path while the path was down for {result.down_s:g} s: "
                f"none completed {when}"
            )
        late = result.late_ios.get(host)
        if result.outage in LATE_CHECKED and host in result.faulted:
            to = f"the path to {result.faulted[host]}"
            if result.before_faulted.get(host) == 0:
                problems.append(
                    f"{label}: {to} completed none of {host}'s I/O in a {LATE_SAMPLE_S} s sample before the fault "
                    f"(the other paths {result.before_ios.get(host)}): the fault took nothing from {host}, so the "
                    "case measured no failover there"
                )
            if late is None:
                problems.append(f"{label}: the I/O of {to} could not be counted during the fault")
            elif late > 0:
                problems.append(
                    f"{label}: {to} still completed {late} I/Os in the fault's last {LATE_SAMPLE_S} s: the fault did "
                    "not take the path away, so the case measured no failover"
                )
        if result.outage == LONG and not result.queued and figures.io_errors == 0:
            problems.append(
                f"{label}: no I/O error was seen although every path was down for {result.down_s:g} s, longer than "
                "the path timeout: the timeout did not apply or the measurement cannot see errors"
            )
        problems.extend(failover_violations(figures, limits, database=database))
    return problems


READ_PROBE = 'dd if="$1" of=/dev/null bs=4096 count=1 iflag=direct status=none'


def usable_after(hosts: Sequence[Host], devices: Mapping[str, str], within_s: float) -> list[str]:
    """Every host reads its device again within ``within_s`` (polled each second); one sentence per host that
    did not."""

    def wait(host: Host) -> str | None:
        deadline = time.monotonic() + within_s
        while True:
            probe = host.run(["sh", "-c", READ_PROBE, "sh", devices[host.name]], check=False, timeout=within_s + 30)
            if probe.ok:
                return None
            if time.monotonic() >= deadline:
                tail = (probe.stderr.strip().splitlines() or ["no message"])[-1]
                return (
                    f"{host.name}: {devices[host.name]} still cannot be read {within_s:g} s after the fault was "
                    f"undone ({tail})"
                )
            time.sleep(1)

    found = each(hosts, wait, check=False)
    return [str(v) if isinstance(v, BaseException) else v for v in found.values() if v is not None]


def verified_after(hosts: Sequence[Host], devices: Mapping[str, str], regions: Mapping[str, Region]) -> list[str]:
    """Every host writes its own region again and reads it back, all at once: the fabric is usable after the
    outage. One sentence per mismatch, shortfall or failed run."""
    outcome = Outcome()
    runs = each(hosts, lambda h: run_verify(h, devices[h.name], [regions[h.name]], write=True), check=False)
    for name, run in runs.items():
        if isinstance(run, BaseException):
            outcome.problems.append(f"{name}: the write and verify after the outage did not run: {run}")
        else:
            outcome.writers[regions[name]] = name
            outcome.add(run)
    return outcome.problems
