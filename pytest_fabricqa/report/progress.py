"""Where a long run is: the points done of all, what each worker runs now and in which phase, and about how long
is left.

A *point* is a case that puts load on a target (a fio point, an integrity check, a fault under I/O): the cases a
qualification's time goes to, one line each as they end. The time left adds, over every case still to run (points
and the quick checks between them):

- for a case seen in this machine's earlier runs (pytest's cache keeps its last :data:`KEPT` durations), the median
  of those, times this run's *pace*: what the cases finished so far took against what the same cases took before
  (once :data:`PACE_AFTER_S` seconds of such cases have finished; held between :data:`PACE_LIMITS`), so a machine
  busier or quieter than last time moves the whole estimate and not one case at a time;
- for a case not seen before, the mean of this run's finished cases of its suite (of all its finished cases while
  its suite has none);
- unknown until a case has finished or was seen before.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_fabricqa.report.gather import case_id_from_nodeid, suite_from_nodeid

KEPT = 3
"""How many earlier runs' durations of a case are kept: the median of three is not moved by one slow run."""
PACE_AFTER_S = 60.0
"""Seconds of finished, earlier-seen cases before this run's pace is trusted over 1.0."""
PACE_LIMITS = (0.5, 2.0)
"""The pace is held between these: a run twice as slow as before is news the time left should not hide."""

PHASES = {"setup": "setting up", "call": "running", "teardown": "tearing down"}
"""What a case is doing, from the phase that comes next after each report pytest makes of it."""
NEXT_PHASE = {"setup": "call", "call": "teardown"}


@dataclass(frozen=True)
class Case:
    """One collected case: its node id, whether it is a point, and its (protocol, target) when it has one."""

    nodeid: str
    point: bool
    pair: tuple[str, str] | None = None
    name: str = ""
    """How a line names it (default: the test's name with its parameters, from the node id)."""

    @property
    def label(self) -> str:
        """Its name on a line."""
        return self.name or case_id_from_nodeid(self.nodeid)

    @property
    def suite(self) -> str:
        """Its suite's name (``performance``, ``failover``, ...), ``other`` outside the qualification suites."""
        return suite_from_nodeid(self.nodeid) or "other"


@dataclass
class Running:
    """A case begun and not yet ended: where (the xdist worker, once a report named it), since when, in what phase."""

    since: float
    phase: str = "setup"
    worker: str = ""


