"""The data-safety guard: refuse to let a fio job that writes touch a device that holds something.

Seed 000's raw-device fio write tests destroyed the ASM disk group living on the devices they wrote to.
Before any writing job, :func:`guard` gathers evidence about the device through a :class:`Host`, using
read-only commands only (readlink, stat, sysfs, ``dd`` + ``od`` reads, ``blkid -p``, ``wipefs --no-act``,
/proc/self/mountinfo, /proc/swaps, findmnt, lsblk), and :func:`inspect` -- a pure function -- refuses a
device that:

- carries an Oracle ASM disk header: ``ORCLDISK`` at byte 0x20 of block 0, or in the backup copy ASM
  keeps (since 10.2.0.5/11.1.0.7) in the second-to-last 4 KiB metadata block of allocation unit 1, i.e.
  block ``AU/BLOCK - 2`` of AU 1 (block 254 for the default 1 MiB AU and 4 KiB blocks, 1022 for 4 MiB).
  When block 0 holds an intact disk header (kfbh type KFBTYP_DISKHEAD), its own block size (kfdhdb.blksize,
  byte 0xda) and AU size (kfdhdb.ausize, byte 0xdc) name the one backup location. When block 0 is gone --
  exactly the damage seed 000 saw -- every common AU size (1, 2, 4, 8, 16, 32, 64 MiB) is checked with 4 KiB
  blocks (the only V$ASM_DISKGROUP.BLOCK_SIZE in practice); source: ``kfed read aun=1 blkn=254`` write-ups
  and ``kfed repair`` notes.
- carries an ASMLib or ASM Filter Driver label: "ORCLDISK" followed by the label name in the 32-byte
  provisioning string at byte 0x20 (ASMLib's osmprivate.h; kfed shows it as ``kfdhdb.driver.provstr``). An
  ASMLib disk usually lives on a partition, so each partition is probed like the whole device.
- carries a file system, RAID/LVM member or partition-table signature (``blkid -p``, ``wipefs``), on the
  device or on any of its partitions;
- is mounted, used as swap, held by another device (sysfs ``holders``: LVM, dm, md, multipath), or has a
  partition that is;
- is the host's root disk (the devices behind ``/``, from ``findmnt`` and ``lsblk -s``).

Signatures and ASM headers can be allow-listed in the lab file (the message names the exact key);
in-use findings (mounted, swap, held, root disk) and failed probes cannot: the guard fails closed.

Device paths are never interpolated into shell text: the two ``sh -c`` scripts below are fixed strings
that receive the device as ``"$1"``.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.transport.base import CommandResult, Host

ASM_MAGIC = b"ORCLDISK"
ASM_MAGIC_OFFSET = 0x20
ASM_METADATA_BLOCK = 4096
ASM_AU_SIZES_MIB = (1, 2, 4, 8, 16, 32, 64)
# Bytes read per probed block: the block header (kfbh, 0x00-0x1f) and the disk header fields up to the
# AU size at 0xdc (kfdhdb offsets in kfed dumps are relative to 0x20).
HEADER_BYTES = 256

# How to allow a device, as the refusal says it. The lab model marks such devices with
# ``destructive_ok: true``; callers pass the exact key path of the device ({host} and {device} are filled).
DEFAULT_ALLOW_KEY = "destructive_ok: true on the device {device} of host {host}"

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._:+@-]+$")

# Reads HEADER_BYTES at each byte offset given after the device; offsets are multiples of HEADER_BYTES
# so ``skip`` counts HEADER_BYTES-sized blocks. A failed read is reported on the original stdout (fd 3)
# because a pipeline's exit status is that of od.
_READ_SCRIPT = """dev=$1; shift
exec 3>&1
for skip in "$@"; do
  echo "@block $skip"
  { dd if="$dev" bs=256 count=1 skip="$skip" status=none || echo "@error $skip" >&3; } | od -A n -t x1 -v
done
"""

# Prints the device's dev number and size (512-byte sectors), its holders, and each partition with its
# dev number and holders. Exit 3 when the name is not in /sys/class/block.
_SYSFS_SCRIPT = """name=$1
b=/sys/class/block/$name
[ -e "$b/dev" ] || exit 3
printf 'dev %s %s\\n' "$name" "$(cat "$b/dev")"
printf 'size %s %s\\n' "$name" "$(cat "$b/size")"
for h in "$b"/holders/*; do [ -e "$h" ] && printf 'holder %s %s\\n' "$name" "${h##*/}"; done
for p in "$b"/*/partition; do
  [ -e "$p" ] || continue
  d=${p%/partition}; pn=${d##*/}
  printf 'partition %s %s\\n' "$pn" "$(cat "$d/dev")"
  printf 'size %s %s\\n' "$pn" "$(cat "$d/size")"
  for h in "$d"/holders/*; do [ -e "$h" ] && printf 'holder %s %s\\n' "$pn" "${h##*/}"; done
