"""Performance: the fio workloads our users run by hand (seeds 000, 001, 002), as gated cases.

Each workload runs from every initiator at once through fio's client/server mode (``fio --server`` on each
initiator, one ``--client`` per host), as seeds 000 and 003 loaded the storage from every RAC node. A case
reports each host and the total, checks the total is the sum of the hosts and that each host ran its own
random offset stream (its own fio ``randseed``, recorded per host), measures the target's CPU during the
run and the link utilisation, and fails with every threshold it breaks. Writes go only to devices the lab marks
``writable``, and only after the data-safety guard found no ASM, filesystem, LVM or partition signature on them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pytest_fabricqa.cpu import cpu_usage, read_cpu_times
from pytest_fabricqa.fio import FioServer, figures, run_fio, run_fio_clients, shared_offsets, total_mismatch
from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.provision import Fabric
from pytest_fabricqa.report import model as rm
from pytest_fabricqa.safety import guard
from pytest_fabricqa.thresholds import fabric_efficiency, link_utilisation, thresholds_for, violations
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.workloads import Workload, case_id

pytestmark = pytest.mark.loads_target


def _devices(fabric: Fabric, initiator: str, workload: Workload) -> list[str]:
    devices = [d for d in fabric.devices_on(initiator) if d.load]
    if workload.writes:
        devices = [d for d in devices if d.writable]
    return [d.path for d in devices]


# (protocol, initiator, device) already probed in this session: once the first write job passed the guard, the
# plugin's own writes are all that can have landed there, so probing before every later write job is repeated cost
# (about 4 s a workload on the virtual lab) with nothing new to find.
_GUARDED: set[tuple[str, str, str]] = set()


def _guard_writes(lab: LabModel, fabric: Fabric, lab_hosts: dict[str, Host]) -> None:
    """Refuse to write to a device that carries an ASM header, a filesystem, LVM or a partition table."""
    for device in fabric.devices:
        key = (fabric.protocol, device.initiator, device.path)
        if not device.writable or not device.load or key in _GUARDED:
            continue
        allowed = (device.path,) if device.destructive_ok else ()
        target = lab.target_for(fabric.protocol)
        guard(
            lab_hosts[device.initiator],
            device.path,
            allowed,
            allow_key=f"targets[kind={target.kind}].devices.{device.backing}.destructive_ok: true",
        )
        _GUARDED.add(key)


@pytest.fixture(scope="session")
def lab_environment(lab: LabModel, lab_hosts: dict[str, Host]) -> dict[str, Any]:
    """Kernel releases of every host, and the model and firmware of the target's first NVMe backing device."""
    kernels = {name: host.run(["uname", "-r"]).stdout.strip() for name, host in lab_hosts.items()}
    env: dict[str, Any] = {"kernels": kernels}
    for target in lab.targets:
        if target.host is None:
            continue
        for device in target.devices.values():
            name = device.path.rsplit("/", 1)[-1]
            if not name.startswith("nvme"):
                continue
            sysfs = f"/sys/class/block/{name}/device"
            out = lab_hosts[target.host].run(["cat", f"{sysfs}/model", f"{sysfs}/firmware_rev"], check=False)
            lines = out.stdout.split("\n")
            if out.ok and len(lines) >= 2:
                env["device_model"], env["device_firmware"] = lines[0].strip(), lines[1].strip()
                return env
    return env


def _case(request: pytest.FixtureRequest, protocol: str, workload: Workload, **fields: Any) -> rm.Case:
    return rm.Case(
        nodeid=request.node.nodeid,
        case_id=case_id(protocol, workload),
        suite="performance",
        verdict="passed",
        protocol=protocol,
        workload=workload,
        **fields,
    )


