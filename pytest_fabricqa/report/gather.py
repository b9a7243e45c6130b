"""From test outcomes to a :class:`~pytest_fabricqa.report.model.Run`: what the plugin's controller gathers.

A suite records a :class:`Case` while its test runs; the test's outcome decides the case's final verdict
(a case recorded as passed whose test then failed is failed). Tests that recorded nothing still become
cases when their file is one of the qualification suites (a prerequisite that errored in setup must show
in the report), with the verdict and the one-line reason pytest gave. Nothing here imports pytest: the
plugin passes plain values (node id, phase, outcome, reason).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, cast

from pytest_fabricqa.report.baseline import environment_mismatch
from pytest_fabricqa.report.model import BaselineUse, Case, Environment, Run, SuiteKind, Verdict, case_from_dict

#: Words in a test file's name that say which suite it is (``suites/test_prerequisites.py``).
SUITE_WORDS: tuple[tuple[str, SuiteKind], ...] = (
    ("prereq", "prerequisite"),
    ("connect", "connectivity"),
    ("perf", "performance"),
    ("oracle", "oracle"),
    ("integrity", "integrity"),
    ("failover", "failover"),
)

#: Key of ``Case.extras`` where suites put what they learnt about the environment (fio, kernels, device).
ENVIRONMENT_KEY = "environment"


def suite_from_nodeid(nodeid: str) -> SuiteKind | None:
    """The suite a test belongs to, from its file name; None for a file that is not a qualification suite."""
    stem = PurePosixPath(nodeid.split("::", 1)[0]).stem.lower()
    for word, suite in SUITE_WORDS:
        if word in stem:
            return suite
    return None


def case_id_from_nodeid(nodeid: str) -> str:
    """The test's name with its parameters (``test_rdma_link[nvme-rdma-el72h1]``), class included if any."""
    parts = nodeid.split("::")
    return "::".join(parts[1:]) if len(parts) > 1 else nodeid


@dataclass
class _Pending:
    """What is known about one test while its phases arrive."""

    nodeid: str
    verdict: Verdict | None = None
    reason: str = ""
    case: dict[str, Any] | None = None
    protocol: str | None = None
    target: str | None = None


def phase_verdict(when: str, outcome: str, current: Verdict | None) -> Verdict | None:
    """Fold one phase's outcome into the test's verdict so far.

    Setup failing is an error (the case never ran); any skip is skipped (an xfail too: it was not
    qualified); the call decides passed or failed; a failing teardown turns a pass into an error.
    """
    if outcome == "skipped":
        return "skipped" if current is None else current
    if when == "setup":
        return "error" if outcome == "failed" else current
    if when == "call":
        return "failed" if outcome == "failed" else "passed"
    if when == "teardown" and outcome == "failed" and current in (None, "passed"):
        return "error"
    return current


@dataclass
class Gatherer:
    """Collects the phases of every test, in any order of tests (xdist workers interleave them)."""

    _tests: dict[str, _Pending] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """Recorded cases that could not be read back (a suite bug); reported, not fatal."""

    def add(
        self,
        nodeid: str,
        when: str,
        outcome: str,
        *,
        case: Mapping[str, Any] | None = None,
        protocol: str | None = None,
        target: str | None = None,
        reason: str = "",
    ) -> None:
        """One phase report of one test; ``reason`` is pytest's one-line failure or skip message."""
        pending = self._tests.setdefault(nodeid, _Pending(nodeid))
        before = pending.verdict
        pending.verdict = phase_verdict(when, outcome, before)
        if pending.verdict != before and reason:
            label = f"{when}: " if when != "call" and pending.verdict == "error" else ""
            pending.reason = label + reason
        if case is not None:
            pending.case = dict(case)
        if protocol is not None:
            pending.protocol = protocol
        if target is not None:
            pending.target = target

    def cases(self) -> list[Case]:
        """Every gathered test as a case with its final verdict, sorted by node id (stable across runs)."""
        out = []
        for nodeid in sorted(self._tests):
            case = self._final(self._tests[nodeid])
            if case is not None:
                out.append(case)
        return out

    def _final(self, pending: _Pending) -> Case | None:
        if pending.verdict is None:
            return None  # Interrupted before any phase decided anything.
        if pending.case is not None:
            try:
                case = case_from_dict(pending.case, f"case recorded by {pending.nodeid}")
            except ValueError as exc:
                self.problems.append(str(exc))
            else:
                return finish_case(case, pending.verdict, pending.reason)
        suite = suite_from_nodeid(pending.nodeid)
        if suite is None:
            return None
        case = Case(
            nodeid=pending.nodeid,
            case_id=case_id_from_nodeid(pending.nodeid),
            suite=suite,
            verdict=pending.verdict,
            protocol=pending.protocol,
            target=pending.target,
        )
        return finish_case(case, pending.verdict, pending.reason)

    def unreported(self) -> list[str]:
        """Node ids of tests outside the qualification suites that recorded no case (not in the report)."""
        return [n for n, p in sorted(self._tests.items()) if p.case is None and suite_from_nodeid(n) is None]


def case_reasons(case: Case) -> list[str]:
    """Everything the case itself says went wrong: threshold violations, regressions, failed checks."""
    reasons = list(case.violations)
    if case.regression is not None:
        reasons += list(case.regression.messages)
    reasons += [c.name for c in case.checks if c.verdict in ("failed", "error")]
    return reasons


