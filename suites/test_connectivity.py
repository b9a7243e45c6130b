"""Connectivity: the target serving each protocol is provisioned, every initiator connects and sees its devices.

Discovery shows what the lab exports; each initiator is connected; each device has the size and logical block
size of its backing device on the target; each reaches every unit over every path the target serves on; each unit
has one WWID on every initiator and no two share one (what
multipath groups paths by); the path timeouts and native multipath are what the lab's ``multipath`` section
expects (and recorded whatever it expects); a short read-only fio pass succeeds on every device; an identity no
access list of the lab names is refused by the target (issue 31's access check); and after teardown no controller, session or target object of ours is left. Parametrized by protocol (ids are the
protocol names); the ``fabric`` fixture is connected once per protocol for the whole session.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.fabric.provision import Fabric, FabricDevice, leftovers
from pytest_fabricqa.faults import identity
from pytest_fabricqa.fio.parse import FioOutputError, parse_fio_output
from pytest_fabricqa.initiators import dm, iscsi, nvme
from pytest_fabricqa.initiators.connect import path_problems
from pytest_fabricqa.initiators.paths import path_settings_case, path_settings_problems, read_everywhere
from pytest_fabricqa.initiators.wwid import read_wwids, wwid_problems
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

pytestmark = pytest.mark.loads_target

# Small and read-only: this checks the path works, it measures nothing. One fio per initiator, one job per device,
# all devices at once (one process start and one SSH round trip per host, not per device).
FIO_READ = ("--rw=read", "--bs=64k", "--size=16M", "--readonly", "--direct=1", "--ioengine=libaio",
            "--output-format=json")  # fmt: skip


def _expected(fabric: Fabric) -> list[str]:
    return list(fabric.export.subsystems)


def test_discovery_shows_the_exported_subsystems(fabric: Fabric, initiators: list[Host], protocol: str) -> None:
    """Every initiator's discovery (nvme discover / iscsiadm -m discovery) lists what the target exports."""
    problems = [
        f"{host.name}: discovery over {protocol} does not list {name} (it lists {fabric.discovered.get(host.name)})"
        for host in initiators
        for name in _expected(fabric)
        if name not in fabric.discovered.get(host.name, [])
    ]
    assert not problems, "\n".join(problems)


def test_every_initiator_is_connected(fabric: Fabric, initiators: list[Host]) -> None:
    """Each initiator sees one block device per exported namespace or LUN."""
    wanted = len(fabric.export.units)
    problems = [
        f"{host.name}: sees {len(fabric.devices_on(host.name))} of {wanted} devices"
        for host in initiators
        if len(fabric.devices_on(host.name)) != wanted
    ]
    assert not problems, "\n".join(problems)


def test_every_initiator_reaches_every_unit_over_every_path(fabric: Fabric, initiators: list[Host]) -> None:
    """Each initiator reaches every subsystem over every path the target serves on (one live NVMe controller, or
    one iSCSI session, per portal address): with ``paths: all`` a namespace has one controller per storage port."""

    def read(host: Host) -> list[str]:
        if not fabric.devices_on(host.name):
            return []
        nvme_family = protocol_spec(fabric.export.protocol).family == "nvme"
        controllers = nvme.state(host)[0] if nvme_family else []
        sessions = [] if nvme_family else iscsi.sessions(host)
        return path_problems(host.name, fabric.export, controllers, sessions)

    problems = [p for found in each(initiators, read).values() if isinstance(found, list) for p in found]
    assert not problems, "\n".join(problems)


def _blockdev(host: Host, path: str) -> tuple[int, int]:
    out = host.run(["blockdev", "--getsize64", "--getss", path]).stdout.split()
    return int(out[0]), int(out[1])


