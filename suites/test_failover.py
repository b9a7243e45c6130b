"""Path failover under I/O (issue 13, faults a, c, d and e): paths down while fio writes and verifies.

On every initiator fio writes its own region (distinct offsets, ``verify=crc32c`` with ``verify_backlog``) and
logs its IOPS every 100 ms; paths go down on every initiator at once and come back:

- ``one-path-down`` (``test_one_path_down``, for a target serving on several paths): the link of the path that
  carries the I/O (the NVMe multipath path device that completes it) down for ``failover.one_path_down_s``
  while the other paths stay up. The I/O must move to a remaining path while it is down, with no I/O error and
  no verify error; the stall (how long the initiator took to give the path up) is gated by ``max_stall_s``.
- ``path-parity`` (``test_paths_carry_alike``, a target serving several paths): each path alone carries a short
  read-only fio on every initiator at once (NVMe: every other path's port ANA-inaccessible, the path devices'
  counters proving which path carried the reads; iSCSI/iSER: the dm-multipath map's disk over that path), and
  the slowest path may be at most ``max_path_imbalance_pct`` below the fastest: the Windows HLK multiport rule
  (10% there).
- ``ana-inaccessible``, ``alua-unavailable`` and ``target-port-down`` (``test_path_away_on_the_target``, a target
  serving several paths): the target port carrying the first initiator's I/O goes away for ``one_path_down_s`` --
  its ANA group inaccessible (nvmet's port, SPDK's listener), its ALUA target port group unavailable (LIO: a TPG
  and an ALUA group per path; dm-multipath's ``prio alua`` follows it), or the port itself unlinked (nvmet), its listener removed (SPDK), or its portal removed
  and the target host's storage port carrying it dropping every frame (LIO: removing the portal alone leaves the
  sessions logged in through it running; SCST and tgt: that storage port dropping every frame, their daemons
  listening on whatever address is left) -- then back. The initiators must move their I/O to another path while
  it is away, with no error. After an ANA or ALUA change nothing is disconnected, so the stall is the host's reaction
  alone; a port taken away costs the detection of a dead path (for iSCSI/iSER under dm-multipath, the nop-out
  timeouts and recovery_tmo, as for a path's link).
- ``path-flapping`` (``test_path_flapping``, for a target serving on several paths): the one-path outage
  ``failover.flap_cycles`` times in a row (3 by default, as SPDK's host/failover.sh) under one fio run, each cycle
  on the path carrying the I/O at that moment, its failback watched before the next: every cycle is judged as the
  one-path outage (the I/O moved while the path was down, the path quiet at the fault's end, the failback where the
  path shared the I/O), and the whole run must see no I/O error and no verify error.
- ``controller-reset`` (``test_controller_reset``, NVMe-oF): on every initiator the controller of the path carrying
  the I/O is reset (``nvme reset``, which returns once the controller is live again: its queues torn down and
  connected again, as blktests' nvme/040 does under I/O). I/O must go on with no I/O error and no verify error;
  its stall is gated by ``max_stall_s``.
- ``session-relogin`` (``test_session_relogin``, iSCSI and iSER on several paths): on every initiator the iSCSI
  session of the path carrying the I/O is logged out and at once logged in again (``iscsiadm --logout``, then
  ``--login``: SCSI's counterpart of the controller reset). Its disk leaves the dm-multipath map and a new one joins
  it; I/O must go on over the other paths with no I/O error and no verify error, its stall gated by
  ``max_stall_s``, and the session after the login must be a new one (else the fault changed nothing).
- ``target-restart`` (``test_target_restart``, nvmet, SPDK, LIO, SCST and tgt): the whole target goes away on every
  path at once for ``failover.brief_down_s`` and comes back, as when its service restarts -- nvmet's ports unlinked
  from our subsystems (every controller on them deleted), SPDK's nvmf_tgt stopped and started again from its saved
  configuration (down for the brief time plus its start), LIO's TPGs disabled (every session closed), SCST's target
  disabled with each session force-closed, tgt's target offline with each connection deleted (logins meanwhile
  answered with a target error, which open-iscsi retries) -- then back. Judged as the brief outage: I/O stopped for
  at least half the time, resumed, no I/O error and no verify error, the stall gated by ``max_stall_s``.
- ``all-paths-down-brief``: every storage link of each initiator, for less than the path timeout. I/O must stop
  for at least half the outage (else the fault took nothing away: ``outage.TAKEN_SHARE``), then resume with no I/O
  error and no verify error; the stall is gated by the lab's ``max_stall_s``.
- ``all-paths-down-long``: for longer than the path timeout. I/O errors must be seen on every host (proof the
  measurement sees errors); afterwards every initiator reads its device again and writes and verifies a region.
  A lab whose hosts queue with no path left (``failover.long_outage: queue``, a valid RAC choice) gets the
  opposite verdict: no I/O error, I/O stopped for the outage and resumed after it, then the same read and verify;
  its NVMe controllers' timeouts in force are read first, and one that would fail I/O is named.

Per host the case reports the fault's stall (the run's other gaps beside it), the first I/O and the recovery to 90% after the fault, the I/O and
verify errors. The path timeouts the cases run with come from the lab's ``failover`` section and are set only
for the case, the old values recorded on each initiator first (a killed run's come back at the next start).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from pytest_fabricqa.core import cases
from pytest_fabricqa.core.cases import ALUA, ANA, BRIEF, FLAPPING, LONG, LONG_QUEUED, ONE_PATH, OUTAGES, PORT, RESET
from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.fabric.provision import Fabric
from pytest_fabricqa.failover import flapping, parity
from pytest_fabricqa.failover import outage as og
from pytest_fabricqa.failover.figures import stall_rule
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.faults import restart
from pytest_fabricqa.fio.verify import Region
from pytest_fabricqa.integrity import checks as ig
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.lab.thresholds import Thresholds, thresholds_for
from pytest_fabricqa.report import model as rm
from pytest_fabricqa.safety.guard import WriteGuard
from pytest_fabricqa.transport.base import Host

pytestmark = [pytest.mark.loads_target, pytest.mark.fabricqa_failover]


@pytest.mark.fabricqa_late_in_pair  # its outages come after the pair's figures are measured
@pytest.mark.parametrize("outage", [BRIEF, LONG])
def test_all_paths_down(
    lab: LabModel, lab_target: TargetModel, protocol: str, outage: str, fabric: Fabric, lab_hosts: dict[str, Host],
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """Every initiator's storage links down at once while fio writes and verifies, then up (see the module)."""
    _outage_case(lab, lab_target, protocol, outage, fabric, lab_hosts, write_guard, fabricqa_report, request)


