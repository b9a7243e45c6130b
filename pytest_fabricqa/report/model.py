"""The results model: what a qualification run measured and decided, and its JSON form.

The plugin fills a :class:`Run` while the session runs; the HTML report, the terminal summary, the
protocol comparison and the regression gate only read it. The JSON form carries a schema version
(``fabricqa-results/1``) so a baseline written by an older or newer plugin is refused with a clear
message instead of being compared field by field by accident.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import Field, PlainSerializer, PlainValidator, Strict, TypeAdapter, ValidationError

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.core.metrics import METRICS
from pytest_fabricqa.core.workloads import Workload

SCHEMA = "fabricqa-results/1"

Verdict = Literal["passed", "failed", "skipped", "error"]
SuiteKind = Literal["prerequisite", "connectivity", "performance", "oracle", "integrity", "failover"]
VERDICTS: tuple[str, ...] = get_args(Verdict)
SUITE_KINDS: tuple[str, ...] = get_args(SuiteKind)

Number = Annotated[float, Strict()]
"""A number in a results file: an integer or a float, never a string or a boolean."""
Figures = dict[str, Number]
"""Metric name (one of :data:`METRICS`) to value; a metric fio did not report is absent, not zero."""
Timestamp = Annotated[datetime, PlainSerializer(datetime.isoformat, return_type=str)]
"""Written as Python's ``isoformat`` (``+00:00``, not pydantic's ``Z``), as every results file has been."""


def _workload(value: object) -> Workload:
    if isinstance(value, Workload):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an object, found {value!r}")
    return Workload.from_dict(value, "")


# The workload keeps its own JSON form (runtime_s, options), defined once in workloads.py.
WorkloadField = Annotated[Workload, PlainValidator(_workload), PlainSerializer(Workload.to_dict)]
WhenSet = Field(exclude_if=lambda value: not value)
"""Written only when known, so files from before these were recorded read and rewrite byte for byte."""


class ResultsFileError(UserError):
    """A results file cannot be used: unreadable, not JSON, another schema, or a field of the wrong shape."""

    def __init__(self, path: Path | str, why: str) -> None:
        self.path = Path(path)
        self.why = why
        super().__init__(f"{path}: {why}")


def check_figures(figures: Mapping[str, float], where: str = "figures") -> None:
    """Raise ``ValueError`` naming the key when a metric name is unknown or a value is not a finite number."""
    for name, value in figures.items():
        if name not in METRICS:
            raise ValueError(f"{where}: unknown metric {name!r}; known metrics are {', '.join(METRICS)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{where}.{name}: {value!r} is not a finite number")


@dataclass(frozen=True)
class Check:
    """One named check inside a case that is not a fio figure: an ASM disk group state, a kernel module."""

    name: str
    verdict: Verdict
    detail: str = ""


@dataclass(frozen=True)
class Mismatch:
    """One block a verify found wrong: where (host, device, byte offset, length) and what was expected."""

    host: str
    device: str
    offset: int
    length: int
    what: str
    """fio's words: ``crc32c: verify failed``, ``verify: bad magic header``."""
    expected: str = ""
    received: str = ""


@dataclass(frozen=True)
class Write:
    """One write of an integrity case: who wrote the region at ``region_offset``, its number among that region's
    writes, and its generation (what the region's read-back wanted until a later write)."""

    host: str
    region_offset: int
    number: int
    generation: int


@dataclass(frozen=True)
class Integrity:
    """What an integrity case wrote and read back (:mod:`pytest_fabricqa.integrity.checks`)."""

    bytes_written: int = 0
    bytes_verified: int = 0
    """The bytes fio checked, not merely read (:func:`pytest_fabricqa.fio.verify.checked_bytes` says how)."""
    mismatches: tuple[Mismatch, ...] = ()
    expected_mismatches: int = 0
    """Blocks the case changed on purpose (the corruption case): found there, they are the expected detection."""
    fio_errors: int = 0
    """fio's own count of failed verifies (``total_err``), beside the mismatches read from its messages."""
    writes: tuple[Write, ...] = ()
    """Every write the case made, with its generation (:mod:`pytest_fabricqa.fio.generation`)."""


@dataclass(frozen=True)
class RegressionInfo:
    """How a case compared with the same case in the baseline run."""

    baseline_case_id: str
    baseline_figures: Figures
    tolerances: dict[str, Number]
    """Percent per metric, as applied."""
    messages: tuple[str, ...] = ()
    """One sentence per metric beyond its tolerance; empty when the case is within the baseline."""