def test_device_size_and_block_size_match_the_backing_device(
    fabric: Fabric, lab_hosts: dict[str, Host], protocol: str
) -> None:
    """Size and logical block size on each initiator equal the backing device's on the target."""
    if fabric.target_host is None:
        pytest.skip(f"{protocol}: the target is external; its backing devices cannot be read")
    target = lab_hosts[fabric.target_host]
    backing = {path: _blockdev(target, path) for path in {fabric.backing_path(d) for d in fabric.devices}}
    problems = []
    for device in fabric.devices:
        seen = _blockdev(lab_hosts[device.initiator], device.path)
        want = backing[fabric.backing_path(device)]
        if seen != want:
            problems.append(
                f"{device.initiator}: {device.path} ({device.subsystem} #{device.address}) is {seen[0]} bytes with "
                f"{seen[1]}-byte blocks; {fabric.target_host}:{fabric.backing_path(device)} is {want[0]} bytes with "
                f"{want[1]}-byte blocks"
            )
    assert not problems, "\n".join(problems)


def test_every_unit_has_one_wwid_on_every_initiator_and_no_two_share_one(
    fabric: Fabric, initiators: list[Host]
) -> None:
    """What multipath needs: each namespace or LUN shows the same WWID on every initiator, and no two show one."""
    found = each(initiators, lambda host: read_wwids(host, [d.path for d in fabric.devices_on(host.name)]))
    wwids = {name: value for name, value in found.items() if not isinstance(value, BaseException)}
    problems = wwid_problems(fabric.devices, wwids)
    assert not problems, "\n".join(problems)


def test_path_settings_are_what_the_lab_expects(
    fabric: Fabric, initiators: list[Host], protocol: str, fabricqa_report: Any, request: pytest.FixtureRequest
) -> None:
    """How a lost path plays out on each initiator: native NVMe multipath, each controller's ctrl_loss_tmo,
    reconnect_delay and fast_io_fail_tmo and its subsystem's iopolicy, or each session's recovery_tmo and its
    connections' nop-out timeouts, against the lab's ``multipath`` section; every value read is recorded."""
    hosts = [host for host in initiators if fabric.devices_on(host.name)]
    family = protocol_spec(protocol).family
    found, problems = read_everywhere(hosts, fabric.export.subsystems)
    paths = len(fabric.export.addresses)
    problems += path_settings_problems(found, fabric.export.subsystems, family, fabric.lab.multipath, paths)
    if family == "scsi" and paths > 1:  # the LUNs are dm-multipath maps: multipathd and each map's paths
        names = {h.name: [d.path for d in fabric.devices_on(h.name)] for h in hosts}
        problems += dm.problems_everywhere(hosts, names, paths, fabric.lab.multipath.dm.queue_if_no_path)
    case = path_settings_case(request.node.nodeid, f"{protocol}-{fabric.target}-path-settings", protocol,
                              fabric.target, family, found, problems, fabric.lab.multipath, paths)  # fmt: skip
    fabricqa_report.record(case, request)
    assert not problems, "\n".join(problems)


def _read_pass(host: Host, devices: list[FabricDevice]) -> list[str]:
    if not devices:
        return []
    jobs = [arg for device in devices for arg in (f"--name={device.path}", f"--filename={device.path}")]
    result = host.run(["fio", *FIO_READ, *jobs], check=False, timeout=300)
    try:
        run = parse_fio_output(result.stdout, host=host.name)
    except FioOutputError as exc:
        return [f"{host.name}: fio on {', '.join(d.path for d in devices)} exited {result.exit_code}: {exc}"]
    problems = [f"{host.name}: {error}" for error in run.errors]
    read = {job.name: job.read.io_bytes for job in run.jobs}
    problems += [f"{host.name}: fio read 0 bytes from {d.path}" for d in devices if read.get(d.path, 0) <= 0]
    return problems


def test_read_only_fio_pass_on_every_device(fabric: Fabric, initiators: list[Host]) -> None:
    """A 16 MiB read-only fio pass (direct I/O, libaio) on every device of every initiator, all at once."""
    results = each(initiators, lambda host: _read_pass(host, fabric.devices_on(host.name)), check=False)
    problems = [p for r in results.values() for p in (r if isinstance(r, list) else [f"{r}"])]
    assert not problems, "\n".join(problems)


