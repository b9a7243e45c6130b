"""The data-safety guard on real block devices: the virtual lab's scratch disk, and namespaces across nvme-tcp.

Every case writes a real signature onto vstor's 256 MiB virtio scratch disk (/dev/vda, meant for destructive
tests): an ASM disk header (kfed's layout) at block 0 or only at the backup location in AU 1, ``mkfs.ext4``,
``pvcreate``, a GPT made by ``sfdisk`` (on this machine: the guest image has no sfdisk, Debian 12 ships it in
the ``fdisk`` package; its bytes are copied onto the disk and the guest's kernel reads the partition from them),
then runs :func:`guard` on it: refused, and allowed once allow-listed. In-use cases (mounted, a mounted partition,
an LVM logical volume on top, swap) are refused even when allow-listed; a zeroed disk passes. The last case writes
an ASM header onto both devices vstor exports (the workloads' RAM disk and the NVMe drive), connects nvme-tcp and
runs the suites' write guard (``pytest_fabricqa.measure.verdict.WriteGuard``), and the guard on every namespace of both initiators.

The guard is read-only: around every run neither the kernel's count of sectors written to the device
(/sys/class/block/NAME/stat, after a sync) nor the sha256 of the whole device changes. The hash is taken here,
from the QEMU drive's raw file (checked once to hold what the guest sees), or in the guest for the RAM disk.

Runs on the three guests tests/vlab/conftest.py shares with the other modules here (labs/vlab.yaml).
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from vlab_support import STATE

from pytest_fabricqa.fabric.provision import connect_fabric, leftovers
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.safety.guard import WriteGuard
from pytest_fabricqa.safety.signatures import DeviceRefused, guard, inspect
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab

ROOT = Path(__file__).parents[2]

MiB = 1 << 20
SCRATCH = "/dev/vda"  # labs/vlab.yaml: vlab.vstor.drives.scratch, virtio, 256 MiB
SCRATCH_BYTES = 256 * MiB
# vlab.yaml's exported devices on vstor: the workloads' RAM disk and the emulated NVMe drive (connectivity only).
BACKING = {"ram0": "/dev/ram0", "nvme0": "/dev/nvme0n1"}
MOUNT_POINT = "/mnt/fabricqa-guard"
VG = "fabricqa_guard"
GROUP, DISK = "FQGUARD", "FQGUARD_0000"
# No udev in the guests: LVM must create its /dev nodes itself or lvcreate fails ("not found: device not cleared").
LVM_NO_UDEV = "activation { udev_rules = 0 udev_sync = 0 }"
DEFAULT_KEY = "destructive_ok: true on the device /dev/vda of host vstor"


def _sh(host: Host, script: str, *args: str, timeout: float = 300) -> str:
    return host.run(["sh", "-c", script, "sh", *args], timeout=timeout).stdout


# After a sync: the sectors written to the device since boot (field 7 of its sysfs stat), then, when $2 is
# "hash", the sha256 of its first 128 MiB and last MiB read with O_DIRECT (the device's bytes, not the page cache's).
SNAPSHOT = r"""dev=$1 what=$2
sync
set -- $(cat "/sys/class/block/${dev##*/}/stat")
echo "written_sectors=$7"
[ "$what" = hash ] || exit 0
mib=$(( $(blockdev --getsize64 "$dev") / 1048576 ))
{ dd if="$dev" bs=1M count=128 iflag=direct status=none
  dd if="$dev" bs=1M skip=$((mib - 1)) iflag=direct status=none; } | sha256sum
