"""Undo stacks, the target registry and one-line errors (no hosts needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import ScriptedHost
from labfiles import vlab_kernel_text, vlab_kernel_text_as

from pytest_fabricqa.core.kinds import REGISTRY
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.fabric.provision import FabricDevice, _one_line
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.targets import load_target
from pytest_fabricqa.transport.base import CommandError, CommandResult

LABS = Path(__file__).parents[2] / "labs"


def test_undo_runs_newest_first_once_and_keeps_going_after_a_failure() -> None:
    ran: list[str] = []
    undo = UndoStack()
    undo.push("remove port", lambda: ran.append("port"))

    def broken() -> None:
        ran.append("namespace")
        raise CommandError(CommandResult("vstor", ("rmdir", "x"), 1, "", "rmdir: Device or resource busy"))

    undo.push("remove namespace", broken)
    undo.push("disconnect", lambda: ran.append("disconnect"))
    errors = undo.unwind()
    assert ran == ["disconnect", "namespace", "port"]
    assert errors == ["remove namespace: rmdir: Device or resource busy"]
    assert undo.unwind() == [] and ran == ["disconnect", "namespace", "port"]  # idempotent


def test_every_lab_target_kind_is_registered_and_unimplemented_ones_say_so(tmp_path: Path) -> None:
    assert {"nvmet", "lio", "spdk", "scst", "tgt", "external"} <= set(REGISTRY)
    lab = load_lab(LABS / "rac3.yaml")
    assert type(load_target(lab, lab.target_for("iser"), {"el72h3": object()})).__name__ == "ScstTarget"  # type: ignore[dict-item]
    for kind in [k for k, v in REGISTRY.items() if v.driver is None]:
        text = vlab_kernel_text().replace("  - kind: nvmet\n", f"  - kind: {kind}\n")
        (tmp_path / "lab.yaml").write_text(text)
        lab = load_lab(tmp_path / "lab.yaml")
        with pytest.raises(ProvisionError) as info:
            load_target(lab, lab.target_for("nvme-tcp"), {})
        message = str(info.value)
        assert message.startswith(f"vstor: target kind {kind!r} (lab 'vlab' targets[0].kind) is not implemented yet;")
        assert "\n" not in message


def test_registry_loads_each_driver_lazily() -> None:
    lab = load_lab(LABS / "vlab.yaml")
    hosts = {"vstor": object()}
    assert type(load_target(lab, lab.target_for("nvme-tcp"), hosts)).__name__ == "NvmetTarget"  # type: ignore[arg-type]
    assert type(load_target(lab, lab.target_for("iser"), hosts)).__name__ == "LioTarget"  # type: ignore[arg-type]


def test_external_target_describes_without_provisioning(tmp_path: Path) -> None:
    text = vlab_kernel_text_as("  - kind: external\n").replace(
        "    host: vstor\n    protocols: [iscsi, iser]", "    address: 10.10.10.50\n    protocols: [iscsi, iser]", 1
    )
    (tmp_path / "lab.yaml").write_text(text)
    lab = load_lab(tmp_path / "lab.yaml")
    target = load_target(lab, lab.target_for("iser"), {})
    undo = UndoStack()
    export = target.provision("iser", undo)
    assert (export.address, export.port, export.transport, export.subsystems) == (
        "10.10.10.50",
        3260,
        "iser",
        ("iqn.2026-11.io.fabricqa:vstor",),
    )
    assert len(undo) == 0 and target.leftovers() == [] and target.cleanup_stale() == []


def test_several_initiator_failures_become_one_line() -> None:
    failures: list[BaseException] = [
        ProvisionError("vnode1", "cannot reach the portal 10.10.10.99:4420 (nvme-tcp)", "check the storage network"),
        ProvisionError("vnode2", "cannot reach the portal 10.10.10.99:4420 (nvme-tcp)", "check the storage network"),
    ]
    error = _one_line(failures)
    assert str(error) == (
        "vnode1: cannot reach the portal 10.10.10.99:4420 (nvme-tcp) (and 1 more initiator failed); "
        "check the storage network"
    )
    command = CommandError(
        CommandResult("vnode1", ("nvme", "connect"), 1, "", "line1\nFailed to write to /dev/nvme-fabrics")
    )
    assert str(_one_line([command])) == "vnode1: `nvme connect` failed (Failed to write to /dev/nvme-fabrics)"


def test_fabric_device_is_frozen() -> None:
    device = FabricDevice("vnode1", "/dev/nvme0n1", "nvme0", "nqn.x:y", 1, 1024, 512, True, False)
    with pytest.raises(AttributeError):
        device.path = "/dev/sda"  # type: ignore[misc]


def test_initiators_reconnect_in_place_and_their_devices_are_found_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fabric gone and back for the initiators (the integrity suite's reconnect): each initiator's own undo
    stack unwinds (its disconnect), connect_one runs again with a fresh stack, the new device paths replace the
    old ones in lab order, and the target's single teardown entry still disconnects them."""
    from pytest_fabricqa.core.export import Export, ExportedUnit
    from pytest_fabricqa.fabric import provision
    from pytest_fabricqa.initiators.connect import Connected

    lab = load_lab(LABS / "vlab.yaml")
    hosts = {name: ScriptedHost(name) for name in lab.hosts}
    unit = ExportedUnit("nqn.x", 1, "ram0", "/dev/ram0", True, False)
    export = Export("nvme-tcp", "tcp", "10.10.10.19", 4420, (unit,), "vstor")
    events: list[str] = []
    generation = {"n": 0}

    def device(host: str) -> FabricDevice:
        return FabricDevice(host, f"/dev/nvme{generation['n']}n1", "ram0", "nqn.x", 1, 1 << 29, 512, True, False)

    def connect_one(lab_: object, model: object, export_: object, host: ScriptedHost, undo: UndoStack) -> Connected:
        undo.push("disconnect", lambda: events.append(f"disconnect {host.name}"))
        events.append(f"connect {host.name}")
        return Connected([device(host.name)], ["nqn.x"])

    monkeypatch.setattr(provision, "connect_one", connect_one)
    stacks = {name: UndoStack() for name in ("vnode1", "vnode2")}
    for name, stack in stacks.items():
        stack.push("disconnect", lambda name=name: events.append(f"disconnect {name}"))
    undo = UndoStack()
    undo.push("disconnect the initiators", lambda: provision._unwind_initiators(stacks, hosts))
    fabric = provision.Fabric(lab, "nvme-tcp", export, undo, "vstor", [device("vnode1"), device("vnode2")],
                              {}, 0.0, [], hosts)  # fmt: skip
    fabric._initiator_stacks = stacks
    generation["n"] = 7
    fabric.reconnect_initiators()
    assert sorted(events) == ["connect vnode1", "connect vnode2", "disconnect vnode1", "disconnect vnode2"]
    assert events.index("disconnect vnode1") < events.index("connect vnode1")
    assert [(d.initiator, d.path) for d in fabric.devices] == [("vnode1", "/dev/nvme7n1"), ("vnode2", "/dev/nvme7n1")]
    events.clear()
    fabric.teardown()
    assert sorted(events) == ["disconnect vnode1", "disconnect vnode2"]
    with pytest.raises(KeyError, match="not an initiator of this fabric"):
        fabric.disconnect_initiators(["vstor"])