@pytest.mark.fabricqa_late_in_pair
def test_one_path_down(
    lab: LabModel, lab_target: TargetModel, protocol: str, fabric: Fabric, lab_hosts: dict[str, Host],
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """On every initiator the path carrying the I/O goes down while fio writes and verifies; the I/O must move to a
    remaining path while it is down, with no error (see the module)."""
    paths = fabric.export.addresses
    if len(paths) < 2:
        pytest.skip(
            f"{protocol}-{fabric.target}: the target serves on one path ({paths[0]}), so there is no path to fail "
            "over to (set targets[].paths: all in the lab file to serve it on every storage port of its host)"
        )
    _outage_case(lab, lab_target, protocol, ONE_PATH, fabric, lab_hosts, write_guard, fabricqa_report, request)


@pytest.mark.fabricqa_late_in_pair
def test_path_flapping(
    lab: LabModel, lab_target: TargetModel, protocol: str, fabric: Fabric, lab_hosts: dict[str, Host],
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """On every initiator the path carrying the I/O goes down and comes back ``failover.flap_cycles`` times in a row
    under one run, its failback watched between; every cycle must move the I/O to a remaining path while the path is
    down, and the run must see no error (see the module)."""
    paths = fabric.export.addresses
    if len(paths) < 2:
        pytest.skip(
            f"{protocol}-{fabric.target}: the target serves on one path ({paths[0]}), so there is no path to fail "
            "over to (set targets[].paths: all in the lab file)"
        )
    _outage_case(lab, lab_target, protocol, FLAPPING, fabric, lab_hosts, write_guard, fabricqa_report, request)


@pytest.mark.fabricqa_late_in_pair
def test_controller_reset(
    lab: LabModel, lab_target: TargetModel, protocol: str, fabric: Fabric, lab_hosts: dict[str, Host],
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """On every initiator the NVMe controller of the path carrying the I/O is reset (``nvme reset``) while fio
    writes and verifies; I/O must go on with no error, its stall gated like a path's (see the module)."""
    if protocol_spec(protocol).family != "nvme":
        pytest.skip(f"{protocol}: a controller reset (nvme reset) is an NVMe-oF fault; this is a SCSI transport")
    _outage_case(lab, lab_target, protocol, RESET, fabric, lab_hosts, write_guard, fabricqa_report, request)


@pytest.mark.fabricqa_late_in_pair
def test_session_relogin(
    lab: LabModel, lab_target: TargetModel, protocol: str, fabric: Fabric, lab_hosts: dict[str, Host],
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """On every initiator the iSCSI session of the path carrying the I/O is logged out and straight in again while
    fio writes and verifies; I/O must go on over the other paths with no error, its stall gated like a path's (see
    the module)."""
    if protocol_spec(protocol).family != "scsi":
        pytest.skip(f"{protocol}: a session logout and login (iscsiadm) is an iSCSI fault; this is an NVMe transport")
    paths = fabric.export.addresses
    if len(paths) < 2:
        pytest.skip(
            f"{protocol}-{fabric.target}: the target serves on one path ({paths[0]}), so the I/O has no other path "
            "while its session is logged out (set targets[].paths: all in the lab file)"
        )
    _outage_case(lab, lab_target, protocol, cases.RELOGIN, fabric, lab_hosts, write_guard, fabricqa_report, request)


@pytest.mark.fabricqa_late_in_pair
def test_target_restart(
    lab: LabModel, lab_target: TargetModel, protocol: str, fabric: Fabric, lab_hosts: dict[str, Host],
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """The whole target goes away on every path at once and comes back while fio writes and verifies -- nvmet's
    ports unlinked, SPDK's nvmf_tgt stopped and started again from its saved configuration, LIO's TPGs disabled,
    SCST's target disabled with its sessions closed, tgt's offline with its connections closed -- for the brief
    outage's time; I/O must wait and resume with no error (see the module)."""
    why = restart.not_restarted(lab_target.kind)
    if why is not None:
        pytest.skip(f"{protocol}-{fabric.target}: {why}")
    _outage_case(lab, lab_target, protocol, cases.RESTART, fabric, lab_hosts, write_guard, fabricqa_report, request)


TARGET_SIDE = {ANA: ("nvmet", "spdk"), PORT: ("nvmet", "spdk", "lio", "scst", "tgt"), ALUA: ("lio",)}
"""The target-side outages and the kinds they are made on."""


@pytest.mark.fabricqa_late_in_pair
@pytest.mark.parametrize("outage", list(TARGET_SIDE))
def test_path_away_on_the_target(
    lab: LabModel, lab_target: TargetModel, protocol: str, outage: str, fabric: Fabric, lab_hosts: dict[str, Host],
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """The target port carrying the I/O goes away while fio writes and verifies -- its ANA group inaccessible, its
    ALUA group unavailable, or the port itself taken away -- then back; the initiators must move the I/O to another path while it is away,
    with no error (see the module)."""
    paths = fabric.export.addresses
    if lab_target.kind not in TARGET_SIDE[outage] or len(paths) < 2:
        pytest.skip(
            f"{protocol}-{fabric.target}: {outage} is made on {' and '.join(TARGET_SIDE[outage])} targets serving "
            f"several paths (targets[].paths: all); this one is {lab_target.kind} on {len(paths)} path(s)"
        )
    _outage_case(lab, lab_target, protocol, outage, fabric, lab_hosts, write_guard, fabricqa_report, request)


@pytest.mark.fabricqa_late_in_pair
def test_paths_carry_alike(
    lab: LabModel, lab_target: TargetModel, protocol: str, fabric: Fabric, lab_hosts: dict[str, Host],
    fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """Each path alone carries a short read-only fio on every initiator at once (NVMe: every other path's target
    port made ANA-inaccessible, the path devices' counters proving which path carried it; SCSI: the dm-multipath
    map's disk over that path read directly), and no path is more than the lab's ``max_path_imbalance_pct`` slower
    than the fastest: the Windows HLK multiport rule (see the module)."""
    paths = fabric.export.addresses
    scsi = protocol_spec(protocol).family == "scsi"
    if len(paths) < 2 or not (scsi or lab_target.kind in TARGET_SIDE[ANA]):
        pytest.skip(
            f"{protocol}-{fabric.target}: paths are measured one by one over several paths (targets[].paths: all), "
            f"NVMe ones through ANA changes ({' and '.join(TARGET_SIDE[ANA])}); this one is {lab_target.kind} on "
            f"{len(paths)} path(s)"
        )
    devices = ig.shared_devices(fabric.devices)  # the load-carrying device, by each initiator's path to it
    if not devices:
        pytest.skip(f"{protocol}: the lab marks no exported device as carrying load, so no path is measured")
    device = devices[0]
    names = [n for n in lab.hosts_with("initiator") if n in device.paths]
    hosts = ig.hosts_by_name(lab_hosts, names)
    undo = UndoStack()
    try:
        if scsi:
            result = parity.measure_member_paths(hosts, device.paths, paths)
        else:
            result = parity.measure_paths(
                hosts, device.paths, paths,
                lambda address: faults.ana_change(lab, lab_hosts, lab_target.name, protocol, address=address), undo,
            )  # fmt: skip
    finally:
        failed_undo = undo.unwind()
    limits = parity.with_default_limit(thresholds_for(lab.thresholds_table(), protocol, parity.PARITY))
    problems = parity.parity_problems(result, limits, paths) + failed_undo
    imbalance = parity.imbalance(result)
    case = _case(
        request, protocol, fabric, parity.PARITY,
        figures={"path_imbalance_pct": max(imbalance.values())} if imbalance else {},
        hosts={n: {"path_imbalance_pct": v} for n, v in imbalance.items()},
        limits=limits, problems=problems,
        extras={"parity": {"device": device.backing, "iops_per_path": result.iops}},
    )  # fmt: skip
    fabricqa_report.record(case, request)
    assert not problems, "\n".join(problems)


def _outage_case(
    lab: LabModel, lab_target: TargetModel, protocol: str, outage: str, fabric: Fabric, lab_hosts: dict[str, Host],
    write_guard: WriteGuard, fabricqa_report: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    devices = ig.shared_devices(fabric.devices)
    if not devices:
        pytest.skip(f"{protocol}: the lab marks no exported device writable, so nothing is written")
    write_guard.before_writes(protocol, fabric.devices, fabric.target)
    device = devices[0]
    names = [n for n in lab.hosts_with("initiator") if n in device.paths]
    hosts = ig.hosts_by_name(lab_hosts, names)
    settings = lab.failover
    bs = ig.BLOCK_SIZES[settings.block_size]
    regions = {n: Region(ig.BASE_OFFSET + slot * (settings.region_mb << 20), settings.region_mb << 20, bs)
               for slot, n in enumerate(names)}  # fmt: skip
    room = ig.room_problem(device, len(names), settings.region_mb << 20)
    if room is not None:
        pytest.skip(f"{protocol}: {room}")
    undo = UndoStack()
    family = protocol_spec(protocol).family
    try:
        if outage == FLAPPING:
            result = flapping.path_flapping(
                lab, hosts, device.paths, regions, name_prefix=lab_target.name_prefix,
                subsystems=fabric.export.subsystems, family=family, undo=undo,
            )  # fmt: skip
        else:
            result = og.path_outage(
                lab, hosts, device.paths, regions, name_prefix=lab_target.name_prefix,
                subsystems=fabric.export.subsystems, family=family, outage=outage, undo=undo,
                target_fault=partial(_target_fault, outage, lab, lab_hosts, lab_target.name, protocol),
                target_restart=partial(restart.target_restart, lab, lab_hosts, lab_target.name, protocol),
            )  # fmt: skip
    finally:
        failed_undo = undo.unwind()
    limits = thresholds_for(lab.thresholds_table(), protocol, outage)
    judge = flapping.flapping_problems if outage == FLAPPING else og.outage_problems
    problems = judge(result, limits, names, database=lab.database) + failed_undo
    if outage == LONG:
        problems += og.usable_after(hosts, device.paths, settings.recover_s)
        if not problems:
            problems += og.verified_after(hosts, device.paths, regions)
    case = _case(
        request, protocol, fabric, outage,
        figures=_worst(result),
        hosts={n: f.figures() for n, f in result.figures.items()},
        limits=limits, problems=problems,
        extras={
            "failover": {
                "outage": outage,
                "what": LONG_QUEUED if result.queued else OUTAGES[outage],
                "long_outage": settings.long_outage if outage == LONG else None,
                "timeouts_in_force": result.in_force,  # a queued long outage's NVMe controllers, before the fault
                "down_s": result.down_s,
                "wall_s": round(result.wall_s, 1),
                "faults": {
                    n: {"start_ms": f.fault.start_ms, "end_ms": f.fault.end_ms} for n, f in result.figures.items()
                },
                "timeouts_before": result.timeouts,
                # The path the fault took away, and what it completed near the fault's end (none, if it went); what
                # every path completed in a sample before it, and each sample of the hold (faulted, others).
                "faulted_paths": {
                    n: {"traddr": a, "late_ios": result.late_ios.get(n), "before_ios": result.before_ios.get(n),
                        "before_faulted": result.before_faulted.get(n),
                        "samples": result.samples.get(n),
                        "shared_before": result.shared_before.get(n),
                        "failback": result.figures[n].failback if n in result.figures else None}
                    for n, a in result.faulted.items()
                },
                "timeouts_applied": {"nvme": settings.nvme.model_dump(), "iscsi": settings.iscsi.model_dump()},
                # Path flapping: each cycle's hold, and per host its figures, the path it took and the failback.
                "cycles": [
                    {"down_s": c.down_s,
                     "hosts": {n: {**f.figures(), "traddr": c.faulted.get(n), "late_ios": c.late_ios.get(n),
                                   "failback": f.failback} for n, f in c.figures.items()}}
                    for c in result.cycles
                ],
                "series": result.series,  # IOPS over time per host and the fault window: the report's chart
                # How the stall was measured, said in the report, and the load it was measured under.
                "stall_rule": stall_rule(og.INTERVAL_MS, round(settings.fault_reach_s * 1000)),
                "fault_io": {"rate_iops": settings.rate_iops, "settled_share": settings.settled_share},
            }
        },
    )  # fmt: skip
    raw = fabricqa_report.raw_path(case.case_id).with_suffix(".failover")
    for name, text in result.raw_files().items():
        (raw / name).parent.mkdir(parents=True, exist_ok=True)
        (raw / name).write_text(text)
    fabricqa_report.record(case, request)
    assert not problems, "\n".join(problems)


def _case(
    request: pytest.FixtureRequest, protocol: str, fabric: Fabric, name: str, *, figures: dict[str, float],
    hosts: dict[str, dict[str, float]], limits: Thresholds, problems: list[str], extras: dict[str, Any],
) -> rm.Case:  # fmt: skip
    """A failover case for the report: ``<protocol>-<target>-failover-<name>``; the report judges it by its
    violations."""
    return rm.Case(
        nodeid=request.node.nodeid,
        case_id=f"{protocol}-{fabric.target}-failover-{name}",
        suite="failover",
        verdict="passed",
        protocol=protocol,
        target=fabric.target,
        figures=figures,
        hosts=hosts,
        thresholds=limits.limits(),
        violations=tuple(problems),
        extras=extras,
    )


def _target_fault(
    outage: str, lab: LabModel, hosts: dict[str, Host], target: str, protocol: str, address: str
) -> faults.FaultInjector:
    """The target-side fault of ``outage`` on the port at ``address``."""
    if outage == ANA:
        return faults.ana_change(lab, hosts, target, protocol, address=address)
    if outage == ALUA:
        return faults.alua_change(lab, hosts, target, protocol, address=address)
    return faults.target_port_down(lab, hosts, target, protocol, address=address)


def _worst(result: og.OutageResult) -> dict[str, float]:
    """The case's figures: each the worst host's (longest fault stall, most errors)."""
    worst: dict[str, float] = {}
    for figures in result.figures.values():
        for name, value in figures.figures().items():
            worst[name] = max(worst.get(name, value), value)
    return worst
