"""The transport interface: how the plugin runs a command on a lab host.

A transport takes an argv list and quotes it once, at the edge; lab values never pass through a shell
unquoted. Members (local, ssh) satisfy :class:`Host` structurally, without inheriting from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pytest_fabricqa.core.commands import STDERR_TAIL_LINES, CommandError, CommandResult, command_tail
from pytest_fabricqa.core.errors import FabricQAError

__all__ = ["STDERR_TAIL_LINES", "CommandError", "CommandResult", "Host", "HostUnreachable", "command_tail"]


class HostUnreachable(FabricQAError):
    """A lab host could not be reached at all (connection refused, timeout, authentication)."""


@runtime_checkable
class Host(Protocol):
    """A lab host that runs commands. ``name`` is the lab's name for it (el72h1, vstor, ...)."""

    name: str

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run ``argv`` on the host; raise :class:`CommandError` on a non-zero exit when ``check``."""
        ...

    def close(self) -> None:
        """Release the connection (idempotent)."""
        ...
