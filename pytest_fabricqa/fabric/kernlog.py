"""The kernel's own account of a case: each lab host's storage messages (NVMe, SCSI, iSCSI/iSER, RDMA,
dm-multipath, SCST, hung tasks, and the clocksource watchdog's notes, which say a guest's CPU stopped) since the
case began, read from ``dmesg``, and the RDMA link counters that rose meanwhile (retransmits, errors).

A stalled path, a dropped controller or a hung reconnect shows first in the initiators' and the target's kernel
log; a failure that names only fio's timeout leaves the engineer (and a CI log) guessing, and a path that dropped
in the middle of a point that still met its limits leaves a PASS that hides it. So every case that puts load on
the target reads its account when it ends (:func:`account`, wired in the plugin): a failed case shows it, a
failover case keeps it as its fault's account, and a case that injected no fault fails when its hosts logged
storage trouble (:data:`TROUBLE`; :func:`trouble_problems`), unless the lab allows the line (``watch.kernel_allow``).

Reading is one command per host (read-only; ``dmesg`` needs root or ``kernel.dmesg_restrict=0``), bounded in time,
and reads the host's clock with it, so "since the case began" is on the host's clock, not the runner's; a host
that cannot be read is said so in one line instead of failing the case.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

RDMA_MARK = "== rdma statistic"
KERNEL_LOG = (
    'date +%s.%N; { dmesg --time-format iso || echo "dmesg failed: exit $?"; } | tail -n 3000; '
    f'echo "{RDMA_MARK}"; rdma statistic show 2>/dev/null || true'
)
"""The host's clock (Unix seconds, first line), then its kernel ring buffer with wall-clock times (util-linux 2.30
and later), its newest lines, then (after :data:`RDMA_MARK`) each RDMA link's counters (iproute2's ``rdma``;
nothing on a host without it or without RDMA devices)."""
READ_TIMEOUT_S = 20.0
SLACK_S = 1.0
"""Lines this long before the case began (on the host's clock) count too: the clock is read over SSH, so the
runner's moment maps to the host's within the command's time."""
MOST_LINES = 30
"""At most this many storage lines per host are shown: the whole connect chatter would drown the story."""
FIRST_LINES = 10
"""Of :data:`MOST_LINES`, this many are the oldest when there are more: how the trouble began (a guest starved of
CPU, a first timeout) is the start of the story, and the newest lines alone showed only its end (a queue's worth
of ``I/O ... QID 1 timeout`` lines on vnode2 and its reconnect, CI of 540e45f, nothing of how the stall began)."""
RDMA_RISE = re.compile(r"err|retr|seq|dup|rnr|timeout|out_of|link_down|drop|discard", re.IGNORECASE)
"""The RDMA link counters worth showing when they rose over a case: retransmits, duplicates, out-of-sequence
packets, RNR NAKs, errors (Soft-RoCE's ``duplicate_request``, ``out_of_seq_request``, ``completer_retry_err``,
``retry_exceeded_err``; a ConnectX's ``out_of_sequence``, ``local_ack_timeout_err``), not the traffic counts.
Shown, never judged: a retransmit is the transport doing its job, and a lost I/O shows in the kernel log anyway."""
STORAGE = re.compile(
    r"nvme|nvmet|iscsi|iser|isert|scsi|\bsd[a-z]+\b|rdma|\brxe|\bmlx|blk_update|I/O error|Buffer I/O|device-mapper"
    r"|multipath|\bdm-\d|scst|\btgt|hung_task|blocked for more than|INFO: task|Call Trace|\bBUG\b|WARNING:|Oops"
    r"|\bLink is (?:Up|Down)\b|\blink (?:up|down)\b|clocksource",
    re.IGNORECASE,
)
_LINE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[,.](\d+))?([+-]\d{2}:?\d{2})\s(.*)$")


