"""Where a long run is (:mod:`pytest_fabricqa.report.progress`): a live status line on a terminal, else one line per
point as it ends.

Registered for a run with ``--lab`` in the process that writes the terminal (never on an xdist worker).

- **On a terminal** (and not ``-q``, ``-s`` or live logging, which write between pytest's lines where a status line
  would be in the way), a status line under pytest's output names the points done of all, the time left, and what
  each worker runs: its case, pair, phase (setting up, running, tearing down) and since when. It is redrawn whenever
  pytest reports something; it is taken away before anything else writes and drawn again after
  (:mod:`pytest_fabricqa.report.statusline`).
- **Otherwise** (``-q``, a CI log, a pipe): one line per point as it ends, through pytest's terminal reporter, on a
  line of its own; pytest then starts its next line of results with the file's name again.

Each case's duration goes into pytest's cache (``fabricqa/durations/<lab>``, its last few runs), so the next run's
estimate starts from this one's.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from pytest_fabricqa.report.progress import Case, Progress
from pytest_fabricqa.report.statusline import StatusLine, controls

XDIST_GROUP = "@"
"""Under xdist (always ``--dist loadgroup`` with a lab) the controller sees node ids, not items: xdist ends the id of
each case in an xdist group with ``@<group>``, and the plugin groups exactly the cases that load a target."""


class ProgressPlugin:
    """Counts the cases, times them, and shows where the run is: a live line, or a line for each point that ended."""

    def __init__(self, config: pytest.Config, lab_name: str, pair_of: Any) -> None:
        self.config = config
        self.key = f"fabricqa/durations/{lab_name}"
        self.pair_of = pair_of
        self.progress: Progress | None = None
        self.elapsed: dict[str, float] = {}
        self.live: StatusLine | None = None
        self._live_checked = False
        self._ended = False

    def _last(self) -> dict[str, Any]:
        cache = getattr(self.config, "cache", None)
        value = cache.get(self.key, {}) if cache is not None else {}
        return value if isinstance(value, dict) else {}

    def _status_line(self) -> StatusLine | None:
        """The live line when this run writes to a terminal that can have one, decided once."""
        if self._live_checked:
            return self.live
        self._live_checked = True
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        config = self.config
        if (
            reporter is None
            or not reporter.isatty()
            or config.get_verbosity() < 0
            or config.getoption("capture", "fd") == "no"
            or config.getini("log_cli")
            or config.getoption("log_cli_level", None)
        ):
            return None
        writer = reporter._tw  # the terminal writer every terminal plugin writes through
        stream = getattr(writer, "_file", None) or sys.stdout
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            return None
        found = controls(None, fd)
        if found is None:
            return None

        def write(text: str) -> None:
            stream.write(text)
            stream.flush()

        self.live = StatusLine(found, write, lambda: writer.fullwidth, lambda: writer.width_of_current_line)
        return self.live

    def _redraw(self) -> None:
        line = self._status_line()
        if line is not None and self.progress is not None and not self._ended and self.progress.running:
            line.show(self.progress.status())

    def _hide(self) -> None:
        if self.live is not None:
            self.live.hide()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Around a line the plugin writes itself: the status line goes away and comes back under it."""
        self._hide()
        try:
            yield
        finally:
            self._redraw()

    def _around(self) -> Generator[None, Any, Any]:
        """A hook in which pytest (or xdist) may write to the terminal: no status line while it does."""
        self._hide()
        try:
            return (yield)
        finally:
            self._redraw()

    # The hooks in which pytest's terminal reporter and xdist's write; wrappers, so they run around all of them.
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> Generator[None, Any, Any]:
        if self.progress is not None:
            self.progress.start(nodeid)
        return (yield from self._around())

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, Any, Any]:
        self._hide()
        try:
            result = yield
            self._count(report)  # after the terminal reporter counted the report (its outcome is read there)
            return result
        finally:
            self._redraw()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logfinish(self) -> Generator[None, Any, Any]:
        return (yield from self._around())

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collectreport(self) -> Generator[None, Any, Any]:
        return (yield from self._around())

    @pytest.hookimpl(wrapper=True, tryfirst=True, optionalhook=True)
    def pytest_testnodedown(self) -> Generator[None, Any, Any]:
        return (yield from self._around())

    @pytest.hookimpl(wrapper=True, tryfirst=True, optionalhook=True)
    def pytest_handlecrashitem(self) -> Generator[None, Any, Any]:
        return (yield from self._around())

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self._ended = True  # the summary and the lab's shutdown follow: no status line under them
        self._hide()
        cache = getattr(self.config, "cache", None)
        if self.progress is not None and cache is not None and self.progress.done:
            durations = self.progress.durations()
            cache.set(self.key, {k: [round(v, 1) for v in values] for k, values in durations.items()})

    @pytest.hookimpl(tryfirst=True)
    def pytest_internalerror(self) -> None:
        self._ended = True
        self._hide()

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self) -> None:
        self._ended = True
        self._hide()

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

    def _count(self, report: pytest.TestReport) -> None:
        progress = self.progress
        if progress is None:
            return
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        progress.reported(report.nodeid, report.when or "", getattr(gateway, "id", ""))
        self.elapsed[report.nodeid] = self.elapsed.get(report.nodeid, 0.0) + report.duration
        if report.when != "teardown":
            return
        seconds = self.elapsed.pop(report.nodeid)
        progress.finish(report.nodeid, seconds)
        if self._status_line() is None and progress.case(report.nodeid).point:
            self._write_line(progress.line(report.nodeid, _outcome(self.config, report.nodeid), seconds))

    def _write_line(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
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


def _outcome(config: pytest.Config, nodeid: str) -> str:
    """The case's outcome as pytest counted it: failed if any phase failed, else skipped or passed."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}) if reporter is not None else {}
    for word in ("failed", "error", "skipped", "passed"):
        if any(getattr(r, "nodeid", None) == nodeid for r in stats.get(word, ())):
            return word
    return "ended"
