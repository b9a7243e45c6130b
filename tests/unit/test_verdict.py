"""The package API a performance suite calls besides fio: the write guard with its once-per-session memory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from fakes import Answer, ScriptedHost

from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.initiators.reservations import reservation_key
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.safety import guard as guard_module
from pytest_fabricqa.safety.guard import DeviceReserved, WriteGuard
from pytest_fabricqa.safety.signatures import DeviceRefused
from pytest_fabricqa.transport.counting import CountingHost
from pytest_fabricqa.transport.local import LocalHost

LOCAL_LAB = Path(__file__).resolve().parents[1] / "data" / "labs" / "local.yaml"
MiB = 1 << 20
pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("blkid", "wipefs", "dd", "od", "findmnt", "lsblk", "awk")),
    reason="needs util-linux, coreutils and awk",
)


def _device(path: Path, *, asm: bool = False, writable: bool = True, destructive_ok: bool = False) -> FabricDevice:
    with path.open("wb") as f:
        f.truncate(64 * MiB)
    if asm:  # an ASM disk header in block 0 (kfbh.endian .. kfdhdb.driver.provstr "ORCLDISK")
        block = bytearray(256)
        block[0x20:0x28] = b"ORCLDISK"
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, bytes(block), 0)
        os.close(fd)
    return FabricDevice(
        initiator="localhost",
        path=str(path),
        backing="ram0",
        subsystem="nqn.2026-11.io.fabricqa:local",
        address=1,
        size_bytes=64 * MiB,
        logical_block_size=512,
        writable=writable,
        destructive_ok=destructive_ok,
    )


def test_each_device_is_probed_once_per_session_and_read_only_devices_never(tmp_path: Path) -> None:
    host = CountingHost(LocalHost("localhost"))
    guard = WriteGuard(load_lab(LOCAL_LAB), {"localhost": host})
    clean = _device(tmp_path / "clean.img")
    read_only = _device(tmp_path / "ro.img", asm=True, writable=False)  # never written: never probed
    guard.before_writes("nvme-tcp", [clean, read_only])
    assert host.count == 1 and guard.guarded == {("nvme-tcp", "nvmet", "localhost", clean.path)}
    guard.before_writes("nvme-tcp", [clean, read_only])
    assert host.count == 1  # the second write workload costs nothing


def test_a_device_with_an_asm_header_is_refused_until_the_lab_allows_it(tmp_path: Path) -> None:
    host = CountingHost(LocalHost("localhost"))
    guard = WriteGuard(load_lab(LOCAL_LAB), {"localhost": host})
    asm = _device(tmp_path / "asm.img", asm=True)
    for _ in range(2):  # refused every time: a refusal is not remembered as guarded
        with pytest.raises(DeviceRefused, match=r"targets\[kind=nvmet\]\.devices\.ram0\.destructive_ok: true"):
            guard.before_writes("nvme-tcp", [asm])
    assert guard.guarded == set() and host.count == 2
    guard.before_writes("nvme-tcp", [_device(tmp_path / "asm.img", asm=True, destructive_ok=True)])
    assert guard.guarded == {("nvme-tcp", "nvmet", "localhost", asm.path)}


# -- persistent reservations: a device someone holds one on is refused before anything is written -----------------


def _lio_lab() -> LabModel:
    from labfiles import vlab_kernel_text

    return LabModel.model_validate(yaml.safe_load(vlab_kernel_text()))


def _map(initiator: str) -> FabricDevice:
    return FabricDevice(
        initiator=initiator, path="/dev/mapper/3600140a", backing="ram0", subsystem="iqn.2026-11.io.fabricqa:vstor",
        address=0, size_bytes=64 * MiB, logical_block_size=512, writable=True, destructive_ok=False,
    )  # fmt: skip


def _holding(holder: int | None, keys: tuple[int, ...] = ()) -> ScriptedHost:
    """An initiator whose mpathpersist reads show ``keys`` registered and ``holder`` holding Write Exclusive."""

    def answer(argv: tuple[str, ...]) -> Answer:
        if argv[:3] == ("mpathpersist", "--in", "--read-keys"):
            listed = "".join(f"    {k:#x}\n" for k in keys)
            return f"  PR generation=0x7, \t{len(keys)} registered reservation key{'s' if len(keys) != 1 else ''} follow:\n{listed}"
        if argv[:3] == ("mpathpersist", "--in", "--read-reservation"):
            if holder is None:
                return "  PR generation=0x7, there is NO reservation held \n"
            return f"  PR generation=0x7, Reservation follows:\n   Key = {holder:#x}\n  scope = LU_SCOPE, type = Write Exclusive\n"
        return None

    return ScriptedHost("vnode1", answer)


@pytest.mark.parametrize(
    ("holder", "whose"),
    [
        (0x111, "not ours: a cluster's or a person's"),
        (reservation_key(0, 5), "a key of a run of this plugin's that was killed"),
    ],
)
def test_a_device_someone_holds_a_reservation_on_is_refused_before_any_probe_or_write(
    monkeypatch: pytest.MonkeyPatch, holder: int, whose: str
) -> None:
    probed: list[object] = []
    monkeypatch.setattr(guard_module, "guard_hosts", lambda hosts, requests: probed.append(requests))
    host = _holding(holder, (holder, 0x222))
    guard = WriteGuard(_lio_lab(), {"vnode1": host})
    with pytest.raises(DeviceReserved) as caught:
        guard.before_writes("iscsi", [_map("vnode1")], target="lio")
    said = str(caught.value)
    assert said.startswith("vnode1: refusing to let a write job touch /dev/mapper/3600140a: a persistent reservation")
    assert f"holder {holder:#x} (Write Exclusive)" in said and whose in said and "\n" not in said
    assert isinstance(caught.value, DeviceRefused) and probed == [] and guard.guarded == set()
    assert not [argv for argv in host.commands if "--out" in argv]  # read only


def test_registrations_without_a_holder_let_the_writes_through_and_are_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probed: list[object] = []
    monkeypatch.setattr(guard_module, "guard_hosts", lambda hosts, requests: probed.append(requests))
    host = _holding(None, (0x111,))
    guard = WriteGuard(_lio_lab(), {"vnode1": host, "vnode2": _holding(0x999)})
    guard.before_writes("iscsi", [_map("vnode1"), _map("vnode2")], target="lio")  # one LUN: read from vnode1 only
    assert len(probed) == 1 and len(host.commands) == 2
    guard.before_writes("iscsi", [_map("vnode1"), _map("vnode2")], target="lio")
    assert len(host.commands) == 2  # guarded once per session


def test_reservations_that_cannot_be_read_refuse_and_a_kind_without_them_reads_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(guard_module, "guard_hosts", lambda hosts, requests: None)
    broken = ScriptedHost("vnode1", lambda argv: (1, "", "mpathpersist: no multipath device\n"))
    with pytest.raises(DeviceReserved, match=r"could not be read \(.*no multipath device\)"):
        WriteGuard(_lio_lab(), {"vnode1": broken}).before_writes("iscsi", [_map("vnode1")], target="lio")
    untouched = ScriptedHost("vnode1", lambda argv: None)  # nvmet 6.1: no reservation command at all
    WriteGuard(_lio_lab(), {"vnode1": untouched}).before_writes("nvme-tcp", [_map("vnode1")], target="nvmet")
    assert untouched.commands == []
