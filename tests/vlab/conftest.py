"""One virtual lab for every module in tests/vlab: booted once per session (or attached when it is up), stopped
at the end if this session booted it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from vlab_support import STATE, make_lab

from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.transport.base import Host


@pytest.fixture(scope="session")
def vlab() -> Iterator[tuple[LabModel, dict[str, Host], dict[str, str]]]:
    """(lab, hosts, ssh files) of a running three-guest lab."""
    from pytest_fabricqa.provision import cleanup_stale
    from pytest_fabricqa.session import make_hosts
    from pytest_fabricqa.vlab_lab import ensure_running

    lab = make_lab()
    virtual, booted = ensure_running(lab, STATE, os.getpid())
    hosts = make_hosts(lab, key=virtual.ssh_key, known_hosts=virtual.known_hosts)
    try:
        cleanup_stale(lab, hosts)
        yield lab, hosts, {"key": str(virtual.ssh_key), "known_hosts": str(virtual.known_hosts)}
    finally:
        for host in hosts.values():
            host.close()
        if booted:
            virtual.stop()
