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
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, cast, get_args

from pytest_fabricqa.errors import UserError
from pytest_fabricqa.metrics import METRICS
from pytest_fabricqa.workloads import Workload

SCHEMA = "fabricqa-results/1"

Verdict = Literal["passed", "failed", "skipped", "error"]
SuiteKind = Literal["prerequisite", "connectivity", "performance", "oracle"]
VERDICTS: tuple[str, ...] = get_args(Verdict)
SUITE_KINDS: tuple[str, ...] = get_args(SuiteKind)

Figures = dict[str, float]
"""Metric name (one of :data:`METRICS`) to value; a metric fio did not report is absent, not zero."""


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
class RegressionInfo:
    """How a case compared with the same case in the baseline run."""

    baseline_case_id: str
    baseline_figures: Figures
    tolerances: dict[str, float]
    """Percent per metric, as applied."""
    messages: tuple[str, ...] = ()
    """One sentence per metric beyond its tolerance; empty when the case is within the baseline."""


@dataclass(frozen=True)
class Case:
    """One collected test and what it found."""

    nodeid: str
    case_id: str
    suite: SuiteKind
    verdict: Verdict
    protocol: str | None = None
    """``None`` for lab-wide cases (a prerequisite that holds for every protocol)."""
    workload: Workload | None = None
    hosts: dict[str, Figures] = field(default_factory=dict)
    """Figures per initiator host, for runs from several hosts at once."""
    figures: Figures = field(default_factory=dict)
    """Aggregate figures over all hosts (IOPS and MB/s summed; latency and CPU as the plugin folds them)."""
    thresholds: dict[str, float] = field(default_factory=dict)
    """Limits applied, by the lab's threshold keys (``min_iops``, ``max_p99_us``: :data:`pytest_fabricqa.metrics.THRESHOLD_KEYS`)."""
    violations: tuple[str, ...] = ()
    regression: RegressionInfo | None = None
    raw_fio_json: str | None = None
    checks: tuple[Check, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict)
    """JSON-compatible free-form data, e.g. ``{"calibrate_io": {"max_iops": ..., "max_mbps": ...}}``."""
    randseeds: dict[str, int] = field(default_factory=dict)
    """fio's ``randseed`` per initiator host, as fio reported it back; distinct per host (see fio/command.py)."""
    queues: dict[str, dict[str, int]] = field(default_factory=dict)
    """The queue settings that shaped the figures, per host, as read from the hosts: open-iscsi's
    ``node.session.queue_depth``/``node.session.cmds_max`` and NVMe-oF's ``nr_io_queues``/``queue_size`` on the
    initiators, LIO's ``default_cmdsn_depth`` on the target (:mod:`pytest_fabricqa.queues`)."""
    start_offsets_ms: dict[str, float] = field(default_factory=dict)
    """How long after the first host each host's fio jobs started, in ms (fio's ``job_start``, fio >= 3.36, on
    each host's own clock); empty when fio did not report it."""

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
    started: datetime
    tolerances: dict[str, float]
    environment_mismatch: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run:
    """One qualification session."""

    lab: str
    protocols: tuple[str, ...]
    target_kind: str
    started: datetime
    finished: datetime
    environment: Environment = field(default_factory=Environment)
    cases: tuple[Case, ...] = ()
    baseline: BaselineUse | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    """JSON-compatible free-form data, e.g. ``{"oracle_not_exercised": "the lab declares no database"}``."""

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


def _time(value: datetime) -> str:
    return value.isoformat()


def run_to_dict(run: Run) -> dict[str, Any]:
    """The JSON-compatible form of a run, with the schema version first."""
    env = run.environment
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "lab": run.lab,
        "protocols": list(run.protocols),
        "target_kind": run.target_kind,
        "started": _time(run.started),
        "finished": _time(run.finished),
        "environment": {
            "fio_version": env.fio_version,
            "kernels": dict(env.kernels),
            "device_model": env.device_model,
            "device_firmware": env.device_firmware,
            "plugin_version": env.plugin_version,
            "git_commit": env.git_commit,
            "python_version": env.python_version,
            "pytest_version": env.pytest_version,
        },
        "baseline": None,
        "extras": run.extras,
        "cases": [case_to_dict(c) for c in run.cases],
    }
    if run.baseline is not None:
        b = run.baseline
        out["baseline"] = {
            "path": b.path,
            "lab": b.lab,
            "started": _time(b.started),
            "tolerances": dict(b.tolerances),
            "environment_mismatch": list(b.environment_mismatch),
        }
    return out


