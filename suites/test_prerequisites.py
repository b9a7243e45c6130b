"""Prerequisites: what a storage engineer checks by hand before a qualification run.

The tools each role needs, kernels that can run the protocol (its modules loaded, built in or installed: a
capability, never a `uname -r` comparison), a user-space target's own software (SPDK's nvmf_tgt or running app, its
RPC socket, hugepages), the storage interface (address, MTU) and an RDMA link for nvme-rdma and iser. Read-only checks: they may run in parallel.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.fabric.prereq import (
    DAEMON_SCRIPT,
    MODULES_SCRIPT,
    daemon_problem,
    interface_problems,
    module_problems,
    parse_module_report,
    rdma_problem,
    target_daemon,
)
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.transport.base import Host

KERNEL_FEATURE = {
    "nvme-tcp": "NVMe/TCP",
    "nvme-rdma": "NVMe/RDMA",
    "iscsi": "iSCSI",
    "iser": "iSER",
}


@pytest.mark.roles("initiator")
def test_initiator_tools(infra: Any, protocol: str, lab_host_name: str) -> None:
    """Each initiator has fio and the protocol's initiator tool (nvme-cli or iscsiadm)."""
    missing = [tool for tool in protocol_spec(protocol).initiator_tools if not infra.exists(tool)]
    assert not missing, f"{lab_host_name}: missing {', '.join(missing)} (install it for {protocol})"


@pytest.mark.roles("initiator")
def test_initiator_kernel(lab_host: Host, protocol: str) -> None:
    """Each initiator's kernel can run the protocol: its modules are loaded, built in or installed."""
    spec = protocol_spec(protocol)
    problems = _module_problems(lab_host, spec.initiator_modules, f"an {KERNEL_FEATURE[protocol]} initiator")
    assert not problems, "; ".join(problems)


def test_target_kernel_and_modules(lab_target: TargetModel, protocol: str, target_host: Host | None) -> None:
    """The target host's kernel has the target modules for the protocol (loaded, built in or installed)."""
    target = lab_target
    if target_host is None:
        pytest.skip(f"{protocol}: the target is external (an array the lab only describes)")
    modules = protocol_spec(protocol).target_modules.get(target.kind, ())
    problems = _module_problems(target_host, modules, f"a {target.kind} {KERNEL_FEATURE[protocol]} target")
    assert not problems, "; ".join(problems)


def test_target_daemon(lab: LabModel, lab_target: TargetModel, protocol: str, target_host: Host | None) -> None:
    """A target kind with a user-space half has it ready: SCST's iscsi-scstd and tgt's tgtd running, or installed
    when the lab has the plugin start them; SPDK's nvmf_tgt (or the running app and its RPC socket), python3 for its
    RPC client, hugepages or the no-huge setting, and RDMA built in for nvme-rdma."""
    target = lab_target
    daemon = target_daemon(target, lab.targets.index(target))
    check = None
    if target_host is not None and target.host is not None:
        from pytest_fabricqa.targets import load_target

        check = getattr(load_target(lab, target, {target.host: target_host}), "prerequisite_problems", None)
    if target_host is None or (daemon is None and check is None):
        pytest.skip(f"{protocol}: a {target.kind} target has no daemon of its own to check")
    if check is not None:
        problems = check(protocol)
        assert not problems, "; ".join(problems)
        return
    assert daemon is not None
    out = target_host.run(["sh", "-c", DAEMON_SCRIPT, "sh", daemon.name, daemon.binary], check=False)
    problem = daemon_problem(target_host.name, daemon, out.stdout)
    assert problem is None, problem


def test_storage_interface(lab: LabModel, lab_host_name: str, lab_host: Host) -> None:
    """Every storage interface (one per path) is up with the lab's address and MTU."""
    ports = lab.hosts[lab_host_name].storage
    if not ports:
        pytest.skip(f"{lab_host_name} has no storage port in the lab")
    out = lab_host.run(["ip", "-j", "addr", "show"], check=False)
    problems = [
        problem
        for port in ports
        for problem in interface_problems(lab_host_name, out.stdout, port.interface, str(port.address), lab.network.mtu)
    ]
    assert not problems, "; ".join(problems)


@pytest.mark.fabric("rdma")
def test_rdma_link(lab: LabModel, protocol: str, lab_host_name: str, lab_host: Host) -> None:
    """For nvme-rdma and iser, every host on the storage network has an ACTIVE RDMA link on each storage port."""
    ports = lab.hosts[lab_host_name].storage
    if not ports:
        pytest.skip(f"{lab_host_name} has no storage port in the lab")
    out = lab_host.run(["rdma", "-j", "link", "show"], check=False)
    problems = [p for p in (rdma_problem(lab_host_name, out.stdout, port.interface) for port in ports) if p]
    assert not problems, "; ".join(problems)


def _module_problems(host: Host, modules: tuple[str, ...], what: str) -> list[str]:
    if not modules:
        return []
    report = parse_module_report(host.run(["sh", "-c", MODULES_SCRIPT, "sh", *modules]).stdout)
    return module_problems(host.name, report, modules, what)
