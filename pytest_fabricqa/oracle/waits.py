"""The database's own view of its storage: wait events as AWR shows them, from a live database (issue 32, item 4).

A DBA judges storage by the top waits: "log file sync", "log file parallel write", "db file sequential read". Around
a load the user runs (Swingbench, a batch job), :func:`snapshot` reads every instance's ``GV$SYSTEM_EVENT`` (waits
and time waited, microseconds) and ``GV$EVENT_HISTOGRAM`` (waits per power-of-two millisecond bucket: a row's
``WAIT_TIME_MILLI`` is the bucket's upper bound, the waits in it took less), and ``GV$INSTANCE`` (each instance's
startup time). :func:`delta` subtracts two snapshots per instance and event: the waits, their average, and the 99th
percentile and the longest wait as the histogram's bucket bounds ("< 8 ms"), as AWR's wait event histogram shows
them. An instance that restarted between the snapshots (its startup time changed; its counters began again) is
said, and its figures are not counted: a counter that started again from zero cannot be subtracted. :func:`judge`
holds each event's figures to the lab's per-event ceilings (``database.waits.limits``).

The views need SELECT on them (SELECT_CATALOG_ROLE); no Diagnostics Pack is needed for V$ views, unlike AWR's
DBA_HIST_*. Nothing here imports pytest; python-oracledb is used through :mod:`pytest_fabricqa.oracle.sql`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_fabricqa.lab.database import EventLimits
from pytest_fabricqa.oracle.sql import query


def _in_list(events: Sequence[str]) -> tuple[str, dict[str, str]]:
    binds = {f"e{i}": event for i, event in enumerate(events)}
    return ", ".join(f":{name}" for name in binds), binds


def instance_sql() -> str:
    return "SELECT inst_id, instance_name, host_name, startup_time FROM gv$instance"


def system_event_sql(events: Sequence[str]) -> tuple[str, dict[str, str]]:
    names, binds = _in_list(events)
    statement = (
        "SELECT inst_id, event, wait_class, total_waits, time_waited_micro FROM gv$system_event "
        f"WHERE event IN ({names})"
    )
    return statement, binds


def histogram_sql(events: Sequence[str]) -> tuple[str, dict[str, str]]:
    names, binds = _in_list(events)
    statement = f"SELECT inst_id, event, wait_time_milli, wait_count FROM gv$event_histogram WHERE event IN ({names})"
    return statement, binds


@dataclass(frozen=True)
class Instance:
    """One instance as GV$INSTANCE shows it."""

    inst_id: int
    name: str
    host: str
    started: object
    """STARTUP_TIME as the driver gives it (a datetime): only compared, for a restart."""


@dataclass(frozen=True)
class Snapshot:
    """Every instance's wait counters for the events read, at one moment."""

    instances: dict[int, Instance]
    waits: dict[tuple[int, str], tuple[int, int]]
    """(instance, event) -> (total waits, time waited in microseconds)."""
    histograms: dict[tuple[int, str], dict[int, int]]
    """(instance, event) -> bucket upper bound in ms -> waits in it."""
    classes: dict[str, str] = field(default_factory=dict)
    """event -> its wait class (User I/O, System I/O, Commit)."""


def _int(row: Mapping[str, Any], column: str) -> int:
    value = row.get(column)
    return int(value) if value is not None else 0


def snapshot(connection: Any, events: Sequence[str]) -> Snapshot:
    """Read the instances and the ``events``' counters and histograms of every instance (three queries)."""
    instances = {
        _int(r, "INST_ID"): Instance(
            _int(r, "INST_ID"), str(r.get("INSTANCE_NAME", "")), str(r.get("HOST_NAME", "")), r.get("STARTUP_TIME", "")
        )
        for r in query(connection, instance_sql())
    }
    statement, binds = system_event_sql(events)
    waits, classes = {}, {}
    for row in query(connection, statement, binds):
        key = (_int(row, "INST_ID"), str(row["EVENT"]))
        waits[key] = (_int(row, "TOTAL_WAITS"), _int(row, "TIME_WAITED_MICRO"))
        classes[key[1]] = str(row.get("WAIT_CLASS", ""))
    statement, binds = histogram_sql(events)
    histograms: dict[tuple[int, str], dict[int, int]] = {}
    for row in query(connection, statement, binds):
        key = (_int(row, "INST_ID"), str(row["EVENT"]))
        histograms.setdefault(key, {})[_int(row, "WAIT_TIME_MILLI")] = _int(row, "WAIT_COUNT")
    return Snapshot(instances, waits, histograms, classes)


@dataclass(frozen=True)
class EventFigures:
    """One event on one instance over the window, in AWR's terms."""

    inst_id: int
    event: str
    waits: int
    time_ms: float
    avg_ms: float | None
    p99_ms: int | None
    """The upper bound of the histogram bucket holding the 99th percentile wait ("< p99_ms")."""
    max_ms: int | None
    """The upper bound of the highest bucket with a wait in the window ("< max_ms")."""
    histogram: dict[int, int]
    wait_class: str = ""


@dataclass
class WaitDelta:
    """Two snapshots' difference: figures per (instance, event), instances that restarted between them (not
    counted), and instances seen in only one of them."""

    figures: list[EventFigures] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def by_event(self, event: str) -> list[EventFigures]:
        return [f for f in self.figures if f.event == event]