@pytest.mark.fabricqa_kernel_expects(*identity.REFUSAL_LINES)
def test_an_initiator_no_access_list_names_is_refused(
    fabric: Fabric, lab: LabModel, lab_target: TargetModel, protocol: str, initiators: list[Host]
) -> None:
    """Access control: the first initiator presents an identity no access list of the lab names -- a made-up host
    NQN (a connect written to ``/dev/nvme-fabrics``) or initiator name (a login through an iface record of its own) -- to the
    fabric's first subsystem or target at its first portal. The target must refuse it for that reason (NVMe: the
    initiator's kernel logs the connect as not allowed; iSCSI: the login fails as not authorized), and the try leaves
    nothing behind: a controller or session it made is removed, the iface record deleted (also by the next run's
    start when this one is killed: :mod:`pytest_fabricqa.faults.identity`). A target that admits the identity fails
    the case, naming it."""
    family = protocol_spec(protocol).family
    host = next((h for h in initiators if fabric.devices_on(h.name)), None)
    if host is None:
        pytest.skip(f"{protocol}-{fabric.target}: no initiator is connected to try an identity from")
    made_up, host_id = identity.made_up_identity(family)
    subsystem = fabric.export.subsystems[0]
    tried = identity.UnlistedIdentity(lab, host, lab_target.name_prefix, fabric.export, family, subsystem, made_up,
                                      host_id)  # fmt: skip
    problems = identity.try_it(tried, f"{lab_target.kind} ({fabric.target})")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("secret", ["wrong", "missing"])
def test_a_login_with_a_wrong_or_missing_chap_secret_is_refused(
    fabric: Fabric, lab: LabModel, lab_target: TargetModel, protocol: str, initiators: list[Host], secret: str
) -> None:
    """CHAP (``targets[].iscsi.chap``): the first initiator logs in under its own initiator name, which the target's
    access list names, through an iface record of its own -- with the lab's CHAP name and a made-up secret
    (``wrong``), or with no CHAP at all (``missing``). The target must reject the login as the access check does
    (:func:`test_an_initiator_no_access_list_names_is_refused`); one it admits does not check CHAP, and the case
    fails. The try leaves nothing behind, as that case's does; the made-up secret is never recorded."""
    chap = lab_target.iscsi.chap if lab_target.iscsi is not None else None
    if protocol_spec(protocol).family != "scsi" or chap is None:
        pytest.skip(f"{protocol}-{fabric.target}: the lab sets no iSCSI CHAP for this target (targets[].iscsi.chap)")
    host = next((h for h in initiators if fabric.devices_on(h.name)), None)
    own = lab.hosts[host.name].initiator_iqn if host is not None else None
    if host is None or own is None:
        pytest.skip(f"{protocol}-{fabric.target}: no connected initiator with an initiator_iqn to log in as")
    credentials = (chap.initiator.user, identity.made_up_secret()) if secret == "wrong" else None
    label = f"its own initiator name {own} with a {secret} CHAP secret"
    tried = identity.UnlistedIdentity(lab, host, lab_target.name_prefix, fabric.export, "scsi",
                                      fabric.export.subsystems[0], own, chap=credentials, label=label,
                                      listed=True)  # fmt: skip
    problems = identity.try_it(tried, f"{lab_target.kind} ({fabric.target})")
    assert not problems, "\n".join(problems)


@pytest.mark.fabricqa_last_in_pair
def test_teardown_leaves_no_controller_session_or_target_object(
    fabric: Fabric, lab: LabModel, lab_hosts: dict[str, Host]
) -> None:
    """After teardown nothing of ours is left on any host.

    It runs after every other case of its (protocol, target), so nobody needs the fabric afterwards; a case of the
    pair that still asks for it (a user's own suite, a -k selection) gets it connected again.
    """
    fabric.teardown()
    left = leftovers(lab, lab_hosts)
    assert left == [], "\n".join(left)
