"""What a performance suite needs besides running fio, as plain functions and objects any suite can call.

- :class:`WriteGuard`: the data-safety guard before write workloads, once per protocol, initiator and device in a
  session (the ``write_guard`` fixture holds the session's one).
- :func:`performance_case`: a performance case for the report, from its figures and the lab's limits, every
  threshold it breaks listed (the ``fabricqa_report`` fixture's ``gate`` then adds the baseline comparison).
- :func:`environment_probe`: kernel releases of every host and the model and firmware of the target's first NVMe
  backing device (the plugin's own ``pytest_fabricqa_update_environment`` hook implementation).

No pytest here: the fixtures in plugin.py are thin wrappers around these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.report.model import Case
from pytest_fabricqa.safety_batch import GuardRequest, guard_hosts
from pytest_fabricqa.thresholds import thresholds_for, violations
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.workloads import Workload, case_id


class WriteGuard:
    """Refuses a write workload on a device that carries an ASM header, a filesystem, LVM or a partition table.

    Each (protocol, target, initiator, device) is probed once per session: once the first write job passed the
    guard, the plugin's own writes are all that can have landed there, so probing before every later write job is
    repeated cost (about 4 s a workload on the virtual lab) with nothing new to find. One probe command per initiator, the
    initiators in parallel; every refusal raises :class:`pytest_fabricqa.safety.DeviceRefused`.
    """

    def __init__(self, lab: LabModel, hosts: Mapping[str, Host]) -> None:
        self.lab = lab
        self.hosts = hosts
        self.guarded: set[tuple[str, str, str, str]] = set()
        """(protocol, target name, initiator, device path) that passed the guard in this session."""

    def before_writes(self, protocol: str, devices: Iterable[FabricDevice], target: str | None = None) -> None:
        """Probe the writable, loaded ``devices`` of ``protocol`` served by ``target`` (the lab's target name;
        default the first serving it) not probed yet; raise on the first refusal."""
        model = self.lab.target_for(protocol, target)
        which = f"targets[kind={model.kind}]" if model.name == model.kind else f"targets[name={model.name}]"
        requests: dict[str, list[GuardRequest]] = {}
        for device in devices:
            key = (protocol, model.name, device.initiator, device.path)
            if not device.writable or not device.load or key in self.guarded:
                continue
            requests.setdefault(device.initiator, []).append(
                GuardRequest(
                    device.path,
                    (device.path,) if device.destructive_ok else (),
                    f"{which}.devices.{device.backing}.destructive_ok: true",
                )
            )
        guard_hosts(self.hosts, requests)
        self.guarded.update((protocol, model.name, host, r.device) for host, rs in requests.items() for r in rs)


def performance_case(
    nodeid: str,
    lab: LabModel,
    protocol: str,
    workload: Workload,
    figures: Mapping[str, float],
    *,
    target: str | None = None,
    problems: Iterable[str] | None = None,
    **fields: Any,
) -> Case:
    """The report's case for ``workload`` over ``protocol`` served by ``target`` (the lab's target name): its figures, the lab's limits for it, and as
    violations ``problems`` when the suite checked the limits itself (with a spread, say), else every limit the
    figures break. ``fields`` are the other :class:`~pytest_fabricqa.report.model.Case` fields (``hosts``,
    ``extras``, ``randseeds``, ...). The verdict is "passed" until the test's outcome says otherwise.
    """
    limits = thresholds_for(lab.thresholds_table(), protocol, workload.name)
    found = violations(figures, limits, label=workload.name) if problems is None else list(problems)
    return Case(
        nodeid=nodeid,
        case_id=case_id(protocol, workload, target),
        suite="performance",
        verdict="passed",
        protocol=protocol,
        target=target,
        workload=workload,
        figures=dict(figures),
        thresholds=limits.limits(),
        violations=tuple(found),
        **fields,
    )


def environment_probe(lab: LabModel, hosts: Mapping[str, Host]) -> dict[str, Any]:
    """Kernel releases of every host, and the model and firmware of the target's first NVMe backing device."""
    kernels = {name: host.run(["uname", "-r"]).stdout.strip() for name, host in hosts.items()}
    env: dict[str, Any] = {"kernels": kernels}
    for target in lab.targets:
        if target.host is None:
            continue
        for device in target.devices.values():
            name = device.path.rsplit("/", 1)[-1]
            if not name.startswith("nvme"):
                continue
            sysfs = f"/sys/class/block/{name}/device"
            out = hosts[target.host].run(["cat", f"{sysfs}/model", f"{sysfs}/firmware_rev"], check=False)
            lines = out.stdout.split("\n")
            if out.ok and len(lines) >= 2:
                env["device_model"], env["device_firmware"] = lines[0].strip(), lines[1].strip()
                return env
    return env
