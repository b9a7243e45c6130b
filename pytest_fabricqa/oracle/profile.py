"""The database's own I/O mix as one fio run per node, and its figures in the names a DBA reads (issue 32, items 1-2).

A RAC database does not do one fio point at a time: while LGWR writes redo (small, sequential, synchronous, one at
a time: every commit waits for it), foreground sessions read single blocks at random, DBWR writes dirty blocks
behind them in asynchronous batches, and full scans read 1 MiB at a time, from every node at once. A fabric can pass
every fio point and still give a 20 ms log file sync under that mix.

:func:`job_file` is one node's fio job file: the four streams of the lab's ``oracle_profile`` as four fio jobs run
together, on regions of the device that are that node's own (each instance has its own redo thread and, here, its
own part of the data: node ``n`` of ``N`` from byte :data:`BASE_OFFSET` + ``n`` x its span on). :func:`figures`
reads fio's JSON of that run into one :class:`EventFigures` per stream under the wait event AWR would name it, and
:func:`judge` holds them to the lab's per-event limits (``oracle_profile.limits``, the same
:class:`~pytest_fabricqa.lab.database.EventLimits` as the live database's waits).

Scaling (item 3, seed 003's 1 to 4 nodes): :func:`steps` names the nodes of each run (the first 1, 2, ... N) and
:func:`scaling` turns the runs' figures into per-step database IOPS, efficiency against linear and the knee (the
scaling code of :mod:`pytest_fabricqa.core.scaling`), with each event's average and worst 99th percentile.
Nothing here imports pytest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_fabricqa.core.scaling import (
    DEFAULT_KNEE_GAIN_PCT,
    ScalingPoint,
    efficiency_violations,
    knee,
    scaling_points,
    subsets,
)
from pytest_fabricqa.fio.model import FioResult, combine_directions
from pytest_fabricqa.lab.database import EventLimits, OracleProfile

MiB = 1 << 20
BASE_OFFSET = 128 * MiB
"""Where the profile's regions begin: past block 0 and the allocation units the data-safety guard reads, as the
integrity suite's regions."""

STREAMS: dict[str, tuple[str, str]] = {
    "redo": ("log file parallel write", "write"),
    "reads": ("db file sequential read", "read"),
    "dbwr": ("db file parallel write", "write"),
    "multiblock": ("db file scattered read", "read"),
}
"""fio job name -> (the wait event AWR names that I/O, the direction it does)."""


@dataclass(frozen=True)
class Regions:
    """One node's byte ranges on the device: its redo log and its data."""

    redo_offset: int
    redo_bytes: int
    data_offset: int
    data_bytes: int

    @property
    def end(self) -> int:
        return self.data_offset + self.data_bytes


def regions(profile: OracleProfile, node: int) -> Regions:
    """Node ``node``'s (0, 1, ...) regions: its redo, then its data, after the nodes before it."""
    redo, data = profile.redo.region_mb * MiB, profile.data_mb * MiB
    start = BASE_OFFSET + node * (redo + data)
    return Regions(start, redo, start + redo, data)


def span(profile: OracleProfile, nodes: int) -> int:
    """Bytes of the device the profile needs for ``nodes`` nodes (its regions' end)."""
    return regions(profile, nodes - 1).end if nodes else BASE_OFFSET


