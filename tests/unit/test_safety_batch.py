"""The guard's probe batched: one command per host gives exactly the evidence the one-at-a-time probe gives,
refusals still fire, hosts run in parallel. Real commands on this machine (regular-file images, and the root
disk read-only), counted with the counting transport wrapper."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_fabricqa.safety.batch import (
    DevicesRefused,
    GuardRequest,
    guard_host,
    guard_hosts,
    parse_batch,
    prefetch,
)
from pytest_fabricqa.safety.signatures import DeviceRefused, gather_evidence, guard
from pytest_fabricqa.transport.base import CommandResult
from pytest_fabricqa.transport.counting import CountingHost
from pytest_fabricqa.transport.local import LocalHost

MiB = 1 << 20
pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("blkid", "wipefs", "dd", "od", "findmnt", "lsblk", "awk")),
    reason="needs util-linux, coreutils and awk",
)


def _image(path: Path, size: int = 64 * MiB, asm_at: int | None = None) -> Path:
    with path.open("wb") as f:
        f.truncate(size)
    if asm_at is not None:
        block = bytearray(256)
        block[0x20:0x28] = b"ORCLDISK"
        block[0x48:0x51] = b"NVME_0000"
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, bytes(block), asm_at)
        os.close(fd)
    return path


def _root_device() -> str | None:
    root = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "/"], capture_output=True, text=True).stdout.strip()
    return root.split("[", 1)[0] if root.startswith("/dev/") else None


def test_one_command_gives_the_same_evidence_as_one_probe_at_a_time(tmp_path: Path) -> None:
    devices = [str(_image(tmp_path / "empty.img")), str(_image(tmp_path / "small.img", 3 * MiB))]
    devices.append(str(tmp_path / "missing.img"))
    root = _root_device()
    if root is not None:
        devices.append(root)  # a block device: the sysfs probe and the 512-byte-sector size, read-only
    link = tmp_path / "by-id"
    link.symlink_to(devices[0])
    requests = [GuardRequest(d, allowed=(str(link),)) for d in devices]

    one_by_one = CountingHost(LocalHost("node1"))
    expected = [gather_evidence(one_by_one, d) for d in devices]
    batched = CountingHost(LocalHost("node1"))
    prefetched = prefetch(batched, requests)
    got = [gather_evidence(prefetched, d) for d in devices]
    assert got == expected
    assert batched.count == 1 and prefetched.misses == []
    assert one_by_one.count >= 9 * (len(devices) - 1)  # what every device used to cost (9-11 commands)
    # The allow-list's canonical paths are in the same command.
    assert guard(prefetched, devices[0], allowed=(str(link),)) == expected[0]
    assert prefetched.misses == [] and batched.count == 1


def test_the_batched_guard_still_refuses(tmp_path: Path) -> None:
    asm = _image(tmp_path / "asm.img", asm_at=MiB + 254 * 4096)  # the backup header of a 1 MiB AU only
    clean = _image(tmp_path / "clean.img")
    host = CountingHost(LocalHost("node1"))
    with pytest.raises(DeviceRefused, match=r"AU 1, block 254") as refused:
        guard_host(host, [GuardRequest(str(clean)), GuardRequest(str(asm))])
    assert "node1" in str(refused.value) and host.count == 1
    # The lab's allow-list lifts it, still in one command.
    host = CountingHost(LocalHost("node1"))
    evidence = guard_host(host, [GuardRequest(str(asm), allowed=(str(asm),))])
    assert evidence[0].asm_headers and host.count == 1


class _MeetingHost(CountingHost):
    """A counting host whose every command first waits at ``meet`` for the other hosts' commands."""

    def __init__(self, host: LocalHost, log: list, meet: threading.Barrier) -> None:
        super().__init__(host, log)
        self.meet = meet

    def run(self, argv: Sequence[str], **kwargs: Any) -> CommandResult:
        self.meet.wait()
        return super().run(argv, **kwargs)


def test_hosts_run_in_parallel_and_every_refusal_is_listed(tmp_path: Path) -> None:
    log: list = []
    # Each host's command waits at a barrier until the other's has started too: run one after the other, the
    # first would wait alone and the barrier break (after 60 s, a deadlock guard, not a timing assertion).
    meet = threading.Barrier(2, timeout=60)
    hosts = {name: _MeetingHost(LocalHost(name), log, meet) for name in ("node1", "node2")}
    clean = {name: _image(tmp_path / f"{name}.img") for name in hosts}
    found = guard_hosts(hosts, {name: [GuardRequest(str(path))] for name, path in clean.items()})
    assert set(found) == {"node1", "node2"} and len(log) == 2
    asm = {name: _image(tmp_path / f"{name}-asm.img", asm_at=0) for name in hosts}
    with pytest.raises(DevicesRefused) as refused:
        guard_hosts(hosts, {name: [GuardRequest(str(path))] for name, path in asm.items()})
    assert "node1: refusing" in str(refused.value) and "node2: refusing" in str(refused.value)


def test_a_cut_off_record_falls_back_to_real_commands() -> None:
    text = "@@abc 0\nreadlink\0-e\0--\0/dev/x\0@@abc =\n/dev/x\n\n@@abc -\n\n@@abc .\n@@abc 0\nstat\0"
    record = parse_batch(text, "abc", "node1")
    assert record == {
        ("readlink", "-e", "--", "/dev/x"): CommandResult(
            "node1", ("readlink", "-e", "--", "/dev/x"), 0, "/dev/x\n", ""
        )
    }
