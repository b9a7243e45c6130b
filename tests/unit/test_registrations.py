"""The records of the reservation keys a run registers, and their sweep after a killed run
(:mod:`pytest_fabricqa.faults.registrations`): the records files for real on this machine (a temporary state
folder, the real shell scripts and lock), the reservation commands of a target that keeps its registrations (an
external array's, which no clean-up of ours removes)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from labfiles import vlab_kernel_text

from pytest_fabricqa.core import proc
from pytest_fabricqa.faults import registrations as reg
from pytest_fabricqa.faults.inject import FaultError
from pytest_fabricqa.initiators.reservations import ReservationState, reservation_key
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.targets import remote
from pytest_fabricqa.transport.base import CommandError, CommandResult, Host
from pytest_fabricqa.transport.local import LocalHost

KILLED = {"lab": "vlab", "controller": proc.machine(), "user": "root", "pid": 4_194_000, "started": 1}
FOREIGN = 0x111  # registered by hand: a cluster's, never ours to touch


class Array:
    """The registrations of one device as an array keeps them; ``stuck``: keys whose unregister it acknowledges and
    ignores."""

    def __init__(self, *keys: int, stuck: tuple[int, ...] = ()) -> None:
        self.keys, self.stuck, self.unregistered = list(keys), stuck, []

    def report(self, host: Host, path: str) -> ReservationState:
        return ReservationState(len(self.unregistered), tuple(self.keys))

    def unregister(self, host: Host, path: str, key: int) -> None:
        self.unregistered.append((host.name, path, key))
        if key not in self.stuck:
            self.keys.remove(key)


def lab(kind: str = "lio") -> LabModel:
    """The virtual lab's kernel targets; ``external``: and an array of someone else's at 10.10.10.50, its last."""
    text = vlab_kernel_text()
    if kind == "external":
        text = text.replace(
            "\nvlab:\n",
            "\n  - kind: external\n    address: 10.10.10.50\n    protocols: [iscsi]\n"
            "    iscsi: {iqn: 'iqn.2026-11.io.fabricqa:array', luns: [a]}\n\nvlab:\n",
            1,
        )
    return LabModel.model_validate(yaml.safe_load(text))


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(remote, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(remote, "is_block_device", lambda host, path: path != "/dev/gone")
    return tmp_path


def _use(monkeypatch: pytest.MonkeyPatch, array: Array) -> None:
    monkeypatch.setattr(reg, "driver_for", lambda family, nsid: array)


def _record(state: Path, prefix: str, key: int, owner: dict[str, Any], device: str = "/dev/mapper/3600140a") -> None:
    path = state / f"{prefix}-reservations.json"
    keys = json.loads(path.read_text())["keys"] if path.exists() else {}
    keys[f"{device}@{key:#x}"] = {
        "key": key, "device": device, "family": "scsi", "nsid": 0, "target": "lio",
        "what": f"reservation key {key:#x} on {device}", "owner": owner,
    }  # fmt: skip
    path.write_text(json.dumps({"kind": "reservations", "keys": keys}))


def test_a_key_is_recorded_with_its_owner_named_as_a_leftover_and_forgotten_once_dropped(state: Path) -> None:
    model = lab()
    prefix = model.targets[-1].name_prefix
    host = LocalHost("vnode1")
    ledger = reg.KeyLedger(model.name, prefix, "lio", "scsi", 0)
    key = reservation_key(0, 0x42)
    ledger.add(host, "/dev/mapper/3600140a", key)
    (record,) = json.loads((state / f"{prefix}-reservations.json").read_text())["keys"].values()
    assert record["key"] == key and record["owner"]["pid"] > 0 and record["owner"]["lab"] == "vlab"
    (left,) = reg.leftover_keys(model, {"vnode1": host})
    assert left.startswith(f"vnode1: reservation key {key:#x} on /dev/mapper/3600140a by lab 'vlab', pid ")
    ledger.drop(host, "/dev/mapper/3600140a", key)
    assert not (state / f"{prefix}-reservations.json").exists() and reg.leftover_keys(model, {"vnode1": host}) == []


def test_a_killed_runs_key_is_unregistered_at_the_next_start_and_a_foreign_key_stays(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = lab("external")
    prefix = model.targets[-1].name_prefix
    ours = reservation_key(1, 0x42)
    array = Array(FOREIGN, ours)
    _use(monkeypatch, array)
    _record(state, prefix, ours, KILLED)
    host = LocalHost("vnode1")
    done = reg.sweep_stale(model, {"vnode1": host}, target_host="10.10.10.50")
    assert done == [
        f"vnode1: unregistered reservation key {ours:#x} on /dev/mapper/3600140a that lab 'vlab', pid 4194000 of user "
        f"root on {proc.machine()} left"
    ]
    assert array.keys == [FOREIGN] and array.unregistered == [("vnode1", "/dev/mapper/3600140a", ours)]
    assert reg.leftover_keys(model, {"vnode1": host}) == []


def test_a_live_runs_keys_and_another_labs_are_left_alone(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = lab("external")
    prefix = model.targets[-1].name_prefix
    array = Array(reservation_key(0, 1), reservation_key(0, 2))
    _use(monkeypatch, array)
    alive = {**KILLED, "pid": os.getpid(), "started": proc.start_ticks(os.getpid())}
    _record(state, prefix, reservation_key(0, 1), alive)
    _record(state, prefix, reservation_key(0, 2), {**KILLED, "lab": "other"}, device="/dev/sdc")
    done = reg.sweep_stale(model, {"vnode1": LocalHost("vnode1")})
    assert len(done) == 1 and done[0].startswith("vnode1: left lab 'other', pid 4194000") and "alone" in done[0]
    assert array.unregistered == []
    assert len(reg.leftover_keys(model, {"vnode1": LocalHost("vnode1")})) == 2


def test_a_key_the_array_keeps_stops_the_start_and_keeps_its_record(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = lab("external")
    prefix = model.targets[-1].name_prefix
    ours = reservation_key(0, 9)
    _use(monkeypatch, Array(ours, stuck=(ours,)))
    _record(state, prefix, ours, KILLED)
    with pytest.raises(FaultError, match=rf"reservation key {ours:#x} on /dev/mapper/3600140a is still registered"):
        reg.sweep_stale(model, {"vnode1": LocalHost("vnode1")})
    assert len(reg.leftover_keys(model, {"vnode1": LocalHost("vnode1")})) == 1


def test_a_failed_unregister_stops_the_start_in_one_line(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = lab("external")
    prefix = model.targets[-1].name_prefix

    class Refusing(Array):
        def unregister(self, host: Host, path: str, key: int) -> None:
            raise CommandError(CommandResult(host.name, ("mpathpersist",), 24, "", "PR out: command failed"))

    ours = reservation_key(0, 9)
    _use(monkeypatch, Refusing(ours))
    _record(state, prefix, ours, KILLED)
    with pytest.raises(FaultError) as caught:
        reg.sweep_stale(model, {"vnode1": LocalHost("vnode1")})
    assert str(caught.value).startswith(f"vnode1: cannot unregister reservation key {ours:#x} on /dev/mapper/3600140a")
    assert "\n" not in str(caught.value) and "unregister it by hand" in str(caught.value)


def test_a_gone_device_is_dropped_on_a_provisioned_target_but_stops_the_start_on_an_external_array(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = reservation_key(0, 9)
    _use(monkeypatch, Array())
    provisioned = lab("lio")
    _record(state, provisioned.targets[1].name_prefix, ours, KILLED, device="/dev/gone")
    (said,) = reg.sweep_stale(provisioned, {"vnode1": LocalHost("vnode1")})
    assert "is gone (the target's clean-up makes its LUN or namespace again" in said
    assert reg.leftover_keys(provisioned, {"vnode1": LocalHost("vnode1")}) == []
    external = lab("external")
    _record(state, external.targets[-1].name_prefix, ours, KILLED, device="/dev/gone")
    with pytest.raises(FaultError, match="/dev/gone is gone"):
        reg.sweep_stale(external, {"vnode1": LocalHost("vnode1")})