@dataclass(frozen=True)
class Case:
    """One collected test and what it found."""

    nodeid: str
    case_id: str
    _: KW_ONLY
    suite: SuiteKind
    protocol: str | None = None
    """``None`` for lab-wide cases (a prerequisite that holds for every protocol)."""
    target: Annotated[str | None, WhenSet] = None
    """The lab's name of the target the case ran against (``targets[].name``); ``None`` for cases that do not
    depend on a target, and in files from before targets had names (see :func:`case_target`)."""
    verdict: Verdict
    workload: WorkloadField | None = None
    figures: Figures = field(default_factory=dict)
    """Aggregate figures over all hosts (IOPS and MB/s summed; latency and CPU as the plugin folds them)."""
    hosts: dict[str, Figures] = field(default_factory=dict)
    """Figures per initiator host, for runs from several hosts at once."""
    thresholds: dict[str, Number] = field(default_factory=dict)
    """Limits applied, by the lab's threshold keys (``min_iops``, ``max_p99_us``: :data:`pytest_fabricqa.core.metrics.THRESHOLD_KEYS`)."""
    violations: tuple[str, ...] = ()
    regression: RegressionInfo | None = None
    raw_fio_json: str | None = None
    checks: tuple[Check, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict)
    """JSON-compatible free-form data, e.g. ``{"calibrate_io": {"max_iops": ..., "max_mbps": ...}}``."""
    randseeds: Annotated[dict[str, int], WhenSet] = field(default_factory=dict)
    """fio's ``randseed`` per initiator host, as fio reported it back; distinct per host (see fio/command.py)."""
    queues: Annotated[dict[str, dict[str, int]], WhenSet] = field(default_factory=dict)
    """The queue settings that shaped the figures, per host, as read from the hosts: open-iscsi's
    ``node.session.queue_depth``/``node.session.cmds_max`` and NVMe-oF's ``nr_io_queues``/``queue_size`` on the
    initiators, LIO's ``default_cmdsn_depth`` on the target (:mod:`pytest_fabricqa.fabric.queues`)."""
    start_offsets_ms: Annotated[dict[str, Number], WhenSet] = field(default_factory=dict)
    """How long after the first host each host's fio jobs started, in ms (fio's ``job_start``, fio >= 3.36, on
    each host's own clock); empty when fio did not report it."""
    integrity: Annotated[Integrity | None, WhenSet] = None
    """Bytes written and verified, and every mismatch, for an integrity case; absent on every other case."""

    @property
    def start_spread_ms(self) -> float | None:
        """How far apart the hosts started (the last host's offset), or None when unknown or one host."""
        return max(self.start_offsets_ms.values()) if len(self.start_offsets_ms) > 1 else None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"case {self.case_id}: verdict {self.verdict!r} is not one of {VERDICTS}")
        if self.suite not in SUITE_KINDS:
            raise ValueError(f"case {self.case_id}: suite {self.suite!r} is not one of {SUITE_KINDS}")
        check_figures(self.figures, f"case {self.case_id} figures")
        for host, figures in self.hosts.items():
            check_figures(figures, f"case {self.case_id} hosts.{host}")


@dataclass(frozen=True)
class Environment:
    """What the figures depend on besides the fabric: a baseline taken with other versions is flagged."""

    fio_version: str | None = None
    kernels: dict[str, str] = field(default_factory=dict)
    """Kernel release per host (initiators and target), as ``uname -r`` prints it."""
    device_model: str | None = None
    device_firmware: str | None = None
    plugin_version: str | None = None
    git_commit: str | None = None
    python_version: str | None = None
    pytest_version: str | None = None


@dataclass(frozen=True)
class BaselineUse:
    """Which baseline a run was compared with, and what differed in its environment."""

    path: str
    lab: str
    started: Timestamp
    tolerances: dict[str, Number]
    environment_mismatch: tuple[str, ...] = ()


@dataclass(frozen=True)
class TargetInfo:
    """A target of the lab as the run used it: what it is, where it ran, and where its work runs on the host."""

    kind: str
    host: str | None = None
    """The lab host running it (None for an external array)."""
    protocols: tuple[str, ...] = ()
    """The protocols this run qualified through it."""
    reactor_cores: str = ""
    """SPDK: the cores its reactors poll on (the app's core mask, as the lab gives it); empty when the target
    has no reactors or the mask is not known. The target CPU figures are the whole host's: read them with this."""


@dataclass(frozen=True)
class Run:
    """One qualification session."""

    lab: str
    protocols: tuple[str, ...]
    target_kind: str
    started: Timestamp
    finished: Timestamp
    environment: Environment = field(default_factory=Environment)
    baseline: BaselineUse | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    """JSON-compatible free-form data, e.g. ``{"oracle_not_exercised": "the lab declares no database"}``."""
    cases: tuple[Case, ...] = ()
    targets: Annotated[dict[str, TargetInfo], WhenSet] = field(default_factory=dict)
    """The lab's targets this run used, by name; empty in files from before targets had names."""

    def case_target(self, case: Case) -> str | None:
        """The name of the target ``case`` ran against. A file from before targets had names had one target per
        protocol, named by its kind: the kind of ``target_kind`` that serves the case's protocol."""
        if case.target is not None or case.protocol is None or self.targets:
            return case.target
        from pytest_fabricqa.core.kinds import REGISTRY  # the targets package is heavier than this model

        # "nvmet+lio" as the plugin wrote it; older hand-made files say "nvmet (NVMe-oF), scst (iSER)".
        words = dict.fromkeys(re.findall(r"[a-z]+", self.target_kind))
        kinds = [k for k in words if k in REGISTRY and case.protocol in REGISTRY[k].serves]
        return kinds[0] if len(kinds) == 1 else None

    def pairs(self) -> list[tuple[str, str]]:
        """(protocol, target) of every case that ran against a target, in first-seen order."""
        found = {(c.protocol, t): None for c in self.cases if c.protocol is not None and (t := self.case_target(c))}
        return [(p, t) for p, t in found if p is not None and t is not None]

    def cases_for(self, protocol: str | None, suite: SuiteKind | None = None) -> list[Case]:
        """The cases of one protocol (``None``: lab-wide cases), optionally of one suite kind."""
        return [c for c in self.cases if c.protocol == protocol and (suite is None or c.suite == suite)]

    def verdict(self, protocol: str | None = None) -> str:
        """``PASS``, ``FAIL`` or ``NOT RUN`` for one protocol (lab-wide cases count too), or for all."""
        cases = [c for c in self.cases if protocol is None or c.protocol in (protocol, None)]
        return overall_verdict(c.verdict for c in cases)


