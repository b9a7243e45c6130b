"""Data integrity and the shared disk: what one initiator writes, every initiator reads back, byte for byte.

Per protocol, on every device the lab marks ``writable`` and only after the data-safety guard passed: a region
written with content unique to that write (fio's ``verify=pattern``: the write's generation and each block's
offset, ``pytest_fabricqa.fio.generation``; ``verify_backlog``) read back on the same host; written on one
initiator and read on every other (the RAC shared-disk view, both directions), then overwritten by the next and
read back by the first, which must see the new write (no stale read from a cache or a path); every
initiator writing its own region at the same time and each reading back all of them; the data still there after
the fabric was disconnected and connected again, and after the target restarted (written and flushed before it: a
failover case, made where the lab's ``failover`` section runs them). Block sizes 4 KiB, 8 KiB (the database block) and 1 MiB. A
mismatch names the host, the device, the offset and what was expected, and the block, read again, says what it
holds instead: an earlier write of it (a lost write or a stale read), the block written for another offset (a
misdirected write), or flipped bits.

``test_verify_detects_corruption`` proves the verify can fail: it zeroes 4 KiB of a written block directly on the
target's backing device (one the lab marks ``corruptible``) and passes only when the verify names that block.
``test_reservations_fence`` drives a cluster's fencing with persistent reservations (SCSI-3 PR over iSCSI and
iSER, NVMe reservations over NVMe-oF); a target kind without them is skipped, naming the kind.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.fabric import kernlog
from pytest_fabricqa.fabric.provision import Fabric
from pytest_fabricqa.failover import survival
from pytest_fabricqa.faults import restart
from pytest_fabricqa.faults.registrations import KeyLedger
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.integrity.reservations import driver_for, fencing, reservation_case, run_token, unsupported
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.safety.guard import WriteGuard
from pytest_fabricqa.transport.base import Host

pytestmark = [pytest.mark.loads_target, pytest.mark.fabricqa_integrity]

BLOCK_SIZES = pytest.mark.parametrize("bs", list(ig.BLOCK_SIZES.values()), ids=list(ig.BLOCK_SIZES))
LABEL = {size: label for label, size in ig.BLOCK_SIZES.items()}


def _guarded(fabric: Fabric, protocol: str, write_guard: WriteGuard) -> list[ig.SharedDevice]:
    """Every shared writable device, after the write guard passed them all."""
    devices = ig.shared_devices(fabric.devices)
    if not devices:
        pytest.skip(f"{protocol}: the lab marks no exported device writable, so nothing is written")
    write_guard.before_writes(protocol, fabric.devices, fabric.target)
    return devices


def _roomy(fabric: Fabric, protocol: str, slots: int, devices: list[ig.SharedDevice]) -> list[ig.SharedDevice]:
    """``devices``, or a skip naming each that has no room for ``slots`` regions."""
    stride = ig.stride(fabric.lab.integrity.region_bytes)
    small = [p for p in (ig.room_problem(d, slots, stride) for d in devices) if p is not None]
    if small:
        pytest.skip(f"{protocol}: " + "; ".join(small))
    return devices


def _disk(
    fabric: Fabric, protocol: str, write_guard: WriteGuard, slots: int, among: list[ig.SharedDevice] | None = None
) -> ig.SharedDevice:
    """The first of ``among`` (default: every shared writable device), after the write guard passed all of them."""
    guarded = _guarded(fabric, protocol, write_guard)
    return _roomy(fabric, protocol, slots, (guarded if among is None else among)[:1])[0]


def _every_disk(fabric: Fabric, protocol: str, write_guard: WriteGuard, slots: int) -> list[ig.SharedDevice]:
    """Every shared writable device (each namespace and LUN the lab marks writable), after the write guard passed
    them all; the case is skipped when any lacks the room, naming each that does."""
    return _roomy(fabric, protocol, slots, _guarded(fabric, protocol, write_guard))


def _initiators(fabric: Fabric, device: ig.SharedDevice, lab_hosts: dict[str, Host], least: int) -> list[Host]:
    names = [n for n in fabric.lab.hosts_with("initiator") if n in device.paths]
    if len(names) < least:
        pytest.skip(f"{device.label} is seen by {len(names)} initiator(s); this check needs {least}")
    return ig.hosts_by_name(lab_hosts, names)


def _record(
    report: Any, request: pytest.FixtureRequest, fabric: Fabric, name: str, protocol: str, outcome: ig.Outcome
) -> None:
    """Record the case ``<protocol>-<target>-<name>`` of the fabric's target."""
    case = ig.integrity_case(request.node.nodeid, f"{protocol}-{fabric.target}-{name}", protocol, outcome)
    case = replace(case, target=fabric.target)
    report.record(case, request)
    assert not outcome.problems, "\n".join(outcome.problems)


