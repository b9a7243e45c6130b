"""A transport wrapper that counts (and keeps) the commands a host ran: how many round trips a step costs.

Not a transport of its own (it is not in the registry): it wraps any :class:`~pytest_fabricqa.transport.base.Host`
so unit tests and the harness benchmark can say "one fio point cost 2 commands" instead of guessing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_fabricqa.transport.base import CommandResult, Host


@dataclass(frozen=True)
class Counted:
    """One command a wrapped host ran: its argv, when it started and how long it took (monotonic seconds)."""

    host: str
    argv: tuple[str, ...]
    started: float
    seconds: float


class CountingHost:
    """Wraps ``host``; every ``run`` is recorded in ``log`` (shared between wrappers when one is passed)."""

    def __init__(self, host: Host, log: list[Counted] | None = None) -> None:
        self.host = host
        self.name = host.name
        self.log: list[Counted] = [] if log is None else log
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"counting({self.host!r})"

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run through the wrapped host and record the command."""
        started = time.monotonic()
        try:
            return self.host.run(argv, check=check, timeout=timeout, stdin=stdin)
        finally:
            with self._lock:
                self.log.append(Counted(self.name, tuple(argv), started, time.monotonic() - started))

    def close(self) -> None:
        """Close the wrapped host."""
        self.host.close()

    @property
    def count(self) -> int:
        """Commands run so far (through every wrapper sharing this log)."""
        return len(self.log)


def round_trips(log: Sequence[Counted]) -> int:
    """How many sequential waits the commands in ``log`` cost: commands that overlapped in time count once."""
    spans = sorted((c.started, c.started + c.seconds) for c in log)
    trips, end = 0, float("-inf")
    for start, stop in spans:
        if start >= end:
            trips += 1
            end = stop
        else:
            end = max(end, stop)
    return trips