done
exit 0
"""


@dataclass(frozen=True)
class AsmHeader:
    """An ASM disk header found on the device."""

    offset: int
    where: str
    diskgroup: str = ""
    disk: str = ""
    status_code: int | None = None
    label: str = ""  # the ASMLib / ASM Filter Driver label after "ORCLDISK" in the provisioning string
    disk_header: bool = True  # kfbh type KFBTYP_DISKHEAD: ASM wrote a disk header, not only a label

    def describe(self) -> str:
        """A phrase for the refusal message."""
        if not self.disk_header:
            name = f" {self.label}" if self.label else ""
            return (
                f"an ASMLib or ASM Filter Driver label{name} (ORCLDISK{self.label}) in {self.where} "
                f"at byte {self.offset:#x}"
            )
        parts = [f"label {self.label}"] if self.label else []
        if self.disk:
            parts.append(f"disk {self.disk}")
        if self.diskgroup:
            parts.append(f"of disk group {self.diskgroup}")
        if self.status_code is not None:
            # KFDHDR_MEMBER = 3 in kfed dumps; other codes are printed as numbers rather than guessed.
            parts.append("status MEMBER" if self.status_code == 3 else f"header status code {self.status_code}")
        detail = f" ({', '.join(parts)})" if parts else ""
        return f"an Oracle ASM disk header (ORCLDISK) in {self.where} at byte {self.offset:#x}{detail}"


@dataclass(frozen=True)
class Signature:
    """A signature a read-only probe found (blkid or wipefs)."""

    type: str
    usage: str = ""
    offset: str = ""
    source: str = "blkid"
    on: str = ""  # a partition's kernel name when found there, not on the whole device

    def describe(self) -> str:
        """A phrase for the refusal message."""
        usage = f" {self.usage}" if self.usage else ""
        at = f" at offset {self.offset}" if self.offset else ""
        where = f" on partition {self.on}" if self.on else ""
        return f"a {self.type}{usage} signature{where}{at} (found by {self.source})"


@dataclass(frozen=True)
class DeviceEvidence:
    """What the read-only probes found about one device on one host."""

    host: str
    device: str
    path: str = ""
    name: str = ""
    is_block_device: bool = False
    size_bytes: int | None = None
    asm_headers: tuple[AsmHeader, ...] = ()
    signatures: tuple[Signature, ...] = ()
    partitions: tuple[str, ...] = ()
    holders: tuple[str, ...] = ()
    mounts: tuple[str, ...] = ()
    swaps: tuple[str, ...] = ()
    root_disks: tuple[str, ...] = ()
    probe_errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def aliases(self) -> frozenset[str]:
        """The names the lab may use for this device: as configured, and its canonical path."""
        return frozenset(a for a in (self.device, self.path) if a)


@dataclass(frozen=True)
class Finding:
    """One reason to refuse; ``overridable`` findings are lifted by the lab's allow-list."""

    what: str
    overridable: bool


@dataclass(frozen=True)
class Refusal:
    """Why a device must not be written to, and how to allow it where that is possible."""

    host: str
    device: str
    path: str
    findings: tuple[Finding, ...]
    allow_key: str

    @property
    def overridable(self) -> bool:
        """True when every finding can be lifted by allow-listing the device."""
        return all(f.overridable for f in self.findings)

    def message(self) -> str:
        """One paragraph: host, device, everything found, and the fix."""
        shown = self.device if self.path in ("", self.device) else f"{self.device} ({self.path})"
        found = "; ".join(f.what for f in self.findings)
        text = f"{self.host}: refusing to let a write job touch {shown}: {found}."
        if self.overridable:
            text += f" If its contents may be destroyed, set {self.allow_key} in the lab file."
        else:
            text += (
                " The allow-list cannot lift an in-use device or a failed probe: release the device "
                "(unmount, swapoff, deactivate its holders) or fix the probe, then run again."
            )
        return text


class DeviceRefused(FabricQAError):
    """A write job was about to touch a device that holds data or is in use."""

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal
        super().__init__(refusal.message())


