"""``fio --server`` per session and worker: its own port and pid file on each initiator, stopped only by its owner.

One fixed port and pid file for every session made two xdist workers (two target hosts) or two labs sharing an
initiator stop each other's server. The owner here is the lab and the worker (``vlab-gw0``): its port is derived
from it (a free one next to it when another process listens there) and its pid file is
``/run/fabricqa/fio-server-<owner>.pid``. A stop names the pid file *and* the process name (``pkill -x fio
--pidfile``), so a pid reused by another program is never signalled; a server a killed session of the same owner
left is stopped before a new one starts (the lab lock keeps two live sessions of one lab apart).
"""

from __future__ import annotations

import hashlib
import re

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.fio.command import server_argv, server_stop_argv
from pytest_fabricqa.fio.model import FioServer
from pytest_fabricqa.transport.base import Host

PORTS = (18765, 19764)  # the range derived ports fall in, clear of fio's default 8765 and of storage ports
PORT_TRIES = 20
RUN_DIR = "/run/fabricqa"


class FioServerError(FabricQAError):
    """No fio server could start on a host: one line, which host, why, what to do."""


def owner_name(lab_name: str, worker: str) -> str:
    """The owner of one session's servers: the lab and the xdist worker (``main`` without xdist)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{lab_name}-{worker}")


def pidfile(owner: str) -> str:
    """Where the server of ``owner`` keeps its pid on each initiator."""
    return f"{RUN_DIR}/fio-server-{owner}.pid"


def first_port(owner: str) -> int:
    """The port derived from ``owner``: the same from run to run, different between owners (mostly)."""
    low, high = PORTS
    return low + int(hashlib.sha256(owner.encode()).hexdigest(), 16) % (high - low + 1)


def stop_argv(path: str) -> list[str]:
    """Stop the fio process whose pid ``path`` names; nothing when that pid is no longer fio (one place:
    :func:`pytest_fabricqa.fio.command.server_stop_argv`)."""
    return server_stop_argv(path)


def start(host: Host, name: str, address: str, owner: str) -> FioServer:
    """Start ``owner``'s fio server on ``host`` at ``address`` (after stopping one a killed session of the same owner
    left), on the first free port from :func:`first_port`."""
    path = pidfile(owner)
    host.run(stop_argv(path), check=False)
    host.run(["mkdir", "-p", RUN_DIR])
    low, high = PORTS
    port = first_port(owner)
    for _ in range(PORT_TRIES):
        if not host.run(["ss", "-Hltn", "sport", "=", f":{port}"], check=False).stdout.strip():
            host.run(server_argv(address=address, port=port, pidfile=path))
            return FioServer(name, address, port)
        port = low if port >= high else port + 1
    raise FioServerError(
        f"{host.name}: no free TCP port for fio --server in {PORT_TRIES} tries from {first_port(owner)}; "
        "stop what listens there, or run fewer sessions on this initiator"
    )


def stop(host: Host, owner: str) -> None:
    """Stop ``owner``'s server on ``host`` (idempotent) and drop its pid file."""
    path = pidfile(owner)
    host.run(stop_argv(path), check=False)
    host.run(["rm", "-f", path], check=False)