def test_fio(
    lab: LabModel,
    protocol: str,
    workload: Workload,
    fabric: Fabric,
    fio_servers: list[FioServer],
    lab_hosts: dict[str, Host],
    target_host: Host | None,
    lab_environment: dict[str, Any],
    fabricqa_report: Any,
    request: pytest.FixtureRequest,
) -> None:
    """One workload from every initiator at once; thresholds from the lab file; regressions against the
    baseline fail the case itself."""
    jobs = [(server, _devices(fabric, server.name, workload)) for server in fio_servers]
    jobs = [(server, devices) for server, devices in jobs if devices]
    if not jobs:
        pytest.skip(f"{protocol}: the lab marks no exported device writable, so {workload.name} does not run")
    if workload.writes:
        _guard_writes(lab, fabric, lab_hosts)
    controller = lab_hosts[jobs[0][0].name]
    cpu_before = read_cpu_times(target_host) if target_host else None
    result = run_fio_clients(controller, jobs, workload, case=case_id(protocol, workload))
    cpu = cpu_usage(cpu_before, read_cpu_times(target_host)) if target_host and cpu_before else None

    total = figures(result.total)
    total["link_utilisation"] = link_utilisation(total["mbps"], lab.network.link_speed_gbps)
    if cpu is not None:
        total["target_cpu_usr_pct"] = cpu.usr_pct
        total["target_cpu_sys_pct"] = cpu.sys_pct
    fabricqa_report.raw_path(case_id(protocol, workload)).write_text(result.raw_output)

    limits = thresholds_for(lab.thresholds_table(), protocol, workload.name)
    problems = violations(total, limits, label=workload.name)
    for problem in (total_mismatch(result), shared_offsets(result)):
        if problem:
            problems.append(problem)
    case = _case(
        request,
        protocol,
        workload,
        figures=total,
        hosts={h.host: figures(h) for h in result.hosts},
        thresholds=limits.limits(),
        violations=tuple(problems),
        extras={"environment": {**lab_environment, "fio_version": result.fio_version}},
        randseeds={h.host: h.randseeds[0] for h in result.hosts if h.randseeds},
    )
    regression = fabricqa_report.regressions(case)
    fabricqa_report.record(replace(case, regression=regression), request)
    if regression is not None:
        problems.extend(regression.messages)
    assert not problems, "\n".join(problems)


def test_fabric_efficiency(
    lab: LabModel,
    protocol: str,
    fabric: Fabric,
    lab_hosts: dict[str, Host],
    target_host: Host | None,
    fabricqa_report: Any,
    request: pytest.FixtureRequest,
) -> None:
    """The first read workload on the target's own device and through the fabric, as a ratio (seed 000 found
    NVMe-oF at local-device speed). Recorded as a figure; a ratio above 1.05 means the measurement is wrong."""
    if target_host is None:
        pytest.skip(f"{protocol}: an external target has no local device to compare with")
    from pytest_fabricqa.plugin import WORKLOADS_KEY

    workload = next(w for w in request.config.stash[WORKLOADS_KEY] if not w.writes)
    device = fabric.devices[0]
    target = lab.target_for(protocol)
    local_path = target.devices[device.backing].path
    local = run_fio(target_host, workload, [local_path])
    remote = run_fio(lab_hosts[device.initiator], workload, [device.path])
    fabric_figures, local_figures = figures(remote), figures(local)
    ratio = fabric_efficiency(fabric_figures["iops"], local_figures["iops"])
    problems = []
    if not 0 < ratio < 1.05:
        problems.append(
            f"fabric/local IOPS ratio {ratio:.2f} is not plausible (local {local_figures['iops']:,.0f} IOPS)"
        )
    case = _case(
        request,
        protocol,
        workload,
        figures={**fabric_figures, "fabric_efficiency": ratio},
        hosts={device.initiator: fabric_figures, f"{target_host.name} (local)": local_figures},
        violations=tuple(problems),
    )
    fabricqa_report.record(replace(case, case_id=f"{case.case_id}-fabric-efficiency"), request)
    assert not problems, problems[0]
