"""fio --server per session and worker (issue 28 item 6): each owner (lab and xdist worker) has its own port and pid
file, a stop signals only a fio process whose pid its own pid file names, and two owners on one initiator leave each
other's server running -- on a scripted host, and with real fio servers on this machine."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from fakes import Answer, ScriptedHost

from pytest_fabricqa.fio import server
from pytest_fabricqa.transport.local import LocalHost


class Initiator(ScriptedHost):
    """An initiator where ``busy`` ports have a listener (``ss -Hltn`` prints a line for them)."""

    def __init__(self, busy: set[int] | None = None) -> None:
        super().__init__("vnode1")
        self.busy = busy or set()

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[:2] == ("ss", "-Hltn"):
            port = int(argv[-1].lstrip(":"))
            return f"LISTEN 0 5 0.0.0.0:{port} 0.0.0.0:*\n" if port in self.busy else ""
        return ""


def test_two_owners_get_their_own_pid_file_and_port() -> None:
    a, b = server.owner_name("vlab", "gw0"), server.owner_name("vlab", "gw1")
    assert (a, server.owner_name("team b", "main")) == ("vlab-gw0", "team-b-main")
    assert server.pidfile(a) != server.pidfile(b) and server.first_port(a) != server.first_port(b)
    assert server.first_port(a) == server.first_port("vlab-gw0")  # stable from run to run
    assert all(server.PORTS[0] <= server.first_port(f"lab-gw{i}") <= server.PORTS[1] for i in range(50))


def test_start_stops_its_own_leftover_then_takes_the_first_free_port() -> None:
    owner = "vlab-gw0"
    first = server.first_port(owner)
    host = Initiator(busy={first, first + 1})
    started = server.start(host, "vnode1", "10.10.10.17", owner)
    assert started.port == first + 2 and started.connect_string == f"ip:10.10.10.17,{first + 2}"
    assert host.commands[0] == ("pkill", "-x", "fio", "--pidfile", server.pidfile(owner))
    assert host.commands[-1] == (
        "fio",
        f"--server=ip:10.10.10.17,{first + 2}",
        f"--daemonize={server.pidfile(owner)}",
    )
    server.stop(host, owner)
    assert ("pkill", "-x", "fio", "--pidfile", server.pidfile(owner)) == host.commands[-2]


def test_no_free_port_is_one_line() -> None:
    owner = "vlab-gw0"
    first = server.first_port(owner)
    host = Initiator(busy={first + i for i in range(server.PORT_TRIES)})
    with pytest.raises(
        server.FioServerError, match=rf"^vnode1: no free TCP port for fio --server in 20 tries from {first}"
    ):
        server.start(host, "vnode1", "10.10.10.17", owner)


def _listening(port: int) -> bool:
    out = subprocess.run(["ss", "-Hltn", "sport", "=", f":{port}"], capture_output=True, text=True, check=False)
    return bool(out.stdout.strip())


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_two_workers_servers_on_one_initiator_leave_each_other_running() -> None:
    host = LocalHost("localhost")
    owners = [server.owner_name(f"selftest{time.monotonic_ns()}", w) for w in ("gw0", "gw1")]
    started = []
    try:
        for owner in owners:
            started.append(server.start(host, "localhost", "127.0.0.1", owner))
        deadline = time.monotonic() + 10
        while not all(_listening(s.port) for s in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_listening(s.port) for s in started)
        server.stop(host, owners[0])
        deadline = time.monotonic() + 10
        while _listening(started[0].port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _listening(started[0].port) and _listening(started[1].port)
        # gw0's session, killed and started again, stops only its own leftover.
        again = server.start(host, "localhost", "127.0.0.1", owners[0])
        assert again.port == started[0].port and _listening(started[1].port)
        started[0] = again
    finally:
        for owner in owners:
            server.stop(host, owner)
