"""Plain settings for the Oracle checks, filled by the lab model (no pydantic here on purpose).

Proposed lab-file section (the lab model validates it and builds these dataclasses)::

    database:
      asm:                          # where GV$ASM_* are read (SYSASM)
        host: el72h1-vip            # or descriptor: "(DESCRIPTION=...)" instead of host/port/service_name
        port: 1521
        service_name: +ASM
        instance_name: +ASM1        # optional: pin one ASM instance
        wallet_location: /etc/fabricqa/wallet   # optional; password then comes from the wallet
        config_dir: /etc/fabricqa/tns           # optional tnsnames.ora / sqlnet.ora folder
        user_env: FABRICQA_ASM_USER             # optional: names of the variables holding credentials
        password_env: FABRICQA_ASM_PASSWORD
      db:                           # where CALIBRATE_IO runs (SYSDBA), same keys as asm
        host: el72h1-vip
        port: 1521
        service_name: orcl
      asmcmd:                       # optional: read health with asmcmd over SSH instead of SQL
        host: el72h1                # lab host name
        user: grid
        oracle_home: /u01/app/19.0.0/grid
        oracle_sid: +ASM1
      diskgroups: [NVME]
      instances: [1, 2]             # INST_IDs every disk group must be mounted on
      disk_paths: [/dev/nvme1n1, /dev/nvme2n1]  # the lab's devices as ASM sees them (V$ASM_DISK.PATH;
                                    # ORCL:NAME for ASMLib, AFD:NAME for the filter driver): watched in group 0
      driver_mode: thin             # or thick: through Oracle Client libraries, for databases thin mode cannot
      lib_dir: /opt/oracle/instantclient_19_25   # reach (before 12.1, 10G password verifiers); optional
      misscount: 30                 # optional: Oracle CSS misscount and disktimeout in seconds (crsctl get css
      disktimeout: 200              # misscount / disktimeout; 30 and 200 are Oracle's defaults): the budgets
                                    # a path failover's I/O stall is reported against (failover.py)
      calibrate:
        num_physical_disks: 2
        max_latency_ms: 20
        timeout_s: 3600
        thresholds: {min_iops: 100000, min_mbps: 3000, max_latency_ms: 2}

Credentials never live in the lab file: only the names of the environment variables that hold them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

DEFAULT_USER_ENV = "FABRICQA_ORACLE_USER"
DEFAULT_PASSWORD_ENV = "FABRICQA_ORACLE_PASSWORD"
DEFAULT_MISSCOUNT_S = 30
"""Oracle CSS ``misscount`` by default (Linux): seconds of missed network heartbeat before a node is evicted; while
the cluster reconfigures, a voting-disk I/O may take at most misscount less reboottime (the short disk timeout)."""
DEFAULT_DISKTIMEOUT_S = 200
"""Oracle CSS ``disktimeout`` by default: seconds a voting-disk I/O may take before the node is evicted (the long
disk timeout, outside a reconfiguration)."""


@dataclass(frozen=True)
class ConnectSettings:
    """Where and how to connect: host/port/service_name, or a full connect ``descriptor``."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}  # the lab model rejects unknown keys

    host: str | None = None
    port: int = 1521
    service_name: str | None = None
    instance_name: str | None = None
    descriptor: str | None = None
    wallet_location: str | None = None
    config_dir: str | None = None
    user_env: str = DEFAULT_USER_ENV
    password_env: str = DEFAULT_PASSWORD_ENV
    wallet_password_env: str | None = None

    def describe(self) -> str:
        """Where this connects, for messages (never any credential)."""
        if self.descriptor:
            return "the configured connect descriptor"
        target = f"{self.host}:{self.port}/{self.service_name}"
        return f"{target} (instance {self.instance_name})" if self.instance_name else target


@dataclass(frozen=True)
class AsmcmdSettings:
    """How to run asmcmd on a lab host: as which OS user, with which ORACLE_HOME and ORACLE_SID."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}  # the lab model rejects unknown keys

    host: str
    oracle_home: str
    oracle_sid: str = "+ASM"
    user: str | None = "grid"


@dataclass(frozen=True)
class CalibrateThresholds:
    """Gates on a CALIBRATE_IO result; None means not gated."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}  # the lab model rejects unknown keys

    min_iops: int | None = None
    min_mbps: int | None = None
    max_latency_ms: int | None = None