TROUBLE = re.compile(
    r"I/O error|blk_update_request|critical \w+ error|Buffer I/O|medium error|Sense Key|FAILED Result"
    r"|reservation conflict|rejecting I/O|offline device|timed? ?out|timeout|reset(?:ting)? controller"
    r"|controller is down|error recovery|failfast|Reconnecting in|reconnect(?:ed| attempt)|Failed reconnect"
    r"|failed to connect|connection error|conn error|connection\d+:\d+: detected|ping timeout|session recovery"
    r"|RDMA_CM_EVENT_(?:DISCONNECTED|UNREACHABLE|REJECTED|ADDR_ERROR|ROUTE_ERROR|CONNECT_ERROR)"
    r"|keep-?alive|Failing path|remaining active paths|Reinstating path|Link is Down|\blink down\b"
    r"|blocked for more than|hung_task|INFO: task|Call Trace|\bBUG\b|WARNING:|Oops|soft lockup|\bstall\b"
    r"|ABORT_TASK|LUN_RESET|MISCOMPARE",
    re.IGNORECASE,
)
"""Storage lines that mean trouble: an I/O error, a SCSI error or reservation conflict, a timeout, a controller
reset or reconnect, a lost connection, a path failed or reinstated by dm-multipath, a link down, a hung task, a
kernel warning or trace, a target aborting or resetting. A connect's or a disconnect's own lines ("new ctrl",
"Removing ctrl", an iSCSI login) are not, nor is what :data:`BENIGN` names."""
BENIGN = re.compile(r"alua: transition timeout set to|WARNING: .* check_flush_dependency", re.IGNORECASE)
"""Lines :data:`TROUBLE` would match that say nothing is wrong: scsi_dh_alua's note of its own transition timeout,
logged for every SCSI disk an ALUA target (LIO) shows, at each login; and the workqueue lint's warning that a
memory-reclaim workqueue flushed an ordinary one (``check_flush_dependency``, once per boot), which Debian 12's
6.1 kernel logs when scsi_transport_iscsi unbinds a session at logout (``WQ_MEM_RECLAIM
iscsi_ctrl_0:3:__iscsi_unbind_session ... is flushing !WQ_MEM_RECLAIM pm:pm_runtime_work``, CI of 4627b63, an
SCST teardown on vnode1): a kernel's own bookkeeping at a clean logout, no I/O touched. A warning :data:`BENIGN`
names excuses its own call trace (the ``Call Trace:`` line that follows it before another splat begins)."""
DISCONNECT_READS = r"Buffer I/O error on dev \S+, logical block \d+, async page read"
"""What a deliberate disconnect of every path may leave (a case's ``fabricqa_kernel_expects``): a buffered read of
the device -- udev's probe or the page cache's readahead, never the plugin's fio, which reads with O_DIRECT -- in
flight when the last path went ("block nvme0n1: no available path - failing I/O", then "Buffer I/O error on dev
nvme0n1, logical block 1024, async page read" on vnode1, nvme-rdma on nvmet, full run of 46e990c). A lost write,
any other I/O error, or an error on a device while a path remains is still trouble."""
SPLAT = re.compile(r"WARNING:|\bBUG\b|Oops|INFO: task|blocked for more than|soft lockup|hung_task", re.IGNORECASE)
"""The first line of a kernel splat, whose ``Call Trace:`` follows it."""


def _stamp(match: re.Match[str]) -> float:
    stamp, fraction, zone, _ = match.groups()
    return datetime.fromisoformat(f"{stamp}{zone}").timestamp() + float(f"0.{fraction or 0}")


def last_stamp(text: str) -> float | None:
    """The time of the newest line of ``dmesg --time-format iso`` output (Unix seconds on the host's clock)."""
    for line in reversed(text.splitlines()):
        match = _LINE.match(line)
        if match is not None:
            return _stamp(match)
    return None


def storage_entries(text: str, since_s: float, after_s: float | None = None) -> list[tuple[float, str]]:
    """The storage lines of ``dmesg --time-format iso`` output stamped at or after ``since_s`` (Unix seconds on the
    host's clock, less :data:`SLACK_S`) and after ``after_s`` (the newest line an earlier case's account read: its
    lines are that case's, never the next one's), oldest first, each with its time (Unix seconds on the host's
    clock) and as ``HH:MM:SS.mmm message``. Lines without a time (a continuation) belong to the line before them."""
    found: list[tuple[float, str]] = []
    keep = False
    when = 0.0
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            if keep and line.strip():
                found.append((when, f"{'':13}{line.strip()}"))
            continue
        stamp, fraction, _, message = match.groups()
        when = _stamp(match)
        keep = when >= since_s - SLACK_S and (after_s is None or when > after_s) and STORAGE.search(message) is not None
        if keep:
            found.append((when, f"{stamp[11:]}.{(fraction or '0')[:3]:0<3} {message.strip()}"))
    return found


def storage_lines(text: str, since_s: float, *, most: int | None = MOST_LINES) -> list[str]:
    """:func:`storage_entries`' lines without their times, the newest ``most`` of them (every one with None)."""
    found = [line for _, line in storage_entries(text, since_s)]
    return found if most is None else found[-most:]


