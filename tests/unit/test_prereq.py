"""Prerequisite checks on real `ip -j addr` output from this machine and recorded `rdma -j link` output."""

from __future__ import annotations

import json
import subprocess

from pytest_fabricqa.core.protocols import protocol
from pytest_fabricqa.fabric.prereq import (
    MODULES_SCRIPT,
    interface_problems,
    module_problems,
    parse_module_report,
    rdma_problem,
)

# Written by hand in the format of iproute2's `rdma -j link show` (Soft-RoCE rxe0 on eth1);
# real recordings from the virtual lab live in tests/data/vlab/.
RXE_ACTIVE = (
    '[{"ifindex":0,"ifname":"rxe0","port":1,"state":"ACTIVE","physical_state":"LINK_UP","netdev":"eth1",'
    '"netdev_index":3}]'
)


# MODULES_SCRIPT output as it reads on an Oracle Linux 8 initiator (UEK-less RHEL-compatible 4.18 kernel, nvme_tcp
# shipped as a module, nvme_fabrics loaded by an earlier nvme-rdma connect) and on a kernel built without NVMe/TCP.
OL8_418 = "release 4.18.0-305.el8.x86_64\nmodule nvme_fabrics loaded\nmodule nvme_tcp loadable\n"
NEW_WITHOUT_TCP = "release 6.1.0-28-amd64\nmodule nvme_fabrics builtin\nmodule nvme_tcp missing\n"


def test_a_4_18_kernel_that_carries_nvme_tcp_can_run_nvme_tcp() -> None:
    # The old gate (uname -r >= 5.0) failed RHEL/OL 8 hosts that run NVMe/TCP every day.
    report = parse_module_report(OL8_418)
    assert report.release == "4.18.0-305.el8.x86_64"
    assert module_problems("el8h1", report, protocol("nvme-tcp").initiator_modules, "an NVMe/TCP initiator") == []


def test_a_new_kernel_without_the_module_cannot() -> None:
    # ... and passed a 6.1 kernel built without it.
    (problem,) = module_problems(
        "h1", parse_module_report(NEW_WITHOUT_TCP), protocol("nvme-tcp").initiator_modules, "an NVMe/TCP initiator"
    )
    assert problem == (
        "h1: kernel 6.1.0-28-amd64 cannot run an NVMe/TCP initiator: module(s) nvme_tcp neither loaded, built in "
        "nor installed; install the kernel package that carries them or boot a kernel built with them"
    )


def test_a_module_the_report_does_not_mention_counts_as_missing() -> None:
    (problem,) = module_problems("h1", parse_module_report(""), ("nvmet", "nvmet_tcp"), "a target")
    assert "nvmet, nvmet_tcp" in problem and "the kernel cannot run a target" in problem


def test_the_modules_script_runs_here_and_names_each_module() -> None:
    out = subprocess.run(
        ["sh", "-c", MODULES_SCRIPT, "sh", "nvme_tcp", "no_such_module_xyz"], capture_output=True, text=True
    )
    report = parse_module_report(out.stdout)
    assert (
        out.returncode == 0
        and report.release == subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    )
    assert report.modules["no_such_module_xyz"] == "missing"
    assert report.modules["nvme_tcp"] in ("loaded", "builtin", "loadable", "missing")


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
