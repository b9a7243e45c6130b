"""Lab files: YAML describing hosts, the storage network, targets, safety and thresholds.

A lab file is read once, at load time, into validated pydantic models. Every mistake becomes one
:class:`LabError` line that names the file, the key, the line where known and what is allowed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    IPvAnyAddress,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.core.workloads import load_matrix, selected_names
from pytest_fabricqa.lab.database import OracleProfile, OracleSettings
from pytest_fabricqa.lab.thresholds import Thresholds, unmatched

PROTOCOLS: tuple[str, ...] = ("nvme-tcp", "nvme-rdma", "iscsi", "iser")
ROLES: tuple[str, ...] = ("target", "initiator", "db")

Protocol = Literal["nvme-tcp", "nvme-rdma", "iscsi", "iser"]
Role = Literal["target", "initiator", "db"]

# NVMe base spec, "NVMe Qualified Names", as SPDK 23.01 checks it (lib/nvmf/subsystem.c, nvmf_nqn_is_valid): "nqn.",
# a yyyy-mm date code, ".", a reverse domain whose labels start with a letter, hold letters, digits and '-' and end
# with a letter or digit (63 characters at most), then ":" and a name; or the UUID form. 223 bytes at most. Linux's
# nvmet takes any name (see SHORT_NQN_RE); SPDK refuses everything else, naming no reason.
NQN_MAX_BYTES = 223
NQN_UUID_PREFIX = "nqn.2014-08.org.nvmexpress:uuid:"
_DOMAIN_LABEL_RE = re.compile(r"^[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_NQN_NAME_RE = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII without spaces: nothing a shell or configfs misreads
# RFC 3720 3.2.6: an iSCSI name holds lower-case letters, digits, '-', '.' and ':' (tgt refuses anything else, '_'
# among them), 223 bytes at most; the iqn form is "iqn.yyyy-mm.reverse.domain[:unique]".
IQN_RE = re.compile(r"^iqn\.\d{4}-\d{2}\.[a-z0-9][a-z0-9.-]*[a-z0-9](:[a-z0-9.:-]+)?$")
IQN_MAX_BYTES = 223
# Linux nvmet also accepts a short subsystem name (seed 000 used "nvmet1"); nothing a shell or configfs misreads.
SHORT_NQN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,222}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PREFIX_MAX = 32  # a default name_prefix longer than this ends in a hash (SCST device names stop at 64 characters)


def default_prefix(lab_name: str, place: str = "") -> str:
    """The mark a target carries when the lab sets no ``name_prefix``: ``fqa-`` and the lab's name, and the target's
    place when the lab's targets sit on several (initiators log in through one iSCSI iface per prefix, and two
    places' fabrics may be live at once). Two labs sharing a host thus carry different marks and records by
    default; characters a sysfs name or an iface name cannot hold become ``-``, and a long one ends in a hash."""
    raw = "-".join(part for part in ("fqa", lab_name, place) if part)
    slug = re.sub(r"[^A-Za-z0-9_.-]", "-", raw)
    if len(slug) > PREFIX_MAX:
        slug = f"{slug[: PREFIX_MAX - 9]}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}"
    return slug


# A namespace's 16-byte NGUID, written as nvmetcli saves it (and configfs' device_nguid takes it).
NGUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def nqn_problem(nqn: str) -> str | None:
    """None when ``nqn`` is an NVMe qualified name as the NVMe spec defines it and SPDK checks it, else the rule it
    breaks, in one sentence (short names that only nvmet takes break it too: see :data:`SHORT_NQN_RE`)."""
    if len(nqn.encode()) > NQN_MAX_BYTES:
        return f"an NQN is at most {NQN_MAX_BYTES} bytes"
    if not re.match(r"^nqn\.\d{4}-\d{2}\.", nqn):
        return "an NQN starts with 'nqn.', a yyyy-mm date code and '.' (nqn.yyyy-mm.reverse.domain:name)"
    if nqn.startswith(NQN_UUID_PREFIX):
        if NGUID_RE.match(nqn.removeprefix(NQN_UUID_PREFIX)):
            return None
        return f"after '{NQN_UUID_PREFIX}' only a UUID may follow (8-4-4-4-12 hexadecimal digits)"
    domain, colon, name = nqn[len("nqn.yyyy-mm.") :].partition(":")
    if not colon or not name:
        return "an NQN needs ':' and a name after the reverse domain (nqn.yyyy-mm.reverse.domain:name)"
    for label in domain.split("."):
        if not _DOMAIN_LABEL_RE.match(label):
            return (
                f"the reverse domain's label {label!r} must start with a letter, hold only letters, digits and '-', "
                "end with a letter or digit, and be 63 characters at most"
            )
    if not _NQN_NAME_RE.match(name):
        return "the name after ':' must be printable ASCII without spaces"
    return None


def iqn_problem(iqn: str) -> str | None:
    """None when ``iqn`` is an iSCSI qualified name every target kind takes (RFC 3720), else the rule it breaks."""
    if len(iqn.encode()) > IQN_MAX_BYTES:
        return f"an iSCSI name is at most {IQN_MAX_BYTES} bytes"
    if not re.match(r"^iqn\.\d{4}-\d{2}\.", iqn):
        return (
            "an iSCSI qualified name starts with 'iqn.', a yyyy-mm date code and '.' (iqn.yyyy-mm.reverse.domain:name)"
        )
    bad = sorted({c for c in iqn if not (c.isascii() and (c.islower() or c.isdigit() or c in ".-:"))})
    if bad:
        return (
            f"{', '.join(repr(c) for c in bad)} not allowed: an iSCSI name holds only lower-case letters, digits, '.', "
            "'-' and ':' (RFC 3720; tgt refuses the rest)"
        )
    if not IQN_RE.match(iqn):
        return "the reverse domain after the date code must start and end with a letter or digit"
    return None


class LabError(UserError):
    """A lab file is missing, unreadable or invalid. The message is one line: file, key, line, fix."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SSHSettings(_Model):
    """How the plugin reaches hosts over SSH. Secrets are named, never stored: a key path or an env variable."""

    user: str = "root"
    port: int = Field(22, ge=1, le=65535)
    key: Path | None = None
    password_env: str | None = None
    config: Path | None = None
    known_hosts: Path | None = None
    verify_host_keys: bool = True
    connect_timeout: float = Field(15.0, gt=0)
    command_timeout: float = Field(900.0, gt=0)  # no remote command may run longer (fio sets its own)


class StorageLink(_Model):
    """A host's port on the storage network: one path."""

    interface: str
    address: IPvAnyAddress


