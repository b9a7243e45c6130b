"""The data-safety guard before write workloads, once per protocol, target, initiator and device in a session
(the ``write_guard`` fixture holds the session's one): the devices' contents (:mod:`.signatures`, one probe per
initiator, :mod:`.batch`), and where the target kind implements persistent reservations, whether anyone holds one
on the device (:class:`DeviceReserved`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.initiators.reservations import ReservationState, driver_for, is_ours, unsupported
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.safety.batch import GuardRequest, guard_hosts
from pytest_fabricqa.safety.signatures import DeviceRefused, Finding, Refusal
from pytest_fabricqa.transport.base import CommandError, Host


class DeviceReserved(DeviceRefused):
    """A write job was about to touch a device on which someone holds a persistent reservation (a cluster fencing
    with it, a person's, or a key of a killed run of this plugin's that its next start has not swept)."""

    def __init__(self, host: str, device: str, state: ReservationState | None, error: str = "") -> None:
        if state is None:
            what = f"its persistent reservations could not be read ({error})"
            fix = "read them by hand (sg_persist --in -r / nvme resv-report) and fix the command, then run again"
        else:
            holder = state.holder or 0
            whose = (
                "a key of a run of this plugin's that was killed (its next start unregisters it)"
                if is_ours(holder)
                else "not ours: a cluster's or a person's"
            )
            what = f"a persistent reservation is held on it ({state.describe()}; the holder's key is {whose})"
            fix = "release it where it was made (or let the run that holds it end), then run again"
        refusal = Refusal(host, device, device, (Finding(what, False),), "")
        super().__init__(refusal)
        self.args = (f"{host}: refusing to let a write job touch {device}: {what}; {fix}",)

    def __str__(self) -> str:
        return str(self.args[0])


class WriteGuard:
    """Refuses a write workload on a device that carries an ASM header, a filesystem, LVM or a partition table, or
    on which anyone holds a persistent reservation (:class:`DeviceReserved`, for the kinds that implement them).

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
        pending: list[FabricDevice] = []
        for device in devices:
            key = (protocol, model.name, device.initiator, device.path)
            if not device.writable or not device.load or key in self.guarded:
                continue
            pending.append(device)
            requests.setdefault(device.initiator, []).append(
                GuardRequest(
                    device.path,
                    (device.path,) if device.destructive_ok else (),
                    f"{which}.devices.{device.backing}.destructive_ok: true",
                )
            )
        self._unreserved(protocol, model.kind, pending)
        guard_hosts(self.hosts, requests)
        self.guarded.update((protocol, model.name, host, r.device) for host, rs in requests.items() for r in rs)

    def _unreserved(self, protocol: str, kind: str, devices: list[FabricDevice]) -> None:
        """Raise :class:`DeviceReserved` when anyone holds a reservation on one of ``devices`` (each namespace or
        LUN read once, from the first initiator that sees it), or its reservations cannot be read. A kind without
        reservations (6.1's nvmet) has nothing to read."""
        if unsupported(kind) is not None:
            return
        family = protocol_spec(protocol).family
        first: dict[tuple[str, int], FabricDevice] = {}
        for device in devices:
            first.setdefault((device.subsystem, device.address), device)
        for device in first.values():
            try:
                state = driver_for(family, device.address).report(self.hosts[device.initiator], device.path)
            except (CommandError, ValueError) as exc:
                said = str(exc).strip().splitlines()
                raise DeviceReserved(
                    device.initiator, device.path, None, said[-1] if said else type(exc).__name__
                ) from None
            if state.holder is not None:
                raise DeviceReserved(device.initiator, device.path, state)
