"""The kernel's own account of a failed case: each lab host's storage messages (NVMe, SCSI, iSCSI/iSER, RDMA,
dm-multipath, SCST, hung tasks) since the case began, read from ``dmesg`` once the case has failed.

A stalled path, a dropped controller or a hung reconnect shows first in the initiators' and the target's kernel
log; a failure that names only fio's timeout leaves the engineer (and a CI log) guessing. Reading is one command
per host (read-only; ``dmesg`` needs root or ``kernel.dmesg_restrict=0``), bounded in time; a host that cannot be
read is said so in one line instead of failing the report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

KERNEL_LOG = "dmesg --time-format iso | tail -n 3000"
"""The host's kernel ring buffer with wall-clock times (util-linux 2.30 and later), its newest lines."""
READ_TIMEOUT_S = 20.0
SLACK_S = 5.0
"""Lines this long before the case began count too: the hosts' clocks and the runner's differ a little."""
MOST_LINES = 30
"""The newest this many storage lines per host: the end of the story, not the whole connect chatter."""
STORAGE = re.compile(
    r"nvme|nvmet|iscsi|iser|isert|scsi|\bsd[a-z]+\b|rdma|\brxe|\bmlx|blk_update|I/O error|Buffer I/O|device-mapper"
    r"|multipath|\bdm-\d|scst|\btgt|hung_task|blocked for more than|INFO: task|Call Trace|\bBUG\b|WARNING:|Oops"
    r"|\bLink is (?:Up|Down)\b|\blink (?:up|down)\b",
    re.IGNORECASE,
)
_LINE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[,.](\d+))?([+-]\d{2}:?\d{2})\s(.*)$")


def storage_lines(text: str, since_s: float, *, most: int = MOST_LINES) -> list[str]:
    """The storage lines of ``dmesg --time-format iso`` output stamped at or after ``since_s`` (Unix seconds, less
    :data:`SLACK_S`), the newest ``most`` of them, each as ``HH:MM:SS.mmm message``. Lines without a time (a
    continuation) belong to the line before them."""
    found: list[str] = []
    keep = False
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            if keep and line.strip():
                found.append(f"{'':13}{line.strip()}")
            continue
        stamp, fraction, zone, message = match.groups()
        when = datetime.fromisoformat(f"{stamp}{zone}").timestamp() + float(f"0.{fraction or 0}")
        keep = when >= since_s - SLACK_S and STORAGE.search(message) is not None
        if keep:
            found.append(f"{stamp[11:]}.{(fraction or '0')[:3]:0<3} {message.strip()}")
    return found[-most:]


def read_storage_lines(host: Host, since_s: float) -> list[str]:
    """One host's storage lines since ``since_s``; raises what the transport raises."""
    result = host.run(["sh", "-c", KERNEL_LOG], check=False, timeout=READ_TIMEOUT_S)
    if not result.ok and not result.stdout.strip():
        tail = (result.stderr.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
        raise RuntimeError(f"dmesg could not be read ({tail}); it needs root or kernel.dmesg_restrict=0")
    return storage_lines(result.stdout, since_s)


def sections(hosts: Mapping[str, Host], since_s: float) -> list[tuple[str, str]]:
    """``(title, text)`` per host with something to say, in the hosts' order: its storage lines since
    ``since_s``, or why they could not be read. Never raises."""
    read = each(hosts.values(), lambda host: read_storage_lines(host, since_s), check=False)
    found: list[tuple[str, str]] = []
    for name in hosts:
        lines = read.get(name)
        if isinstance(lines, BaseException):
            found.append((f"kernel log {name}", f"not read: {lines}"))
        elif lines:
            found.append((f"kernel log {name} (storage lines since the case began)", "\n".join(lines)))
    return found