def test_each_pairs_cases_run_in_one_stretch_and_phases_stay_in_order() -> None:
    from pytest_fabricqa.plugin.groups import runs_together

    # (phase, pair or None, name): pytest's own order after its reordering by session parameters
    items = [
        (1, ("nvme-rdma", "nvmet"), "conn-nvmet"),
        (1, None, "prereq-a"),
        (1, ("nvme-rdma", "spdk"), "conn-spdk"),
        (1, ("nvme-rdma", "nvmet"), "fio-nvmet"),
        (0, None, "before"),
        (1, ("nvme-rdma", "spdk"), "fio-spdk"),
        (2, ("nvme-rdma", "nvmet"), "after-nvmet"),
    ]
    ordered = runs_together(items, phase=lambda i: i[0], key=lambda i: i[1])
    assert [i[2] for i in ordered] == [
        "before",
        "conn-nvmet",
        "fio-nvmet",
        "prereq-a",
        "conn-spdk",
        "fio-spdk",
        "after-nvmet",
    ]
    # A pair's tear-down case (marked last in its pair) moves to the end of that pair's stretch only.
    ordered = runs_together(items, phase=lambda i: i[0], key=lambda i: i[1], last=lambda i: i[2] == "conn-nvmet")
    assert [i[2] for i in ordered][:4] == ["before", "fio-nvmet", "conn-nvmet", "prereq-a"]
    # A late case (the failover suite's) goes after the others and before the last (rank 0, 1, 2).
    rank = {"conn-nvmet": 2, "fio-nvmet": 1}
    items.insert(1, (1, ("nvme-rdma", "nvmet"), "perf-nvmet"))
    ordered = runs_together(items, phase=lambda i: i[0], key=lambda i: i[1], last=lambda i: rank.get(i[2], 0))
    assert [i[2] for i in ordered][:5] == ["before", "perf-nvmet", "fio-nvmet", "conn-nvmet", "prereq-a"]