def overall_verdict(verdicts: Iterable[str]) -> str:
    """Fold case verdicts: any failure or error fails; nothing run (all skipped, or none) is ``NOT RUN``."""
    seen = set(verdicts)
    if seen & {"failed", "error"}:
        return "FAIL"
    if "passed" in seen:
        return "PASS"
    return "NOT RUN"


# --- JSON form -------------------------------------------------------------------------------------------
# One generic converter: pydantic reads and writes the dataclasses above from their annotations, so a field
# added to a class is in the JSON form with nothing else to change. The field order of each class is the key
# order of the file.


def _adapter(kind: type) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


_RUN = _adapter(Run)
_CASE = _adapter(Case)


def _where(error: ValidationError, root: str) -> str:
    """The first problem pydantic found, as one line naming the key path: ``results.cases[0].figures.iops: ...``."""
    first = error.errors(include_url=False)[0]
    path = root
    for part in first["loc"]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    message = first["msg"].removeprefix("Value error, ")
    if message.startswith("."):  # Workload.from_dict names the key below the workload itself
        return path + message
    if first["type"] == "missing":
        return f"{path.rsplit('.', 1)[0]}: missing key {path.rsplit('.', 1)[1]!r}"
    return f"{path}: {message}" + ("" if first["type"] == "value_error" else f", found {first['input']!r}")


def run_to_dict(run: Run) -> dict[str, Any]:
    """The JSON-compatible form of a run, with the schema version first."""
    return {"schema": SCHEMA, **_RUN.dump_python(run, mode="json")}


def case_to_dict(case: Case) -> dict[str, Any]:
    """The JSON-compatible form of one case (as it appears under ``cases`` in a results file)."""
    return cast(dict[str, Any], _CASE.dump_python(case, mode="json"))


def run_from_dict(data: object) -> Run:
    """Build a run from its JSON form; ``ValueError`` names the first key that is missing or malformed."""
    if not isinstance(data, dict):
        raise ValueError(f"results: expected an object, found {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"schema is {data.get('schema')!r}, this plugin reads {SCHEMA!r}")
    try:
        return cast(Run, _RUN.validate_python({k: v for k, v in data.items() if k != "schema"}))
    except ValidationError as exc:
        raise ValueError(_where(exc, "results")) from None


def case_from_dict(data: object, where: str = "case") -> Case:
    """Build a case from :func:`case_to_dict`'s form; ``ValueError`` names the first bad key."""
    try:
        return cast(Case, _CASE.validate_python(data))
    except ValidationError as exc:
        raise ValueError(_where(exc, where)) from None


def write_temp(folder: Path, text: str) -> Path:
    """Write ``text`` to a fresh hidden file in ``folder`` (flushed to disk) for a later atomic rename.

    Opened with mode ``x`` rather than ``mkstemp`` so the file gets the user's umask (mkstemp makes 0600,
    which would hide results from a CI job reading them as another user).
    """
    while True:
        tmp = folder / f".fabricqa-{os.getpid()}-{secrets.token_hex(6)}.tmp"
        try:
            with open(tmp, "x", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        except FileExistsError:
            continue
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp


def dumps(run: Run) -> str:
    """The JSON text of a run, as written to results and baseline files."""
    return json.dumps(run_to_dict(run), indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(run: Run, path: Path | str) -> Path:
    """Write ``run`` to ``path`` atomically: a reader sees the old file or the new one, never half of one."""
    return write_atomic(path, dumps(run))


def write_atomic(path: Path | str, text: str) -> Path:
    """Write ``text`` to ``path`` (creating its folder) so a reader sees the old file or the new one, never half."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file sits in the target's folder so os.replace stays a rename on one filesystem.
    tmp = write_temp(target.parent, text)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def load_json(path: Path | str) -> Run:
    """Read a results file; :class:`ResultsFileError` says why a file is unreadable, corrupt or foreign."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(source, f"cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(source, f"not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or "schema" not in data:
        raise ResultsFileError(source, f"not a pytest-fabricqa results file (no {SCHEMA!r} schema key)")
    try:
        return run_from_dict(data)
    except ValueError as exc:
        raise ResultsFileError(source, str(exc)) from None