def inspect(
    evidence: DeviceEvidence,
    allowed: Collection[str] = (),
    *,
    allow_key: str | None = None,
) -> Refusal | None:
    """Return a :class:`Refusal` when ``evidence`` shows the device must not be written, else None.

    ``allowed`` holds the paths the lab marks ``destructive_ok`` on this host (as configured or canonical);
    it lifts signature, partition and ASM-header findings only. ``allow_key`` is the lab-file key the
    message tells the user to set, with ``{host}`` and ``{device}`` filled in.
    """
    findings: list[Finding] = []
    findings.extend(Finding(f"could not be inspected: {e}", False) for e in evidence.probe_errors)
    if evidence.name and evidence.name in evidence.root_disks:
        chain = ", ".join(evidence.root_disks)
        findings.append(Finding(f"is the host's root disk (/ is on {chain})", False))
    findings.extend(Finding(f"is mounted: {m}", False) for m in evidence.mounts)
    findings.extend(Finding(f"is in use as swap: {s}", False) for s in evidence.swaps)
    findings.extend(Finding(f"is held by another device: {h}", False) for h in evidence.holders)
    is_allowed = bool(evidence.aliases & set(allowed))
    if not is_allowed:
        findings.extend(Finding(f"carries {h.describe()}", True) for h in evidence.asm_headers)
        findings.extend(Finding(f"carries {s.describe()}", True) for s in _dedupe(evidence.signatures))
        if evidence.partitions:
            findings.append(Finding(f"has partitions: {', '.join(evidence.partitions)}", True))
    if not findings:
        return None
    key = (allow_key or DEFAULT_ALLOW_KEY).format(host=evidence.host, device=evidence.device)
    return Refusal(evidence.host, evidence.device, evidence.path, tuple(findings), key)


def _dedupe(signatures: Iterable[Signature]) -> list[Signature]:
    # blkid and wipefs often report the same signature; keep wipefs's (it has the offset) and drop
    # a blkid one of the same type.
    result: list[Signature] = []
    signatures = list(signatures)
    wipefs_types = {(s.type, s.on) for s in signatures if s.source == "wipefs"}
    for s in signatures:
        if s.source == "blkid" and (s.type, s.on) in wipefs_types:
            continue
        if s not in result:
            result.append(s)
    return result


# ---------------------------------------------------------------------------------------------------
# Evidence gathering (read-only commands through a Host)
# ---------------------------------------------------------------------------------------------------


def asm_probe_offsets(size_bytes: int | None, geometry: tuple[int, int] | None = None) -> list[tuple[int, str]]:
    """Byte offsets of block 0 and of the backup disk header(s) that fit the device.

    ``geometry`` is (block size, AU size) read from an intact block 0 (:func:`asm_geometry`): then the one
    backup location it names; without it, the backup location of every common AU size with 4 KiB blocks.
    """
    offsets = [(0, "block 0")]
    if geometry is not None:
        block, au = geometry
        candidates = [(au, block, "the backup header for this disk's")]
    else:
        candidates = [(mib << 20, ASM_METADATA_BLOCK, "the backup header for a") for mib in ASM_AU_SIZES_MIB]
    for au, block, words in candidates:
        block_in_au = au // block - 2
        offset = au + block_in_au * block
        if size_bytes is None or offset + block <= size_bytes:
            offsets.append((offset, f"{words} {au >> 20} MiB AU (AU 1, block {block_in_au})"))
    return offsets


KFBTYP_DISKHEAD = 1  # kfbh.type of a disk header block


def asm_geometry(data: bytes) -> tuple[int, int] | None:
    """(block size, AU size) from an intact ASM disk header in block 0, or None when it holds none.

    kfbh.endian (byte 0: 1 little, 0 big) orders kfdhdb.blksize (u16 at 0xda) and kfdhdb.ausize (u32 at 0xdc);
    the values must be an ASM metadata block size (512 B - 64 KiB, a power of two) and a documented AU size.
    """
    if len(data) < 0xE0 or data[ASM_MAGIC_OFFSET : ASM_MAGIC_OFFSET + len(ASM_MAGIC)] != ASM_MAGIC:
        return None
    if data[2] != KFBTYP_DISKHEAD or data[0] not in (0, 1):
        return None
    order = "<" if data[0] == 1 else ">"
    block, au = struct.unpack_from(f"{order}HI", data, 0xDA)
    sane_block = 512 <= block <= 65536 and block & (block - 1) == 0
    if not sane_block or au not in {mib << 20 for mib in ASM_AU_SIZES_MIB}:
        return None
    return block, au


