"""A tiny learning Ethernet switch for the lab's storage segment, on one UNIX socket.

Each guest's storage NIC is a QEMU ``-netdev stream`` client of this socket; QEMU frames every Ethernet frame
as a 4-byte big-endian length and the frame. Why not ``vde_switch``: VDE 2.3 drops every frame larger than
1518 bytes, so a storage MTU of 9000 (jumbo frames, which field labs use) cannot carry a single full frame;
this switch passes frames up to 65535 bytes. Frames never leave the UNIX socket: no IP on the host at all.

Run as ``python -m pytest_fabricqa.vlab.switch SOCKET``; it exits on SIGTERM or when its socket file is
removed. A port that does not read (a hung guest) loses frames beyond :data:`MAX_QUEUE` bytes, like a real
switch under congestion, instead of growing without bound.

It logs to stderr (the lab's ``switch.log``) each port it accepts, with the QEMU process on the other end, and
each port it loses and why: a guest's storage NIC whose connection ends is dead until the lab restarts (QEMU 7.2
does not reconnect a stream netdev), and this log is where that shows.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import struct
import sys
import time
from pathlib import Path

MAX_FRAME = 65535
MAX_QUEUE = 8 * 1024 * 1024
RECV_BYTES = 256 * 1024
BROADCAST_BIT = 0x01  # the group bit of the first destination byte: broadcast and multicast
CONGESTION_LOG_S = 10.0  # at most one line per port this often about the frames congestion dropped


def log(line: str) -> None:
    """One timestamped line on stderr (stdout is closed once the parent has read ``ready``)."""
    os.write(2, f"{time.strftime('%H:%M:%S')} {line}\n".encode(errors="replace"))


def peer_name(sock: socket.socket) -> str:
    """The process at the other end of a UNIX socket: ``pid N (its -name)`` when /proc tells, else ``pid N``."""
    try:
        pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
    except OSError:
        return "an unknown peer"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    name = argv[argv.index(b"-name") + 1].decode(errors="replace") if b"-name" in argv[:-1] else ""
    return f"pid {pid} ({name})" if name else f"pid {pid}"


class _Port:
    def __init__(self, sock: socket.socket, number: int) -> None:
        self.sock = sock
        self.name = f"port {number}, {peer_name(sock)}"
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.congested = 0  # frames dropped since the last congestion line
        self.congestion_logged = 0.0


class Switch:
    """Learning switch: unicast to the port that last sent from the destination MAC, else flood."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.ports: list[_Port] = []
        self.mac_table: dict[bytes, _Port] = {}
        self.running = True
        self.accepted = 0

    def serve(self) -> None:
        """Forward frames until stopped (SIGTERM) or the socket file disappears."""
        while self.running:
            for key, mask in self.selector.select(timeout=2.0):
                port = key.data
                if port is None:
                    self._accept()
                    continue
                if mask & selectors.EVENT_READ:
                    self._read(port)
                if mask & selectors.EVENT_WRITE and port in self.ports:
                    self._flush(port)
            if not self.path.exists():
                self.running = False
        for port in list(self.ports):
            self._drop(port, "the switch stops")
        self.listener.close()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except BlockingIOError:
            return
        sock.setblocking(False)
        self.accepted += 1
        port = _Port(sock, self.accepted)
        self.ports.append(port)
        self.selector.register(sock, selectors.EVENT_READ, port)
        log(f"{port.name}: connected")

    def _drop(self, port: _Port, why: str) -> None:
        if port in self.ports:
            log(
                f"{port.name}: dropped: {why}"
                + (f" ({port.congested} frames to it lost to congestion before)" if port.congested else "")
            )
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(port.sock)
        port.sock.close()
        if port in self.ports:
            self.ports.remove(port)
        for mac in [m for m, p in self.mac_table.items() if p is port]:
            del self.mac_table[mac]

    def _read(self, port: _Port) -> None:
        try:
            data = port.sock.recv(RECV_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:
            self._drop(port, f"reading failed ({exc})")
            return
        if not data:
            self._drop(port, "the peer closed the connection")
            return
        buf = port.inbuf
        buf += data
        while len(buf) >= 4:
            size = int.from_bytes(buf[:4], "big")
            if size > MAX_FRAME:  # a peer that does not speak the framing: cut it off
                self._drop(port, f"a frame of {size} bytes announced, over {MAX_FRAME}: the framing is lost")
                return
            if len(buf) < 4 + size:
                break
            frame = bytes(buf[4 : 4 + size])
            del buf[: 4 + size]
            self._forward(port, frame)

    def _forward(self, source: _Port, frame: bytes) -> None:
        if len(frame) < 14:
            return
        destination, sender = frame[0:6], frame[6:12]
        if not sender[0] & BROADCAST_BIT:
            self.mac_table[sender] = source
        target = None if destination[0] & BROADCAST_BIT else self.mac_table.get(destination)
        targets = [target] if target is not None else [p for p in self.ports if p is not source]
        record = len(frame).to_bytes(4, "big") + frame
        for port in targets:
            if port is source:
                continue
            if len(port.outbuf) + len(record) > MAX_QUEUE:
                self._congested(port)
                continue
            port.outbuf += record
            self._flush(port)

    def _congested(self, port: _Port) -> None:
        """A frame to ``port`` dropped because it has not read :data:`MAX_QUEUE` bytes: counted, logged now and then."""
        port.congested += 1
        now = time.monotonic()
        if now - port.congestion_logged >= CONGESTION_LOG_S:
            log(f"{port.name}: {port.congested} frames to it dropped, {len(port.outbuf)} bytes unread (congestion)")
            port.congestion_logged, port.congested = now, 0

    def _flush(self, port: _Port) -> None:
        if port.outbuf:
            try:
                sent = port.sock.send(port.outbuf)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self._drop(port, f"sending failed ({exc})")
                return
            del port.outbuf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if port.outbuf else 0)
        self.selector.modify(port.sock, events, port)


def main(argv: list[str] | None = None) -> int:
    """Entry point: one argument, the socket path (must not exist yet)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pytest_fabricqa.vlab.switch SOCKET", file=sys.stderr)
        return 2
    switch = Switch(Path(args[0]))

    def stop(_signum: int, _frame: object) -> None:
        switch.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    os.write(1, b"ready\n")
    switch.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
