"""The truth of the numbers on the virtual lab (issue 11): each initiator runs its own random offset stream.

Runs on the three guests tests/vlab/conftest.py shares with the other modules here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_fabricqa.fio import FioServer, run_fio_clients, server_argv, server_stop_argv, split_output
from pytest_fabricqa.fio.command import host_randseed
from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.provision import Fabric, connect_fabric
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.workloads import case_id, make_workload

pytestmark = pytest.mark.vlab

PIDFILE = "/run/fabricqa-numbers-fio.pid"
Vlab = tuple[LabModel, dict[str, Host], dict[str, str]]


@pytest.fixture(scope="module")
def nvme_tcp(vlab: Vlab) -> Iterator[Fabric]:
    """The nvme-tcp fabric, connected from both initiators for this module."""
    lab, hosts, _ = vlab
    fabric = connect_fabric(lab, "nvme-tcp", hosts)
    try:
        yield fabric
    finally:
        fabric.teardown()


@pytest.fixture(scope="module")
def servers(vlab: Vlab) -> Iterator[list[FioServer]]:
    """``fio --server`` on both initiators' storage addresses."""
    lab, hosts, _ = vlab
    started: list[FioServer] = []
    try:
        for name in lab.hosts_with("initiator"):
            storage = lab.hosts[name].storage
            assert storage is not None
            hosts[name].run(server_stop_argv(PIDFILE), check=False)
            hosts[name].run(server_argv(address=str(storage.address), pidfile=PIDFILE))
            started.append(FioServer(name, str(storage.address)))
        yield started
    finally:
        for server in started:
            hosts[server.name].run(server_stop_argv(PIDFILE), check=False)


def _run(vlab: Vlab, fabric: Fabric, servers: list[FioServer], rw: str = "randread") -> Any:
    _, hosts, _ = vlab
    workload = make_workload(rw, "4k", numjobs=2, iodepth=4, runtime=2, ramp_time=0)
    jobs = [(s, [d.path for d in fabric.devices_on(s.name) if d.load]) for s in servers]
    case = case_id("nvme-tcp", workload)
    return case, run_fio_clients(hosts[servers[0].name], jobs, workload, case=case)


def test_each_initiator_runs_its_own_randseed(vlab: Vlab, nvme_tcp: Fabric, servers: list[FioServer]) -> None:
    case, result = _run(vlab, nvme_tcp, servers)
    # The raw JSON fio printed, not our parse of it: each host's jobs carry that host's randseed.
    document, _ = split_output(result.raw_output)
    reported: dict[str, set[str]] = {}
    by_address = {s.address: s.name for s in servers}
    for entry in document["client_stats"]:
        if entry.get("jobname") == "All clients":
            continue
        host = by_address[entry["hostname"]]
        reported.setdefault(host, set()).add(entry["job options"]["randseed"])
    assert set(reported) == {"vnode1", "vnode2"}
    assert reported == {name: {str(host_randseed(case, name))} for name in reported}
    assert reported["vnode1"] != reported["vnode2"]
