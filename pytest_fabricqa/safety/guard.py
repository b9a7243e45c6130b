"""The data-safety guard before write workloads, once per protocol, target, initiator and device in a session
(the ``write_guard`` fixture holds the session's one)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.safety.batch import GuardRequest, guard_hosts
from pytest_fabricqa.transport.base import Host


class WriteGuard:
    """Refuses a write workload on a device that carries an ASM header, a filesystem, LVM or a partition table.

    Each (protocol, target, initiator, device) is probed once per session: once the first write job passed the
    guard, the plugin's own writes are all that can have landed there, so probing before every later write job is
    repeated cost (about 4 s a workload on the virtual lab) with nothing new to find. One probe command per initiator, the
    initiators in parallel; every refusal raises :class:`pytest_fabricqa.safety.signatures.DeviceRefused`.
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