class HostModel(_Model):
    """One lab host: how to reach it, what it does, and its address on the storage network."""

    address: str | None = None
    ssh_alias: str | None = None
    transport: Literal["ssh", "local"] = "ssh"
    user: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    roles: tuple[Role, ...]
    storage: tuple[StorageLink, ...] = ()
    """The host's ports on the storage network, one per path: ``{interface, address}``, or a list of them when the
    host reaches the storage over several (two storage interfaces, each on its own segment and subnet)."""
    host_nqn: str | None = None
    initiator_iqn: str | None = None

    @field_validator("storage", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        if value is None:
            return ()
        return [value] if isinstance(value, (Mapping, StorageLink)) else value

    @field_validator("storage")
    @classmethod
    def _distinct_ports(cls, value: tuple[StorageLink, ...]) -> tuple[StorageLink, ...]:
        for what, seen in (("interface", [p.interface for p in value]), ("address", [str(p.address) for p in value])):
            twice = sorted({x for x in seen if seen.count(x) > 1})
            if twice:
                raise ValueError(f"two storage ports share the {what} {twice[0]}; each path needs its own")
        return value

    @property
    def storage_link(self) -> StorageLink | None:
        """The host's first storage port (its first path), or None: the one initiators and fio servers use while
        the plugin connects over one path."""
        return self.storage[0] if self.storage else None

    @model_validator(mode="after")
    def _reachable(self) -> HostModel:
        if self.transport == "ssh" and not (self.address or self.ssh_alias):
            raise ValueError("an SSH host needs 'address' or 'ssh_alias'")
        if self.host_nqn and (problem := nqn_problem(self.host_nqn)):
            raise ValueError(f"host_nqn {self.host_nqn!r}: {problem}")
        if self.initiator_iqn and (problem := iqn_problem(self.initiator_iqn)):
            raise ValueError(f"initiator_iqn {self.initiator_iqn!r}: {problem}")
        return self


class NetworkModel(_Model):
    """The storage network: what every storage port should show."""

    link_speed_gbps: float = Field(gt=0)
    mtu: int = Field(1500, ge=576, le=65536)
    prefix_len: int = Field(24, ge=1, le=128)


class Device(_Model):
    """A backing device on the target host. ``writable`` admits write workloads; ``destructive_ok`` also
    overrides the data-safety guard (ASM, filesystem, LVM or partition signatures); ``corruptible`` lets the
    integrity suite change bytes on it directly on the target host, to prove its verify can fail (a scratch
    device only: what it holds is destroyed)."""

    path: str
    writable: bool = False
    destructive_ok: bool = False
    load: bool = True  # performance workloads run on it (false: exported for connectivity checks only)
    nguid: str | None = None  # the namespace's NGUID when exported over NVMe-oF (seed 000 set them by hand)
    corruptible: bool = False

    @field_validator("nguid")
    @classmethod
    def _nguid(cls, value: str | None) -> str | None:
        if value is not None and not NGUID_RE.match(value):
            raise ValueError(
                f"nguid {value!r} is not an NGUID: 32 hex digits as 8-4-4-4-12, e.g. 00000000-0000-0000-0000-000000000101"
            )
        return value

    @model_validator(mode="after")
    def _corruptible_is_writable(self) -> Device:
        if self.corruptible and not self.writable:
            raise ValueError("corruptible: true needs writable: true (the integrity suite writes it first)")
        return self

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"device path {value!r} must be absolute, e.g. /dev/nvme0n1")
        return value


class Subsystem(_Model):
    """An NVMe subsystem: its NQN and the devices exported as its namespaces (NSID 1, 2, ... in order)."""

    nqn: str
    namespaces: tuple[str, ...]
    allow_any_host: bool = True
    allowed_hosts: tuple[str, ...] = ()

    @field_validator("nqn")
    @classmethod
    def _nqn(cls, value: str) -> str:
        problem = nqn_problem(value)
        if problem and not (value.startswith("nqn.") or SHORT_NQN_RE.match(value)):
            problem = "a short name (nvmet only) holds letters, digits, '.', '_', ':' and '-', 223 bytes at most"
        elif problem and value.startswith("nqn."):
            problem += " (NVMe spec; SPDK refuses it)"
        else:
            problem = None
        if problem:
            raise ValueError(f"{value!r}: {problem}")
        return value


class NvmeConnect(_Model):
    """Options for ``nvme connect`` on every initiator (the kernel's defaults when unset)."""

    nr_io_queues: int | None = Field(None, ge=1)
    queue_size: int | None = Field(None, ge=2)
    ctrl_loss_tmo: int | None = Field(None, ge=-1)
    keep_alive_tmo: int | None = Field(None, ge=1)
    iopolicy: Literal["numa", "round-robin", "queue-depth"] | None = None
    """Written to each of the fabric's subsystems on every initiator once connected
    (``/sys/class/nvme-subsystem/nvme-subsysN/iopolicy``, native multipath): which live path I/O goes down. Unset,
    the kernel's default (``nvme_core.iopolicy``, ``numa`` unless changed) stays. Nothing to set back: the subsystem
    is the connect's own (a subsystem already connected is refused) and goes with the disconnect. ``queue-depth``
    needs Linux 6.11 or later; an older kernel refuses it and the connect stops saying so."""


class NvmeExport(_Model):
    """How a target exports NVMe-oF: one port (trsvcid), its subsystems and the initiators' connect options."""

    port: int = Field(4420, ge=1, le=65535)
    subsystems: tuple[Subsystem, ...]
    saved_config: Path | None = None
    connect: NvmeConnect = NvmeConnect()


class SecretRef(_Model):
    """Where a secret is read -- a file on the machine running pytest, readable by its owner only, or an environment
    variable of the run -- never the secret itself: a lab file is shared, committed and shown in reports. Its
    ``repr`` names only the place; :meth:`reveal` reads the value when the plugin needs it."""

    file: str | None = None
    env: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _never_inline(cls, value: Any) -> Any:
        if isinstance(value, (str, int, float)):
            raise ValueError(
                "a secret is never written in the lab file; give {file: PATH} (a file readable by its owner only) "
                "or {env: NAME} (an environment variable of the run)"
            )
        return value

    @model_validator(mode="after")
    def _one_place(self) -> SecretRef:
        if (self.file is None) == (self.env is None):
            raise ValueError("give exactly one of file: PATH or env: NAME")
        return self

    @property
    def where(self) -> str:
        """The place, for messages (never the value)."""
        return f"file {self.file}" if self.file is not None else f"environment variable {self.env}"

    def problem(self) -> str | None:
        """Why the secret cannot be read, one clause with its fix; None when :meth:`reveal` will succeed."""
        if self.env is not None:
            value = os.environ.get(self.env)
            return None if value else f"environment variable {self.env} is not set (or empty); export it for the run"
        path = Path(os.path.expanduser(str(self.file)))
        try:
            mode = path.stat().st_mode
            text = path.read_text()
        except OSError as exc:
            return f"secret file {path} cannot be read ({exc.strerror}); create it, readable by its owner only"
        if mode & 0o077:
            return f"secret file {path} is readable by others (mode {mode & 0o777:o}); chmod 600 {path}"
        if not text.strip():
            return f"secret file {path} is empty; write the secret into it"
        return None

    def reveal(self) -> str:
        """The secret (a file's first line, or the variable's value); :class:`LabError` naming the place when it
        cannot be read."""
        problem = self.problem()
        if problem is not None:
            raise LabError(problem)
        if self.env is not None:
            return os.environ[self.env]
        return Path(os.path.expanduser(str(self.file))).read_text().splitlines()[0].strip()


