"""The local transport: a lab host that is this machine, reached with subprocess (no shell)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from pytest_fabricqa.transport.base import CommandError, CommandResult


class LocalHost:
    """Runs commands on this machine. argv goes straight to exec: nothing is ever parsed by a shell."""

    def __init__(self, name: str = "localhost") -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"local://{self.name}"

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run ``argv`` here; raise :class:`CommandError` on a non-zero exit when ``check``."""
        args = tuple(str(a) for a in argv)
        try:
            proc = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        except FileNotFoundError:
            result = CommandResult(self.name, args, 127, "", f"{args[0]}: command not found")
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            result = CommandResult(self.name, args, 124, out, f"timed out after {timeout} s")
        else:
            result = CommandResult(self.name, args, proc.returncode, proc.stdout, proc.stderr)
        if check and not result.ok:
            raise CommandError(result)
        return result

    def close(self) -> None:
        """Nothing to release for a local host."""
