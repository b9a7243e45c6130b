"""A tiny learning Ethernet switch for the lab's storage segment, on one UNIX socket.

Each guest's storage NIC is a QEMU ``-netdev stream`` client of this socket; QEMU frames every Ethernet frame
as a 4-byte big-endian length and the frame. Why not ``vde_switch``: VDE 2.3 drops every frame larger than
1518 bytes, so a storage MTU of 9000 (jumbo frames, which field labs use) cannot carry a single full frame;
this switch passes frames up to 65535 bytes. Frames never leave the UNIX socket: no IP on the host at all.

Run as ``python -m pytest_fabricqa.vlab.switch SOCKET``; it exits on SIGTERM or when its socket file is
removed. A port that does not read (a hung guest) loses frames beyond :data:`MAX_QUEUE` bytes, like a real
switch under congestion, instead of growing without bound.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import sys
from pathlib import Path

MAX_FRAME = 65535
MAX_QUEUE = 8 * 1024 * 1024
RECV_BYTES = 256 * 1024
BROADCAST_BIT = 0x01  # the group bit of the first destination byte: broadcast and multicast


class _Port:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = bytearray()
        self.outbuf = bytearray()


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
            self._drop(port)
        self.listener.close()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except BlockingIOError:
            return
        sock.setblocking(False)
        port = _Port(sock)
        self.ports.append(port)
        self.selector.register(sock, selectors.EVENT_READ, port)

    def _drop(self, port: _Port) -> None:
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
        except OSError:
            data = b""
        if not data:
            self._drop(port)
            return
        buf = port.inbuf
        buf += data
        while len(buf) >= 4:
            size = int.from_bytes(buf[:4], "big")
            if size > MAX_FRAME:
                self._drop(port)  # a peer that does not speak the framing: cut it off
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
                continue  # congestion drop
            port.outbuf += record
            self._flush(port)

    def _flush(self, port: _Port) -> None:
        if port.outbuf:
            try:
                sent = port.sock.send(port.outbuf)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._drop(port)
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