def parse_asm_header(data: bytes, offset: int, where: str) -> AsmHeader | None:
    """Return the ASM header or ASMLib/AFD label in ``data`` (the first bytes of a block), or None."""
    if data[ASM_MAGIC_OFFSET : ASM_MAGIC_OFFSET + len(ASM_MAGIC)] != ASM_MAGIC:
        return None

    def text(start: int, length: int) -> str:
        raw = data[start : start + length].split(b"\0", 1)[0]
        return raw.decode("ascii", "replace").strip()

    end_of_magic = ASM_MAGIC_OFFSET + len(ASM_MAGIC)
    label = text(end_of_magic, 32 - len(ASM_MAGIC))
    if len(data) > 2 and data[2] != KFBTYP_DISKHEAD:
        return AsmHeader(offset=offset + ASM_MAGIC_OFFSET, where=where, label=label, disk_header=False)
    status = data[0x47] if len(data) > 0x47 else None
    return AsmHeader(
        offset=offset + ASM_MAGIC_OFFSET,
        where=where,
        disk=text(0x48, 32),
        diskgroup=text(0x68, 32),
        status_code=status,
        label=label,
    )


def parse_od_blocks(stdout: str) -> tuple[dict[int, bytes], list[int]]:
    """Parse the read script's output: skip -> bytes, and the skips whose read failed."""
    blocks: dict[int, bytearray] = {}
    failed: list[int] = []
    current: int | None = None
    for line in stdout.splitlines():
        if line.startswith("@block "):
            current = int(line.split()[1])
            blocks[current] = bytearray()
        elif line.startswith("@error "):
            failed.append(int(line.split()[1]))
        elif current is not None and line.strip():
            blocks[current].extend(int(byte, 16) for byte in line.split())
    return {k: bytes(v) for k, v in blocks.items()}, failed


def parse_blkid_export(stdout: str) -> dict[str, str]:
    """Parse ``blkid -o export`` (KEY=value lines, spaces escaped with a backslash)."""
    values: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = re.sub(r"\\(.)", r"\1", value.strip())
    return values


def blkid_signatures(values: dict[str, str], on: str = "") -> list[Signature]:
    """Signatures named in parsed ``blkid -p -o export`` output (``on``: the partition probed, if one was)."""
    found = []
    if values.get("TYPE"):
        found.append(Signature(values["TYPE"], values.get("USAGE", ""), "", "blkid", on))
    if values.get("PTTYPE"):
        found.append(Signature(values["PTTYPE"], "partition table", "", "blkid", on))
    return found


def wipefs_signatures(stdout: str, on: str = "") -> list[Signature]:
    """Signatures listed by ``wipefs --no-act --json`` (``on``: the partition probed, if one was)."""
    if not stdout.strip():
        return []
    document = json.loads(stdout)
    return [
        Signature(str(s.get("type") or "unknown"), "", str(s.get("offset") or ""), "wipefs", on)
        for s in document.get("signatures", [])
    ]


def _sh(script: str, *args: str) -> list[str]:
    # "sh" is $0; the device and the other arguments follow as $1...
    return ["sh", "-c", script, "sh", *args]


@dataclass(frozen=True)
class _Contents:
    asm_headers: list[AsmHeader]
    signatures: list[Signature]
    errors: list[str]
    notes: list[str]


