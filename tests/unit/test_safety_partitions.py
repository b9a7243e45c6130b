"""The guard on partitioned devices, ASMLib and ASM Filter Driver labels, and the ASM geometry of block 0.

Header bytes are tests/data/safety/*.od (the read script's own od format; tests/data/safety/README.md says where
each layout comes from). The host is scripted per command and path, as a partitioned device answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import Answer, ScriptedHost

from pytest_fabricqa.safety import signatures as safety
from pytest_fabricqa.safety.signatures import HEADER_BYTES, asm_geometry, gather_evidence, inspect, parse_od_blocks

DATA = Path(__file__).parents[1] / "data" / "safety"
MiB = 1 << 20
ZEROS = (" 00" * 16 + "\n") * 16
# sdb (2 GiB) with one partition sdb1 (from sector 2048), as safety._SYSFS_SCRIPT prints them.
SYSFS = "dev sdb 8:16\nsize sdb 4194304\npartition sdb1 8:17\nsize sdb1 4192256\n"


def _block(name: str) -> bytes:
    blocks, _ = parse_od_blocks("@block 0\n" + (DATA / f"{name}.od").read_text())
    return blocks[0]


class PartitionedHost(ScriptedHost):
    """Answers the guard's probes of /dev/sdb and /dev/sdb1; ``blocks`` maps (path, byte offset) to od text."""

    def __init__(self, blocks: dict[tuple[str, int], str], blkid: dict[str, tuple[int, str]] | None = None) -> None:
        super().__init__("el72h1")
        self.blocks = blocks
        self.blkid = blkid or {}

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[0] == "sh" and "dd if" in argv[2]:
            path, skips = argv[4], argv[5:]
            return "".join(
                f"@block {skip}\n" + self.blocks.get((path, int(skip) * HEADER_BYTES), ZEROS) for skip in skips
            )
        if argv[0] == "blkid":
            code, out = self.blkid.get(argv[-1], (2, ""))
            return code, out, ""
        return PROBES.get(argv[0] if argv[0] != "cat" else argv[1], "")


PROBES = {
    "readlink": "/dev/sdb\n",
    "stat": "block special file 0\n",
    "sh": SYSFS,
    "wipefs": '{"signatures": []}',
    "/proc/swaps": "Filename Type Size Used Priority\n",
    "findmnt": "/dev/sda2\n",
    "lsblk": "sda2\nsda\n",
}


def _od(name: str) -> str:
    return (DATA / f"{name}.od").read_text()


def test_an_asmlib_label_on_a_partition_is_found_and_named() -> None:
    # oracleasm createdisk DATA1 /dev/sdb1: the label is on the partition; the whole disk shows only its table.
    host = PartitionedHost({("/dev/sdb1", 0): _od("asmlib-label-block0")}, blkid={"/dev/sdb": (0, "PTTYPE=dos\n")})
    evidence = gather_evidence(host, "/dev/sdb")
    (label,) = evidence.asm_headers
    assert (label.label, label.disk_header, label.where) == ("DATA1", False, "block 0 of partition sdb1")
    refusal = inspect(evidence)
    assert refusal is not None and refusal.overridable
    assert "carries an ASMLib or ASM Filter Driver label DATA1 (ORCLDISKDATA1) in block 0 of partition sdb1" in (
        refusal.message()
    )
    # Every probe of the partition went to /dev/sdb1 as an argument, never into the script text.
    assert any(c[:2] == ("blkid", "-p") and c[-1] == "/dev/sdb1" for c in host.commands)
    assert any(c[0] == "sh" and "dd if" in c[2] and c[4] == "/dev/sdb1" for c in host.commands)


def test_an_afd_label_on_the_whole_device_is_refused() -> None:
    host = PartitionedHost({("/dev/sdb", 0): _od("afd-label-block0")})
    refusal = inspect(gather_evidence(host, "/dev/sdb"))
    assert refusal is not None
    assert "label DATA1" in refusal.message() and "block 0 at byte 0x20" in refusal.message()


def test_a_file_system_on_a_partition_is_named_with_its_partition() -> None:
    host = PartitionedHost({}, blkid={"/dev/sdb1": (0, "TYPE=xfs\nUSAGE=filesystem\n")})
    refusal = inspect(gather_evidence(host, "/dev/sdb"))
    assert refusal is not None
    assert "a xfs filesystem signature on partition sdb1 (found by blkid)" in refusal.message()


def test_an_intact_block_0_names_the_one_backup_location() -> None:
    host = PartitionedHost({("/dev/sdb", 0): _od("asm-member-4mib-au-block0")})
    evidence = gather_evidence(host, "/dev/sdb")
    reads = [c[5:] for c in host.commands if c[0] == "sh" and "dd if" in c[2] and c[4] == "/dev/sdb"]
    backup = 4 * MiB + 1022 * 4096
    assert reads == [("0",), (str(backup // HEADER_BYTES),)]
    (header,) = evidence.asm_headers
    assert (header.disk, header.diskgroup, header.status_code) == ("NVME_0000", "NVME", 3)
    # Without an intact block 0 (the partition here), every common AU size is tried.
    partition_reads = [c[5:] for c in host.commands if c[0] == "sh" and "dd if" in c[2] and c[4] == "/dev/sdb1"]
    assert len(partition_reads[1]) == 7


def test_the_backup_found_through_block_0s_geometry() -> None:
    backup = 4 * MiB + 1022 * 4096
    host = PartitionedHost(
        {("/dev/sdb", 0): _od("asm-member-4mib-au-block0"), ("/dev/sdb", backup): _od("asm-member-4mib-au-block0")}
    )
    wheres = [h.where for h in gather_evidence(host, "/dev/sdb").asm_headers]
    assert wheres == ["block 0", "the backup header for this disk's 4 MiB AU (AU 1, block 1022)"]


def test_asm_geometry_reads_block_and_au_size_in_the_headers_byte_order() -> None:
    assert asm_geometry(_block("asm-member-4mib-au-block0")) == (4096, 4 * MiB)
    assert asm_geometry(_block("asmlib-label-block0")) is None  # a label, no disk header
    assert asm_geometry(_block("afd-label-block0")) is None  # no AU size recorded
    assert asm_geometry(bytes(256)) is None
    big = bytearray(_block("asm-member-4mib-au-block0"))
    big[0] = 0  # kfbh.endian 0: big-endian platform
    big[0xDA:0xE0] = (4096).to_bytes(2, "big") + (8 * MiB).to_bytes(4, "big")
    assert asm_geometry(bytes(big)) == (4096, 8 * MiB)
    odd = bytearray(_block("asm-member-4mib-au-block0"))
    odd[0xDC:0xE0] = (3 * MiB).to_bytes(4, "little")
    assert asm_geometry(bytes(odd)) is None


@pytest.mark.parametrize("size", [None, 4 * MiB])
def test_offsets_from_a_geometry_stay_inside_the_device(size: int | None) -> None:
    offsets = safety.asm_probe_offsets(size, (4096, 4 * MiB))
    assert offsets[1:] == (
        [] if size else [(4 * MiB + 1022 * 4096, "the backup header for this disk's 4 MiB AU (AU 1, block 1022)")]
    )
