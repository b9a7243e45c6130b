"""Prerequisite checks on real `ip -j addr` output from this machine and recorded `rdma -j link` output."""

from __future__ import annotations

import json
import subprocess

import pytest

from pytest_fabricqa.prereq import interface_problems, kernel_problem, rdma_problem
from pytest_fabricqa.protocols import parse_kernel_version

# Written by hand in the format of iproute2's `rdma -j link show` (Soft-RoCE rxe0 on eth1);
# real recordings from the virtual lab live in tests/data/vlab/.
RXE_ACTIVE = (
    '[{"ifindex":0,"ifname":"rxe0","port":1,"state":"ACTIVE","physical_state":"LINK_UP","netdev":"eth1",'
    '"netdev_index":3}]'
)


@pytest.mark.parametrize(
    ("release", "expected"), [("6.1.0-28-amd64", (6, 1)), ("4.8.17", (4, 8)), ("3.10.0-327.el7.x86_64", (3, 10))]
)
def test_kernel_versions_parse(release: str, expected: tuple[int, int]) -> None:
    assert parse_kernel_version(release) == expected


def test_kernel_too_old_for_nvme_tcp() -> None:
    # Seed 000's RHEL 7.2 kernel is too old for NVMe/TCP (5.0) and for an NVMe-oF host (4.8).
    assert kernel_problem("el72h1", "3.10.0-327.el7.x86_64\n", (5, 0), "an NVMe/TCP host") == (
        "el72h1: kernel 3.10.0-327.el7.x86_64 is older than 5.0, the first with an NVMe/TCP host; upgrade the kernel"
    )
    assert kernel_problem("el72h3", "4.8.17", (4, 8), "an NVMe-oF target") is None
    assert kernel_problem("h", "2.6.32", None, "iscsi") is None


def _ip_lo() -> str:
    return subprocess.run(["ip", "-j", "addr", "show", "dev", "lo"], capture_output=True, text=True).stdout


def test_loopback_interface_matches() -> None:
    assert interface_problems("localhost", _ip_lo(), "lo", "127.0.0.1", 65536) == []


def test_interface_mismatches_are_all_listed() -> None:
    problems = interface_problems("localhost", _ip_lo(), "lo", "10.10.10.17", 9000)
    assert problems == [
        "localhost: lo does not carry 10.10.10.17 (it has 127.0.0.1, ::1); fix the address or the lab",
        "localhost: lo MTU is 65536, the lab expects 9000",
    ]


def test_missing_interface() -> None:
    assert interface_problems("h", "[]", "ens1", "10.10.10.17", 1500) == [
        "h: storage interface ens1 does not exist; check hosts.h.storage.interface"
    ]


def test_down_interface() -> None:
    data = json.loads(_ip_lo())
    data[0]["flags"] = ["LOOPBACK"]
    data[0]["operstate"] = "DOWN"
    assert "is down" in interface_problems("h", json.dumps(data), "lo", "127.0.0.1", 65536)[0]


def test_rdma_link_active_on_storage_interface() -> None:
    assert rdma_problem("vnode1", RXE_ACTIVE, "eth1") is None


def test_rdma_link_missing_or_down() -> None:
    assert "no RDMA link on ens1" in (rdma_problem("el72h1", RXE_ACTIVE, "ens1") or "")
    assert "rdma link add rxe0 type rxe netdev ens1" in (rdma_problem("el72h1", "[]", "ens1") or "")
    down = RXE_ACTIVE.replace('"ACTIVE"', '"DOWN"')
    assert rdma_problem("vnode1", down, "eth1") == "vnode1: the RDMA link on eth1 is not ACTIVE (rxe0 DOWN)"