"""


def _snapshot(host: Host, device: str, image: Path | None = None, *, hash_in_guest: bool = False) -> tuple[str, ...]:
    """What must not change while the guard runs: the device's written-sector count and a sha256 of its bytes.

    With ``image`` (the QEMU drive's raw file on this machine) the whole device is hashed here, from outside the
    guest, in a fraction of a second: sha256 under software emulation runs at ~40 MB/s. ``hash_in_guest`` hashes
    the first 128 MiB and the last MiB in the guest instead, for a drive with no file here (a RAM disk).
    """
    found = _sh(host, SNAPSHOT, device, "hash" if hash_in_guest else "count").split()
    if image is not None:
        digest = hashlib.sha256()
        with image.open("rb") as f:
            for chunk in iter(lambda: f.read(4 * MiB), b""):
                digest.update(chunk)
        found.append(f"sha256={digest.hexdigest()}")
    return tuple(found)


def _block0(host: Host, device: str) -> bytes:
    dump = _sh(host, 'dd if="$1" bs=4096 count=1 iflag=direct status=none | od -A n -t x1 -v', device)
    return bytes(int(byte, 16) for byte in dump.split())


# Writes base64 data ($3) at 512-byte sector $2. The data travels as an argument: SSHHost's stdin goes through
# invoke one character per 10 ms (about 100 bytes/s), too slow for a GPT's 17 KiB.
WRITE = r"""printf %s "$3" | base64 -d | dd of="$1" bs=512 seek="$2" iflag=fullblock oflag=direct conv=notrunc,fsync status=none
"""


def _write(host: Host, device: str, offset: int, data: bytes) -> None:
    assert offset % 512 == 0 and len(data) % 512 == 0
    _sh(host, WRITE, device, str(offset // 512), base64.b64encode(data).decode())


def _asm_header(au_size: int = MiB) -> bytes:
    """Block 0 of an ASM disk as kfed shows it: kfbh at 0x00, kfdhdb at 0x20 (provstr ORCLDISK).

    The same layout as tests/unit/test_safety.py; kfed field offsets from ``kfed read`` dumps of 11.2-19c disks.
    """
    block = bytearray(4096)
    block[0:4] = bytes([1, 0x82, 1, 1])  # endian little, hard, KFBTYP_DISKHEAD, datfmt
    block[0x20:0x28] = b"ORCLDISK"
    block[0x46] = 1  # KFDGTP_EXTERNAL
    block[0x47] = 3  # KFDHDR_MEMBER
    block[0x48 : 0x48 + len(DISK)] = DISK.encode()
    block[0x68 : 0x68 + len(GROUP)] = GROUP.encode()
    struct.pack_into("<HHI", block, 0xD8, 512, 4096, au_size)  # secsize, blksize, ausize
    return bytes(block)


def _backup_offset(au_size: int) -> int:
    # ASM keeps a copy of the disk header in the second-to-last 4 KiB block of AU 1 (kfed repair's source);
    # computed here on its own so a wrong formula in the guard shows.
    return au_size + (au_size // 4096 - 2) * 4096


def _gpt_bytes() -> tuple[bytes, bytes]:
    """The first 34 and last 33 sectors of a 256 MiB disk with a GPT and one 64 MiB partition, from sfdisk."""
    with tempfile.TemporaryDirectory() as tmp:
        image = Path(tmp) / "gpt.img"
        with image.open("wb") as f:
            f.truncate(SCRATCH_BYTES)
        subprocess.run(["sfdisk", "--quiet", str(image)], input="label: gpt\nsize=64MiB\n", text=True, check=True)
        data = image.read_bytes()
    return data[: 34 * 512], data[-33 * 512 :]


def _write_gpt(host: Host) -> None:
    head, tail = _gpt_bytes()
    _write(host, SCRATCH, 0, head)
    _write(host, SCRATCH, SCRATCH_BYTES - len(tail), tail)
    _reread_partitions(host)


def _reread_partitions(host: Host) -> None:
    """The kernel reads the new table when asked. udev first: vstor's udevd probes the disk and its partitions
    after every write (its inotify watch), and a partition it holds open makes BLKRRPART fail with EBUSY (2 of 10
    times on vstor, after the SSH commands came ~100 ms closer together; CI of cb1c0e3)."""
    host.run(["udevadm", "settle"])
    host.run(["blockdev", "--rereadpt", SCRATCH])


def _asmlib_on_partition(host: Host) -> None:
    """A GPT with vda1 at 1 MiB (sfdisk's default start), then the ASMLib label ``oracleasm createdisk DATA1``
    stamps on the partition: "ORCLDISK" and the label at byte 0x20 (ASMLib's osmprivate.h)."""
    _write_gpt(host)
    label = bytearray(512)
    label[0x20:0x2D] = b"ORCLDISKDATA1"
    _write(host, SCRATCH, MiB, bytes(label))


def _mkfs(host: Host, device: str) -> None:
    # Lazy init off: a mounted ext4 would otherwise zero its inode tables in the background while we hash.
    host.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", device], timeout=300)


def _pvcreate(host: Host) -> None:
    host.run(["pvcreate", "-ff", "-y", SCRATCH])


def _mount(host: Host, device: str) -> None:
    host.run(["mkdir", "-p", MOUNT_POINT])
    host.run(["mount", "-o", "noatime", device, MOUNT_POINT])


# Undoes whatever a case (or a killed earlier run) made on the scratch disk, then zeroes where the cases write:
# the first 8 MiB (block 0, the AU 1 backup headers for 1 and 4 MiB AUs, GPT, PV label, ext4 and swap headers)
# and the last MiB (the GPT backup).
RESTORE = r"""dev=$1 mnt=$2 vg=$3 lvm=$4
umount "$mnt" 2>/dev/null
swapoff "$dev" 2>/dev/null
if vgs "$vg" >/dev/null 2>&1; then
  lvremove --config "$lvm" -y "$vg" >/dev/null || exit 1
  vgremove -y "$vg" >/dev/null || exit 1
fi
if pvs "$dev" >/dev/null 2>&1; then pvremove -y "$dev" >/dev/null || exit 1; fi
udevadm settle  # udevd's probes of the disk and its partitions hold them open: see _reread_partitions
wipefs -a -q "$dev" || exit 1
dd if=/dev/zero of="$dev" bs=1M count=8 oflag=direct conv=fsync status=none || exit 1
mib=$(( $(blockdev --getsize64 "$dev") / 1048576 ))
dd if=/dev/zero of="$dev" bs=1M seek=$((mib - 1)) count=1 oflag=direct conv=fsync status=none || exit 1
udevadm settle
blockdev --rereadpt "$dev" || exit 1
"""

# What is still on the disk after RESTORE, checked without the guard's code: one line per problem.
LEFT_ON_SCRATCH = r"""dev=$1 name=${1##*/}
ls "/sys/class/block/$name/holders" | sed 's/^/holder /'
for p in /sys/class/block/"$name"/"$name"*; do [ -e "$p/partition" ] && echo "partition ${p##*/}"; done
grep "^$dev" /proc/mounts /proc/swaps
blkid -p "$dev"; [ $? -eq 2 ] || echo "blkid found a signature"
true
"""


@pytest.fixture(scope="module")
def vstor(vlab: tuple[LabModel, dict[str, Host], dict[str, str]]) -> Host:
    """vstor, with its scratch disk checked to be the 256 MiB virtio disk before anything is written to it."""
    host = vlab[1]["vstor"]
    # virtio_blk is in the image but not loaded at boot: the scratch disk becomes /dev/vda here.
    host.run(["modprobe", "virtio_blk"])
    name = SCRATCH.rsplit("/", 1)[1]
    facts = _sh(host, 'cat "$1/size"; readlink -f "$1/device/driver"', f"/sys/class/block/{name}").split()
    assert facts == [str(SCRATCH_BYTES // 512), "/sys/bus/virtio/drivers/virtio_blk"], (
        f"{SCRATCH} on vstor is not the lab's 256 MiB virtio scratch disk ({facts}): refusing to write to it"
    )
    return host


@pytest.fixture(scope="module")
def images(vlab: tuple[LabModel, dict[str, Host], dict[str, str]], vstor: Host) -> dict[str, Path]:
    """vstor's QEMU drives as raw files on this machine, by their device in the guest; checked to be that device.

    QEMU writes the guest's writes into these files (cache=unsafe only skips the host's flushes), so after a sync
    in the guest the file holds the device's bytes.
    """
    lab = vlab[0]
    from pytest_fabricqa.vlab.lab import run_dir_for

    folder = run_dir_for(STATE, lab) / "vstor"
    files = {SCRATCH: folder / "drive-scratch.raw", BACKING["nvme0"]: folder / "drive-nvme0.raw"}
    marker = os.urandom(4096)
    try:
        _write(vstor, SCRATCH, 4096, marker)  # block 1: no case writes there, RESTORE zeroes it
        with files[SCRATCH].open("rb") as f:
            f.seek(4096)
            assert f.read(4096) == marker, f"{files[SCRATCH]} is not what vstor sees as {SCRATCH}"
    finally:
        _write(vstor, SCRATCH, 4096, bytes(4096))
    return files


@pytest.fixture
def scratch(vstor: Host, images: dict[str, Path]) -> Iterator[Host]:
    """vstor with a blank scratch disk; what the test made on it is undone afterwards."""
    _sh(vstor, RESTORE, SCRATCH, MOUNT_POINT, VG, LVM_NO_UDEV)
    assert _sh(vstor, LEFT_ON_SCRATCH, SCRATCH).split("\n") == [""]
    yield vstor
    _sh(vstor, RESTORE, SCRATCH, MOUNT_POINT, VG, LVM_NO_UDEV)
    left = _sh(vstor, LEFT_ON_SCRATCH, SCRATCH).strip()
    assert not left, f"the scratch disk was not restored: {left}"


def _asm_at(au_size: int | None) -> Callable[[Host], None]:
    def make(host: Host) -> None:
        _write(host, SCRATCH, 0 if au_size is None else _backup_offset(au_size), _asm_header(au_size or MiB))

    return make


ASM_FOUND = f"(disk {DISK}, of disk group {GROUP}, status MEMBER)"

# case -> (how to make it, phrases the refusal must contain, phrases it must not)
CONTENTS: dict[str, tuple[Callable[[Host], None], tuple[str, ...], tuple[str, ...]]] = {
    "asm-block-0": (
        _asm_at(None),
        (f"carries an Oracle ASM disk header (ORCLDISK) in block 0 at byte 0x20 {ASM_FOUND}",),
        ("backup header",),
    ),
    "asm-backup-only-1mib-au": (
        _asm_at(MiB),
        (f"ORCLDISK) in the backup header for a 1 MiB AU (AU 1, block 254) at byte 0x1fe020 {ASM_FOUND}",),
        ("in block 0",),
    ),
    "asm-backup-only-4mib-au": (
        _asm_at(4 * MiB),
        (f"ORCLDISK) in the backup header for a 4 MiB AU (AU 1, block 1022) at byte 0x7fe020 {ASM_FOUND}",),
        ("in block 0", "1 MiB AU"),
    ),
    "asmlib-label-on-partition": (
        _asmlib_on_partition,
        (
            "carries an ASMLib or ASM Filter Driver label DATA1 (ORCLDISKDATA1) in block 0 of partition vda1 "
            "at byte 0x20",
            "has partitions: vda1",
        ),
        (),
    ),
    "mkfs-ext4": (
        lambda host: _mkfs(host, SCRATCH),
        ("ext4 signature at offset 0x438 (found by wipefs)",),
        (),
    ),
    "pvcreate": (
        _pvcreate,
        ("LVM2_member signature at offset 0x218 (found by wipefs)",),
        (),
    ),
    "sfdisk-gpt": (
        _write_gpt,
        (
            "gpt signature at offset 0x200 (found by wipefs)",
            f"gpt signature at offset {SCRATCH_BYTES - 512:#x} (found by wipefs)",
            "PMBR signature at offset 0x1fe (found by wipefs)",
            "has partitions: vda1",
        ),
        (),
    ),
}


@pytest.mark.parametrize("content", list(CONTENTS))
def test_a_device_with_content_is_refused_unless_allow_listed_and_never_changed(
    scratch: Host, images: dict[str, Path], content: str
) -> None:
    make, found, absent = CONTENTS[content]
    make(scratch)
    before = _snapshot(scratch, SCRATCH, images[SCRATCH])

    with pytest.raises(DeviceRefused) as refused:
        guard(scratch, SCRATCH)
    message = str(refused.value)
    assert message.startswith(f"vstor: refusing to let a write job touch {SCRATCH}: carries ")
    for phrase in found:
        assert phrase in message
    for phrase in absent:
        assert phrase not in message
    assert refused.value.refusal.overridable
    assert message.endswith(f"If its contents may be destroyed, set {DEFAULT_KEY} in the lab file.")

    evidence = guard(scratch, SCRATCH, (SCRATCH,))
    # Passed because it is allow-listed, not because the probes went blind: the content is still seen.
    assert inspect(evidence) is not None
    assert _snapshot(scratch, SCRATCH, images[SCRATCH]) == before, "the guard changed the device"


def _mounted(host: Host) -> None:
    _mkfs(host, SCRATCH)
    _mount(host, SCRATCH)


def _partition_mounted(host: Host) -> None:
    _write_gpt(host)
    _mkfs(host, f"{SCRATCH}1")
    _mount(host, f"{SCRATCH}1")


def _logical_volume(host: Host) -> None:
    _pvcreate(host)
    host.run(["vgcreate", VG, SCRATCH])
    host.run(["lvcreate", "--config", LVM_NO_UDEV, "-y", "-L", "8M", "-n", "lv", VG])


def _swap(host: Host) -> None:
    host.run(["mkswap", SCRATCH])
    host.run(["swapon", SCRATCH])


IN_USE: dict[str, tuple[Callable[[Host], None], tuple[str, ...]]] = {
    "mounted": (_mounted, (f"is mounted: {SCRATCH} on {MOUNT_POINT}",)),
    "partition-mounted": (_partition_mounted, (f"is mounted: {SCRATCH}1 on {MOUNT_POINT}",)),
    "lvm-logical-volume": (_logical_volume, ("is held by another device: vda is held by dm-",)),
    "swap": (_swap, (f"is in use as swap: {SCRATCH}",)),
}


@pytest.mark.parametrize("case", list(IN_USE))
def test_a_device_in_use_is_refused_even_when_allow_listed(scratch: Host, images: dict[str, Path], case: str) -> None:
    make, found = IN_USE[case]
    make(scratch)
    before = _snapshot(scratch, SCRATCH, images[SCRATCH])

    with pytest.raises(DeviceRefused) as refused:
        guard(scratch, SCRATCH, (SCRATCH,))
    assert not refused.value.refusal.overridable
    message = str(refused.value)
    assert message.startswith(f"vstor: refusing to let a write job touch {SCRATCH}: ")
    for phrase in found:
        assert phrase in message
    assert "The allow-list cannot lift an in-use device" in message
    assert "destructive_ok" not in message  # telling the user to allow-list it would not help
    assert _snapshot(scratch, SCRATCH, images[SCRATCH]) == before, "the guard changed the device"


def test_a_zeroed_device_passes(scratch: Host, images: dict[str, Path]) -> None:
    count = f"count={SCRATCH_BYTES // (4 * MiB)}"
    scratch.run(
        ["dd", "if=/dev/zero", f"of={SCRATCH}", "bs=4M", count, "oflag=direct", "conv=fsync", "status=none"],
        timeout=900,
    )
    before = _snapshot(scratch, SCRATCH, images[SCRATCH])
    evidence = guard(scratch, SCRATCH)
    assert evidence.is_block_device and evidence.size_bytes == SCRATCH_BYTES
    assert (evidence.asm_headers, evidence.signatures, evidence.partitions) == ((), (), ())
    assert (evidence.holders, evidence.mounts, evidence.swaps, evidence.probe_errors) == ((), (), (), ())
    assert _snapshot(scratch, SCRATCH, images[SCRATCH]) == before, "the guard changed the device"


def test_an_asm_header_on_the_backing_devices_is_refused_on_every_initiator_across_nvme_tcp(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], vstor: Host, images: dict[str, Path]
) -> None:
    lab, hosts, _ = vlab
    try:
        for backing in BACKING.values():  # before the fabric exists: the header must travel across it
            _write(vstor, backing, 0, _asm_header())
            assert _block0(vstor, backing) == _asm_header()
        fabric = connect_fabric(lab, "nvme-tcp", hosts)
        try:
            assert sorted((d.initiator, d.backing) for d in fabric.devices) == [
                (initiator, backing) for initiator in ("vnode1", "vnode2") for backing in sorted(BACKING)
            ]
            backing_before = {path: _backing_snapshot(vstor, path, images) for path in BACKING.values()}
            # A write from an initiator would land on the backing devices hashed above, and shows in the
            # initiator's own written-sector count (reading 1.5 GiB back across the emulated fabric would be slow).
            initiators_before = {d: _snapshot(hosts[d.initiator], d.path) for d in fabric.devices}

            # The suites' path (the write_guard fixture): it guards the devices the workloads write to (ram0).
            with pytest.raises(DeviceRefused) as refused:
                WriteGuard(lab, hosts).before_writes(fabric.protocol, fabric.devices)
            message = str(refused.value)
            assert message.startswith(f"{refused.value.refusal.host}: refusing to let a write job touch /dev/nvme")
            assert f"ORCLDISK) in block 0 at byte 0x20 {ASM_FOUND}" in message
            assert message.endswith(f"If its contents may be destroyed, set {_suite_key('ram0')} in the lab file.")

            for device in fabric.devices:  # and every namespace, as each initiator sees it
                with pytest.raises(DeviceRefused) as refused:
                    guard(hosts[device.initiator], device.path, allow_key=_suite_key(device.backing))
                message = str(refused.value)
                assert message.startswith(f"{device.initiator}: refusing to let a write job touch {device.path}: ")
                assert f"ORCLDISK) in block 0 at byte 0x20 {ASM_FOUND}" in message
                assert message.endswith(f"set {_suite_key(device.backing)} in the lab file.")

            # Allow-listed in the lab (destructive_ok, as the suite reads it from the devices): the suite goes on.
            WriteGuard(lab, hosts).before_writes(
                fabric.protocol, [replace(d, destructive_ok=True) for d in fabric.devices]
            )

            for path, before in backing_before.items():
                assert _backing_snapshot(vstor, path, images) == before, f"the guard changed {path} on vstor"
            for device, before in initiators_before.items():
                after = _snapshot(hosts[device.initiator], device.path)
                assert after == before, f"the guard wrote to {device.path} on {device.initiator}"
        finally:
            fabric.teardown()
        assert leftovers(lab, hosts) == []
    finally:
        # Both drives are the lab's, shared with other tests: leave block 0 as blank as a fresh lab's.
        for backing in BACKING.values():
            _write(vstor, backing, 0, bytes(4096))
    for backing in BACKING.values():
        assert _block0(vstor, backing) == bytes(4096)


def _backing_snapshot(vstor: Host, path: str, images: dict[str, Path]) -> tuple[str, ...]:
    image = images.get(path)
    return _snapshot(vstor, path, image, hash_in_guest=image is None)


def _suite_key(backing: str) -> str:
    # The allow_key suites/test_performance.py names for an nvmet target's device.
    return f"targets[kind=nvmet].devices.{backing}.destructive_ok: true"