def test_connect_fabric_provisions_the_named_target_one_pair_per_host_and_reads_its_queue_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two targets of vstor serve nvme-tcp: the one named is provisioned, the export and the fabric carry its
    name, a second pair on the same host is refused while the first is live, and a driver's own queue reader
    (SPDK's) is asked for its limits."""
    import yaml

    from pytest_fabricqa.core.export import Export, ExportedUnit
    from pytest_fabricqa.fabric import provision
    from pytest_fabricqa.initiators.connect import Connected
    from pytest_fabricqa.lab.model import LabModel

    data = yaml.safe_load((LABS / "vlab.yaml").read_text())
    second = dict(data["targets"][0], name="second")
    data["targets"].append(second)
    lab = LabModel.model_validate(data)
    hosts = {name: ScriptedHost(name) for name in lab.hosts}
    provisioned: list[str] = []

    class Driver:
        def __init__(self, model: object) -> None:
            self.model = model

        def provision(self, protocol: str, undo: UndoStack) -> Export:
            provisioned.append(self.model.name)  # type: ignore[attr-defined]
            unit = ExportedUnit("nqn.x", 1, "ram0", "/dev/ram0", True, False)
            return Export(protocol, "tcp", "10.10.10.19", 4420, (unit,), "vstor")

        def queue_settings(self, protocol: str) -> dict[str, int]:
            return {"spdk_max_queue_depth": 128}

    def connect_one(lab_: object, model: object, export: Export, host: ScriptedHost, undo: UndoStack) -> Connected:
        assert export.target == model.name  # type: ignore[attr-defined]
        return Connected([FabricDevice(host.name, "/dev/nvme1n1", "ram0", "nqn.x", 1, 1 << 29, 512, True, False)], [])

    monkeypatch.setattr(provision, "load_target", lambda lab_, model, hosts_: Driver(model))
    monkeypatch.setattr(provision, "connect_one", connect_one)
    monkeypatch.setattr(provision, "cleanup_stale", lambda *a, **k: [])
    monkeypatch.setattr(provision, "read_queues", lambda *a, **k: {})
    fabric = provision.connect_fabric(lab, "nvme-tcp", hosts, target="second")
    try:
        assert "set -C" in hosts["vstor"].commands[0][2]  # the kind's lock on the target host, first of all
        assert provisioned == ["second"] and fabric.target == "second" and fabric.export.target == "second"
        assert fabric.queues == {"vstor": {"spdk_max_queue_depth": 128}}
        with pytest.raises(ProvisionError, match=r"the nvme-tcp fabric of target second is still connected"):
            provision.connect_fabric(lab, "nvme-tcp", hosts, target="nvmet")
    finally:
        fabric.teardown()
    again = provision.connect_fabric(lab, "nvme-tcp", hosts, target="nvmet")  # the host is free again
    again.teardown()
    assert provisioned == ["second", "nvmet"]


def test_connect_fabric_is_refused_before_any_clean_up_when_another_labs_session_drives_the_kind_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lab B on vstor's nvmet while lab A's live session drives it: one line naming A, nothing cleaned or made,
    and the host free for B's next pair."""
    import subprocess
    import sys

    from pytest_fabricqa.fabric import lock, provision

    lab = load_lab(LABS / "vlab.yaml")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    held = lock.me("team-a", other.pid)

    def vstor(argv: tuple[str, ...]) -> str:
        if argv[:2] == ("sh", "-c") and "set -C" in argv[2]:
            assert argv[5] == "/run/fabricqa/target-nvmet.lock"
            return "HELD\n" + held.line()
        raise AssertionError(f"vstor: nothing else may run: {argv}")

    hosts = {name: ScriptedHost(name) for name in lab.hosts}
    hosts["vstor"] = ScriptedHost("vstor", vstor)
    monkeypatch.setattr(provision, "cleanup_stale", lambda *a, **k: pytest.fail("cleaned up under another's lock"))
    try:
        with pytest.raises(lock.TargetInUse) as info:
            provision.connect_fabric(lab, "nvme-tcp", hosts, target="nvmet")
    finally:
        other.kill()
        other.wait()
    assert str(info.value).startswith(
        f"vstor: nvmet on this host is driven by the session of lab 'team-a', pid {other.pid}"
    )
    assert len(hosts["vstor"].commands) == 2  # the take, then the give-back's read (the lock is not ours: kept)
    assert provision._LIVE == {}


def test_an_initiator_that_cannot_let_go_leaves_the_fabric_to_be_provisioned_anew() -> None:
    """A failed disconnect (CI, 2026-12-03: a multipath map in use) raises, and the fabric is no longer marked
    connected, so the ``fabric`` fixture provisions it anew for the next case; before, the pair's later cases got
    a fabric without devices and skipped as if the lab marked nothing writable."""
    from pytest_fabricqa.core.export import Export, ExportedUnit
    from pytest_fabricqa.fabric import provision

    lab = load_lab(LABS / "vlab.yaml")
    hosts = {name: ScriptedHost(name) for name in lab.hosts}
    export = Export("iscsi", "tcp", "10.10.10.19", 3260, (ExportedUnit("iqn.x", 1, "ram0", "/dev/ram0"),), "vstor")
    device = FabricDevice("vnode1", "/dev/mapper/36001405x", "ram0", "iqn.x", 1, 1 << 29, 512, True, False)

    def in_use() -> None:
        raise CommandError(CommandResult("vnode1", ("multipath", "-f", "36001405x"), 1, "36001405x: map in use", ""))

    stack = UndoStack()
    stack.push("remove multipath map 36001405x", in_use)
    fabric = provision.Fabric(lab, "iscsi", export, UndoStack(), "vstor", [device], {}, 0.0, [], hosts)
    fabric._initiator_stacks = {"vnode1": stack}
    assert fabric.connected
    with pytest.raises(ProvisionError, match=r"vnode1: disconnecting from the iscsi target failed: .*map in use"):
        fabric.reconnect_initiators()
    assert not fabric.connected and fabric.devices == []


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ((0, "", ""), r"^vnode1: cannot reach the portal 10\.10\.10\.19:4420 \(nvme-rdma\)"),
        (
            (124, "", "timed out after 15.0 s"),
            r"^vnode1: does not answer over SSH any more \(timed out after 15\.0 s\)",
        ),
        ((-1, "", ""), r"^vnode1: does not answer over SSH any more \(exit -1\)"),
    ],
    ids=["the-storage-network", "a-hung-host", "a-closed-session"],
)
def test_a_portal_probe_that_fails_because_the_initiator_is_gone_says_so(
    answer: tuple[int, str, str], expected: str
) -> None:
    """The CI run of 2026-12-06 lost a guest under load and then read 'cannot reach the portal' on every pair that
    followed: the probe runs over SSH, so a host that no longer answers at all must be told apart from its storage
    network."""
    from pytest_fabricqa.core.export import Export, ExportedUnit
    from pytest_fabricqa.initiators.connect import connect_one

    lab = load_lab(LABS / "vlab.yaml")
    host = ScriptedHost(
        "vnode1", lambda argv: (1, "", "") if argv[0] == "ping" else answer if argv == ("true",) else None
    )
    export = Export(
        "nvme-rdma", "rdma", "10.10.10.19", 4420, (ExportedUnit("nqn.x", 1, "ram0", "/dev/ram0", True, False),), "vstor"
    )
    with pytest.raises(ProvisionError, match=expected):
        connect_one(lab, lab.targets[0], export, host, UndoStack())  # type: ignore[arg-type]
    assert host.commands[0][0] == "ping" and host.commands[1] == ("true",)


