"""A command that ran on a lab host: its result, the error a failed one raises, and that error in one line.

Every layer reads these (a target's undo, an initiator's message, a fault's record); the transports make them.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pytest_fabricqa.core.errors import FabricQAError

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


def command_tail(exc: BaseException, lines: int = 1) -> str:
    """The last stderr (or stdout) line of a failed command, for a one-line message."""
    if isinstance(exc, CommandError):
        text = (exc.result.stderr or exc.result.stdout).strip()
        tail = " / ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())
        return tail or f"exit code {exc.result.exit_code}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