def job_file(profile: OracleProfile, device: str, node: int, *, runtime_s: int | None = None) -> str:
    """Node ``node``'s fio job file: the four streams at once on ``device`` (direct I/O, time based)."""
    r = regions(profile, node)
    runtime = runtime_s if runtime_s is not None else profile.runtime_s
    redo_sync = "sync=dsync" if profile.redo.sync == "dsync" else "fdatasync=1"
    dbwr_rate = f"rate_iops={profile.dbwr.rate_iops}\n" if profile.dbwr.rate_iops else ""
    return (
        "[global]\n"
        f"filename={device}\ndirect=1\ntime_based=1\nruntime={runtime}\nrandrepeat=0\nnorandommap=1\n"
        "group_reporting=1\nlat_percentiles=1\nclat_percentiles=0\n"
        f"randseed={4096 + node}\n"
        "\n[redo]\nnew_group\n"
        f"rw=write\nbssplit={profile.redo.bssplit}\nioengine=psync\n{redo_sync}\niodepth=1\n"
        f"offset={r.redo_offset}\nsize={r.redo_bytes}\n"
        "\n[reads]\nnew_group\n"
        f"rw=randread\nbs={profile.reads.bs}\nioengine=psync\niodepth=1\nnumjobs={profile.reads.sessions}\n"
        f"offset={r.data_offset}\nsize={r.data_bytes}\n"
        "\n[dbwr]\nnew_group\n"
        f"rw=randwrite\nbs={profile.dbwr.bs}\nioengine=libaio\niodepth={profile.dbwr.iodepth}\n"
        f"iodepth_batch_submit={profile.dbwr.batch}\niodepth_batch_complete_max={profile.dbwr.batch}\n{dbwr_rate}"
        f"offset={r.data_offset}\nsize={r.data_bytes}\n"
        "\n[multiblock]\nnew_group\n"
        f"rw=read\nbs={profile.multiblock.bs}\nioengine=libaio\niodepth={profile.multiblock.iodepth}\n"
        f"offset={r.data_offset}\nsize={r.data_bytes}\n"
    )


@dataclass(frozen=True)
class EventFigures:
    """One stream on one node over the run, as a wait event: its waits (I/Os), the database-style IOPS, the
    average, 99th percentile and longest wait in ms, and the share of the run its sessions spent waiting (the time
    waited over the run's time per session and I/O slot: 1.0 is a session that always waited, or an asynchronous
    stream whose every slot was always in flight)."""

    node: str
    event: str
    stream: str
    waits: int
    iops: float
    avg_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    waiting_share: float | None
    slots: int
    """Sessions times I/Os each keeps in flight."""


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1000


def _slots(options: Sequence[tuple[str, str]]) -> int:
    """A job's sessions times the I/Os each keeps in flight (numjobs x iodepth, fio's defaults 1)."""
    given = dict(options)
    return max(1, int(given.get("numjobs", "1"))) * max(1, int(given.get("iodepth", "1")))


def figures(result: FioResult, node: str) -> list[EventFigures]:
    """Each stream of one node's run (its clones merged: the reads' sessions), under its wait event."""
    out: list[EventFigures] = []
    for stream, (event, direction) in STREAMS.items():
        jobs = [job for job in result.jobs if job.name == stream]
        if not jobs:
            continue
        parts = [job.direction(direction) for job in jobs]
        merged, _ = combine_directions(direction, parts) if len(parts) > 1 else (parts[0], ())
        longest = [p.lat_max_us for p in parts if p.lat_max_us is not None]
        runtime_s = max((p.runtime_ms for p in parts), default=0) / 1000
        waited_s = sum((p.lat_mean_us or 0) * p.total_ios for p in parts) / 1e6
        slots = sum(_slots(job.options) for job in jobs)
        share = waited_s / (runtime_s * slots) if runtime_s else None
        max_ms = _ms(max(longest)) if longest else None
        p99_ms = _ms(merged.p99_us)
        if p99_ms is not None and max_ms is not None:
            p99_ms = min(p99_ms, max_ms)  # fio's percentile is its histogram bin's upper value; never past the max
        out.append(
            EventFigures(
                node, event, stream, merged.total_ios, merged.iops, _ms(merged.lat_mean_us), p99_ms, max_ms, share,
                sum(_slots(j.options) for j in jobs),
            )
        )  # fmt: skip
    return out


def database_iops(all_figures: Sequence[EventFigures]) -> dict[str, float]:
    """Database-style IOPS as AWR's load profile adds them: read, write and total over every node and stream."""
    reads = sum(f.iops for f in all_figures if STREAMS[f.stream][1] == "read")
    writes = sum(f.iops for f in all_figures if STREAMS[f.stream][1] == "write")
    return {"read": reads, "write": writes, "total": reads + writes}


