"""One line per point as it ends, with how far the run is and about how long is left (:mod:`pytest_fabricqa.report.progress`).

Registered for a run with ``--lab`` in the process that writes the terminal (never on an xdist worker). It writes
through pytest's own terminal reporter, each line on a line of its own; pytest then starts its next line of results
with the file's name again. Each case's duration goes into pytest's cache (``fabricqa/durations/<lab>``), so the
next run's estimate starts from this one's.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_fabricqa.report.progress import Case, Progress

XDIST_GROUP = "@"
"""Under xdist (always ``--dist loadgroup`` with a lab) the controller sees node ids, not items: xdist ends the id of
each case in an xdist group with ``@<group>``, and the plugin groups exactly the cases that load a target."""


class ProgressPlugin:
    """Counts the cases, times them, and writes a line for each point that ended."""

    def __init__(self, config: pytest.Config, lab_name: str, pair_of: Any) -> None:
        self.config = config
        self.key = f"fabricqa/durations/{lab_name}"
        self.pair_of = pair_of
        self.progress: Progress | None = None
        self.elapsed: dict[str, float] = {}

    def _last(self) -> dict[str, float]:
        cache = getattr(self.config, "cache", None)
        value = cache.get(self.key, {}) if cache is not None else {}
        return {k: float(v) for k, v in value.items() if isinstance(v, int | float)} if isinstance(value, dict) else {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:
            cases = [
                Case(i.nodeid, i.get_closest_marker("loads_target") is not None, self.pair_of(i)) for i in session.items
            ]
            self.progress = Progress(cases, self._last())

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.progress is None:  # every worker collects the same ids (xdist checks it)
            cases = []
            for nodeid in ids:
                bare, group, _ = nodeid.rpartition("::")[2].partition(XDIST_GROUP)
                cases.append(Case(nodeid, bool(group), name=bare))
            self.progress = Progress(cases, self._last())

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if self.progress is not None:
            self.progress.start(nodeid)

    @pytest.hookimpl(trylast=True)  # after the terminal reporter counted the report (its outcome is read there)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        progress = self.progress
        if progress is None:
            return
        self.elapsed[report.nodeid] = self.elapsed.get(report.nodeid, 0.0) + report.duration
        if report.when != "teardown":
            return
        seconds = self.elapsed.pop(report.nodeid)
        progress.finish(report.nodeid, seconds)
        if not progress.case(report.nodeid).point:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        line = progress.line(report.nodeid, _outcome(self.config, report.nodeid), seconds)
        verbosity = self.config.get_verbosity()
        # Start on a line of our own: pytest's ensure_newline goes by its file-name mark, which -q, xdist's letters
        # and a line of the plugin's own (the virtual lab's boot) leave unset while a line is open; the writer
        # knows (``_tw``, the terminal writer every terminal plugin writes through).
        if reporter._tw.width_of_current_line:
            reporter.write("\n")
        reporter.write(line)
        if verbosity < 0 or (verbosity == 0 and self.config.pluginmanager.get_plugin("dsession") is not None):
            reporter.write("\n")  # pytest's letters carry on below it
        else:
            # pytest's next result starts a line of its own: with -v its ensure_newline ends this one (the mark -2,
            # pytest's own for "a line is open"); without, it names the file again on a new line (None).
            reporter.currentfspath = -2 if verbosity > 0 else None

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(self.config, "cache", None)
        if self.progress is not None and cache is not None and self.progress.done:
            cache.set(self.key, {k: round(v, 1) for k, v in self.progress.durations().items()})


def _outcome(config: pytest.Config, nodeid: str) -> str:
    """The case's outcome as pytest counted it: failed if any phase failed, else skipped or passed."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}) if reporter is not None else {}
    for word in ("failed", "error", "skipped", "passed"):
        if any(getattr(r, "nodeid", None) == nodeid for r in stats.get(word, ())):
            return word
    return "ended"
