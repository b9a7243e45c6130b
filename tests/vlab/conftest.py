"""One virtual lab for every module in tests/vlab: booted once per session (or attached when it is up, as under
`.ci/run`, which boots it once for the main job and these tests), stopped at the end if this session booted it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from vlab_support import STATE, make_lab

from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.vlab import VirtualLab


@pytest.fixture(scope="session")
def virtual_lab() -> Iterator[VirtualLab]:
    """The running three-guest QEMU lab itself (its processes, consoles and real-ssh argv)."""
    from pytest_fabricqa.vlab.lab import ensure_running

    virtual, booted = ensure_running(make_lab(), STATE, os.getpid())
    try:
        yield virtual
    finally:
        if booted:
            virtual.stop()


@pytest.fixture(scope="session")
def vlab(virtual_lab: VirtualLab) -> Iterator[tuple[LabModel, dict[str, Host], dict[str, str]]]:
    """(lab, hosts, ssh files) of a running three-guest lab."""
    from pytest_fabricqa.fabric.provision import cleanup_stale
    from pytest_fabricqa.plugin.session import make_hosts

    lab = make_lab()
    hosts = make_hosts(lab, key=virtual_lab.ssh_key, known_hosts=virtual_lab.known_hosts)
    try:
        cleanup_stale(lab, hosts)
        yield lab, hosts, {"key": str(virtual_lab.ssh_key), "known_hosts": str(virtual_lab.known_hosts)}
    finally:
        for host in hosts.values():
            host.close()
