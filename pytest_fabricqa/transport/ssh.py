"""The SSH transport: one fabric connection per lab host, reused for the whole session.

Host keys are verified (paramiko's RejectPolicy) against the lab's known_hosts or the user's; turning that off
is an explicit lab setting. Passwords come from an environment variable named in the lab file and never appear
in output.

Commands run in long-lived ``/bin/sh`` sessions on that connection, one command at a time per session, each in a
subshell (so a ``cd`` or an ``exec`` cannot leak into the next), with a fresh session opened for each command
running at the same time. A session per command costs sshd a fork, the user's shell and its start-up files:
~146 ms for ``true`` on the virtual lab's emulated guests, ~7 ms in a running session (``nvme list``: 223 ms
against 83 ms; ``benchmarks/bench_ssh.py``).
"""

from __future__ import annotations

import os
import re
import secrets
import select
import shlex
import threading
import time
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
        self._shells: list[_Shell] = []
        self._lock = threading.Lock()
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

        config = Config(runtime_ssh_path=str(self._ssh_config)) if self._ssh_config else Config()
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

    def _shell(self) -> _Shell:
        """An idle shell session of this host, or a new one (reconnecting if the connection dropped)."""
        with self._lock:
            while self._shells:
                shell = self._shells.pop()
                if shell.usable():
                    return shell
                shell.close()
        transport = self._connect().client.get_transport()
        if transport is None or not transport.is_active():
            # The host went away (a rebooted guest): its sessions went with it.
            self.close()
            transport = self._connect().client.get_transport()
        return _Shell(transport.open_session())

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
        limit = timeout if timeout is not None else self.command_timeout
        shell = self._shell()
        try:
            code, out, err = shell.run(shlex.join(args), stdin, limit)
        except BaseException:
            shell.close()  # a command still running (an interrupt) leaves its session unusable
            raise
        if code is None:
            shell.close()
            result = CommandResult(self.name, args, 124, out, f"timed out after {limit} s")
        elif not shell.usable():
            shell.close()
            result = CommandResult(self.name, args, code, out, err or "the SSH session closed during the command")
        else:
            with self._lock:
                self._shells.append(shell)
            result = CommandResult(self.name, args, code, out, err)
        if check and not result.ok:
            raise CommandError(result)
        return result

    def close(self) -> None:
        """Close the SSH connection (idempotent)."""
        with self._lock:
            shells, self._shells = self._shells, []
        for shell in shells:
            shell.close()
        if self._connection is not None:
            self._connection.close()
            self._connection = None


# The longest one wait for a channel's output blocks before its buffers are looked at again. paramiko (5.1) wakes
# select() through one pipe shared by the channel's stdout and stderr buffers, and that pipe's set and clear are not
# atomic across the two (pipe.OrPipe): stdout fed by paramiko's thread while stderr is read here can leave the pipe
# clear with data buffered. In CI (2026-12-04) a tgtadm whose tgtd died under it answered on both streams at once,
# and the wait slept the whole 900 s command timeout with the answer already there.
POLL_SLICE_S = 1.0


class _Shell:
    """One ``/bin/sh`` session on a host's connection: a command at a time, its end told by a marker line.

    After the command, the shell prints ``<marker> <exit code>`` to stdout and ``<marker>`` to stderr; the
    marker is random per session and counted per command, so no output can fake it.
    """

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        channel.exec_command("exec /bin/sh")
        self._token = secrets.token_hex(8)
        self._count = 0
        self._broken = False

    def usable(self) -> bool:
        return not self._broken and not self._channel.closed and not self._channel.exit_status_ready()

    def close(self) -> None:
        self._broken = True
        self._channel.close()

    def run(self, command: str, stdin: str | None, timeout: float | None) -> tuple[int | None, str, str]:
        """``(exit code, stdout, stderr)``; the code is None when ``timeout`` ran out; if the session ended before
        the command's end was told, the shell's exit status when it failed, else -1."""
        self._count += 1
        marker = f"__fabricqa_{self._token}_{self._count}"
        feed = "</dev/null" if stdin is None else ""
        line = f"( {command} ) {feed}; printf '%s %d\\n' {marker} $?; printf '%s\\n' {marker} >&2\n"
        if stdin is not None:
            # printf is the shell's builtin: the text reaches the command byte for byte, whatever its size.
            line = f"printf %s {shlex.quote(stdin)} | {line}"
        channel = self._channel
        channel.sendall(line.encode())
        end_out = re.compile(rf"{marker} (\d+)\n$".encode())
        end_err = f"{marker}\n".encode()
        out, err = bytearray(), bytearray()
        code: int | None = None
        err_done = False
        deadline = None if timeout is None else time.monotonic() + timeout
        while code is None or not err_done:
            while channel.recv_ready():
                out += channel.recv(65536)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            if code is None:
                found = end_out.search(out[-80:])
                if found:
                    code = int(found.group(1))
                    del out[len(out) - len(found.group(0)) :]
            if not err_done and err.endswith(end_err):
                err_done = True
                del err[-len(end_err) :]
            if code is not None and err_done:
                break
            if channel.closed or channel.eof_received:
                self._broken = True
                status = channel.recv_exit_status() if channel.exit_status_ready() else -1
                return (status if status != 0 else -1), _text(out), _text(err)
            wait = POLL_SLICE_S if deadline is None else min(POLL_SLICE_S, deadline - time.monotonic())
            if wait <= 0:
                self._broken = True
                return None, _text(out), _text(err)
            select.select([channel], [], [], wait)
        return code, _text(out), _text(err)


def _text(data: bytearray) -> str:
    return bytes(data).decode("utf-8", errors="replace")
