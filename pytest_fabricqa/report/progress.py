"""Where a long run is: the points done of all, what each worker runs now, and about how long is left.

A *point* is a case that puts load on a target (a fio point, an integrity check, a fault under I/O): the cases a
qualification's time goes to, one line each as they end. The time left adds, over every case still to run (points
and the quick checks between them), what it took in this machine's last run (pytest's cache), or for a case not
seen before the mean of this run's finished cases of its suite (of all its finished cases while its suite has
none); unknown until a case has finished or was seen before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytest_fabricqa.report.gather import case_id_from_nodeid, suite_from_nodeid


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
class Progress:
    """The run's cases in order and what is known of their durations (``last``: node id -> seconds, last run)."""

    cases: Sequence[Case]
    last: Mapping[str, float] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    running: list[str] = field(default_factory=list)
    """The node ids begun and not yet ended, in the order they began (one per xdist worker)."""

    def __post_init__(self) -> None:
        self._by_id = {c.nodeid: c for c in self.cases}

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

    def start(self, nodeid: str) -> None:
        """``nodeid`` began."""
        self.running.append(nodeid)

    def finish(self, nodeid: str, seconds: float) -> None:
        """``nodeid`` ended after ``seconds`` (setup, call and teardown together)."""
        self.done[nodeid] = seconds
        if nodeid in self.running:
            self.running.remove(nodeid)

    def left_s(self) -> float | None:
        """About how many seconds the cases not yet ended will take; None while nothing is known to estimate it."""
        means: dict[str, list[float]] = {}
        for nodeid, seconds in self.done.items():
            means.setdefault(self.case(nodeid).suite, []).append(seconds)
        everything = [s for values in means.values() for s in values]
        total = 0.0
        for case in self.cases:
            if case.nodeid in self.done:
                continue
            if case.nodeid in self.last:
                total += self.last[case.nodeid]
            elif case.suite in means:
                total += sum(means[case.suite]) / len(means[case.suite])
            elif everything:
                total += sum(everything) / len(everything)
            else:
                return None
        return total

    def line(self, nodeid: str, outcome: str, seconds: float) -> str:
        """The line for a point that ended: how far the run is, the point, what the other xdist workers run, the
        time left: ``fabricqa: point 12 of 58 (nvme-rdma nvmet): test_fio[...] passed in 25 s; about 8 min left``."""
        case = self.case(nodeid)
        where = f" ({' '.join(case.pair)})" if case.pair else ""
        text = f"fabricqa: point {self.points_done()} of {self.points}{where}: {case.label} {outcome} in {duration(seconds)}"
        others = [self.case(n).label for n in self.running if n != nodeid]
        if others:
            text += f"; running: {', '.join(others)}"
        left = self.left_s()
        text += f"; about {duration(left)} left" if left is not None else "; time left not known yet"
        return text

    def durations(self) -> dict[str, float]:
        """What to keep for the next run's estimate: the last run's figures, this run's over them."""
        return {**self.last, **self.done}


def duration(seconds: float) -> str:
    """``25 s``, ``8 min``, ``1 h 05 min``: rounded as a person reads a time left."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"
