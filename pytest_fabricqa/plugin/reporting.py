"""The qualification report's pytest wiring: options, the object behind ``fabricqa_report``, gathering, writing.

plugin.py calls :func:`addoption` and, once a lab is loaded, registers a :class:`ReportPlugin`. The plugin
object's methods are hooks (the ``fabricqa_report`` fixture, in plugin.py, returns its ``api``); the work (verdicts, environment, baselines, rendering) is done
by :mod:`pytest_fabricqa.report`, which never imports pytest.

Under pytest-xdist every process gets a ReportPlugin: workers attach each recorded case to its
``TestReport`` (an attribute, as pytest-html does with ``extras``; reports travel to the controller with
all their attributes), and only the controller gathers them and writes files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import warnings
from collections.abc import Generator, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fabricqa.core.metrics import DEFAULT_TOLERANCES, METRICS
from pytest_fabricqa.report.baseline import (
    BaselineWarning,
    ToleranceError,
    compare_case,
    find_baseline_file,
    parse_tolerances,
)
from pytest_fabricqa.report.gather import Gatherer, baseline_use, flat_properties, merge_environment, phase_verdict
from pytest_fabricqa.report.model import (
    Case,
    Environment,
    RegressionInfo,
    ResultsFileError,
    Run,
    case_to_dict,
)

if TYPE_CHECKING:
    from pytest_fabricqa.lab.model import LabModel
    from pytest_fabricqa.report.model import TargetInfo

CASE_KEY = pytest.StashKey[dict[str, Any]]()
PROPERTIES_KEY = pytest.StashKey[list[tuple[str, object]]]()
SENT_KEY = pytest.StashKey[dict[str, Any]]()

DEFAULT_REPORT_DIR = "fabricqa-report"
_FILE_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _tolerance_option(value: str) -> dict[str, float]:
    """argparse type for --tolerance: ``iops=10,lat_p99_us=20`` (percent per metric)."""
    try:
        return parse_tolerances(value, base={})
    except ToleranceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def addoption(parser: pytest.Parser) -> None:
    """Register --report-dir, --baseline, --save-baseline and --tolerance in the fabricqa option group."""
    group = parser.getgroup("fabricqa", "storage fabric qualification (pytest-fabricqa)")
    group.addoption(
        "--report-dir",
        metavar="DIR",
        help=f"where results.json, report.html, junit.xml and raw/ go (default: {DEFAULT_REPORT_DIR}/ under the rootdir)",
    )
    group.addoption(
        "--baseline",
        metavar="PATH",
        help="compare with this results file, or with the newest run of the same lab and protocol in this folder",
    )
    group.addoption(
        "--save-baseline",
        metavar="DIR",
        help="when the run PASSES, save its results in DIR as the newest baseline (a failing run is never saved)",
    )
    group.addoption(
        "--tolerance",
        action="append",
        default=[],
        type=_tolerance_option,
        metavar="METRIC=PCT[,...]",
        help="how far a figure may move in its bad direction against the baseline, in percent, "
        f"e.g. iops=10,lat_p99_us=20; over the lab file's 'tolerances' and the defaults "
        f"({', '.join(f'{k}={v:g}' for k, v in DEFAULT_TOLERANCES.items())})",
    )


def resolve_tolerances(lab: LabModel, overrides: list[dict[str, float]]) -> dict[str, float]:
    """Defaults, then the lab file's ``tolerances``, then every --tolerance in order."""
    tolerances = dict(DEFAULT_TOLERANCES)
    for name, value in lab.tolerances.items():
        if name not in METRICS:
            raise pytest.UsageError(
                f"lab {lab.name!r}: tolerances.{name}: unknown metric; known metrics are {', '.join(METRICS)}"
            )
        if not 0 <= value < float("inf"):
            raise pytest.UsageError(f"lab {lab.name!r}: tolerances.{name}: {value!r} must be 0 percent or more")
        tolerances[name] = float(value)
    for override in overrides:
        tolerances.update(override)
    return tolerances


