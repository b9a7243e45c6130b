"""The truth of the numbers on the virtual lab (issue 11): the queue settings the lab sets are the ones read back,
each initiator runs its own random offset stream, and how far apart the hosts started is recorded when fio says.

Runs on the three guests tests/vlab/conftest.py shares with the other modules here. The iSCSI tests connect their
own fabric and come first: the module's nvme-tcp fabric (with the queue settings) holds the target from its first
use to the module's end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from vlab_support import make_lab

from pytest_fabricqa.core.workloads import case_id, make_workload
from pytest_fabricqa.fabric.provision import Fabric, connect_fabric
from pytest_fabricqa.fio import (
    FioServer,
    run_fio_clients,
    server_argv,
    server_stop_argv,
    split_output,
    start_offsets,
)
from pytest_fabricqa.fio.command import host_randseed
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab

PIDFILE = "/run/fabricqa-numbers-fio.pid"
Vlab = tuple[LabModel, dict[str, Host], dict[str, str]]


def _queue_settings(data: dict[str, Any]) -> None:
    for target in data["targets"]:
        if target.get("iscsi"):
            target["iscsi"].update(queue_depth=64, cmds_max=256)
            if target["kind"] == "lio":
                target["iscsi"]["cmdsn_depth"] = 96  # LIO's own key
        if target.get("nvme"):
            target["nvme"].setdefault("connect", {}).update(nr_io_queues=1, queue_size=64)


def test_iscsi_queue_settings_are_set_and_read_back(vlab: Vlab) -> None:
    _, hosts, _ = vlab
    fabric = connect_fabric(make_lab(_queue_settings), "iscsi", hosts)
    try:
        queues = fabric.queues
    finally:
        fabric.teardown()
    for initiator in ("vnode1", "vnode2"):
        assert queues[initiator] == {"node.session.queue_depth": 64, "node.session.cmds_max": 256}
    # Set before the ACLs were made, so each initiator's ACL took the same window.
    assert set(queues["vstor"].values()) == {96} and "default_cmdsn_depth" in queues["vstor"]


def test_the_stock_lab_records_the_defaults(vlab: Vlab) -> None:
    lab, hosts, _ = vlab
    fabric = connect_fabric(lab, "iscsi", hosts)
    try:
        queues = fabric.queues
    finally:
        fabric.teardown()
    # open-iscsi's and LIO's defaults: seed 002's "iSCSI peaks at QD 32" may be exactly this 32.
    assert queues["vnode1"] == {"node.session.queue_depth": 32, "node.session.cmds_max": 128}
    assert queues["vstor"]["default_cmdsn_depth"] == 64


@pytest.fixture(scope="module")
def nvme_tcp(vlab: Vlab) -> Iterator[Fabric]:
    """The nvme-tcp fabric, connected from both initiators for this module with the lab's queue settings (one
    I/O queue of 64 entries per controller)."""
    _, hosts, _ = vlab
    fabric = connect_fabric(make_lab(_queue_settings), "nvme-tcp", hosts)
    try:
        yield fabric
    finally:
        fabric.teardown()


def test_nvme_queue_settings_are_set_and_read_back(nvme_tcp: Fabric) -> None:
    for initiator in ("vnode1", "vnode2"):
        assert nvme_tcp.queues[initiator] == {"nr_io_queues": 1, "queue_size": 64}


@pytest.fixture(scope="module")
def servers(vlab: Vlab) -> Iterator[list[FioServer]]:
    """``fio --server`` on both initiators' storage addresses."""
    lab, hosts, _ = vlab
    started: list[FioServer] = []
    try:
        for name in lab.hosts_with("initiator"):
            storage = lab.hosts[name].storage_link
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


def test_how_far_apart_the_hosts_started_is_recorded_when_fio_reports_it(
    vlab: Vlab, nvme_tcp: Fabric, servers: list[FioServer]
) -> None:
    _, result = _run(vlab, nvme_tcp, servers)
    document, _ = split_output(result.raw_output)
    reported = [e for e in document["client_stats"] if e.get("jobname") != "All clients"]
    offsets = start_offsets(result)
    if all("job_start" in e for e in reported):  # fio >= 3.36
        assert set(offsets) == {"vnode1", "vnode2"} and min(offsets.values()) == 0.0
        assert max(offsets.values()) < 5000, offsets  # both servers got the job within seconds of each other
    else:  # Debian 12's fio 3.33: no per-job start time, and none is invented
        assert offsets == {} and all(h.start_ms is None for h in result.hosts)