def case_to_dict(case: Case) -> dict[str, Any]:
    """The JSON-compatible form of one case (as it appears under ``cases`` in a results file)."""
    w = case.workload
    r = case.regression
    return {
        "nodeid": case.nodeid,
        "case_id": case.case_id,
        "suite": case.suite,
        "protocol": case.protocol,
        "verdict": case.verdict,
        "workload": None if w is None else w.to_dict(),
        "figures": dict(case.figures),
        "hosts": {h: dict(f) for h, f in case.hosts.items()},
        "thresholds": dict(case.thresholds),
        "violations": list(case.violations),
        "regression": None
        if r is None
        else {
            "baseline_case_id": r.baseline_case_id,
            "baseline_figures": dict(r.baseline_figures),
            "tolerances": dict(r.tolerances),
            "messages": list(r.messages),
        },
        "raw_fio_json": case.raw_fio_json,
        "checks": [{"name": c.name, "verdict": c.verdict, "detail": c.detail} for c in case.checks],
        "extras": case.extras,
        # Written only when known, so files from before these were recorded read and rewrite byte for byte.
        **({"randseeds": dict(case.randseeds)} if case.randseeds else {}),
        **({"queues": {h: dict(q) for h, q in case.queues.items()}} if case.queues else {}),
        **({"start_offsets_ms": dict(case.start_offsets_ms)} if case.start_offsets_ms else {}),
    }


_KIND_NAMES: dict[type, str] = {str: "a string", int: "an integer"}


class _Reader:
    """Typed access to one JSON object, with errors that name the key path."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, found {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.where = where

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise ValueError(f"{self.where}: missing key {key!r}")
            return None
        return self.data[key]

    def _typed(self, key: str, kind: type, required: bool) -> Any:
        value = self._get(key, required)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ValueError(f"{self.where}.{key}: expected {_KIND_NAMES[kind]}, found {value!r}")
        return value

    def text(self, key: str) -> str:
        return cast(str, self._typed(key, str, True))

    def opt_text(self, key: str) -> str | None:
        return cast("str | None", self._typed(key, str, False))

    def opt_integer(self, key: str) -> int | None:
        return cast("int | None", self._typed(key, int, False))

    def integer(self, key: str) -> int:
        return cast(int, self._typed(key, int, True))

    def timestamp(self, key: str) -> datetime:
        text = self.text(key)
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{self.where}.{key}: {text!r} is not an ISO 8601 timestamp") from None

    def obj(self, key: str) -> _Reader | None:
        value = self._get(key, False)
        return None if value is None else _Reader(value, f"{self.where}.{key}")

    def mapping(self, key: str) -> dict[str, Any]:
        value = self._get(key, False)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError(f"{self.where}.{key}: expected an object, found {value!r}")
        return value

    def items(self, key: str) -> list[Any]:
        value = self._get(key, False)
        if value is None:
            return []
        if not isinstance(value, list):
            raise ValueError(f"{self.where}.{key}: expected a list, found {value!r}")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        items = self.items(key)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise ValueError(f"{self.where}.{key}[{i}]: expected a string, found {item!r}")
        return tuple(items)

    def numbers(self, key: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, value in self.mapping(key).items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{self.where}.{key}.{name}: {value!r} is not a number")
            out[name] = float(value)
        return out

    def integers(self, key: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, value in self.mapping(key).items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{self.where}.{key}.{name}: {value!r} is not an integer")
            out[name] = value
        return out

    def figures(self, key: str) -> Figures:
        figures = self.numbers(key)
        check_figures(figures, f"{self.where}.{key}")
        return figures


def run_from_dict(data: object) -> Run:
    """Build a run from its JSON form; ``ValueError`` names the first key that is missing or malformed."""
    top = _Reader(data, "results")
    schema = top._get("schema", False)
    if schema != SCHEMA:
        raise ValueError(f"schema is {schema!r}, this plugin reads {SCHEMA!r}")
    env = top.obj("environment") or _Reader({}, "results.environment")
    kernels = env.mapping("kernels")
    for host, release in kernels.items():
        if not isinstance(release, str):
            raise ValueError(f"results.environment.kernels.{host}: expected a string, found {release!r}")
    baseline = None
    b = top.obj("baseline")
    if b is not None:
        baseline = BaselineUse(
            path=b.text("path"),
            lab=b.text("lab"),
            started=b.timestamp("started"),
            tolerances=b.numbers("tolerances"),
            environment_mismatch=b.texts("environment_mismatch"),
        )
    cases = tuple(_case_from_reader(_Reader(c, f"results.cases[{i}]")) for i, c in enumerate(top.items("cases")))
    return Run(
        lab=top.text("lab"),
        protocols=top.texts("protocols"),
        target_kind=top.text("target_kind"),
        started=top.timestamp("started"),
        finished=top.timestamp("finished"),
        environment=Environment(
            fio_version=env.opt_text("fio_version"),
            kernels=cast(dict[str, str], kernels),
            device_model=env.opt_text("device_model"),
            device_firmware=env.opt_text("device_firmware"),
            plugin_version=env.opt_text("plugin_version"),
            git_commit=env.opt_text("git_commit"),
            python_version=env.opt_text("python_version"),
            pytest_version=env.opt_text("pytest_version"),
        ),
        cases=cases,
        baseline=baseline,
        extras=top.mapping("extras"),
    )


def case_from_dict(data: object, where: str = "case") -> Case:
    """Build a case from :func:`case_to_dict`'s form; ``ValueError`` names the first bad key."""
    return _case_from_reader(_Reader(data, where))