def read_storage_lines(host: Host, since_s: float, *, most: int | None = MOST_LINES) -> list[str]:
    """One host's storage lines since ``since_s`` (the runner's Unix time); raises what the transport raises."""
    entries, _, _, _ = read_host(host, since_s)
    lines = [line for _, line in entries]
    return lines if most is None else lines[-most:]


def read_host(
    host: Host, since_s: float, after_s: float | None = None
) -> tuple[list[tuple[float, str]], float, float | None, dict[str, dict[str, int]]]:
    """One host's storage entries since ``since_s`` (the runner's Unix time, moved onto the host's clock by the
    clock reading that comes with the log) and after ``after_s`` (the host's clock: see :func:`storage_entries`),
    that offset (host clock minus the runner's), the time of the newest line read (any line), and the host's RDMA
    link counters read in the same command (:func:`rdma_counters`); raises what the transport raises."""
    result = host.run(["sh", "-c", KERNEL_LOG], check=False, timeout=READ_TIMEOUT_S)
    returned = time.time()
    text, _, counters = result.stdout.partition(f"\n{RDMA_MARK}\n")
    first, _, rest = text.partition("\n")
    try:
        host_now = float(first.strip())
    except ValueError:
        host_now = None  # no clock line: the runner's clock stands for the host's
    else:
        text = rest
    failed = next((line for line in reversed(text.splitlines()) if line.startswith("dmesg failed")), None)
    if failed is not None or (not result.ok and not text.strip()):
        tail = (result.stderr.strip().splitlines() or [failed or f"exit {result.exit_code}"])[-1]
        raise RuntimeError(f"dmesg could not be read ({tail}); it needs root or kernel.dmesg_restrict=0")
    # The host read its clock before the runner saw the answer: the offset errs early, keeping a line or two more.
    offset = 0.0 if host_now is None else host_now - returned
    return storage_entries(text, since_s + offset, after_s), offset, last_stamp(text), rdma_counters(counters)


def rdma_counters(text: str) -> dict[str, dict[str, int]]:
    """Per link (``rxe0/1``), its counters by name, from ``rdma statistic show`` (``link rxe0/1 sent_pkts 415052
    rcvd_pkts 123648 ...``); lines of any other shape are passed over."""
    links: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 4 or words[0] != "link":
            continue
        pairs = zip(words[2::2], words[3::2], strict=False)
        links[words[1]] = {name: int(value) for name, value in pairs if value.isdigit()}
    return links


def rdma_rises(now: Mapping[str, Mapping[str, int]], before: Mapping[str, Mapping[str, int]] | None) -> list[str]:
    """One line per RDMA link whose :data:`RDMA_RISE` counters rose since ``before`` (the previous account's
    reading; None: since the host booted), each counter with its rise."""
    out: list[str] = []
    for link, counters in now.items():
        earlier = (before or {}).get(link, {})
        rose = {
            name: value - earlier.get(name, 0)
            for name, value in counters.items()
            if RDMA_RISE.search(name) and value > earlier.get(name, 0)
        }
        if rose:
            since = "since the previous case's reading" if before is not None else "since the host booted"
            listed = ", ".join(f"{name} +{value:,}" for name, value in rose.items())
            out.append(f"RDMA {link} counters that rose {since}: {listed}")
    return out


@dataclass(frozen=True)
class Account:
    """Every lab host's storage lines over one case, oldest first (``lines``), the hosts that could not be read with
    why (``unread``), and per host the lines logged before ``judged_from`` that are another case's aftermath
    (``aftermath``: how many of ``lines``, from the first, are shown but not judged)."""

    lines: dict[str, list[str]] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)
    aftermath: dict[str, int] = field(default_factory=dict)
    read_to: dict[str, float] = field(default_factory=dict)
    """Per host, the time (its clock) of the newest line this account read: the next case's account starts after it."""
    counters: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """Per host, its RDMA links' counters as this account read them: the next case's rises are counted from them."""
    notes: dict[str, list[str]] = field(default_factory=dict)
    """Per host with any, its RDMA counters that rose (:func:`rdma_rises`): shown after its lines, never judged."""

    def trouble(self, allow: Sequence[re.Pattern[str]] = ()) -> dict[str, list[str]]:
        """Per host with any, its judged lines that mean trouble (:data:`TROUBLE`, not :data:`BENIGN`) and match no
        ``allow`` pattern."""
        found: dict[str, list[str]] = {}
        for host, lines in self.lines.items():
            bad: list[str] = []
            excused_trace = False
            for line in lines[self.aftermath.get(host, 0) :]:
                if SPLAT.search(line):
                    excused_trace = BENIGN.search(line) is not None
                if excused_trace and "Call Trace" in line:
                    continue
                if TROUBLE.search(line) and not BENIGN.search(line) and not any(a.search(line) for a in allow):
                    bad.append(line)
            if bad:
                found[host] = bad
        return found

    def shown(self, host: str) -> list[str]:
        """What is shown of ``host``: at most :data:`MOST_LINES` of its lines (the oldest :data:`FIRST_LINES` and the
        newest, with how many lie between), then its RDMA notes."""
        lines = self.lines.get(host, [])
        if len(lines) > MOST_LINES:
            left = len(lines) - MOST_LINES
            lines = [*lines[:FIRST_LINES], f"... {left:,} lines not shown ...", *lines[FIRST_LINES - MOST_LINES :]]
        return [*lines, *self.notes.get(host, [])]

    def to_dict(self) -> dict[str, list[str]]:
        """For ``case.extras["kernel_log"]``: what is shown of each host (:meth:`shown`), or why it was not read;
        hosts with nothing to say left out."""
        shown = {host: self.shown(host) for host in {**self.lines, **self.notes}}
        out = {host: lines for host, lines in shown.items() if lines}
        out.update({host: [f"not read: {why}"] for host, why in self.unread.items()})
        return out


