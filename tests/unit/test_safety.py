"""The data-safety guard: the pure verdict table-driven, and evidence gathering for real on this machine.

The real tests build disk images in regular files (no loop devices needed): mkfs.ext4 -F on a file, an
ASM disk header written at block 0 or only at the backup location, GPT and MBR written by sfdisk on a
file, and an LVM2 PV label written byte for byte as pvcreate lays it out (pvcreate itself refuses a
regular file). blkid -p and wipefs then see them exactly as they would on a block device. Every real test
hashes the image before and after the guard ran: the guard must not change a byte.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from fakes import Answer, ScriptedHost

from pytest_fabricqa.safety import signatures as safety
from pytest_fabricqa.safety.signatures import (
    AsmHeader,
    DeviceEvidence,
    DeviceRefused,
    Signature,
    asm_probe_offsets,
    gather_evidence,
    guard,
    inspect,
)
from pytest_fabricqa.transport.local import LocalHost

MiB = 1 << 20

# ---------------------------------------------------------------------------------------------------
# Pure core
# ---------------------------------------------------------------------------------------------------

CLEAN = DeviceEvidence(
    host="el72h3",
    device="/dev/nvme0n1",
    path="/dev/nvme0n1",
    name="nvme0n1",
    is_block_device=True,
    size_bytes=1200 * 1000**3,
    root_disks=("sda2", "sda"),
)
ASM0 = AsmHeader(0x20, "block 0", diskgroup="NVME", disk="NVME_0000", status_code=3)
ASM_BACKUP = AsmHeader(MiB + 254 * 4096 + 0x20, "the backup header for a 1 MiB AU (AU 1, block 254)")

# (id, change to the clean evidence, refused?, overridable?, words the message must contain)
CASES = [
    ("clean", {}, False, None, ()),
    ("asm-block-0", {"asm_headers": (ASM0,)}, True, True, ("ORCLDISK", "block 0", "NVME_0000", "disk group NVME")),
    ("asm-backup-only", {"asm_headers": (ASM_BACKUP,)}, True, True, ("AU 1, block 254", "0x1fe020")),
    ("ext4", {"signatures": (Signature("ext4", "filesystem", "0x438", "wipefs"),)}, True, True, ("ext4", "0x438")),
    ("gpt", {"signatures": (Signature("gpt", "partition table"),)}, True, True, ("gpt",)),
    ("lvm", {"signatures": (Signature("LVM2_member", "raid"),)}, True, True, ("LVM2_member",)),
    ("partitions", {"partitions": ("nvme0n1p1",)}, True, True, ("has partitions: nvme0n1p1",)),
    ("mounted", {"mounts": ("/dev/nvme0n1p1 on /data",)}, True, False, ("is mounted: /dev/nvme0n1p1 on /data",)),
    ("swap", {"swaps": ("/dev/nvme0n1",)}, True, False, ("swap",)),
    ("held", {"holders": ("nvme0n1 is held by dm-3",)}, True, False, ("held by dm-3",)),
    ("root-disk", {"root_disks": ("nvme0n1p2", "nvme0n1")}, True, False, ("root disk",)),
    ("probe-failed", {"probe_errors": ("`blkid -p` exited 2",)}, True, False, ("could not be inspected",)),
]


@pytest.mark.parametrize(
    ("change", "refused", "overridable", "words"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_inspect_table(
    change: dict[str, object], refused: bool, overridable: bool | None, words: tuple[str, ...]
) -> None:
    refusal = inspect(replace(CLEAN, **change))  # type: ignore[arg-type]
    if not refused:
        assert refusal is None
        return
    assert refusal is not None
    assert refusal.overridable is overridable
    message = refusal.message()
    assert message.startswith("el72h3: refusing to let a write job touch /dev/nvme0n1")
    for word in words:
        assert word in message
    if overridable:
        assert "destructive_ok: true on the device /dev/nvme0n1 of host el72h3" in message
    else:
        assert "cannot lift" in message


@pytest.mark.parametrize(("case_id", "change"), [(c[0], c[1]) for c in CASES if c[3] is not None])
def test_allow_list_lifts_only_content_findings(case_id: str, change: dict[str, object]) -> None:
    refusal = inspect(replace(CLEAN, **change), allowed={"/dev/nvme0n1"})  # type: ignore[arg-type]
    overridable = next(c[3] for c in CASES if c[0] == case_id)
    if overridable:
        assert refusal is None
    else:
        assert refusal is not None and not refusal.overridable


def test_allow_list_matches_the_canonical_path_and_other_devices_do_not_count() -> None:
    evidence = replace(CLEAN, device="/dev/disk/by-id/nvme-INTEL_1", asm_headers=(ASM0,))
    assert inspect(evidence, allowed={"/dev/nvme0n1"}) is None
    assert inspect(evidence, allowed={"/dev/nvme1n1"}) is not None


def test_every_finding_is_listed_and_the_custom_key_is_named() -> None:
    evidence = replace(CLEAN, asm_headers=(ASM0, ASM_BACKUP), signatures=(Signature("oracleasm", "filesystem"),))
    refusal = inspect(evidence, allow_key="targets.nvmet1.devices[{device}].destructive_ok")
    assert refusal is not None
    assert len(refusal.findings) == 3
    assert "set targets.nvmet1.devices[/dev/nvme0n1].destructive_ok in the lab file" in refusal.message()
    assert str(DeviceRefused(refusal)) == refusal.message()


def test_blkid_and_wipefs_reports_of_the_same_signature_count_once() -> None:
    evidence = replace(
        CLEAN,
        signatures=(Signature("ext4", "filesystem", "", "blkid"), Signature("ext4", "", "0x438", "wipefs")),
    )
    refusal = inspect(evidence)
    assert refusal is not None and len(refusal.findings) == 1 and "0x438" in refusal.message()


@pytest.mark.parametrize(
    ("au_mib", "block_in_au"),
    [(1, 254), (2, 510), (4, 1022), (8, 2046), (16, 4094), (32, 8190), (64, 16382)],
)
def test_backup_header_location_for_each_au_size(au_mib: int, block_in_au: int) -> None:
    offsets = dict((where, offset) for offset, where in asm_probe_offsets(None))
    where = f"the backup header for a {au_mib} MiB AU (AU 1, block {block_in_au})"
    # AU 1 starts one AU in; the backup is its second-to-last 4 KiB block.
    assert offsets[where] == au_mib * MiB + block_in_au * 4096 == 2 * au_mib * MiB - 8192


def test_probe_offsets_stay_inside_the_device() -> None:
    assert [o for o, _ in asm_probe_offsets(4 * MiB)] == [0, 2 * MiB - 8192, 4 * MiB - 8192]
    assert [o for o, _ in asm_probe_offsets(0)] == [0]


def test_parse_asm_header_reads_names_and_status() -> None:
    header = safety.parse_asm_header(_asm_header_bytes("DATA", "DATA_0003"), 0, "block 0")
    assert header == AsmHeader(0x20, "block 0", diskgroup="DATA", disk="DATA_0003", status_code=3)
    assert safety.parse_asm_header(bytes(256), 0, "block 0") is None


def test_parse_blkid_export_unescapes_values() -> None:
    values = safety.parse_blkid_export("DEVNAME=d.img\nVERSION=LVM2\\ 001\nTYPE=LVM2_member\nUSAGE=raid\n")
    assert values["VERSION"] == "LVM2 001"
    assert safety.blkid_signatures(values) == [Signature("LVM2_member", "raid", "", "blkid")]


# ---------------------------------------------------------------------------------------------------
# Evidence gathering with a scripted host: sysfs holders/partitions and mountinfo parsing, blkid errors
# ---------------------------------------------------------------------------------------------------


class GuardHost(ScriptedHost):
    """Answers the guard's commands from a table keyed by the command's first word(s)."""

    def __init__(self, answers: dict[str, tuple[int, str, str] | None]) -> None:
        super().__init__("el72h3")
        self.answers = answers

    def answer(self, argv: tuple[str, ...]) -> Answer:
        key = argv[0] if argv[0] != "sh" else ("sh-read" if "dd if" in argv[2] else "sh-sysfs")
        if argv[0] == "cat":
            key = argv[1]
        if key == "sh-read" and self.answers[key] is None:
            # An empty device: every block asked for (the skips after the path) reads as zeros.
            zeros = " 00" * 16 + "\n"
            return "".join(f"@block {skip}\n" + zeros * 16 for skip in argv[5:])
        return self.answers[key]


SYSFS = "dev nvme0n1 259:0\nsize nvme0n1 2344225968\npartition nvme0n1p1 259:1\nholder nvme0n1p1 dm-3\n"
MOUNTINFO = "27 1 8:2 / / rw,relatime - ext4 /dev/sda2 rw\n40 27 259:1 / /u01 rw,relatime - xfs /dev/nvme0n1p1 rw\n"


def _scripted(**overrides: tuple[int, str, str] | None) -> GuardHost:
    answers: dict[str, tuple[int, str, str] | None] = {
        "readlink": (0, "/dev/nvme0n1\n", ""),
        "stat": (0, "block special file 0\n", ""),
        "sh-sysfs": (0, SYSFS, ""),
        "sh-read": None,
        "blkid": (2, "", ""),
        "wipefs": (0, '{"signatures": []}', ""),
        "/proc/self/mountinfo": (0, MOUNTINFO, ""),
        "/proc/swaps": (0, "Filename Type Size Used Priority\n", ""),
        "findmnt": (0, "/dev/sda2\n", ""),
        "lsblk": (0, "sda2\nsda\n", ""),
    }
    answers.update(overrides)
    return GuardHost(answers)


def test_partitions_holders_and_mounts_of_a_block_device_are_found() -> None:
    host = _scripted()
    evidence = gather_evidence(host, "/dev/nvme0n1")
    assert evidence.size_bytes == 2344225968 * 512
    assert evidence.partitions == ("nvme0n1p1",)
    assert evidence.holders == ("nvme0n1p1 is held by dm-3",)
    assert evidence.mounts == ("/dev/nvme0n1p1 on /u01",)
    assert evidence.root_disks == ("sda2", "sda")
    assert evidence.probe_errors == ()
    # The device reaches the fixed scripts only as a positional argument, never inside the script text.
    scripts = [c for c in host.commands if c[0] == "sh"]
    assert scripts and all("/dev/nvme0n1" not in c[2] and "nvme0n1" not in c[2] for c in scripts)


def test_blkid_exit_2_with_an_error_is_a_failed_probe_not_an_empty_device() -> None:
    host = _scripted(blkid=(2, "", "blkid: error: /dev/nvme0n1: Permission denied\n"))
    refusal = inspect(gather_evidence(host, "/dev/nvme0n1"), allowed={"/dev/nvme0n1"})
    assert refusal is not None and not refusal.overridable
    assert "Permission denied" in refusal.message()


def test_an_unreadable_header_block_fails_closed() -> None:
    host = _scripted(
        **{"sh-read": (0, "@block 0\n@error 0\n", "dd: failed to open '/dev/nvme0n1': Permission denied\n")}
    )
    evidence = gather_evidence(host, "/dev/nvme0n1")
    assert any("dd could not read /dev/nvme0n1" in e for e in evidence.probe_errors)


# ---------------------------------------------------------------------------------------------------
# Real evidence gathering on this machine (local transport, disk images in regular files)
# ---------------------------------------------------------------------------------------------------


def _asm_header_bytes(group: str, disk: str, au_size: int = MiB) -> bytes:
    """Block 0 of an ASM disk as kfed shows it: kfbh at 0x00, kfdhdb at 0x20 (provstr ORCLDISK)."""
    block = bytearray(4096)
    block[0:4] = bytes([1, 0x82, 1, 1])  # endian little, hard, KFBTYP_DISKHEAD, datfmt
    block[0x20:0x28] = b"ORCLDISK"
    block[0x46] = 1  # KFDGTP_EXTERNAL
    block[0x47] = 3  # KFDHDR_MEMBER
    block[0x48 : 0x48 + len(disk)] = disk.encode()
    block[0x68 : 0x68 + len(group)] = group.encode()
    struct.pack_into("<HHI", block, 0xD8, 512, 4096, au_size)  # secsize, blksize, ausize
    return bytes(block)


def _lvm_label() -> bytes:
    """Sector 1 of a PV as pvcreate writes it: label_header (LABELONE, LVM2 001) and pv_header."""
    sector = bytearray(512)
    sector[0:8] = b"LABELONE"
    struct.pack_into("<Q", sector, 8, 1)  # sector_xl: the label sits in sector 1
    struct.pack_into("<I", sector, 20, 32)  # offset_xl: pv_header follows the 32-byte label header
    sector[24:32] = b"LVM2 001"
    sector[32:64] = b"Fq3vXo0b1cR2dS3eT4fU5gV6hW7iX8jY"  # pv uuid, 32 characters
    struct.pack_into("<Q", sector, 64, 256 * MiB)  # device size
    struct.pack_into("<QQQQ", sector, 72, MiB, 0, 0, 0)  # one data area, then the list terminator
    struct.pack_into("<QQQQ", sector, 104, 4096, MiB - 4096, 0, 0)  # one metadata area, terminator
    # LVM's CRC: CRC-32 (zlib polynomial) seeded with 0xf597a6cf and without the final inversion,
    # over the label from offset_xl to the end of the sector.
    crc = ~zlib.crc32(bytes(sector[20:]), ~0xF597A6CF & 0xFFFFFFFF) & 0xFFFFFFFF
    struct.pack_into("<I", sector, 16, crc)
    return bytes(sector)


def _image(path: Path, size: int = 256 * MiB) -> Path:
    with path.open("wb") as f:
        f.truncate(size)  # sparse: costs no disk space
    return path


def _write(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(MiB), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _needs(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} on this machine")


@pytest.fixture
def local() -> LocalHost:
    _needs("blkid", "wipefs", "dd", "od", "findmnt", "lsblk")
    return LocalHost("localhost")


def _inspect_unchanged(host: LocalHost, image: Path) -> tuple[DeviceEvidence, safety.Refusal | None]:
    before = _sha256(image)
    evidence = gather_evidence(host, str(image))
    assert _sha256(image) == before, "the guard changed the device's bytes"
    return evidence, inspect(evidence)


def test_real_empty_image_is_allowed(local: LocalHost, tmp_path: Path) -> None:
    evidence, refusal = _inspect_unchanged(local, _image(tmp_path / "empty.img"))
    assert refusal is None, refusal.message() if refusal else ""
    assert evidence.size_bytes == 256 * MiB and not evidence.is_block_device
    # Block 0 and the backup header of every AU size from 1 to 64 MiB fit a 256 MiB image.
    assert evidence.probe_errors == ()


def test_real_ext4_image_is_refused(local: LocalHost, tmp_path: Path) -> None:
    _needs("mkfs.ext4")
    image = _image(tmp_path / "ext4.img", 64 * MiB)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    _, refusal = _inspect_unchanged(local, image)
    assert refusal is not None and refusal.overridable
    assert "ext4" in refusal.message() and "0x438" in refusal.message()


def test_real_asm_header_at_block_0_is_refused(local: LocalHost, tmp_path: Path) -> None:
    image = _image(tmp_path / "asm.img")
    _write(image, 0, _asm_header_bytes("NVME", "NVME_0000"))
    evidence, refusal = _inspect_unchanged(local, image)
    assert refusal is not None
    assert [h.where for h in evidence.asm_headers] == ["block 0"]
    assert "disk NVME_0000, of disk group NVME, status MEMBER" in refusal.message()
    # blkid knows the ASM header too (its "oracleasm" prober looks for ORCLDISK at byte 32).
    assert "oracleasm" in {s.type for s in evidence.signatures}


@pytest.mark.parametrize("au_mib", [1, 2, 4, 8, 16, 32, 64])
def test_real_asm_backup_header_alone_is_refused(local: LocalHost, tmp_path: Path, au_mib: int) -> None:
    # Block 0 wiped (what a raw fio write does first), the backup copy in AU 1 still there.
    image = _image(tmp_path / "asm-backup.img")
    au = au_mib * MiB
    _write(image, 2 * au - 8192, _asm_header_bytes("NVME", "NVME_0001", au))
    evidence, refusal = _inspect_unchanged(local, image)
    assert refusal is not None
    assert [h.where for h in evidence.asm_headers] == [
        f"the backup header for a {au_mib} MiB AU (AU 1, block {au // 4096 - 2})"
    ]
    assert "oracleasm" not in {s.type for s in evidence.signatures}  # blkid alone would have missed it


@pytest.mark.parametrize("label", ["gpt", "dos"])
def test_real_partition_table_is_refused(local: LocalHost, tmp_path: Path, label: str) -> None:
    _needs("sfdisk")
    image = _image(tmp_path / f"{label}.img", 64 * MiB)
    subprocess.run(["sfdisk", "-q", str(image)], input=f"label: {label}\n,16M\n", text=True, check=True)
    evidence, refusal = _inspect_unchanged(local, image)
    assert refusal is not None
    assert label in {s.type for s in evidence.signatures}


def test_real_lvm_label_is_refused(local: LocalHost, tmp_path: Path) -> None:
    image = _image(tmp_path / "pv.img", 64 * MiB)
    _write(image, 512, _lvm_label())
    evidence, refusal = _inspect_unchanged(local, image)
    assert refusal is not None
    assert "LVM2_member" in {s.type for s in evidence.signatures}


def test_real_guard_raises_and_the_allow_list_lets_it_through(local: LocalHost, tmp_path: Path) -> None:
    image = _image(tmp_path / "asm.img")
    _write(image, 0, _asm_header_bytes("NVME", "NVME_0000"))
    link = tmp_path / "by-id-nvme"
    link.symlink_to(image)
    with pytest.raises(DeviceRefused) as refused:
        guard(local, str(link))
    assert str(image) in str(refused.value) and "localhost" in str(refused.value)
    # The allow-list entry is matched by its canonical path, like a /dev/disk/by-id name.
    assert guard(local, str(link), allowed=[str(image)]).asm_headers


def test_real_missing_device_is_refused(local: LocalHost, tmp_path: Path) -> None:
    refusal = inspect(gather_evidence(local, str(tmp_path / "nope")), allowed={str(tmp_path / "nope")})
    assert refusal is not None and "does not exist" in refusal.message()


def test_real_root_disk_is_refused(local: LocalHost) -> None:
    root = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "/"], capture_output=True, text=True).stdout.strip()
    if not root.startswith("/dev/"):
        pytest.skip(f"/ is on {root!r}, not a block device, on this machine")
    evidence = gather_evidence(local, root)
    refusal = inspect(evidence, allowed={root})
    assert refusal is not None and not refusal.overridable
    assert "root disk" in refusal.message()
    assert any(m.endswith(" on /") for m in evidence.mounts)