def _case_from_reader(c: _Reader) -> Case:
    workload = None
    w = c.obj("workload")
    if w is not None:
        workload = Workload.from_dict(w.data, w.where)
    regression = None
    r = c.obj("regression")
    if r is not None:
        regression = RegressionInfo(
            baseline_case_id=r.text("baseline_case_id"),
            baseline_figures=r.figures("baseline_figures"),
            tolerances=r.numbers("tolerances"),
            messages=r.texts("messages"),
        )
    checks = []
    for i, item in enumerate(c.items("checks")):
        k = _Reader(item, f"{c.where}.checks[{i}]")
        verdict = k.text("verdict")
        if verdict not in VERDICTS:
            raise ValueError(f"{k.where}.verdict: {verdict!r} is not one of {VERDICTS}")
        checks.append(Check(name=k.text("name"), verdict=cast(Verdict, verdict), detail=k.opt_text("detail") or ""))
    hosts_raw = c.mapping("hosts")
    hosts_reader = _Reader(hosts_raw, f"{c.where}.hosts")
    hosts = {h: hosts_reader.numbers(h) for h in hosts_raw}
    queues_raw = c.mapping("queues")
    queues_reader = _Reader(queues_raw, f"{c.where}.queues")
    queues = {h: queues_reader.integers(h) for h in queues_raw}
    try:
        return Case(
            nodeid=c.text("nodeid"),
            case_id=c.text("case_id"),
            suite=cast(SuiteKind, c.text("suite")),
            verdict=cast(Verdict, c.text("verdict")),
            protocol=c.opt_text("protocol"),
            workload=workload,
            hosts=hosts,
            figures=c.figures("figures"),
            thresholds=c.numbers("thresholds"),
            violations=c.texts("violations"),
            regression=regression,
            raw_fio_json=c.opt_text("raw_fio_json"),
            checks=tuple(checks),
            extras=c.mapping("extras"),
            randseeds=c.integers("randseeds"),
            queues=queues,
            start_offsets_ms=c.numbers("start_offsets_ms"),
        )
    except ValueError as exc:
        raise ValueError(f"{c.where}: {exc}") from None


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
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file sits in the target's folder so os.replace stays a rename on one filesystem.
    tmp = write_temp(target.parent, dumps(run))
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