class FabricqaReport:
    """What the ``fabricqa_report`` fixture returns; see that fixture's docstring for how suites use it."""

    def __init__(self, plugin: ReportPlugin) -> None:
        self._plugin = plugin

    @property
    def raw_dir(self) -> Path:
        """``<report-dir>/raw``, created on first use: write each case's fio JSON as ``raw_path(case_id)``."""
        folder = self._plugin.report_dir / "raw"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def raw_path(self, case_id: str) -> Path:
        """``<report-dir>/raw/<case id>.json`` (characters unsafe in a file name become ``_``)."""
        return self.raw_dir / f"{_FILE_SAFE.sub('_', case_id).strip('._') or 'case'}.json"

    @property
    def tolerances(self) -> dict[str, float]:
        """Percent per metric as applied: defaults, then the lab file, then --tolerance."""
        return dict(self._plugin.tolerances)

    def baseline_path(self, protocol: str, target: str | None = None) -> Path | None:
        """The baseline file used for ``protocol`` served by ``target`` (default: the first target serving it),
        or None when its cases are not compared."""
        found = self._plugin.baseline_for(protocol, target)
        return None if found is None else found[0]

    def regressions(self, case: Case) -> RegressionInfo | None:
        """``case`` against the baseline chosen for its protocol and target; None when there is nothing to compare
        with.

        ``info.messages`` holds one sentence per figure beyond its tolerance (empty: within the baseline).
        """
        if case.protocol is None or not case.figures:
            return None
        found = self._plugin.baseline_for(case.protocol, case.target)
        if found is None:
            return None
        return compare_case(case, found[1], self._plugin.tolerances)

    def gate(self, case: Case, request: pytest.FixtureRequest | pytest.Item) -> list[str]:
        """Record ``case`` (compared with the baseline) and return everything that fails it: its threshold
        violations, then every figure beyond its tolerance of the baseline. End the test with
        ``assert not problems, "\\n".join(problems)`` so the case fails with all of them at once."""
        recorded = self.record(case, request)
        problems = list(recorded.violations)
        if recorded.regression is not None:
            problems.extend(recorded.regression.messages)
        return problems

    def record(self, case: Case, request: pytest.FixtureRequest | pytest.Item) -> Case:
        """Attach ``case`` to the running test (pass the test's ``request``); returns the case as recorded.

        A case without ``regression`` gets the baseline comparison filled in. The test's outcome sets the
        final verdict in the report. Its figures become JUnit properties. Recording again replaces.
        """
        node = getattr(request, "node", request)
        if not isinstance(node, pytest.Item):
            raise TypeError("fabricqa_report.record(case, request): pass the test's own `request` fixture")
        if case.regression is None:
            info = self.regressions(case)
            if info is not None:
                case = replace(case, regression=info)
        node.stash[CASE_KEY] = case_to_dict(case)
        previous = node.stash.get(PROPERTIES_KEY, [])
        if previous:
            node.user_properties[:] = [p for p in node.user_properties if p not in previous]
        properties = [p for p in flat_properties(case) if p not in node.user_properties]
        node.user_properties.extend(properties)
        node.stash[PROPERTIES_KEY] = properties
        return case


def amend_case(item: pytest.Item, *, extras: dict[str, Any], violations: Sequence[str] = ()) -> None:
    """Add ``extras`` (keys left out when empty) and ``violations`` to the case ``item`` recorded, if it recorded
    one: what the plugin learns about a case after its body ended (its kernel's account)."""
    case = item.stash.get(CASE_KEY, None)
    if case is None:
        return
    case = dict(case)
    case["extras"] = {**case.get("extras", {}), **{k: v for k, v in extras.items() if v}}
    case["violations"] = [*case.get("violations", []), *(v for v in violations if v not in case.get("violations", []))]
    item.stash[CASE_KEY] = case


def _param_of(item: pytest.Item, name: str) -> str | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get(name) if callspec is not None else None
    return value if isinstance(value, str) else None