def _bucket(histogram: Mapping[int, int], share: float) -> int | None:
    total = sum(histogram.values())
    if total <= 0:
        return None
    needed, seen = math.ceil(share * total), 0
    for bound in sorted(histogram):
        seen += histogram[bound]
        if seen >= needed:
            return bound
    return max(histogram)


def delta(before: Snapshot, after: Snapshot, events: Sequence[str]) -> WaitDelta:
    """The window's figures per instance and event (see the module); a counter that went down on an instance
    whose startup time did not change is taken as a restart too."""
    out = WaitDelta()
    for inst_id in sorted(set(before.instances) | set(after.instances)):
        was, now = before.instances.get(inst_id), after.instances.get(inst_id)
        if was is None or now is None:
            which = now or was
            assert which is not None
            side = "after" if now is not None else "before"
            out.missing.append(
                f"instance {inst_id} ({which.name} on {which.host}) was read only {side} the window: not counted"
            )
            continue
        if was.started != now.started:
            out.restarted.append(
                f"instance {inst_id} ({now.name} on {now.host}) restarted between the snapshots (started {was.started}, "
                f"then {now.started}): its counters began again, its waits are not counted"
            )
            continue
        figures: list[EventFigures] = []
        wound_back = False
        for event in events:
            w0, t0 = before.waits.get((inst_id, event), (0, 0))
            w1, t1 = after.waits.get((inst_id, event), (0, 0))
            h0 = before.histograms.get((inst_id, event), {})
            h1 = after.histograms.get((inst_id, event), {})
            histogram = {b: h1.get(b, 0) - h0.get(b, 0) for b in sorted(set(h0) | set(h1))}
            if w1 < w0 or t1 < t0 or any(v < 0 for v in histogram.values()):
                wound_back = True
                break
            histogram = {b: v for b, v in histogram.items() if v}
            waits = w1 - w0
            time_ms = (t1 - t0) / 1000
            figures.append(
                EventFigures(
                    inst_id, event, waits, time_ms, time_ms / waits if waits else None, _bucket(histogram, 0.99),
                    max(histogram) if histogram else None, histogram, after.classes.get(event, ""),
                )
            )  # fmt: skip
        if wound_back:
            out.restarted.append(
                f"instance {inst_id} ({now.name} on {now.host}): a counter went down between the snapshots (the "
                "instance or its statistics were reset): its waits are not counted"
            )
            continue
        out.figures += figures
    return out


def _bounds(bound: int) -> tuple[float, int]:
    """A histogram bucket's range in ms: ``< bound`` and at least half of it (the first bucket, ``< 1``, from 0)."""
    return (bound / 2 if bound > 1 else 0.0), bound


def judge(result: WaitDelta, limits: Mapping[str, EventLimits]) -> tuple[list[str], list[str]]:
    """Each event's figures against its ceilings, per instance: (problems, notes), one sentence each.

    The average is exact. The 99th percentile and the longest wait are histogram buckets (waits of at least half
    the bound, less than the bound): a bucket at or above the ceiling from its lower bound on is a breach; one that
    straddles it (``< 8 ms`` against 7 ms: 4-8 ms) cannot be told from the histogram and is a note saying so, not
    a pass claimed nor a failure invented. A restarted or missing instance is a problem: its figures are not there
    to judge."""
    problems = list(result.restarted) + list(result.missing)
    notes: list[str] = []
    for event, limit in limits.items():
        for f in result.by_event(event):
            where = f"instance {f.inst_id}, {event!r}"
            if limit.avg_ms is not None and f.avg_ms is not None and f.avg_ms > limit.avg_ms:
                problems.append(
                    f"{where}: average {f.avg_ms:.2f} ms over {f.waits} waits, above the {limit.avg_ms:g} ms limit"
                )
            for what, bound, ceiling in (
                ("99th percentile", f.p99_ms, limit.p99_ms),
                ("longest wait", f.max_ms, limit.max_ms),
            ):
                if ceiling is None or bound is None:
                    continue
                low, high = _bounds(bound)
                if low >= ceiling:
                    problems.append(
                        f"{where}: {what} {low:g}-{high} ms (histogram bucket < {high} ms) over {f.waits} waits, "
                        f"above the {ceiling:g} ms limit"
                    )
                elif high > ceiling:
                    notes.append(
                        f"{where}: {what} in the {low:g}-{high} ms bucket, which the {ceiling:g} ms limit falls inside: "
                        "the histogram cannot tell whether it held"
                    )
    return problems, notes


def table(result: WaitDelta) -> list[dict[str, object]]:
    """The "as AWR would show it" rows: per instance and event with waits, waits, total time, average, 99th
    percentile and longest wait (bucket bounds)."""
    return [
        {
            "instance": f.inst_id,
            "event": f.event,
            "wait class": f.wait_class,
            "waits": f.waits,
            "total wait time (ms)": round(f.time_ms, 1),
            "avg wait (ms)": None if f.avg_ms is None else round(f.avg_ms, 2),
            "p99 (ms)": None if f.p99_ms is None else f"< {f.p99_ms}",
            "max (ms)": None if f.max_ms is None else f"< {f.max_ms}",
        }
        for f in result.figures
        if f.waits
    ]
