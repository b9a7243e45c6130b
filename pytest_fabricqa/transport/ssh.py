"""The SSH transport: one fabric connection per lab host, reused for the whole session.

Host keys are verified (paramiko's RejectPolicy) against the lab's known_hosts or the user's; turning that off
is an explicit lab setting. Passwords come from an environment variable named in the lab file and never appear
in output.
"""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_fabricqa.transport.base import CommandError, CommandResult, HostUnreachable


class SSHHost:
    """Runs commands on a lab host over SSH. argv is quoted once, here, with :func:`shlex.join`."""

    def __init__(
        self,
        name: str,
        address: str,
        *,
        user: str = "root",
        port: int = 22,
        key: Path | None = None,
        password_env: str | None = None,
        ssh_config: Path | None = None,
        known_hosts: Path | None = None,
        verify_host_keys: bool = True,
        connect_timeout: float = 15.0,
        command_timeout: float | None = 900.0,
    ) -> None:
        self.name = name
        self.address = address
        self.user = user
        self.port = port
        self._key = key
        self._password_env = password_env
        self._ssh_config = ssh_config
        self._known_hosts = known_hosts
        self.verify_host_keys = verify_host_keys
        self._connect_timeout = connect_timeout
        self._connection: Any = None
        # A command that never returns (a hung configfs rmdir, a stalled device) must fail the case, not the run.
        self.command_timeout = command_timeout

    def __repr__(self) -> str:
        return f"ssh://{self.user}@{self.address}:{self.port} ({self.name})"

    def _connect(self) -> Any:
        if self._connection is not None:
            return self._connection
        # Imported here: fabric and paramiko load only when a host is really reached.
        import paramiko
        from fabric import Config, Connection

        overrides = {"runners": {"remote": _bulk_stdin_runner()}}
        config = (
            Config(runtime_ssh_path=str(self._ssh_config), overrides=overrides)
            if self._ssh_config
            else Config(overrides=overrides)
        )
        connect_kwargs: dict[str, Any] = {"allow_agent": False, "look_for_keys": self._key is None}
        if self._key is not None:
            connect_kwargs["key_filename"] = str(Path(os.path.expanduser(self._key)))
        if self._password_env:
            password = os.environ.get(self._password_env)
            if password is None:
                raise HostUnreachable(
                    f"{self.name}: the lab names ${self._password_env} for the SSH password, but it is not set"
                )
            connect_kwargs["password"] = password
        conn = Connection(
            self.address,
            user=self.user,
            port=self.port,
            config=config,
            connect_timeout=self._connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        client = conn.client
        if self.verify_host_keys:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            if self._known_hosts is not None:
                path = Path(os.path.expanduser(self._known_hosts))
                if path.is_file():
                    client.get_host_keys().load(str(path))
        else:
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        try:
            conn.open()
        except paramiko.SSHException as exc:
            hint = ""
            if "not found in known_hosts" in str(exc):
                hint = "; add its key to known_hosts (ssh-keyscan) or set ssh.verify_host_keys: false in the lab"
            raise HostUnreachable(f"{self.name}: SSH to {self.address}:{self.port} failed: {exc}{hint}") from None
        except (TimeoutError, OSError) as exc:
            raise HostUnreachable(f"{self.name}: cannot reach {self.address}:{self.port} over SSH: {exc}") from None
        self._connection = conn
        return conn

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run ``argv`` on the host; raise :class:`CommandError` on a non-zero exit when ``check``."""
        args = tuple(str(a) for a in argv)
        conn = self._connect()
        from invoke.exceptions import CommandTimedOut

        try:
            res = conn.run(
                shlex.join(args),
                hide=True,
                warn=True,
                timeout=timeout if timeout is not None else self.command_timeout,
                in_stream=io.StringIO(stdin) if stdin is not None else False,
            )
        except CommandTimedOut as exc:
            limit = timeout if timeout is not None else self.command_timeout
            result = CommandResult(self.name, args, 124, exc.result.stdout, f"timed out after {limit} s")
        else:
            result = CommandResult(self.name, args, res.exited, res.stdout, res.stderr)
        if check and not result.ok:
            raise CommandError(result)
        return result

    def close(self) -> None:
        """Close the SSH connection (idempotent)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _bulk_stdin_runner() -> Any:
    """fabric's Remote runner, reading a file-like stdin in 64 KiB chunks.

    invoke reads a non-terminal stdin one byte per loop with a 10 ms sleep (about 100 bytes/s): a 500-byte fio job
    file took 5 s to send, 30 KB timed out. Terminals keep invoke's byte-at-a-time reading.
    """
    from fabric.runners import Remote

    class BulkStdinRemote(Remote):
        def read_our_stdin(self, input_: Any) -> str | None:
            if isinstance(input_, io.StringIO):
                return input_.read(65536)
            return super().read_our_stdin(input_)

    return BulkStdinRemote
