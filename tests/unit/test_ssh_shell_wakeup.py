"""The SSH transport's wait for a command's end does not depend on paramiko's wake-up pipe alone.

paramiko 5.1 shares one pipe between a channel's stdout and stderr buffers (``pipe.OrPipe``), and its set and clear
are not atomic across the two: output can sit in a buffer with the pipe clear. In CI (2026-12-04) a command's end
was there and the wait slept through the whole 900 s command timeout. The channel here is that case made certain:
its output arrives in its buffers and its pipe never wakes anyone."""

from __future__ import annotations

import os
import re
import threading
import time

from pytest_fabricqa.transport.ssh import _Shell


class _LostWakeupChannel:
    """A channel whose answers arrive in its buffers 0.2 s after a command, without its fileno ever turning
    readable."""

    closed = False
    eof_received = False

    def __init__(self) -> None:
        self._read_end, self._write_end = os.pipe()
        self._out = bytearray()
        self._err = bytearray()
        self._lock = threading.Lock()

    def exec_command(self, command: str) -> None:
        pass

    def fileno(self) -> int:
        return self._read_end

    def exit_status_ready(self) -> bool:
        return False

    def sendall(self, data: bytes) -> None:
        marker = re.search(rb"printf '%s %d\\n' (\S+) \$\?", data)
        assert marker is not None, data

        def answer() -> None:
            time.sleep(0.2)
            with self._lock:
                self._out += b"done\n" + marker.group(1) + b" 0\n"
                self._err += b"tgtadm: warning\n" + marker.group(1) + b"\n"

        threading.Thread(target=answer, daemon=True).start()

    def recv_ready(self) -> bool:
        with self._lock:
            return bool(self._out)

    def recv_stderr_ready(self) -> bool:
        with self._lock:
            return bool(self._err)

    def recv(self, size: int) -> bytes:
        with self._lock:
            data, self._out[:] = bytes(self._out[:size]), self._out[size:]
            return data

    def recv_stderr(self, size: int) -> bytes:
        with self._lock:
            data, self._err[:] = bytes(self._err[:size]), self._err[size:]
            return data

    def close(self) -> None:
        os.close(self._read_end)
        os.close(self._write_end)


def test_a_command_s_end_already_buffered_is_seen_without_a_wake_up() -> None:
    channel = _LostWakeupChannel()
    shell = _Shell(channel)
    results: list[tuple[int | None, str, str]] = []
    waiter = threading.Thread(target=lambda: results.append(shell.run("tgtadm --op delete", None, 900)), daemon=True)
    started = time.monotonic()
    waiter.start()
    waiter.join(timeout=15)
    assert results == [(0, "done\n", "tgtadm: warning\n")], f"still waiting after {time.monotonic() - started:.0f} s"
    shell.close()
