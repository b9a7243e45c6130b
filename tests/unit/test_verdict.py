"""The package API a performance suite calls besides fio: the write guard with its once-per-session memory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.safety.guard import WriteGuard
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
