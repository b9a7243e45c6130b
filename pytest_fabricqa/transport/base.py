"""The transport interface: how the plugin runs a command on a lab host.

A transport takes an argv list and quotes it once, at the edge; lab values never pass through a shell
unquoted. Members (local, ssh) satisfy :class:`Host` structurally, without inheriting from it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pytest_fabricqa.errors import FabricQAError

STDERR_TAIL_LINES = 8


@dataclass(frozen=True)
class CommandResult:
    """What one command did on one host."""

    host: str
    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0

    @property
    def command(self) -> str:
        """The command as a shell would read it (quoted once)."""
        return shlex.join(self.argv)


class CommandError(FabricQAError):
    """A command on a lab host exited non-zero (or could not run): host, command, exit code, stderr tail."""

    def __init__(self, result: CommandResult, why: str = "") -> None:
        self.result = result
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-STDERR_TAIL_LINES:])
        message = f"{result.host}: `{result.command}` exited {result.exit_code}"
        if why:
            message += f" ({why})"
        if tail:
            message += f"; stderr tail:\n{tail}"
        super().__init__(message)


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