def _read_blocks(
    run: Callable[[Sequence[str]], CommandResult], path: str, probes: Sequence[tuple[int, str]], errors: list[str]
) -> dict[int, bytes]:
    """HEADER_BYTES at each probe offset of ``path`` (byte offset -> bytes); an unreadable one is an error."""
    skips = [offset // HEADER_BYTES for offset, _ in probes]
    reads = run(_sh(_READ_SCRIPT, path, *(str(skip) for skip in skips)))
    blocks, unreadable = parse_od_blocks(reads.stdout)
    if not reads.ok or unreadable or any(skip not in blocks for skip in skips):
        where = ", ".join(str(skip * HEADER_BYTES) for skip in unreadable) or "some offsets"
        why = (reads.stderr or reads.stdout).strip().splitlines()
        # The fixed script is long; name the read instead of echoing it.
        errors.append(f"dd could not read {path} at byte offset(s) {where}" + (f" ({why[-1]})" if why else ""))
    return {offset: blocks.get(offset // HEADER_BYTES, b"") for offset, _ in probes}


def _probe_contents(
    run: Callable[[Sequence[str]], CommandResult],
    failed: Callable[[CommandResult], str],
    path: str,
    size: int | None,
    on: str,
) -> _Contents:
    """ASM headers and labels, then blkid and wipefs signatures, of ``path`` (a partition named ``on``, or the
    whole device when ``on`` is empty)."""
    errors: list[str] = []
    notes: list[str] = []
    within = f" of partition {on}" if on else ""

    # Block 0 first: when it holds an intact disk header, its block and AU sizes name the one backup location.
    block0 = _read_blocks(run, path, [(0, "block 0")], errors)[0]
    backups = asm_probe_offsets(size, asm_geometry(block0))[1:]
    blocks = {0: block0, **(_read_blocks(run, path, backups, errors) if backups else {})}
    asm_headers = []
    for offset, where in [(0, "block 0"), *backups]:
        header = parse_asm_header(blocks.get(offset, b""), offset, where + within)
        if header is not None:
            asm_headers.append(header)

    signatures: list[Signature] = []
    blkid = run(["blkid", "-p", "-o", "export", "--", path])
    if blkid.exit_code == 0:
        signatures.extend(blkid_signatures(parse_blkid_export(blkid.stdout), on))
    elif blkid.exit_code == 8:
        # blkid's "ambivalent result": more than one signature; wipefs lists them.
        signatures.append(Signature("ambivalent (several)", "", "", "blkid", on))
    elif blkid.exit_code != 2 or blkid.stderr.strip():
        # Exit 2 means "nothing found" -- but blkid also exits 2 when it cannot open the device, and
        # then says so on stderr. Silence is the only proof of an empty device.
        errors.append(failed(blkid))

    wipefs = run(["wipefs", "--no-act", "--json", "--", path])
    if wipefs.ok:
        try:
            signatures.extend(wipefs_signatures(wipefs.stdout, on))
        except (ValueError, AttributeError) as exc:
            notes.append(f"wipefs output for {path} was not JSON ({exc}); blkid's result stands alone")
    else:
        # util-linux older than 2.27 has no --json; blkid -p has already probed the same signatures.
        notes.append(f"wipefs unavailable: {failed(wipefs)}")
    return _Contents(asm_headers, signatures, errors, notes)


def gather_evidence(host: Host, device: str, *, timeout: float = 60.0) -> DeviceEvidence:
    """Probe ``device`` on ``host`` with read-only commands and return what was found.

    Every probe that cannot run is recorded in ``probe_errors`` rather than raised, so that
    :func:`inspect` refuses the device (fail closed) with the reason in the message.
    """
    errors: list[str] = []
    notes: list[str] = []

    def run(argv: Sequence[str]) -> CommandResult:
        return host.run(argv, check=False, timeout=timeout)

    def failed(result: CommandResult) -> str:
        tail = (result.stderr or result.stdout).strip().splitlines()
        return f"`{result.command}` exited {result.exit_code}" + (f" ({tail[-1]})" if tail else "")

    resolved = run(["readlink", "-e", "--", device])
    if not resolved.ok or not resolved.stdout.strip():
        return DeviceEvidence(host.name, device, probe_errors=(f"{device} does not exist on {host.name}",))
    path = resolved.stdout.strip()
    name = path.rsplit("/", 1)[-1]

    kind = run(["stat", "-L", "-c", "%F %s", "--", path])
    if not kind.ok:
        return DeviceEvidence(host.name, device, path, name, probe_errors=(failed(kind),))
    file_type, _, file_size = kind.stdout.strip().rpartition(" ")
    is_block = file_type == "block special file"
    if not is_block and file_type != "regular file":
        return DeviceEvidence(
            host.name, device, path, name, probe_errors=(f"{path} is a {file_type}, not a block device",)
        )

    size: int | None = int(file_size) if not is_block and file_size.isdigit() else None
    dev_numbers: dict[str, str] = {}
    partitions: list[str] = []
    partition_sizes: dict[str, int] = {}
    holders: list[str] = []
    if is_block:
        if not _SAFE_NAME.match(name):
            errors.append(f"kernel name {name!r} of {path} is not a plain block device name")
        else:
            sysfs = run(_sh(_SYSFS_SCRIPT, name))
            if not sysfs.ok:
                errors.append(failed(sysfs))
            for line in sysfs.stdout.splitlines():
                fields = line.split()
                if len(fields) != 3:
                    continue
                kind_, who, value = fields
                if kind_ == "dev":
                    dev_numbers[who] = value
                elif kind_ == "size" and value.isdigit():
                    if who == name:
                        size = int(value) * 512
                    else:
                        partition_sizes[who] = int(value) * 512
                elif kind_ == "partition":
                    partitions.append(who)
                    dev_numbers[who] = value
                elif kind_ == "holder":
                    holders.append(f"{who} is held by {value}")
        if size is None:
            errors.append(f"the size of {path} could not be read from /sys/class/block/{name}/size")

    asm_headers: list[AsmHeader] = []
    signatures: list[Signature] = []
    # The whole device, then each partition: an ASMLib disk usually lives on a partition.
    for probed, probed_size, on in (
        (path, size, ""),
        *((f"/dev/{p}", partition_sizes.get(p), p) for p in partitions if _SAFE_NAME.match(p)),
    ):
        found = _probe_contents(run, failed, probed, probed_size, on)
        asm_headers.extend(found.asm_headers)
        signatures.extend(found.signatures)
        errors.extend(found.errors)
        notes.extend(found.notes)

    names = {name, *partitions}
    dev_paths = {f"/dev/{n}" for n in names} | {path}
    mounts: list[str] = []
    mountinfo = run(["cat", "/proc/self/mountinfo"])
    if not mountinfo.ok:
        errors.append(failed(mountinfo))
    numbers = {number: who for who, number in dev_numbers.items()}
    for line in mountinfo.stdout.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        source = line.split(" - ", 1)[1].split()[1:2]
        mount_point = fields[4]
        if fields[2] in numbers:
            mounts.append(f"/dev/{numbers[fields[2]]} on {mount_point}")
        elif source and source[0] in dev_paths:
            mounts.append(f"{source[0]} on {mount_point}")

    swaps: list[str] = []
    swap_table = run(["cat", "/proc/swaps"])
    if not swap_table.ok:
        errors.append(failed(swap_table))
    for line in swap_table.stdout.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] in dev_paths:
            swaps.append(fields[0])

    root_disks = _root_disks(run, errors, failed)

    return DeviceEvidence(
        host=host.name,
        device=device,
        path=path,
        name=name,
        is_block_device=is_block,
        size_bytes=size,
        asm_headers=tuple(asm_headers),
        signatures=tuple(signatures),
        partitions=tuple(partitions),
        holders=tuple(holders),
        mounts=tuple(mounts),
        swaps=tuple(swaps),
        root_disks=root_disks,
        probe_errors=tuple(errors),
        notes=tuple(notes),
    )


def _root_disks(
    run: Callable[[Sequence[str]], CommandResult],
    errors: list[str],
    failed: Callable[[CommandResult], str],
) -> tuple[str, ...]:
    """Kernel names of the devices / sits on (partition, LV, disk...), or () when / has no disk."""
    source = run(["findmnt", "-n", "-o", "SOURCE", "/"])
    if not source.ok:
        errors.append(failed(source))
        return ()
    # btrfs subvolumes read /dev/sda2[/@rootfs].
    root = source.stdout.strip().split("[", 1)[0]
    if not root.startswith("/dev/"):
        # overlay, tmpfs...: a container's root has no disk of its own here.
        return ()
    chain = run(["lsblk", "-n", "-r", "-s", "-o", "KNAME", root])
    if not chain.ok:
        errors.append(failed(chain))
        return ()
    return tuple(dict.fromkeys(line.strip() for line in chain.stdout.splitlines() if line.strip()))


def guard(
    host: Host,
    device: str,
    allowed: Collection[str] = (),
    *,
    allow_key: str | None = None,
    timeout: float = 60.0,
) -> DeviceEvidence:
    """Raise :class:`DeviceRefused` unless ``device`` on ``host`` is safe to write; return the evidence.

    ``allowed`` is the lab's allow-list for this host; entries are matched as written and by their
    canonical path on the host (so /dev/disk/by-id/... names work).
    """
    evidence = gather_evidence(host, device, timeout=timeout)
    canonical = set(allowed)
    for entry in allowed:
        resolved = host.run(["readlink", "-e", "--", entry], check=False, timeout=timeout)
        if resolved.ok and resolved.stdout.strip():
            canonical.add(resolved.stdout.strip())
    refusal = inspect(evidence, canonical, allow_key=allow_key)
    if refusal is not None:
        raise DeviceRefused(refusal)
    return evidence