def _reason(report: pytest.TestReport) -> str:
    """pytest's one-line reason for a failure or skip (first line of the crash message, or the skip reason)."""
    if report.passed:
        return ""
    wasxfail = getattr(report, "wasxfail", None)
    if isinstance(wasxfail, str):
        return f"xfail: {wasxfail}" if wasxfail else "xfail"
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if isinstance(message, str) and message.strip():
        return message.strip().splitlines()[0]
    lines = [line for line in report.longreprtext.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _git_commit(folder: Path) -> str | None:
    """HEAD of the git checkout holding ``folder`` (``+dirty`` when tracked files changed), or None."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        head = subprocess.run(
            [git, "-C", str(folder), "rev-parse", "--verify", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        status = subprocess.run(
            [git, "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = head.stdout.strip()[:12]
    return commit + ("+dirty" if status.returncode == 0 and status.stdout.strip() else "")


class ReportPlugin:
    """The report's hooks for one session with a lab (registered by plugin.py as ``fabricqa-report``)."""

    def __init__(
        self,
        config: pytest.Config,
        lab: LabModel,
        protocols: list[str],
        pairs: list[tuple[str, str]] | None = None,
    ) -> None:
        self.config = config
        self.lab = lab
        self.protocols = tuple(protocols)
        self.pairs = list(pairs) if pairs is not None else [(p, lab.target_for(p).name) for p in protocols]
        """(protocol, target name) this run qualifies."""
        self.is_worker = hasattr(config, "workerinput")
        # --collect-only runs nothing: no report, no default junit.xml (only the controller ever writes).
        self.writes = not self.is_worker and not config.getoption("collectonly", False)
        self.report_dir = self._path(config.getoption("report_dir", None)) or config.rootpath / DEFAULT_REPORT_DIR
        self.tolerances = resolve_tolerances(lab, list(config.getoption("tolerance", None) or []))
        self.baselines: dict[tuple[str, str], tuple[Path, Run]] = {}
        """The baseline file and run for each (protocol, target name)."""
        self.notes: list[str] = []
        """Baseline notes for the report and terminal (skipped files, protocols without a baseline)."""
        self._load_baselines()
        self.started = datetime.now().astimezone()
        self.gatherer = Gatherer()
        self.api = FabricqaReport(self)
        self.run: Run | None = None
        self.messages: list[tuple[str, dict[str, bool]]] = []
        """Lines for the terminal summary after the verdicts: files written, baseline saved, problems."""
        self._html_done: set[str] = set()
        self._junit: tuple[Path, Path] | None = None
        if self.writes and not getattr(config.option, "xmlpath", None):
            # Registered from plugin.py's tryfirst pytest_configure, so junitxml's own pytest_configure has
            # not run yet and picks this path up. It writes in place; we rename its file after it wrote.
            final = self.report_dir / "junit.xml"
            partial = self.report_dir / f".junit-{os.getpid()}.xml.partial"
            config.option.xmlpath = str(partial)
            self._junit = (partial, final)

    def _path(self, value: str | None) -> Path | None:
        if not value:
            return None
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else self.config.invocation_params.dir / path

    # -- baselines -----------------------------------------------------------------------------------

    def _load_baselines(self) -> None:
        value = self.config.getoption("baseline", None)
        path = self._path(value)
        if path is None:
            return
        if not path.exists():
            raise pytest.UsageError(f"--baseline={value}: no such results file or folder ({path})")
        problems: list[str] = []
        for protocol, target in self.pairs:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    found = find_baseline_file(path, self.lab.name, protocol, target)
                except ResultsFileError as exc:
                    raise pytest.UsageError(f"--baseline={value}: {exc}") from None
            for w in caught:
                if issubclass(w.category, BaselineWarning) and str(w.message) not in problems:
                    problems.append(str(w.message))
            if found is None:
                self.notes.append(
                    f"no baseline for lab {self.lab.name!r} and {protocol} of target {target} in {path}: not compared"
                )
            else:
                self.baselines[(protocol, target)] = found
        self.notes[:0] = problems
        if not self.is_worker:
            for message in problems:
                self.config.issue_config_time_warning(BaselineWarning(message), stacklevel=2)

    def baseline_for(self, protocol: str, target: str | None) -> tuple[Path, Run] | None:
        """The baseline chosen for ``protocol`` served by ``target`` (None: the first target serving it)."""
        if target is None:
            target = next((t for p, t in self.pairs if p == protocol), None)
        return self.baselines.get((protocol, target)) if target is not None else None

    # -- hooks ---------------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Name the lab in pytest-html's environment table (pytest-metadata), when both are installed."""
        if self.is_worker:
            return
        try:
            from pytest_metadata.plugin import metadata_key
        except ImportError:
            return
        metadata = self.config.stash.get(metadata_key, None)
        if metadata is None:
            return
        metadata["Lab"] = self.lab.name
        metadata["Protocols"] = ", ".join(self.protocols)
        metadata["Target"] = self._target_kind()
        metadata["Lab hosts"] = ", ".join(self.lab.hosts)
        if self.baselines:
            metadata["Baseline"] = ", ".join(sorted({str(p) for p, _ in self.baselines.values()}))
        metadata["Qualification report"] = str(self.report_dir / "report.html")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Put the recorded case on the report (once; xdist ships it to the controller), the protocol and the
        target; a case that depends on the target gets it as a JUnit property whether it recorded figures or not."""
        target = _param_of(item, "target_name")
        if target is not None and ("target", target) not in item.user_properties:
            item.user_properties.append(("target", target))
        report = yield
        case = item.stash.get(CASE_KEY, None)
        if case is not None and item.stash.get(SENT_KEY, None) is not case:
            report.fabricqa_case = case  # type: ignore[attr-defined]
            item.stash[SENT_KEY] = case
        protocol = _param_of(item, "protocol")
        if protocol is not None:
            report.fabricqa_protocol = protocol  # type: ignore[attr-defined]
        if target is not None:
            report.fabricqa_target = target  # type: ignore[attr-defined]
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Controller: gather every phase; with --html, give the case's report its figures as extras."""
        if self.is_worker:
            return
        case = getattr(report, "fabricqa_case", None)
        protocol = getattr(report, "fabricqa_protocol", None)
        target = getattr(report, "fabricqa_target", None)
        self.gatherer.add(
            report.nodeid,
            report.when,
            report.outcome,
            case=case if isinstance(case, dict) else None,
            protocol=protocol if isinstance(protocol, str) else None,
            target=target if isinstance(target, str) else None,
            reason=_reason(report),
        )
        if isinstance(case, dict) and report.nodeid not in self._html_done and self._html_wanted():
            self._html_done.add(report.nodeid)
            self._add_html_extras(report, case)

    def _html_wanted(self) -> bool:
        return bool(self.config.getoption("htmlpath", None)) and self.config.pluginmanager.has_plugin("html")

    def _add_html_extras(self, report: pytest.TestReport, data: dict[str, Any]) -> None:
        from pytest_html import extras

        from pytest_fabricqa.report.html import case_extra_html
        from pytest_fabricqa.report.model import case_from_dict

        try:
            case = case_from_dict(data, f"case recorded by {report.nodeid}")
        except ValueError:
            return  # Reported once, at the end, by the gatherer.
        # The recorded verdict is the suite's guess; this phase's outcome is what the report will say.
        verdict = phase_verdict(report.when, report.outcome, None) or case.verdict
        case = replace(case, verdict=verdict)
        added = [extras.html(case_extra_html(case, chart_id=f"fqa{len(self._html_done)}"))]
        raw = case.raw_fio_json
        raw_file = self.api.raw_path(case.case_id) if raw is None else None
        if raw is None and raw_file is not None and raw_file.is_file():
            raw = raw_file.read_text(encoding="utf-8", errors="replace")
        if raw:
            try:
                added.append(extras.json(json.loads(raw), name="fio JSON"))
            except ValueError:
                added.append(extras.text(raw, name="fio output"))
        report.extras = [*getattr(report, "extras", []), *added]  # type: ignore[attr-defined]

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_report_title(self, report: Any) -> None:
        """pytest-html's page title names the lab."""
        report.title = f"Qualification of lab {self.lab.name} ({', '.join(self.protocols)})"

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        """IOPS and p99 columns in pytest-html's results table."""
        cells.insert(2, '<th class="sortable" data-column-type="iops">IOPS</th>')
        cells.insert(3, '<th class="sortable" data-column-type="p99">p99 µs</th>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        """The case's IOPS and p99 in pytest-html's results table (empty for tests without figures)."""
        from pytest_fabricqa.report.formatting import format_figure

        data = getattr(report, "fabricqa_case", None)
        figures = data.get("figures") if isinstance(data, dict) else None
        values = []
        for metric in ("iops", "lat_p99_us"):
            value = figures.get(metric) if isinstance(figures, dict) else None
            values.append(format_figure(metric, value) if isinstance(value, int | float) else "")
        cells.insert(2, f'<td class="col-iops">{values[0]}</td>')
        cells.insert(3, f'<td class="col-p99">{values[1]}</td>')

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Controller: build the run, write results.json and report.html, move junit.xml in, save a baseline.

        trylast: junitxml has written its file by now (its hook has no ordering), so it can be renamed.
        """
        if not self.writes:
            return
        self.run = run = self.build_run()
        from pytest_fabricqa.report.model import write_json

        self._write("results", lambda: write_json(run, self.report_dir / "results.json"))
        self._write("HTML report", lambda: self._write_html(run))
        if self._junit is not None:
            partial, final = self._junit
            if partial.is_file():
                self._write("JUnit XML", lambda: _rename(partial, final))
                self._point_junitxml_at(final)
        save_to = self._path(self.config.getoption("save_baseline", None))
        if save_to is not None:
            verdict = run.verdict()
            if verdict == "PASS":
                from pytest_fabricqa.report.baseline import save_baseline

                self._write("baseline", lambda: save_baseline(run, save_to), verb="saved this run as the new")
            else:
                self.messages.append(
                    (f"fabricqa: run not saved as a baseline in {save_to}: its verdict is {verdict}", {"yellow": True})
                )

    def _write_html(self, run: Run) -> Path:
        from pytest_fabricqa.report.html import write_html

        return write_html(run, self.report_dir / "report.html", title=f"Qualification of lab {run.lab}")

    def _write(self, what: str, action: Any, verb: str = "wrote") -> None:
        try:
            path = action()
        except Exception as exc:
            # One failed artefact must not cost the others (a broken template must not lose results.json).
            self.messages.append((f"fabricqa: could not write the {what}: {type(exc).__name__}: {exc}", {"red": True}))
        else:
            self.messages.append((f"fabricqa: {verb} {what} {path}", {}))

    def _point_junitxml_at(self, final: Path) -> None:
        """junitxml prints its file's path in the summary: make it the renamed one."""
        try:
            from _pytest.junitxml import xml_key
        except ImportError:
            return
        xml = self.config.stash.get(xml_key, None)
        if xml is not None:
            xml.logfile = str(final)

    def build_run(self) -> Run:
        """The session so far as a :class:`Run` (the controller's gathered cases, environment, baseline)."""
        from pytest_fabricqa import __version__
        from pytest_fabricqa.report.gather import without_environment

        cases = self.gatherer.cases()
        base = Environment(
            plugin_version=__version__,
            git_commit=_git_commit(self.config.rootpath),
            python_version=platform.python_version(),
            pytest_version=pytest.__version__,
        )
        environment = merge_environment(cases, base)
        extras: dict[str, Any] = {}
        if self.notes:
            extras["baseline_notes"] = list(self.notes)
        if self.lab.database is None:
            extras["oracle_not_exercised"] = "the lab declares no database"
        if self.gatherer.problems:
            extras["record_problems"] = list(self.gatherer.problems)
        unreported = self.gatherer.unreported()
        if unreported:
            extras["tests_not_in_report"] = unreported
        return Run(
            lab=self.lab.name,
            protocols=self.protocols,
            target_kind=self._target_kind(),
            started=self.started,
            finished=datetime.now().astimezone(),
            environment=environment,
            cases=tuple(without_environment(c) for c in cases),
            baseline=baseline_use(
                {self._pair_label(p, t): (str(path), run) for (p, t), (path, run) in self.baselines.items()},
                environment,
                self.tolerances,
            ),
            extras=extras,
            targets=self._targets(),
        )

    def _pair_label(self, protocol: str, target: str) -> str:
        """``nvme-rdma`` when the protocol has one target in this run, else ``nvme-rdma spdk``."""
        return protocol if sum(p == protocol for p, _ in self.pairs) == 1 else f"{protocol} {target}"

    def _targets(self) -> dict[str, TargetInfo]:
        """The targets this run qualified, by name (kind, host, protocols, SPDK's reactor cores)."""
        from pytest_fabricqa.report.model import TargetInfo

        out: dict[str, TargetInfo] = {}
        for model in self.lab.targets:
            protocols = tuple(p for p, t in self.pairs if t == model.name)
            if protocols:
                out[model.name] = TargetInfo(model.kind, model.host, protocols, model.reactor_cores)
        return out

    def _target_kind(self) -> str:
        kinds = dict.fromkeys(self.lab.target_for(p, t).kind for p, t in self.pairs)
        return "+".join(kinds) or "none"

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        """The verdict per protocol and one line per protocol x workload, then what was written where."""
        if self.is_worker or self.run is None:
            return
        from pytest_fabricqa.report.terminal import summary_lines

        verdict = self.run.verdict()
        colour = {"PASS": {"green": True}, "FAIL": {"red": True}}.get(verdict, {"yellow": True})
        terminalreporter.write_sep("=", f"fabricqa qualification: {verdict}", bold=True, **colour)
        for line in summary_lines(self.run):
            if line.startswith("fabricqa:"):
                markup = {"bold": True, **colour}
            elif "environment differs" in line or line.startswith("baseline note"):
                markup = {"yellow": True}
            elif line.startswith("      - ") or "[regression]" in line or line.rstrip().endswith(("FAILED", "ERROR")):
                markup = {"red": True}
            else:
                markup = {}
            terminalreporter.write_line(line, **markup)
        for problem in self.gatherer.problems:
            terminalreporter.write_line(f"fabricqa: a recorded case was unreadable: {problem}", red=True)
        for line, markup in self.messages:
            terminalreporter.write_line(line, **markup)


def _rename(source: Path, target: Path) -> Path:
    os.replace(source, target)
    return target
