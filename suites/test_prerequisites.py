"""Prerequisites: what a storage engineer checks by hand before a qualification run.

The tools each role needs, kernels new enough for the protocol, the kernel modules, the storage interface
(address, MTU) and an RDMA link for nvme-rdma and iser. Read-only checks: they may run in parallel.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.prereq import interface_problems, kernel_problem, rdma_problem
from pytest_fabricqa.protocols import protocol as protocol_spec
from pytest_fabricqa.transport.base import Host

KERNEL_FEATURE = {
    "nvme-tcp": "NVMe/TCP",
    "nvme-rdma": "NVMe over Fabrics (RDMA)",
}


@pytest.mark.roles("initiator")
def test_initiator_tools(infra: Any, protocol: str, lab_host_name: str) -> None:
    """Each initiator has fio and the protocol's initiator tool (nvme-cli or iscsiadm)."""
    missing = [tool for tool in protocol_spec(protocol).initiator_tools if not infra.exists(tool)]
    assert not missing, f"{lab_host_name}: missing {', '.join(missing)} (install it for {protocol})"


@pytest.mark.roles("initiator")
def test_initiator_kernel(infra: Any, protocol: str, lab_host_name: str) -> None:
    """Each initiator's kernel is new enough: NVMe-oF host >= 4.8, NVMe/TCP >= 5.0."""
    spec = protocol_spec(protocol)
    release = infra.run("uname -r").stdout
    problem = kernel_problem(
        lab_host_name, release, spec.min_initiator_kernel, f"an {KERNEL_FEATURE.get(protocol)} host"
    )
    assert problem is None, problem


@pytest.mark.roles("initiator")
def test_initiator_modules(lab_host: Host, protocol: str) -> None:
    """The initiator's kernel has the protocol's modules (loaded or loadable)."""
    missing = _missing_modules(lab_host, protocol_spec(protocol).initiator_modules)
    assert not missing, f"{lab_host.name}: kernel modules not available: {', '.join(missing)}"


def test_target_kernel_and_modules(lab: LabModel, protocol: str, target_host: Host | None) -> None:
    """The target host's kernel is new enough and has the target modules for the protocol."""
    target = lab.target_for(protocol)
    if target_host is None:
        pytest.skip(f"{protocol}: the target is external (an array the lab only describes)")
    spec = protocol_spec(protocol)
    release = target_host.run(["uname", "-r"]).stdout
    problem = kernel_problem(target_host.name, release, spec.min_target_kernel, f"a {protocol} target")
    missing = _missing_modules(target_host, spec.target_modules.get(target.kind, ()))
    problems = [p for p in (problem,) if p] + (
        [f"{target_host.name}: kernel modules not available: {', '.join(missing)}"] if missing else []
    )
    assert not problems, "; ".join(problems)


def test_storage_interface(lab: LabModel, lab_host_name: str, lab_host: Host) -> None:
    """The storage interface is up with the lab's address and MTU."""
    storage = lab.hosts[lab_host_name].storage
    if storage is None:
        pytest.skip(f"{lab_host_name} has no storage port in the lab")
    out = lab_host.run(["ip", "-j", "addr", "show", "dev", storage.interface], check=False)
    problems = interface_problems(lab_host_name, out.stdout, storage.interface, str(storage.address), lab.network.mtu)
    assert not problems, "; ".join(problems)


@pytest.mark.fabric("rdma")
def test_rdma_link(lab: LabModel, protocol: str, lab_host_name: str, lab_host: Host) -> None:
    """For nvme-rdma and iser, every host on the storage network has an ACTIVE RDMA link on its storage port."""
    storage = lab.hosts[lab_host_name].storage
    if storage is None:
        pytest.skip(f"{lab_host_name} has no storage port in the lab")
    out = lab_host.run(["rdma", "-j", "link", "show"], check=False)
    problem = rdma_problem(lab_host_name, out.stdout, storage.interface)
    assert problem is None, problem


def _missing_modules(host: Host, modules: tuple[str, ...]) -> list[str]:
    missing = []
    for module in modules:
        loaded = host.run(["test", "-d", f"/sys/module/{module}"], check=False).ok
        if not loaded and not host.run(["modinfo", "-F", "filename", module], check=False).ok:
            missing.append(module)
    return missing