def finish_case(case: Case, verdict: Verdict, reason: str) -> Case:
    """The case with the test's verdict; a failure that the case cannot explain gets pytest's reason."""
    extras = dict(case.extras)
    violations = case.violations
    if verdict in ("failed", "error") and reason and not case_reasons(case):
        violations = (*violations, reason)
    elif verdict == "error" and reason and reason not in violations:
        # The case's figures may be fine and still the test broke (teardown failed): say so.
        violations = (*violations, reason)
    if verdict == "skipped" and reason:
        extras["skip_reason"] = reason
    return replace(case, verdict=verdict, violations=violations, extras=extras)


# --- environment ------------------------------------------------------------------------------------------


def _one(values: Iterable[str | None]) -> str | None:
    seen = sorted({v for v in values if v})
    # Two different fio versions in one run is possible (per host); keep both rather than pick one.
    return " / ".join(seen) or None


def merge_environment(cases: Iterable[Case], base: Environment) -> Environment:
    """``base`` (plugin, git, Python, pytest) plus the hints cases left in ``extras["environment"]``."""
    hints = [c.extras.get(ENVIRONMENT_KEY) for c in cases]
    found = [h for h in hints if isinstance(h, dict)]
    kernels: dict[str, set[str]] = {h: {k} for h, k in base.kernels.items()}
    for hint in found:
        host_kernels = hint.get("kernels")
        if isinstance(host_kernels, dict):
            for host, release in host_kernels.items():
                if isinstance(release, str) and release:
                    kernels.setdefault(str(host), set()).add(release)

    def texts(key: str, first: str | None) -> list[str | None]:
        return [first, *(cast("str | None", h.get(key)) for h in found if isinstance(h.get(key), str))]

    return replace(
        base,
        fio_version=_one(texts("fio_version", base.fio_version)),
        kernels={h: " / ".join(sorted(r)) for h, r in sorted(kernels.items())},
        device_model=_one(texts("device_model", base.device_model)),
        device_firmware=_one(texts("device_firmware", base.device_firmware)),
    )


def without_environment(case: Case) -> Case:
    """The case without its environment hints once they are merged into the run (they would repeat)."""
    if ENVIRONMENT_KEY not in case.extras:
        return case
    return replace(case, extras={k: v for k, v in case.extras.items() if k != ENVIRONMENT_KEY})


# --- baseline ---------------------------------------------------------------------------------------------


def baseline_use(
    baselines: Mapping[str, tuple[str, Run]], environment: Environment, tolerances: Mapping[str, float]
) -> BaselineUse | None:
    """What the report says about the baseline(s): ``baselines`` maps protocol (``protocol target`` where a
    protocol has several targets) -> (file, run).

    Usually one file holds every protocol. When protocols came from different files, the path names each
    (``nvme-tcp: a.json; iser: b.json``) and each file's environment differences carry its name.
    """
    by_path: dict[str, tuple[list[str], Run]] = {}
    for protocol, (path, run) in baselines.items():
        by_path.setdefault(path, ([], run))[0].append(protocol)
    if not by_path:
        return None
    several = len(by_path) > 1
    mismatch: list[str] = []
    for path, (_, run) in by_path.items():
        name = PurePosixPath(path).name
        for message in environment_mismatch(environment, run.environment):
            mismatch.append(f"{name}: {message}" if several else message)
    runs = [run for _, run in by_path.values()]
    path_text = (
        "; ".join(f"{', '.join(p)}: {path}" for path, (p, _) in by_path.items()) if several else next(iter(by_path))
    )
    return BaselineUse(
        path=path_text,
        lab=" / ".join(sorted({r.lab for r in runs})),
        started=max(r.started for r in runs),
        tolerances=dict(tolerances),
        environment_mismatch=tuple(mismatch),
    )


# --- JUnit properties -------------------------------------------------------------------------------------

_PROPERTY_SAFE = re.compile(r"[^A-Za-z0-9_.:-]+")


def flat_properties(case: Case) -> list[tuple[str, object]]:
    """One JUnit property per figure (``iops``, ``lat_p99_us``; ``<host>.iops`` per host) plus the case's id.

    Values are rounded to 3 decimals: the JSON keeps full precision, JUnit is for dashboards.
    """
    props: list[tuple[str, object]] = [("fabricqa_case_id", case.case_id)]
    if case.protocol:
        props.append(("protocol", case.protocol))
    if case.target:
        props.append(("target", case.target))
    props += [(metric, round(value, 3)) for metric, value in case.figures.items()]
    for host, figures in case.hosts.items():
        host_name = _PROPERTY_SAFE.sub("_", host)
        props += [(f"{host_name}.{metric}", round(value, 3)) for metric, value in figures.items()]
    if case.regression is not None:
        props += [("regression", message) for message in case.regression.messages]
    if case.integrity is not None:
        done = case.integrity
        props += [
            ("integrity.bytes_written", done.bytes_written),
            ("integrity.bytes_verified", done.bytes_verified),
            ("integrity.mismatches", len(done.mismatches)),
            ("integrity.expected_mismatches", done.expected_mismatches),
        ]
        props += [
            (
                f"integrity.generation.{_PROPERTY_SAFE.sub('_', w.host)}.{w.region_offset}.{w.number}",
                f"0x{w.generation:08x}",
            )
            for w in done.writes
        ]
    return props