def judge(all_figures: Sequence[EventFigures], limits: Mapping[str, EventLimits]) -> list[str]:
    """Each event's figures per node against the lab's ceilings, one sentence per breach."""
    problems: list[str] = []
    for f in all_figures:
        limit = limits.get(f.event)
        if limit is None:
            continue
        for what, value, ceiling in (("average", f.avg_ms, limit.avg_ms), ("99th percentile", f.p99_ms, limit.p99_ms),
                                     ("longest wait", f.max_ms, limit.max_ms)):  # fmt: skip
            if ceiling is not None and value is not None and value > ceiling:
                problems.append(
                    f"{f.node}, {f.event!r}: {what} {value:.2f} ms over {f.waits} waits, above the {ceiling:g} ms limit"
                )
    return problems


def steps(nodes: Sequence[str], profile: OracleProfile) -> list[tuple[str, ...]]:
    """The nodes of each run: the first 1, 2, ... all of them when the lab scales the profile (the last is every
    node, the case's own figures); only every node when it does not, or when there is one."""
    return subsets(nodes) if profile.scaling else [tuple(nodes)]


@dataclass(frozen=True)
class ScalingStep:
    """One scaling step of the profile: its nodes, database IOPS (read, write, total), efficiency against linear,
    and per event the waits' average (over every node's waits) and the worst node's 99th percentile, in ms."""

    nodes: tuple[str, ...]
    iops: dict[str, float]
    efficiency: float | None
    events: dict[str, tuple[float | None, float | None]]
    knee: bool = False
    """The knee: the last step before the first one that added no more than the lab's ``workloads.knee_gain_pct``
    percent of total IOPS (none is marked when every step paid, or when there is one step)."""

    def to_dict(self) -> dict[str, object]:
        """JSON form for the case's extras (``oracle_scaling``)."""
        return {
            "n": len(self.nodes), "nodes": list(self.nodes),
            "iops": {k: round(v, 1) for k, v in self.iops.items()},
            "efficiency": None if self.efficiency is None else round(self.efficiency, 3),
            "events": {e: {"avg_ms": _round(a), "p99_ms": _round(p)} for e, (a, p) in self.events.items()},
            "knee": self.knee,
        }  # fmt: skip


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def scaling(
    runs: Sequence[tuple[Sequence[str], Sequence[EventFigures]]], min_gain_pct: float = DEFAULT_KNEE_GAIN_PCT
) -> list[ScalingStep]:
    """Each step's figures from (nodes, every node's event figures) per run, in order 1..N: efficiency from the
    scaling code (IOPS(n) / (n x IOPS(1))) and the knee of the total IOPS (:func:`~pytest_fabricqa.core.scaling.knee`
    at ``min_gain_pct``) when a later step stopped paying."""
    totals = [database_iops(found) for _, found in runs]
    points = scaling_points([(tuple(nodes), {"iops": t["total"]}) for (nodes, _), t in zip(runs, totals, strict=True)])
    where = knee([t["total"] for t in totals], min_gain_pct) if len(runs) > 1 else None
    stopped = where is not None and where < len(runs) - 1
    out: list[ScalingStep] = []
    for index, ((nodes, found), total, point) in enumerate(zip(runs, totals, points, strict=True)):
        events: dict[str, tuple[float | None, float | None]] = {}
        for event, _ in STREAMS.values():
            these = [f for f in found if f.event == event]
            waits = sum(f.waits for f in these)
            weighted = [(f.avg_ms, f.waits) for f in these if f.avg_ms is not None]
            avg = sum(a * w for a, w in weighted) / waits if weighted and waits else None
            p99s = [f.p99_ms for f in these if f.p99_ms is not None]
            if these:
                events[event] = (avg, max(p99s) if p99s else None)
        out.append(ScalingStep(tuple(nodes), total, point.efficiency, events, knee=stopped and index == where))
    return out


def scaling_violations(found: Sequence[ScalingStep], minimum: float | None) -> list[str]:
    """One sentence per step below the lab's ``min_scaling_efficiency`` (none set: none)."""
    points = [ScalingPoint(len(s.nodes), s.nodes, s.iops["total"], efficiency=s.efficiency) for s in found]
    return efficiency_violations(points, minimum, label="oracle profile database IOPS")