@dataclass
class Progress:
    """The run's cases in order and what is known of their durations (``last``: node id -> the seconds it took in
    this machine's earlier runs, oldest first; a lone figure is one run)."""

    cases: Sequence[Case]
    last: Mapping[str, float | Sequence[float]] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    running: dict[str, Running] = field(default_factory=dict)
    """The node ids begun and not yet ended, in the order they began (one per xdist worker)."""

    def __post_init__(self) -> None:
        self._by_id = {c.nodeid: c for c in self.cases}
        self._history = {k: _figures(v) for k, v in self.last.items()}
        self._history = {k: v for k, v in self._history.items() if v}

    def case(self, nodeid: str) -> Case:
        """The collected case of ``nodeid`` (one not collected: a case that is no point)."""
        return self._by_id.get(nodeid) or Case(nodeid, False)

    @property
    def points(self) -> int:
        """How many points the run has."""
        return sum(1 for c in self.cases if c.point)

    def points_done(self) -> int:
        """How many points have ended."""
        return sum(1 for nodeid in self.done if self.case(nodeid).point)

    def start(self, nodeid: str, now: float | None = None) -> None:
        """``nodeid`` began (its set-up starts)."""
        self.running[nodeid] = Running(time.time() if now is None else now)

    def reported(self, nodeid: str, when: str, worker: str = "") -> None:
        """pytest reported phase ``when`` of ``nodeid`` (from xdist worker ``worker``): the case goes on to the next."""
        running = self.running.get(nodeid)
        if running is None:
            return
        running.phase = NEXT_PHASE.get(when, running.phase)
        running.worker = worker or running.worker

    def finish(self, nodeid: str, seconds: float) -> None:
        """``nodeid`` ended after ``seconds`` (setup, call and teardown together)."""
        self.done[nodeid] = seconds
        self.running.pop(nodeid, None)

    def expected_s(self, nodeid: str) -> float | None:
        """What this machine's earlier runs say ``nodeid`` takes (their median), None if it was never seen."""
        history = self._history.get(nodeid)
        return statistics.median(history) if history else None

    def pace(self) -> float:
        """What this run's finished cases took against what the same cases took before (1.0 until it is known)."""
        before = now = 0.0
        for nodeid, seconds in self.done.items():
            expected = self.expected_s(nodeid)
            if expected is not None:
                before += expected
                now += seconds
        if before < PACE_AFTER_S or now <= 0:
            return 1.0
        low, high = PACE_LIMITS
        return min(high, max(low, now / before))

    def left_s(self) -> float | None:
        """About how many seconds the cases not yet ended will take; None while nothing is known to estimate it."""
        means: dict[str, list[float]] = {}
        for nodeid, seconds in self.done.items():
            means.setdefault(self.case(nodeid).suite, []).append(seconds)
        everything = [s for values in means.values() for s in values]
        pace = self.pace()
        total = 0.0
        for case in self.cases:
            if case.nodeid in self.done:
                continue
            expected = self.expected_s(case.nodeid)
            if expected is not None:
                total += expected * pace
            elif case.suite in means:
                total += statistics.fmean(means[case.suite])
            elif everything:
                total += statistics.fmean(everything)
            else:
                return None
        return total

    def _left(self) -> str:
        left = self.left_s()
        return f"about {duration(left)} left" if left is not None else "time left not known yet"

    def line(self, nodeid: str, outcome: str, seconds: float) -> str:
        """The line for a point that ended: how far the run is, the point, what the other xdist workers run, the
        time left: ``fabricqa: point 12 of 58 (nvme-rdma nvmet): test_fio[...] passed in 25 s; about 8 min left``."""
        case = self.case(nodeid)
        text = f"fabricqa: point {self.points_done()} of {self.points}{_where(case)}: {case.label} {outcome} in "
        text += duration(seconds)
        others = [self.case(n).label for n in self.running if n != nodeid]
        if others:
            text += f"; running: {', '.join(others)}"
        return f"{text}; {self._left()}"

    def status(self) -> str:
        """The live line: points done of all, the time left, and per worker the case it runs, its pair, its phase
        and since when: ``fabricqa 12/58 points, about 31 min left | gw0 test_fio[nvme-tcp-nvmet-...] running since
        10:42:13``."""
        parts = [f"fabricqa {self.points_done()}/{self.points} points, {self._left()}"]
        for nodeid, running in self.running.items():
            case = self.case(nodeid)
            # The pair, unless the case's name says it already (the suites' ids start with protocol-target).
            pair = f"{' '.join(case.pair)} " if case.pair and "-".join(case.pair) not in case.label else ""
            worker = f"{running.worker} " if running.worker else ""
            since = time.strftime("%H:%M:%S", time.localtime(running.since))
            parts.append(f"{worker}{pair}{case.label} {PHASES[running.phase]} since {since}")
        return " | ".join(parts)

    def durations(self) -> dict[str, list[float]]:
        """What to keep for the next run's estimate: each case's last :data:`KEPT` durations, this run's last."""
        kept = {k: list(v) for k, v in self._history.items()}
        for nodeid, seconds in self.done.items():
            kept[nodeid] = [*kept.get(nodeid, []), seconds][-KEPT:]
        return kept


def _figures(value: float | Sequence[float] | object) -> list[float]:
    """A cached entry as a list of seconds: a lone number (one run, as the cache held it before) or a list; what is
    neither is nothing."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [float(value)]
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping):
        figures = list(value)
        if figures and all(isinstance(v, int | float) and not isinstance(v, bool) for v in figures):
            return [float(v) for v in figures][-KEPT:]
    return []


def _where(case: Case) -> str:
    return f" ({' '.join(case.pair)})" if case.pair else ""


def duration(seconds: float) -> str:
    """``25 s``, ``2 min 20 s``, ``8 min``, ``1 h 05 min``: rounded as a person reads a time left, to the second
    below ten minutes (where a whole minute is a large share of what is left)."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 600:
        whole = round(seconds)
        return f"{whole // 60} min {whole % 60:02d} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"