def account(
    hosts: Mapping[str, Host],
    since_s: float,
    *,
    judged_from_s: float | None = None,
    after: Mapping[str, float] | None = None,
    counters_before: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
) -> Account:
    """Every host's storage lines since ``since_s`` (the runner's Unix time), read at once; those before
    ``judged_from_s`` (the runner's time; the end of a fault's aftermath) are counted as aftermath. ``after``: per
    host, the newest line an earlier account read (:attr:`Account.read_to`): a line the previous case ended with
    (a fence case's expected reservation conflict, 1 s before the next case began: the full run of 52bec91) is
    that case's, however near the next one's start. ``counters_before``: per host, the RDMA counters an earlier
    account read (:attr:`Account.counters`); a host without any has its rises counted from its boot. Never raises."""
    after = after or {}
    before = counters_before or {}
    read = each(hosts.values(), lambda host: read_host(host, since_s, after.get(host.name)), check=False)
    lines: dict[str, list[str]] = {}
    unread: dict[str, str] = {}
    aftermath: dict[str, int] = {}
    read_to: dict[str, float] = {}
    counters: dict[str, dict[str, dict[str, int]]] = {}
    notes: dict[str, list[str]] = {}
    for name in hosts:
        found = read.get(name)
        if isinstance(found, BaseException):
            unread[name] = str(found)
        elif found is not None:
            entries, offset, newest, links = found
            lines[name] = [line for _, line in entries]
            if links:
                counters[name] = links
                if rises := rdma_rises(links, before.get(name)):
                    notes[name] = rises
            if newest is not None:
                read_to[name] = newest
            if judged_from_s is not None and judged_from_s > since_s:
                aftermath[name] = sum(1 for when, _ in entries if when < judged_from_s + offset)
    return Account(lines, unread, aftermath, read_to, counters, notes)


def trouble_problems(found: Account, allow: Sequence[re.Pattern[str]] = ()) -> list[str]:
    """One sentence per host whose kernel logged storage trouble during a case that injected no fault: how many
    lines, the first of them, and how a lab allows a line it knows to be harmless."""
    problems: list[str] = []
    for host, lines in found.trouble(allow).items():
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        problems.append(
            f"{host}: the kernel logged storage trouble during the case, which injected no fault: {lines[0]!r}{more}; "
            "a line the lab knows to be harmless is allowed by a pattern in watch.kernel_allow"
        )
    return problems


def sections_of(found: Account, hosts: Sequence[str]) -> list[tuple[str, str]]:
    """``(title, text)`` per host with something to say, in ``hosts``' order: what is shown of its storage lines
    and RDMA counters (:meth:`Account.shown`), or why they could not be read."""
    out: list[tuple[str, str]] = []
    for name in hosts:
        if name in found.unread:
            out.append((f"kernel log {name}", f"not read: {found.unread[name]}"))
        elif shown := found.shown(name):
            out.append((f"kernel log {name} (storage lines since the case began)", "\n".join(shown)))
    return out


def sections(hosts: Mapping[str, Host], since_s: float) -> list[tuple[str, str]]:
    """``(title, text)`` per host with something to say, in the hosts' order: its storage lines since
    ``since_s``, or why they could not be read. Never raises."""
    return sections_of(account(hosts, since_s), list(hosts))