@BLOCK_SIZES
def test_write_and_verify(
    fabric: Fabric, protocol: str, bs: int, lab_hosts: dict[str, Host], write_guard: WriteGuard,
    fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """On every writable device, the first initiator writes a region (each block read back while writing) and reads
    it all back."""
    outcome = ig.Outcome()
    for device in _every_disk(fabric, protocol, write_guard, 1):
        host = _initiators(fabric, device, lab_hosts, 1)[0]
        outcome.merge(ig.write_and_verify(host, device, bs, fabric.lab.integrity.region_bytes))
    _record(fabricqa_report, request, fabric, f"integrity-same-host-{LABEL[bs]}", protocol, outcome)


@BLOCK_SIZES
def test_written_on_one_read_on_every_other(
    fabric: Fabric, protocol: str, bs: int, lab_hosts: dict[str, Host], write_guard: WriteGuard,
    fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """On every writable device, each initiator writes its own region; every other initiator reads it back (RAC's
    shared disk). Then the next
    initiator overwrites it with a write of its own and the first must read that back, not its own earlier one."""
    outcome = ig.Outcome()
    for device in _every_disk(fabric, protocol, write_guard, len(fabric.lab.hosts_with("initiator"))):
        hosts = _initiators(fabric, device, lab_hosts, 2)
        outcome.merge(ig.cross_verify(hosts, device, bs, fabric.lab.integrity.region_bytes))
    _record(fabricqa_report, request, fabric, f"integrity-cross-host-{LABEL[bs]}", protocol, outcome)


@BLOCK_SIZES
def test_concurrent_regions(
    fabric: Fabric, protocol: str, bs: int, lab_hosts: dict[str, Host], write_guard: WriteGuard,
    fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """On every writable device, every initiator writes its own region at the same time (each its own write's
    generation), then each reads back every region."""
    outcome = ig.Outcome()
    for device in _every_disk(fabric, protocol, write_guard, len(fabric.lab.hosts_with("initiator"))):
        hosts = _initiators(fabric, device, lab_hosts, 2)
        outcome.merge(ig.concurrent_verify(hosts, device, bs, fabric.lab.integrity.region_bytes))
    _record(fabricqa_report, request, fabric, f"integrity-concurrent-{LABEL[bs]}", protocol, outcome)


# Every initiator disconnects on purpose: a buffered read in flight when the last path goes fails, and is expected
# (kernlog.DISCONNECT_READS); this case's own data is judged by the read back after the reconnect.
@pytest.mark.fabricqa_kernel_expects(kernlog.DISCONNECT_READS)
def test_data_survives_reconnect(
    fabric: Fabric, protocol: str, lab_hosts: dict[str, Host], write_guard: WriteGuard,
    fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """On every writable device a region per block size written, every initiator disconnected and connected again,
    every one reads all back."""
    outcome = ig.Outcome()
    before = []
    for device in _every_disk(fabric, protocol, write_guard, len(ig.BLOCK_SIZES)):
        hosts = _initiators(fabric, device, lab_hosts, 1)
        mine, written = ig.write_before_reconnect(hosts[0], device, fabric.lab.integrity.region_bytes)
        before.append((device, hosts, mine, written))
    if not any(mine.problems for _, _, mine, _ in before):
        fabric.reconnect_initiators()
        for device, hosts, mine, written in before:
            ig.verify_after_reconnect(mine, hosts, ig.paths_now(fabric.devices, device), written)
    for _, _, mine, _ in before:
        outcome.merge(mine)
    _record(fabricqa_report, request, fabric, "integrity-reconnect", protocol, outcome)


@pytest.mark.fabricqa_failover
@pytest.mark.fabricqa_late_in_pair
def test_data_survives_target_restart(
    lab: LabModel, lab_target: TargetModel, fabric: Fabric, protocol: str, lab_hosts: dict[str, Host],
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """On every writable device a region per block size written and flushed (a cache flush to the target), the
    target restarted as the failover suite's target-restart case restarts it, and once every initiator reads its
    devices again, every one reads all back: acknowledged, flushed data survives the target's restart."""
    why = restart.not_restarted(lab_target.kind)
    if why is not None:
        pytest.skip(f"{protocol}-{fabric.target}: {why}")
    outcome = ig.Outcome()
    before = []
    for device in _every_disk(fabric, protocol, write_guard, len(ig.BLOCK_SIZES)):
        hosts = _initiators(fabric, device, lab_hosts, 1)
        mine, written = ig.write_and_flush(hosts[0], device, lab.integrity.region_bytes)
        before.append((device, hosts, mine, written))
    if not any(mine.problems for _, _, mine, _ in before):
        readers = [(hosts, device.paths) for device, hosts, _, _ in before]
        outcome.problems += survival.restarted(lab, lab_hosts, lab_target.name, protocol, readers)
        if not outcome.problems:
            for device, hosts, mine, written in before:
                ig.verify_after_reconnect(mine, hosts, ig.paths_now(fabric.devices, device), written)
    for _, _, mine, _ in before:
        outcome.merge(mine)
    _record(fabricqa_report, request, fabric, "integrity-target-restart", protocol, outcome)


def test_verify_detects_corruption(
    lab: LabModel, fabric: Fabric, protocol: str, lab_hosts: dict[str, Host], target_host: Host | None,
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """Proof the verify can fail: 4 KiB of a written block zeroed on the target's backing device, and the verify
    must name that block (the expected detection: this case passes when it does)."""
    if target_host is None:
        pytest.skip(f"{protocol}: an external target's backing device cannot be reached to change it")
    target = lab.target_for(protocol, fabric.target)
    corruptible = [d for d in ig.shared_devices(fabric.devices) if target.devices[d.backing].corruptible]
    if not corruptible:
        pytest.skip(f"{protocol}: the lab marks no device corruptible (targets[].devices.NAME.corruptible: true)")
    device = _disk(fabric, protocol, write_guard, 1, corruptible)
    hosts = _initiators(fabric, device, lab_hosts, 1)
    backing = target.devices[device.backing].path
    outcome, found = ig.corruption_detected(
        hosts[0], hosts[-1], target_host, device, backing, fabric.lab.integrity.region_bytes
    )
    _record(fabricqa_report, request, fabric, "integrity-corruption-detected", protocol, outcome)
    assert found is not None


# The fenced write: SCSI says "reservation conflict"; Linux 6.1 logs NVMe's as "I/O Error (sct 0x0 / sc 0x83)" (its
# Reservation Conflict status, read on vnode1), and the block layer "critical nexus error" for either. PREEMPT AND
# ABORT aborts the victim's commands in flight, and SCST answered none of them (no TASK ABORTED status): the victim's
# initiator times each out and aborts it itself ("scst: Aborting task set" at the preempt, then 60 s later
# "scst: TM fn ABORT_TASK/0 (..., initiator ...:vnode1, ...)", iSER on SCST, full run of 46e990c).
@pytest.mark.fabricqa_kernel_expects(
    r"reservation conflict", r"sct 0x0 / sc 0x83\b", r"nexus error", r"FAILED Result", r"TM fn ABORT_TASK\b"
)
def test_reservations_fence(
    lab: LabModel, fabric: Fabric, protocol: str, lab_hosts: dict[str, Host], write_guard: WriteGuard,
    fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """A cluster's fencing, each step checked with the target's report and generation (see
    :mod:`pytest_fabricqa.integrity.reservations`): an unregistered initiator is refused; register,
    register-and-ignore, replace, reserve, release, reserve; one holds Write Exclusive (registrants only on a
    multipath map) and the other's preempt-and-abort fences it while it writes (what it was told must be what
    landed): its write is refused; unregister. Keys unique to the run,
    recorded on each host before they are sent; ours unregistered at the end even after a failure, and a key that
    stays fails the case."""
    kind = lab.target_for(protocol, fabric.target).kind
    why = unsupported(kind)
    if why is not None:
        pytest.skip(f"{protocol}: persistent reservations are {why}")
    device = _disk(fabric, protocol, write_guard, 1)
    a, b = _initiators(fabric, device, lab_hosts, 2)[:2]
    family = protocol_spec(protocol).family
    driver = driver_for(family, device.address)
    target = lab.target_for(protocol, fabric.target)
    ledger = KeyLedger(lab.name, target.name_prefix, target.name, family, device.address)
    undo = UndoStack()
    try:
        result = fencing(driver, a, b, device, undo, run=run_token(), ledger=ledger)
    finally:
        # Our keys unregistered from their own hosts; one that stays fails the case (the next start sweeps it).
        left = undo.unwind()
    result.check("clean-up: our keys unregistered, nothing left", "; ".join(left) or None)
    case = reservation_case(request.node.nodeid, f"{protocol}-{fabric.target}-reservations", protocol, result)
    fabricqa_report.record(replace(case, target=fabric.target), request)
    assert not result.problems, "\n".join(result.problems)