@dataclass(frozen=True)
class CalibrateSettings:
    """Inputs of DBMS_RESOURCE_MANAGER.CALIBRATE_IO and the gates on its result."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}  # the lab model rejects unknown keys

    num_physical_disks: int = 1
    max_latency_ms: int = 20
    timeout_s: float = 3600.0
    thresholds: CalibrateThresholds = field(default_factory=CalibrateThresholds)


@dataclass(frozen=True)
class EventLimits:
    """Ceilings on one wait event's figures over a measured window, per instance, in milliseconds (as AWR shows
    them): the average, the 99th percentile and the longest wait (both read from V$EVENT_HISTOGRAM's buckets, so a
    bucket's upper bound: "< 8 ms")."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}  # the lab model rejects unknown keys

    avg_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


DEFAULT_WAIT_EVENTS = (
    "log file sync",
    "log file parallel write",
    "db file sequential read",
    "db file scattered read",
    "db file parallel write",
    "direct path read",
    "direct path write",
)
"""The wait events a DBA reads for storage, in AWR's names: redo (the commit's log file sync, LGWR's log file
parallel write), single- and multi-block reads, DBWR's writes and direct path I/O."""


@dataclass(frozen=True)
class WaitSettings:
    """The database's own wait figures around a load (``database.waits``): V$SYSTEM_EVENT and V$EVENT_HISTOGRAM of
    every instance (GV$), read before and after, their deltas judged per event and instance. The load is the
    user's: ``command`` run on lab host ``host`` over SSH (Swingbench's charbench, a batch job), or, without one,
    ``window_s`` seconds of whatever the database is doing."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}  # the lab model rejects unknown keys

    events: tuple[str, ...] = DEFAULT_WAIT_EVENTS
    limits: dict[str, EventLimits] = field(default_factory=dict)
    host: str | None = None
    command: str | None = None
    window_s: float = 300.0
    timeout_s: float = 7200.0


@dataclass(frozen=True)
class OracleSettings:
    """Everything the Oracle checks need from the lab's ``database:`` section."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}  # the lab model rejects unknown keys

    diskgroups: tuple[str, ...]
    asm: ConnectSettings | None = None
    db: ConnectSettings | None = None
    asmcmd: AsmcmdSettings | None = None
    instances: tuple[int, ...] | None = None
    calibrate: CalibrateSettings | None = None
    waits: WaitSettings | None = None
    disk_paths: tuple[str, ...] = ()
    driver_mode: Literal["thin", "thick"] = "thin"
    lib_dir: str | None = None
    misscount: int = DEFAULT_MISSCOUNT_S
    """CSS misscount of the cluster, in seconds (``crsctl get css misscount``)."""
    disktimeout: int = DEFAULT_DISKTIMEOUT_S
    """CSS disktimeout of the cluster, in seconds (``crsctl get css disktimeout``)."""


@dataclass(frozen=True)
class RedoStream:
    """LGWR's redo writes ("log file parallel write"): sequential, synchronous (O_DIRECT with O_DSYNC, or an
    fdatasync after each write), one at a time, mostly small: commits of a few KiB, and larger writes when many
    sessions commit at once (``bssplit``, fio's size/percent list)."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}

    bssplit: str = "4k/45:8k/20:16k/15:32k/12:64k/8"
    sync: Literal["dsync", "fdatasync"] = "dsync"
    region_mb: int = 256


@dataclass(frozen=True)
class ReadStream:
    """Foreground sessions' single-block reads ("db file sequential read"): random, block size, one at a time per
    session, ``sessions`` of them per node."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}

    bs: str = "8k"
    sessions: int = 4


@dataclass(frozen=True)
class DbwrStream:
    """DBWR's writes of dirty buffers ("db file parallel write"): random, block size, asynchronous, submitted in
    batches of ``batch`` up to ``iodepth`` in flight, at ``rate_iops`` per node at the most (0: as fast as the
    storage takes them)."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}

    bs: str = "8k"
    iodepth: int = 16
    batch: int = 8
    rate_iops: int = 0


@dataclass(frozen=True)
class MultiblockStream:
    """Full scans' multiblock reads ("db file scattered read"; "direct path read" for parallel query): sequential,
    1 MiB (db_file_multiblock_read_count 128 of 8 KiB), low concurrency."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}

    bs: str = "1m"
    iodepth: int = 1


@dataclass(frozen=True)
class OracleProfile:
    """The database's I/O mix (issue 32, ``oracle_profile``): four streams at once from every initiator, each node
    on regions of its own (each RAC instance has its own redo thread and its own part of the data): redo, foreground
    reads, DBWR and multiblock reads, for ``runtime_s`` seconds; each stream's figures are a wait event's, held to
    ``limits`` (event name -> ceilings)."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}

    redo: RedoStream = field(default_factory=RedoStream)
    reads: ReadStream = field(default_factory=ReadStream)
    dbwr: DbwrStream = field(default_factory=DbwrStream)
    multiblock: MultiblockStream = field(default_factory=MultiblockStream)
    data_mb: int = 1024
    runtime_s: int = 60
    limits: dict[str, EventLimits] = field(default_factory=dict)
    targets: tuple[str, ...] = ()
    """The target names it runs against (empty: every target): a lab of many targets per protocol may run it on
    one of each."""
    scaling: bool = True
    """Run it from the first 1, 2, ... N initiators (lab-file order, seed 003's 1 to 4 nodes) before all N, and report
    database IOPS, efficiency against linear, the knee and each event's latency per step."""
    min_scaling_efficiency: float | None = None
    """The least efficiency IOPS(n) / (n x IOPS(1)) a step may show; none: shown, not judged."""