def test_a_fabric_shows_its_target_apps_log_and_a_reader_that_fails_shows_nothing() -> None:
    """What a failed case shows of the target app the plugin started (SPDK's nvmf_tgt): the driver's ``app_log``,
    kept by the fabric; a kernel target has none, and a reader that raises is a diagnostic lost, not an error."""
    from pytest_fabricqa.core.export import Export, ExportedUnit
    from pytest_fabricqa.fabric import provision

    lab = load_lab(LABS / "vlab.yaml")
    hosts = {name: ScriptedHost(name) for name in lab.hosts}
    export = Export(
        "nvme-tcp", "tcp", "10.10.10.19", 4420, (ExportedUnit("nqn.x", 1, "ram0", "/dev/ram0", True, False),), "vstor"
    )
    fabric = provision.Fabric(lab, "nvme-tcp", export, UndoStack(), "vstor", [], {}, 0.0, [], hosts)
    assert fabric.target_log() is None
    fabric._app_log = lambda: ("nvmf_tgt log on vstor", "[2026-12-07 18:16:09.534518] reactor.c: started")
    assert fabric.target_log() == ("nvmf_tgt log on vstor", "[2026-12-07 18:16:09.534518] reactor.c: started")

    def unreadable() -> tuple[str, str] | None:
        raise TimeoutError("vstor did not answer in 60 s")

    fabric._app_log = unreadable
    assert fabric.target_log() is None