class ChapCredentials(_Model):
    """One side's CHAP name and where its secret is read."""

    user: str = Field(min_length=1)
    secret: SecretRef


class IscsiChap(_Model):
    """iSCSI CHAP: ``initiator`` is what the target checks of every initiator (one-way); with ``target`` the
    initiators check the target too (mutual CHAP)."""

    initiator: ChapCredentials
    target: ChapCredentials | None = None

    @property
    def mutual(self) -> bool:
        return self.target is not None


class IscsiExport(_Model):
    """How a target exports iSCSI/iSER: the target IQN, its portal port and LUNs (device names, LUN 0, 1...),
    and the queue limits (open-iscsi's defaults, 32 per LUN and 128 per session, and LIO's command window of 64
    when unset): ``queue_depth`` and ``cmds_max`` go into every initiator's node record before login,
    ``cmdsn_depth`` is LIO's ``default_cmdsn_depth``."""

    iqn: str
    port: int = Field(3260, ge=1, le=65535)
    luns: tuple[str, ...]
    acls: tuple[str, ...] = ()
    chap: IscsiChap | None = None
    queue_depth: int | None = Field(None, ge=1, le=1024)
    cmds_max: int | None = Field(None, ge=2, le=2048)
    cmdsn_depth: int | None = Field(None, ge=1, le=512)

    @field_validator("cmds_max")
    @classmethod
    def _power_of_two(cls, value: int | None) -> int | None:
        if value is not None and value & (value - 1):
            raise ValueError(f"cmds_max {value} must be a power of two (open-iscsi rounds it otherwise), e.g. 256")
        return value

    @field_validator("iqn")
    @classmethod
    def _iqn(cls, value: str) -> str:
        if problem := iqn_problem(value):
            raise ValueError(f"{value!r}: {problem}")
        return value


VdiskHandler = Literal["vdisk_blockio", "vdisk_fileio"]


class ScstDevice(_Model):
    """How SCST serves one lab device: its vdisk handler and ``nv_cache`` (the target-wide ones when unset)."""

    handler: VdiskHandler | None = None
    nv_cache: bool | None = None


class ScstSettings(_Model):
    """SCST specifics (``kind: scst``), with SCST's own names where it has them.

    ``handler`` is the vdisk handler of every device (``vdisk_blockio`` for block devices; ``vdisk_fileio`` serves
    files too, as seed 000 served its OCR and voting LUNs) and ``nv_cache`` its cache mode; ``devices.NAME``
    overrides both for one device. ``queued_commands`` is the iSCSI target's QueuedCommands (SCST's 32 when
    unset; its README.iser advises 128 for iSER, as seed 000 set). ``daemon`` says whether iscsi-scstd runs
    already (``attach``) or the plugin starts it for the fabric and stops it afterwards (``start``; the
    ``binary`` it runs).
    """

    handler: VdiskHandler = "vdisk_blockio"
    nv_cache: bool = False
    devices: dict[str, ScstDevice] = {}
    queued_commands: int | None = Field(None, ge=1, le=2048)
    daemon: Literal["attach", "start"] = "attach"
    binary: str = "iscsi-scstd"


class TgtSettings(_Model):
    """tgt specifics (``kind: tgt``): the backing-store type of every LUN (``rdwr``: read/write through the page
    cache, tgt's default; ``aio``: Linux native AIO), tgtd's management ``control_port`` (tgtadm -C; 0 is the
    default daemon), and whether tgtd runs already (``daemon: attach``) or the plugin starts it on the portal for
    the fabric and stops it afterwards (``start``; the ``binary`` it runs)."""

    bstype: Literal["rdwr", "aio"] = "rdwr"
    control_port: int = Field(0, ge=0, le=32767)  # tgtd keeps it in a short
    daemon: Literal["attach", "start"] = "attach"
    binary: str = "tgtd"


SPDK_CORE_MASK_RE = re.compile(r"^(0x[0-9a-fA-F]+|\[[0-9]+([-,][0-9]+)*\])$")


SPDK_DEFAULT_CORE_MASK = "0x1"  # nvmf_tgt's reactors when the lab gives no core_mask (SPDK's own default too)


class SpdkSettings(_Model):
    """How the plugin drives SPDK's NVMe-oF target (``nvmf_tgt``) on the target host: it starts one (``start: true``,
    the default: ``binary``, ``core_mask``, the RPC socket, hugepages or ``no_huge`` with ``mem_size_mb``) or
    attaches to one already running (``start: false``); either way through its JSON-RPC socket, with SPDK's own
    ``rpc.py`` client where the host has one (``rpc_py``, else found on PATH or under /opt/spdk)."""

    start: bool = True
    binary: str | None = None
    rpc_py: str | None = None
    rpc_socket: str = "/var/tmp/spdk.sock"
    core_mask: str | None = None
    mem_size_mb: int | None = Field(None, ge=64, le=1048576)
    no_huge: bool = False
    no_pci: bool = True
    start_timeout: float = Field(60.0, gt=0)
    rpc_timeout: float = Field(60.0, gt=0)

    @field_validator("binary", "rpc_py", "rpc_socket")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(
                f"{value!r} must be an absolute path on the target host, e.g. /opt/spdk/build/bin/nvmf_tgt"
            )
        return value

    @field_validator("core_mask", mode="before")
    @classmethod
    def _mask_as_written(cls, value: Any) -> Any:
        # YAML reads an unquoted 0xff as the number 255: it was meant as the mask.
        return hex(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("core_mask")
    @classmethod
    def _core_mask(cls, value: str | None) -> str | None:
        if value is not None and not SPDK_CORE_MASK_RE.match(value):
            raise ValueError(f"core_mask {value!r} is not an SPDK core mask: a hex mask such as 0x1, or a list [0,2-3]")
        return value

    @model_validator(mode="after")
    def _start_keys(self) -> SpdkSettings:
        if not self.start:
            given = [k for k in ("binary", "core_mask", "mem_size_mb") if getattr(self, k) is not None]
            given += ["no_huge"] if self.no_huge else []
            if given:
                raise ValueError(
                    f"{', '.join(given)} only apply when the plugin starts nvmf_tgt; set start: true or drop them"
                )
        if self.no_huge and self.mem_size_mb is None:
            raise ValueError(
                "no_huge runs nvmf_tgt without hugepages and needs its memory size; set mem_size_mb, e.g. 512"
            )
        return self


class TargetModel(_Model):
    """A storage target: its name (default: its kind), its kind, the host it runs on, the protocols it serves
    and what it exports. The kinds and what each can serve are :data:`pytest_fabricqa.targets.REGISTRY`."""

    name: str = ""
    kind: str
    host: str | None = None
    address: str | None = None
    protocols: tuple[Protocol, ...]
    devices: dict[str, Device] = {}
    nvme: NvmeExport | None = None
    iscsi: IscsiExport | None = None
    scst: ScstSettings | None = None
    tgt: TgtSettings | None = None
    spdk: SpdkSettings | None = None
    workloads: tuple[str, ...] | None = None
    """The lab's workloads this target runs (default: every one the run selects): a lab that qualifies several
    targets per protocol can run a second target on fewer points, such as seed 000's nvmet-vs-SPDK pair."""
    integrity_block_sizes: tuple[Literal["4k", "8k", "1m"], ...] | None = None
    """The block sizes of the integrity suite's per-block-size checks this target runs (default: 4k, 8k and 1m);
    the reconnect, corruption and reservation checks run on every target whatever it says."""
    integrity_protocols: tuple[Protocol, ...] | None = None
    """The protocols this target runs the integrity suite over (default: every one it serves): a lab that
    qualifies several targets can prove a second target's data path over fewer transports."""
    paths: Literal["first", "all"] = "first"
    """Which of its host's storage ports the target serves on: ``first`` (one path), or ``all``: a listener on
    every storage port of the host, and every initiator connects over each (from its own port in the same
    subnet), so the kernel's native NVMe multipath sees every namespace through one controller per path, and
    multipathd makes one dm-multipath map of each iSCSI/iSER LUN's disks. ``all`` is nvmet's, SPDK's (a listener
    per path) and LIO's (a portal per path) for now."""
    name_prefix: str = ""
    """The mark on what the plugin makes for this target, and the name of its records. Unset, the lab gives one of
    its own (:func:`default_prefix`); two labs that set the same one on one host are refused at their first
    record."""

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        from pytest_fabricqa.core.kinds import REGISTRY  # the targets package imports this module

        if value not in REGISTRY:
            raise ValueError(f"{value!r} is not a target kind; allowed: {', '.join(REGISTRY)}")
        return value

    @field_validator("integrity_protocols")
    @classmethod
    def _integrity_protocols(cls, value: tuple[str, ...] | None, info: ValidationInfo) -> tuple[str, ...] | None:
        served = info.data.get("protocols", ())
        for protocol in value or ():
            if protocol not in served:
                raise ValueError(f"names {protocol}, which the target does not serve; it serves {', '.join(served)}")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value and not NAME_RE.match(value):
            raise ValueError(f"target name {value!r} may hold only letters, digits, '.', '_' and '-'")
        return value

    @property
    def place(self) -> str:
        """Where the target runs: its host, else an external array's address. The plugin keeps one fabric live per
        place (its targets share devices and portals), and under xdist each place's cases run in one worker, so
        fabrics of two places may be live at the same time on the same initiators."""
        return self.host or self.address or ""

    @property
    def reactor_cores(self) -> str:
        """The cores an SPDK target's reactors poll on: the core mask the plugin starts ``nvmf_tgt`` with (the
        lab's ``spdk.core_mask``, else SPDK's default); empty for other kinds and for an app the plugin attaches
        to (its mask is the app's own, not the lab's)."""
        if self.kind != "spdk":
            return ""
        settings = self.spdk or SpdkSettings()
        return (settings.core_mask or SPDK_DEFAULT_CORE_MASK) if settings.start else ""

    @model_validator(mode="after")
    def _default_name(self) -> TargetModel:
        if not self.name:
            object.__setattr__(self, "name", self.kind)  # frozen: the default is set once, at load time
        return self

    @model_validator(mode="after")
    def _exports(self) -> TargetModel:
        if any(p.startswith("nvme") for p in self.protocols) and self.nvme is None:
            raise ValueError("serves an NVMe protocol but has no 'nvme' section (port, subsystems)")
        if any(p in ("iscsi", "iser") for p in self.protocols) and self.iscsi is None:
            raise ValueError("serves iscsi or iser but has no 'iscsi' section (iqn, port, luns)")
        if self.iscsi is not None and self.iscsi.cmdsn_depth is not None and self.kind != "lio":
            raise ValueError(f"iscsi.cmdsn_depth is LIO's default_cmdsn_depth; a {self.kind} target cannot take it")
        for section in ("scst", "tgt", "spdk"):
            if getattr(self, section) is not None and self.kind != section:
                raise ValueError(
                    f"'{section}' holds settings of {section} targets; a {self.kind} target cannot take it"
                )
        if self.scst is not None:
            for name in self.scst.devices:
                if name not in self.devices:
                    raise ValueError(f"scst.devices names {name!r}, which is not under 'devices'")
        if self.kind == "external" and not self.address:
            raise ValueError("an external target needs 'address' (its portal on the storage network)")
        if self.kind != "external" and not self.host:
            raise ValueError(f"a {self.kind} target needs 'host' (the lab host it runs on)")
        used = [d for s in (self.nvme.subsystems if self.nvme else ()) for d in s.namespaces]
        used += list(self.iscsi.luns if self.iscsi else ())
        for name in used:
            if self.kind != "external" and name not in self.devices:
                raise ValueError(f"exports device {name!r}, which is not under 'devices'")
        return self

    @property
    def spdk_settings(self) -> SpdkSettings:
        """The ``spdk`` section, or its defaults (start nvmf_tgt, /var/tmp/spdk.sock) when the lab gives none."""
        return self.spdk if self.spdk is not None else SpdkSettings()


class IntegritySettings(_Model):
    """How much the integrity suite writes: each check's region per host and block size, in MiB (4 by default:
    1,024 blocks of 4 KiB, 512 of 8 KiB), and never fewer than 8 blocks (1 MiB blocks: 8 MiB), so that blocks are
    read back while the rest are still written. A real lab may verify far more; an emulated one, less."""

    region_mb: int = Field(4, ge=1, le=1048576)

    @property
    def region_bytes(self) -> int:
        """The region in bytes."""
        return self.region_mb << 20


class WatchSettings(_Model):
    """What every case that puts load on the target is watched for besides its own limits (issue 29).

    - ``kernel_allow``: regular expressions (Python's ``re``, searched in each line) for storage kernel lines the lab
      knows to be harmless. Otherwise a case that injected no fault fails when a host's kernel logged storage
      trouble during it (:data:`pytest_fabricqa.fabric.kernlog.TROUBLE`: an I/O error, a timeout, a controller
      reset, a lost connection, a failed path, a hung task, ...).
    - ``max_point_stall_s``: a performance point fails when one of its hosts completed no I/O for longer than this,
      read from fio's IOPS log (:func:`pytest_fabricqa.measure.point.point_stalls`). 1 s by default: a path lost
      and found again within the initiator's timeouts leaves no error and no kernel line, only this gap."""

    kernel_allow: tuple[str, ...] = ()
    max_point_stall_s: float = Field(1.0, gt=0, le=3600)
    fault_settle_s: float = Field(120.0, ge=0, le=3600)
    """How long after a fault case ended the kernel may still log its aftermath: such lines in the next cases are
    kept and shown, not judged. A target's keep-alive timer ends each controller a fault left behind up to its
    keep-alive timeout later (nvmet's 60 s on the virtual lab: "keep-alive timer (60 seconds) expired!" on vstor for
    six controllers in the last minute of the nvme-tcp pair's failover cases), and a host reconnects after its own."""

    @field_validator("kernel_allow")
    @classmethod
    def _patterns(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression ({exc})") from None
        return patterns

    @property
    def allowed(self) -> tuple[re.Pattern[str], ...]:
        """``kernel_allow`` compiled (case-insensitive, as the trouble patterns are)."""
        return tuple(re.compile(p, re.IGNORECASE) for p in self.kernel_allow)


class NvmeFailoverTimeouts(_Model):
    """What the failover suite writes to every NVMe-oF controller of its fabric for its own cases (None: leave
    the host's value); the old values are recorded on the host first and written back after (see
    :class:`pytest_fabricqa.faults.inject.PathTimeouts`). Linux 6.1 takes all three on a live controller."""

    io_timeout_s: int | None = Field(None, ge=1, le=3600)
    """``/sys/block/<path disk>/queue/io_timeout`` of each controller's path (nvme0c0n1): how long an I/O waits
    before the host starts error recovery. With the keep-alive this is how soon a dead path is noticed."""
    fast_io_fail_tmo_s: int | None = Field(None, ge=-1, le=3600)
    """``fast_io_fail_tmo``: how long after recovery started I/O fails instead of waiting for the path; -1 never
    (the kernel shows ``off``): I/O waits for the controller until ``ctrl_loss_tmo``."""
    reconnect_delay_s: int | None = Field(None, ge=1, le=3600)
    """``reconnect_delay``: how often a controller that lost its path tries again."""
    ctrl_loss_tmo_s: int | None = Field(None, ge=-1, le=86400)
    """``ctrl_loss_tmo``: how long a controller that lost its path is kept (reconnecting) before it is removed; -1
    for ever (queue-forever: with no path left, I/O waits). The kernel keeps it as a number of reconnects
    (``ctrl_loss_tmo / reconnect_delay``), so a new ``reconnect_delay`` alone would change it: it is always written
    after ``reconnect_delay`` -- this value, or (None) the loss time the controller had before the case."""


class IscsiFailoverTimeouts(_Model):
    """What the failover suite writes to every iSCSI/iSER session of its fabric (None: leave the host's value)."""

    recovery_tmo_s: int | None = Field(None, ge=1, le=3600)
    """The session's ``recovery_tmo`` (open-iscsi's ``replacement_timeout``): how long after the connection
    failed I/O fails instead of waiting for the session to come back."""


class FailoverSettings(_Model):
    """The failover suite (``suites/test_failover.py``): every initiator's storage link down at once, briefly
    (less than the path timeout: I/O must resume without an error) and for long (beyond it: I/O errors must be
    seen), while fio writes and verifies; and the path timeouts the suite applies for its cases."""

    targets: tuple[str, ...] | None = None
    """The targets the suite runs on, by name or kind (default: every target): ``[nvmet, lio]``."""

    protocols: tuple[Protocol, ...] | None = None
    """The protocols the suite runs on (default: every protocol of the run)."""

    outage_by: Literal["link-down", "drop"] = "link-down"
    """How a path goes down: ``link-down`` (``ip link set IFACE down``, as a pulled cable or a dead NIC port) or
    ``drop`` (every frame in and out dropped by tc while the link stays up, as a failed switch)."""

    def runs_on(self, target: TargetModel, protocol: str | None = None) -> bool:
        """Whether the suite runs on ``target`` (over ``protocol``)."""
        if protocol is not None and self.protocols is not None and protocol not in self.protocols:
            return False
        return self.targets is None or target.name in self.targets or target.kind in self.targets

    before_s: float = Field(3.0, gt=0, le=600)
    """Seconds of I/O before the fault (the pre-fault throughput recovery is measured against)."""
    after_s: float = Field(4.0, gt=0, le=600)
    """Seconds of I/O after the links are up again."""
    brief_down_s: float = Field(2.0, gt=0, le=3600)
    """How long the links stay down in the brief outage: less than the path timeout."""
    long_down_s: float = Field(16.0, gt=0, le=3600)
    """How long the links stay down in the long outage: more than the path timeout (detection + timeout)."""
    one_path_down_s: float = Field(15.0, gt=0, le=3600)
    """How long, at the most, the path carrying the I/O stays down in the one-path and target-side outages
    (faults a, b, c, for targets serving on several paths): long enough for the initiator to give the path up and
    move the I/O to another. The fault ends sooner once every host's I/O is back to its rate on the remaining paths
    in two samples in a row (``outage.SETTLED_SAMPLES``)."""
    recover_s: float = Field(60.0, gt=0, le=3600)
    """After the long outage: how long every initiator may take to read its device again."""
    region_mb: int = Field(1, ge=1, le=1048576)
    """Each initiator's region (its own, at a distinct offset), written over and over while the case runs."""
    block_size: Literal["4k", "8k"] = "4k"
    rate_iops: int | None = Field(50, ge=1, le=10_000_000)
    """Each host's fio writes at most this many IOPS during a failover case; ``null``: as fast as the fabric takes
    them. 50: ~5 completions in every 100 ms window of fio's log, so a window without one is a stall, and load light
    enough that an emulated guest still answers the case's own commands (at 1,000 the virtual lab's guests were
    saturated: a command took 2-4 s instead of 0.3 and a one-path case 80 s instead of 51). Capped, recovery equals
    the first I/O: a surviving path that is slower than the lost one still carries the capped rate. Uncapped, such a
    path shows as recovery later than the first I/O -- once the fault is undone -- or none (below the 90% of the
    pre-fault rate; shown on the virtual lab, tests/vlab/test_failover_verdict_vlab.py). Uncapped I/O also slows the
    fault's own commands on a loaded host: raise ``fault_reach_s`` with it (the virtual lab's test sets 8 s)."""
    fault_reach_s: float = Field(3.0, ge=0, le=60)
    """A stall that begins this long after a fault's start is still the fault's: I/O already on its way (socket
    buffers, a controller's queue) completes for a moment after a path is lost (120 ms in a recorded run), and the
    fault's start is read just before its command, which takes up to ~1.5 s on an emulated guest. A real lab whose
    commands answer at once may set it lower, so a later, unrelated gap is not taken for the fault's."""
    settled_share: float = Field(0.6, gt=0, le=1)
    """A one-path or target-side fault ends early once the remaining paths complete at least this share of what
    every path completed in a sample before the fault, two samples in a row: fio runs at a fixed rate and 2 s
    samples of it vary by a quarter under emulation (174-292 after a pre-fault 223, nvme-tcp on the virtual lab,
    2026-12-03). A lab whose surviving paths are known to be slower sets what they reach."""
    failback_wait_s: float = Field(30.0, gt=0, le=3600)
    """After a one-path or target-side fault is undone: how long the faulted path is watched for I/O again, where
    it shared the host's I/O with another path before the fault (a round-robin or service-time policy over every
    path: it must carry I/O again, ``failback_s``). Where it carried the host's I/O alone (NVMe's numa policy, a
    dm-multipath failover group), one sample is read and reported: whether I/O goes back is the policy's choice."""
    flap_cycles: int = Field(3, ge=2, le=20)
    """Path flapping (``path-flapping``): how many times in a row the path carrying the I/O is lost and given back
    under one run, its failback watched between (SPDK's host/failover.sh fails over three times)."""
    long_outage: Literal["fail-fast", "queue"] = "fail-fast"
    """What the hosts do with every path gone for long, the lab's choice (both are valid for RAC):
    ``fail-fast``, I/O fails once the path timeout ran out, so the long outage must show I/O errors on every host;
    ``queue`` (queue-forever: NVMe ``fast_io_fail_tmo`` and ``ctrl_loss_tmo`` off, dm-multipath
    ``no_path_retry queue``), I/O waits for a path, so it must show no error, resume after the restore and verify.
    For ``queue`` the NVMe controllers' values in force are read before the fault; dm-multipath's are the lab's
    ``multipath.dm_conf``."""
    nvme: NvmeFailoverTimeouts = NvmeFailoverTimeouts()
    iscsi: IscsiFailoverTimeouts = IscsiFailoverTimeouts()

    @model_validator(mode="after")
    def _outages(self) -> FailoverSettings:
        if self.brief_down_s >= self.long_down_s:
            raise ValueError(
                f"brief_down_s ({self.brief_down_s:g}) must be shorter than long_down_s ({self.long_down_s:g})"
            )
        if self.long_outage == "queue":
            for key in ("fast_io_fail_tmo_s", "ctrl_loss_tmo_s"):
                value = getattr(self.nvme, key)
                if value not in (None, -1):
                    raise ValueError(
                        f"long_outage queue waits for a path for ever, but nvme.{key} is {value}: set it to -1 "
                        "(off) or leave it out, or set long_outage: fail-fast"
                    )
        return self


Seconds = Annotated[int, Field(ge=0, le=3600)]
OFF = "off"


def _seconds(value: Any, *, off: bool, most: int = 3600) -> Any:
    """A timeout in whole seconds from 0 to ``most``, or ``off`` where the kernel has it (it shows -1 so).

    YAML 1.1 reads an unquoted ``off``/``no`` as false and ``on``/``yes`` as true, which pydantic would take for 0
    and 1: false is the kernel's ``off`` where it has one, any other yes/no is refused. Checked here so that a
    value neither a number nor ``off`` is one message, not one per member of ``int | "off"``."""
    allowed = f"whole seconds from 0 to {most}" + (", or off" if off else "")
    if value is None:  # not checked (the default; also what a dumped lab holds, and loads back)
        return value
    if isinstance(value, bool):
        if off and value is False:
            return OFF
        raise ValueError(f"{str(value).lower()} (YAML's reading of yes/no/on/off) is not {allowed}")
    if off and value == OFF:
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        value = int(value)
    if not isinstance(value, int) or not 0 <= value <= most:
        hint = " (the kernel shows -1 as off)" if off and isinstance(value, int) and value < 0 else ""
        raise ValueError(f"{value!r} is not {allowed}{hint}")
    return value


class NvmePathSettings(_Model):
    """What every initiator shows for the NVMe-oF fabric's controllers while it is connected (checked by the
    connectivity suite, read-only: nothing is set). None: not checked, the value is still read and recorded.
    ``failover.nvme`` changes some of these for the failover cases only; these are the connected defaults."""

    native: bool | None = None
    """``/sys/module/nvme_core/parameters/multipath`` (Y/N, the ``nvme_core.multipath`` module parameter): whether
    the kernel's native multipath merges a namespace's paths into one ``/dev/nvmeXnY``. Off, every path is a block
    device of its own and dm-multipath has to group them."""
    iopolicy: Literal["numa", "round-robin", "queue-depth"] | None = None
    """``/sys/class/nvme-subsystem/nvme-subsysN/iopolicy`` of each of the fabric's subsystems: which live path
    native multipath sends I/O down (``numa``: the nearest; ``round-robin``; ``queue-depth``: the least busy,
    Linux 6.11 and later). The module parameter ``nvme_core.iopolicy`` is only the default for new subsystems."""
    ctrl_loss_tmo_s: int | Literal["off"] | None = None
    """``/sys/class/nvme/nvmeX/ctrl_loss_tmo`` (``nvme connect --ctrl-loss-tmo``): how long after a controller
    lost its path the host keeps reconnecting before it deletes the controller, failing its queued I/O (and, with
    no other path, the namespace). ``off``: reconnect for ever, I/O waits for ever without another path. The kernel
    keeps it as a number of reconnects and shows that times reconnect_delay."""
    reconnect_delay_s: Annotated[int, Field(ge=1, le=3600)] | None = None
    """``/sys/class/nvme/nvmeX/reconnect_delay`` (``--reconnect-delay``): how often the host tries to reconnect."""
    fast_io_fail_tmo_s: int | Literal["off"] | None = None
    """``/sys/class/nvme/nvmeX/fast_io_fail_tmo`` (``--fast_io_fail_tmo``): how long after the path was lost I/O
    fails instead of waiting for a reconnect, while the host goes on reconnecting. ``off``: I/O waits until
    ctrl_loss_tmo (native multipath sends it down another live path at once either way)."""

    @field_validator("ctrl_loss_tmo_s", mode="before")
    @classmethod
    def _loss(cls, value: Any) -> Any:
        return _seconds(value, off=True, most=86400)

    @field_validator("fast_io_fail_tmo_s", mode="before")
    @classmethod
    def _fail(cls, value: Any) -> Any:
        return _seconds(value, off=True)

    @field_validator("reconnect_delay_s", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        return _seconds(value, off=False)

    @model_validator(mode="after")
    def _shown_as_reconnects(self) -> NvmePathSettings:
        loss, delay = self.ctrl_loss_tmo_s, self.reconnect_delay_s
        if isinstance(loss, int) and delay is not None and loss % delay:
            shown = -(-loss // delay) * delay
            raise ValueError(
                f"ctrl_loss_tmo_s {loss} is never shown with reconnect_delay_s {delay}: the kernel keeps "
                f"{shown // delay} reconnects and shows {shown}; expect {shown}"
            )
        return self


class IscsiPathSettings(_Model):
    """What every initiator shows for the iSCSI or iSER fabric's sessions while logged in (checked by the
    connectivity suite, read-only). None: not checked, the value is still read and recorded. Keys are the
    kernel's names, as ``failover.iscsi``'s; open-iscsi's node settings (iscsid.conf) give their values."""

    recovery_tmo_s: Seconds | None = None
    """``/sys/class/iscsi_session/sessionN/recovery_tmo`` (``node.session.timeo.replacement_timeout``): how long
    after the connection failed the session holds I/O for a new login before it fails the I/O, so that
    dm-multipath can send it down another path."""
    recv_tmo_s: Seconds | None = None
    """``/sys/class/iscsi_connection/connectionN:C/recv_tmo`` (``node.conn[0].timeo.noop_out_interval``): after
    how long without a PDU from the target the initiator sends a nop-out (0: never)."""
    ping_tmo_s: Annotated[int, Field(ge=1, le=3600)] | None = None
    """``/sys/class/iscsi_connection/connectionN:C/ping_tmo`` (``node.conn[0].timeo.noop_out_timeout``): how long
    a nop-out may go unanswered before the connection is failed; recovery_tmo starts then."""

    @field_validator("recovery_tmo_s", "recv_tmo_s", "ping_tmo_s", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        return _seconds(value, off=False)


class DmSettings(_Model):
    """What dm-multipath's maps of a target served over several paths show (iSCSI, iSER): checked with the other
    path settings. multipathd must run and each map hold one active path per target portal whatever is set here."""

    queue_if_no_path: bool | None = None
    """Whether each map queues I/O once every path has failed (the table's ``queue_if_no_path`` feature, which
    multipath sets for a ``no_path_retry`` of ``queue`` or a number, and drops for ``fail``). None: not checked."""


_DM_WORD = re.compile(r"[a-z][a-z_]*")
_DM_VALUE = re.compile(r'[A-Za-z0-9_.:/+-]+|"[^"\n{}]*"')


class DmConf(_Model):
    """multipath.conf sections fabricqa writes on every initiator while a SCSI fabric over several paths is
    connected, as a file of its own in multipath-tools' ``config_dir`` (``/etc/multipath/conf.d/<name_prefix>.conf``,
    then ``multipathd reconfigure``), removed with the fabric: ``defaults`` (e.g. ``polling_interval``) and
    ``overrides`` (over every device, the built-in hardware table's entries too: ``no_path_retry``,
    ``fast_io_fail_tmo``, ``dev_loss_tmo``). Keywords and values as multipath.conf spells them."""

    defaults: dict[str, str | int] = {}
    overrides: dict[str, str | int] = {}

    @field_validator("defaults", "overrides")
    @classmethod
    def _plain(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for key, item in value.items():
            if not _DM_WORD.fullmatch(key):
                raise ValueError(f"{key!r} is not a multipath.conf keyword (lower case letters and '_')")
            if not _DM_VALUE.fullmatch(str(item)):
                raise ValueError(f"{key}: {item!r} is not one multipath.conf value (a word, a number, or quoted)")
        return value

    def __bool__(self) -> bool:
        return bool(self.defaults or self.overrides)


class MultipathSettings(_Model):
    """The path settings every initiator should show while a fabric is connected: what decides whether a lost
    path stalls I/O, fails it or sends it down another path (the connectivity suite reads them, never sets them).
    dm-multipath's maps: ``dm``. The one thing written: ``dm_conf``, only when the lab gives it."""

    nvme: NvmePathSettings = NvmePathSettings()
    iscsi: IscsiPathSettings = IscsiPathSettings()
    dm: DmSettings = DmSettings()
    dm_conf: DmConf = DmConf()
    iscsi_dm: IscsiPathSettings = IscsiPathSettings()
    """The same keys for the sessions of a target served over several paths (``paths: all``), whose LUNs
    dm-multipath maps: multipathd writes each path's session ``recovery_tmo`` from its own ``fast_io_fail_tmo``
    (5 s unless multipath.conf says otherwise), so those sessions show that instead of open-iscsi's
    replacement_timeout. A key left out here falls back to ``iscsi``'s."""

    def iscsi_for(self, paths: int) -> tuple[IscsiPathSettings, str]:
        """The session settings expected over ``paths`` paths, and the section they come from (for messages)."""
        if paths < 2:
            return self.iscsi, "iscsi"
        merged = self.iscsi.model_copy(update=self.iscsi_dm.model_dump(exclude_none=True))
        return merged, "iscsi_dm"


class VlabDrive(_Model):
    """An emulated drive in a virtual-lab guest: ``nvme`` (-device nvme, /dev/nvmeXn1) or ``virtio`` (/dev/vdX)."""

    kind: Literal["nvme", "virtio", "ram"] = "nvme"
    size_mb: int = Field(ge=16, le=65536)


class VlabGuest(_Model):
    """How the virtual lab builds the guest behind a host (only in virtual labs)."""

    memory_mb: int = Field(1024, ge=256)
    cpus: int = Field(1, ge=1, le=8)
    hugepages_mb: int = Field(0, ge=0, le=65536)
    """2 MiB hugepages the guest reserves at boot (hugetlbfs on /dev/hugepages), as an SPDK host's set-up does:
    SPDK's RDMA transport cannot register memory without them."""
    drives: dict[str, VlabDrive] = {}


class LabModel(_Model):
    """A whole lab file."""

    name: str
    description: str = ""
    ssh: SSHSettings = SSHSettings()
    hosts: dict[str, HostModel]
    network: NetworkModel
    targets: tuple[TargetModel, ...]
    protocols: tuple[Protocol, ...]
    thresholds: dict[str, dict[str, Thresholds]] = {}
    workloads: dict[str, Any] = {}
    """Overrides of the workload matrix, validated here by :func:`pytest_fabricqa.core.workloads.load_matrix`."""
    tolerances: dict[str, float] = {}
    database: OracleSettings | None = None
    oracle_profile: OracleProfile = OracleProfile()
    """The database's I/O mix for the ``oracle`` profile (:mod:`pytest_fabricqa.oracle.profile`)."""
    integrity: IntegritySettings = IntegritySettings()
    failover: FailoverSettings = FailoverSettings()
    watch: WatchSettings = WatchSettings()
    multipath: MultipathSettings = MultipathSettings()
    vlab: dict[str, VlabGuest] | None = None

    @field_validator("hosts")
    @classmethod
    def _host_names(cls, hosts: dict[str, HostModel]) -> dict[str, HostModel]:
        if not hosts:
            raise ValueError("a lab needs at least one host")
        for name in hosts:
            if not NAME_RE.match(name):
                raise ValueError(f"host name {name!r} may hold only letters, digits, '.', '_' and '-'")
        return hosts

    @field_validator("workloads")
    @classmethod
    def _workload_overrides(cls, workloads: dict[str, Any]) -> dict[str, Any]:
        load_matrix(workloads or None)  # a MatrixError is a ValueError: pydantic reports it under 'workloads'
        return workloads

    @model_validator(mode="after")
    def _consistent(self) -> LabModel:
        for target in self.targets:
            if target.host is not None and target.host not in self.hosts:
                raise ValueError(f"target host {target.host!r} is not under 'hosts' ({', '.join(self.hosts)})")
        for protocol in self.protocols:
            if not any(protocol in t.protocols for t in self.targets):
                raise ValueError(f"protocol {protocol!r} is declared but no target serves it")
        for key in self.thresholds:
            if key != "*" and key not in PROTOCOLS:
                raise ValueError(f"thresholds key {key!r} is not a protocol; use one of {', '.join(PROTOCOLS)} or '*'")
        from pytest_fabricqa.core.kinds import REGISTRY  # the targets package imports this module

        known = [*dict.fromkeys([*(t.name for t in self.targets), *REGISTRY])]
        for name in self.failover.targets or ():
            if name not in known:
                raise ValueError(
                    f"failover.targets: {name!r} is neither a target of the lab nor a target kind ({', '.join(known)})"
                )
        if self.vlab is not None:
            for name in self.vlab:
                if name not in self.hosts:
                    raise ValueError(f"vlab guest {name!r} is not under 'hosts'")
        places = list(dict.fromkeys(t.place for t in self.targets))
        owned = tuple(
            t
            if t.name_prefix
            else t.model_copy(update={"name_prefix": default_prefix(self.name, t.place if len(places) > 1 else "")})
            for t in self.targets
        )
        object.__setattr__(self, "targets", owned)  # frozen: set once, here, before anyone reads it
        return self

    def thresholds_table(self) -> dict[str, dict[str, dict[str, float | None]]]:
        """The thresholds as plain mappings (protocol or "*" -> workload pattern -> limits the entry gives);
        an explicit ``null`` stays, so it lifts the limit a less specific entry sets."""
        return {
            protocol: {pattern: limits.given() for pattern, limits in table.items()}
            for protocol, table in self.thresholds.items()
        }

    def unmatched_thresholds(self) -> list[tuple[tuple[str, ...], str]]:
        """Each threshold entry whose workload pattern matches no workload of the selected sets: its key path
        and why (with the names it could mean)."""
        from pytest_fabricqa.core.cases import OUTAGES, PARITY  # the failover cases' names are their threshold keys

        names = [*selected_names(self.workloads or None), *OUTAGES, PARITY]
        found: list[tuple[tuple[str, ...], str]] = []
        for protocol, table in self.thresholds.items():
            for pattern in table:
                problem = unmatched(pattern, names)
                if problem is not None:
                    found.append((("thresholds", protocol, pattern), problem))
        return found

    # -- queries used by fixtures ----------------------------------------------------------------------
    def hosts_with(self, role: str) -> list[str]:
        """Names of the hosts that have ``role``, in file order."""
        return [name for name, host in self.hosts.items() if role in host.roles]

    def targets_for(self, protocol: str) -> list[TargetModel]:
        """Every target serving ``protocol``, in file order."""
        return [t for t in self.targets if protocol in t.protocols]

    def target_for(self, protocol: str, name: str | None = None) -> TargetModel:
        """The target called ``name`` serving ``protocol``; without ``name``, the first target serving it (what a
        lab with one target per protocol means)."""
        for target in self.targets_for(protocol):
            if name is None or target.name == name:
                return target
        which = f"no target {name!r}" if name else "no target"
        raise LabError(f"lab {self.name!r}: {which} serves {protocol}")

    def target_addresses(self, target: TargetModel) -> tuple[str, ...]:
        """Every portal address of the target, one per path: its storage ports' with ``paths: all``, else the one
        :meth:`target_address`."""
        if target.paths == "all" and target.host is not None and self.hosts[target.host].storage:
            return tuple(str(p.address) for p in self.hosts[target.host].storage)
        return (self.target_address(target),)

    def local_port(self, host: str, remote: str) -> str | None:
        """``host``'s storage address in the same subnet (``network.prefix_len``) as ``remote``, or None."""
        net = ipaddress.ip_interface(f"{remote}/{self.network.prefix_len}").network
        return next((str(p.address) for p in self.hosts[host].storage if p.address in net), None)

    def target_address(self, target: TargetModel) -> str:
        """The portal address initiators use: the external address, or the target host's storage address."""
        if target.address:
            return target.address
        assert target.host is not None
        host = self.hosts[target.host]
        if host.storage_link is None:
            raise LabError(f"lab {self.name!r}: target host {target.host!r} has no 'storage' address")
        return str(host.storage_link.address)


# -- loading ---------------------------------------------------------------------------------------------


def iter_protocol_names(values: list[str]) -> Iterator[str]:
    """Split repeated and comma-separated ``--protocol`` values into names, keeping order, no repeats."""
    seen: set[str] = set()
    for value in values:
        for name in (v.strip() for v in value.split(",")):
            if name and name not in seen:
                seen.add(name)
                yield name


def iface_name(model: TargetModel, transport: str) -> str:
    """The open-iscsi iface record this plugin creates for a target and transport (its mark on the initiator)."""
    return f"{model.name_prefix}_{transport}"
