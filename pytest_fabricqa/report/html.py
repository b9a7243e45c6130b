"""The qualification report: one self-contained HTML file a vendor can hand to a customer.

Everything is inline (CSS, SVG charts); nothing is fetched when the file is opened, so it reads the same
from a USB stick in a machine room. The page is built from a :class:`~pytest_fabricqa.report.model.Run`
in two steps, as pytest-html does: plain view data here, presentation in ``templates/report.html.j2``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from pytest_fabricqa import __version__
from pytest_fabricqa.core.metrics import BY_NAME, METRIC_LABELS
from pytest_fabricqa.core.scaling import DEFAULT_KNEE_GAIN_PCT, ScalingPoint, knee
from pytest_fabricqa.report import charts
from pytest_fabricqa.report.compare import METRIC_SETS, columns_from_run, compare_columns, render_html_table
from pytest_fabricqa.report.formatting import format_figure, rw_label, size_bytes, workload_sort_key
from pytest_fabricqa.report.model import Case, Integrity, Run, overall_verdict, write_atomic
from pytest_fabricqa.report.series import TimeSeries, Window

TEMPLATES = Path(__file__).parent / "templates"

PROTOCOL_NAMES = {"nvme-rdma": "NVMe/RDMA", "nvme-tcp": "NVMe/TCP", "iscsi": "iSCSI", "iser": "iSER"}
SUITE_NAMES = {
    "prerequisite": "Prerequisite",
    "connectivity": "Connectivity",
    "performance": "Performance",
    "oracle": "Oracle",
    "integrity": "Integrity",
    "failover": "Failover",
}
CALIBRATE_LABELS = {
    "max_iops": "Maximum IOPS",
    "max_mbps": "Maximum MB/s",
    "actual_latency_ms": "Latency at maximum IOPS (ms)",
    "max_latency_ms": "Latency limit given (ms)",
    "num_physical_disks": "Physical disks given",
}
NO_ORACLE = "the lab declares no database"


def protocol_name(protocol: str | None) -> str:
    """``nvme-rdma`` -> ``NVMe/RDMA``; lab-wide cases (no protocol) read ``Lab``."""
    if protocol is None:
        return "Lab"
    return PROTOCOL_NAMES.get(protocol, protocol)


def bs_label(bs: str) -> str:
    """fio block size in binary units as storage people write them: ``8k`` -> ``8 KiB``, ``1m`` -> ``1 MiB``."""
    n = size_bytes(bs)
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return bs


@dataclass
class Row:
    """One table row: a case's total, or one host's share of it."""

    jobs: str
    qd: str
    host: str
    cells: list[str]
    verdict: str
    kind: str = "total"
    """``total`` (the case), ``host`` (one host's share, under its total), ``reasons`` (why it failed) or
    ``info`` (what the figures stand on: queue settings, seeds, start spread; in ``reasons``)."""
    reasons: list[str] = field(default_factory=list)
    case_id: str = ""
    """The case a ``total`` row stands for (the row's ``data-case``): what ties it to the case in results.json, the
    terminal summary and JUnit."""


@dataclass
class Group:
    """One access pattern and block size of one protocol: a heading, a chart and a table."""

    title: str
    anchor: str
    chart: str | None
    rows: list[Row]
    headers: list[str]
    show_qd: bool = True
    show_host: bool = True
    knee: str = ""
    """The sweep's knee in words (seed 002), when the group is a sweep."""
    series: list[tuple[str, str]] = field(default_factory=list)
    """(case id, time-series chart) for every case that kept fio's logs."""


@dataclass
class ScalingView:
    """A scaling run (seed 003): a table per step, its chart, the verdict and why it failed."""

    title: str
    verdict: str
    chart: str | None
    rows: list[list[str]]
    reasons: list[str]


@dataclass
class ProtocolSection:
    name: str
    anchor: str
    verdict: str
    counts: dict[str, int]
    groups: list[Group]
    scaling: list[ScalingView] = field(default_factory=list)


@dataclass
class Failure:
    scope: str
    case_id: str
    reason: str


TABLE_METRICS = (
    "iops", "iops_rsd_pct", "mbps", "lat_mean_us", "lat_p99_us", "lat_p999_us", "cpu_usr_pct", "cpu_sys_pct",
    "target_cpu_usr_pct", "target_cpu_sys_pct", "target_cpu_idle_pct",
)  # fmt: skip
TABLE_HEADERS = (
    "IOPS", "IOPS RSD %", "MB/s", "mean µs", "p99 µs", "p99.9 µs", "CPU usr %", "CPU sys %", "target usr %",
    "target sys %", "target idle %",
)  # fmt: skip


def _cells(figures: dict[str, float], metrics: Sequence[str]) -> list[str]:
    return [format_figure(m, figures[m]) if m in figures else "–" for m in metrics]


def case_notes(case: Case) -> list[str]:
    """What a case's figures stand on, one line each: how far apart its hosts started, each host's fio
    randseed and the queue settings read from the hosts."""
    notes: list[str] = []
    if case.start_spread_ms is not None:
        late = max(case.start_offsets_ms, key=lambda host: case.start_offsets_ms[host])
        notes.append(f"hosts started within {case.start_spread_ms:,.0f} ms of each other (last: {late}; fio job_start)")
    elif len(case.hosts) > 1 and case.randseeds:
        notes.append("start spread of the hosts not known: this fio does not report job_start (fio 3.36 does)")
    if case.randseeds:
        notes.append("randseed: " + ", ".join(f"{host} {seed}" for host, seed in sorted(case.randseeds.items())))
    if case.queues:
        parts = [
            f"{host} " + ", ".join(f"{key} {value}" for key, value in settings.items())
            for host, settings in sorted(case.queues.items())
        ]
        notes.append("queues: " + "; ".join(parts))
    return notes


def _reasons(case: Case) -> list[str]:
    reasons = list(case.violations)
    if case.regression is not None:
        reasons += [m for m in case.regression.messages if m not in reasons]
    reasons += [f"{c.name}: {c.detail}" if c.detail else c.name for c in case.checks if c.verdict != "passed"]
    if case.verdict in ("failed", "error") and not reasons:
        reasons.append("no reason recorded (see the pytest output for this test)")
    return reasons


GroupKey = tuple[str, int, str, int, str, str]


def _group_key(case: Case, target: str | None = None) -> GroupKey:
    """Cases of one target, access pattern and block size share a table (the target first: its own tables)."""
    w = case.workload
    assert w is not None
    key = workload_sort_key(w)
    return (target or "", key[0], w.rw, key[2], w.bs, w.size or "")


def _group_title(case: Case, target: str | None = None) -> str:
    w = case.workload
    assert w is not None
    title = f"{rw_label(w.rw).capitalize()}, {bs_label(w.bs)} blocks"
    if w.size:
        title += f", {w.size} file"
    return f"{target}: {title}" if target else title


def _targets_of(run: Run, protocol: str) -> list[str]:
    """The targets that served ``protocol``'s performance cases, in first-seen order."""
    found = (run.case_target(c) for c in run.cases_for(protocol, "performance"))
    return list(dict.fromkeys(t for t in found if t))


def _point(case: Case, x: float) -> charts.Point:
    return charts.Point(
        x, case.figures.get("iops"), case.figures.get("lat_p99_us"), case.verdict in ("failed", "error")
    )


def _knee_gain_pct(cases: Sequence[Case]) -> float:
    for case in cases:
        value = case.extras.get("knee_gain_pct")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return DEFAULT_KNEE_GAIN_PCT


def _sweep_series(cases: Sequence[Case]) -> tuple[list[charts.Series], dict[str, Any], str] | None:
    """IOPS and p99 against outstanding I/O (jobs x QD), one line per jobs count, the sweep's knee marked (seed
    002); or, without queue depths, one line over jobs. None: nothing to draw. The third item says the knee."""
    work = [(c, c.workload) for c in cases if c.workload is not None]
    if not any("iops" in c.figures or "lat_p99_us" in c.figures for c, _ in work):
        return None
    depths = {w.iodepth for _, w in work}
    jobs = sorted({w.numjobs for _, w in work})
    if None not in depths and len(depths) > 1:
        # The knee walks the whole sweep in order of outstanding I/O (then jobs): the last step that still paid.
        ordered = sorted(work, key=lambda cw: (cw[1].outstanding or 0, cw[1].numjobs))
        gain = _knee_gain_pct(cases)
        at = knee([c.figures.get("iops") for c, _ in ordered], gain)
        knee_case = ordered[at] if at is not None else None
        series = []
        for j in jobs:
            points = tuple(
                sorted((_point(c, float(w.outstanding or 0)) for c, w in work if w.numjobs == j), key=lambda p: p.x)
            )
            knee_x = None
            if knee_case is not None and knee_case[1].numjobs == j:
                knee_x = float(knee_case[1].outstanding or 0)
            series.append(charts.Series(f"{j} job{'s' if j != 1 else ''}", points, knee=knee_x))
        ticks = sorted({float(w.outstanding or 0) for _, w in work})
        options: dict[str, Any] = {
            "x_label": "outstanding I/O (jobs × queue depth)",
            "x_ticks": ticks,
            "x_tick_labels": [f"{t:g}" for t in ticks],
        }
        said = ""
        if knee_case is not None:
            w = knee_case[1]
            said = (
                f"Knee: {w.numjobs} job{'s' if w.numjobs != 1 else ''} × QD {w.iodepth} ({w.outstanding} outstanding "
                f"I/Os), the last step of the sweep that still gained more than {gain:g}% IOPS."
            )
        return series, options, said
    if len(jobs) > 1:
        points = tuple(sorted((_point(c, float(w.numjobs)) for c, w in work), key=lambda p: p.x))
        options = {
            "x_label": "jobs",
            "x_ticks": [float(j) for j in jobs],
            "x_tick_labels": [str(j) for j in jobs],
            "log_x": False,
        }
        return [charts.Series("", points)], options, ""
    return None


def _timeseries_chart(case: Case, chart_id: str) -> str | None:
    data = case.extras.get("timeseries")
    if not isinstance(data, dict):
        return None
    try:
        series = TimeSeries.from_dict(data)
    except (ValueError, KeyError, TypeError):
        return None

    def points(windows: Sequence[Window]) -> list[tuple[float, float | None, float | None]]:
        return [(w.t_s, w.iops, w.p99_us) for w in windows]

    return charts.timeseries_chart(
        {host: points(ws) for host, ws in series.hosts.items()}, points(series.cluster), chart_id=chart_id
    )


FAILOVER_METRICS = (
    "stall_s", "other_stall_s", "first_io_s", "recovery_s", "failback_s", "io_errors", "verify_errors"
)  # fmt: skip
"""The failover summary's columns, in the order a fault unfolds; ``path_imbalance_pct`` joins them when a case
measured it (the path parity case)."""


@dataclass
class FigureCell:
    """One figure of the failover summary, with the limit the case recorded for it."""

    text: str
    limit: str = ""
    """``≤ 10``: the case's limit on the figure (``case.thresholds``); empty when it recorded none."""
    broken: bool = False
    """The figure is beyond its limit, or absent while limited (a check nobody could make does not pass)."""


@dataclass
class FailoverRow:
    """A row of the failover summary: a case (``case``), one host's share of it (``host``) or why it failed
    (``reasons``)."""

    kind: str
    cells: list[FigureCell] = field(default_factory=list)
    case_id: str = ""
    scope: str = ""
    """Protocol and target: ``NVMe/TCP · nvmet``."""
    fault: str = ""
    """The outage's name as the failover suite records it (``all-paths-down-brief``); ``–`` when none is."""
    what: str = ""
    host: str = ""
    verdict: str = ""
    chart: str = ""
    """The id of the case's chart further down the section; empty when no chart was drawn."""
    reasons: list[str] = field(default_factory=list)
    kernel: list[tuple[str, str]] = field(default_factory=list)
    """The fault's account: (host, its storage kernel lines during the case, newline-joined) per host with any."""


@dataclass
class FailoverChart:
    """One failover case's chart, under the id its summary row links to."""

    anchor: str
    case_id: str
    what: str
    svg: str


@dataclass
class FailoverView:
    """The failover section: a summary row per case (and per host under it), then each case's chart."""

    headers: list[str]
    rows: list[FailoverRow]
    charts: list[FailoverChart]
    stall_rule: str = ""
    """How the cases measured the fault's stall (their ``extras["failover"]["stall_rule"]``); empty when none said."""


def _failover_chart(data: Mapping[str, Any], chart_id: str) -> str | None:
    """The hosts' IOPS over time through the fault, from ``extras["failover"]["series"]``; None without one."""
    series = data.get("series")
    if not isinstance(series, dict):
        return None
    hosts: dict[str, tuple[list[float], list[float], tuple[float, float]]] = {}
    for host, points in series.items():
        try:
            window = (float(points["fault_s"][0]), float(points["fault_s"][1]))
            hosts[str(host)] = ([float(t) for t in points["t_s"]], [float(v) for v in points["iops"]], window)
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return charts.failover_chart(hosts, chart_id=chart_id)


def _figure_cell(metric: str, figures: Mapping[str, float], limits: Mapping[str, float]) -> FigureCell:
    value = figures.get(metric)
    text = format_figure(metric, value) if value is not None else "–"
    spec = BY_NAME[metric]
    limit = limits.get(spec.threshold_key) if spec.threshold_key is not None else None
    if limit is None:
        return FigureCell(text)
    # The limit's direction is the metric's (metrics.py); the verdict itself stays the case's own.
    broken = value is None or (value > limit if spec.bound == "max" else value < limit)
    return FigureCell(text, f"{'≤' if spec.bound == 'max' else '≥'} {limit:g}", broken)


def _anchor(prefix: str, case_id: str, taken: set[str]) -> str:
    """An element id from a case id (``failover-nvme-tcp-nvmet-failover-all-paths-down-brief``), unique in
    ``taken``: gathered case ids carry brackets and colons, which make awkward link targets."""
    base = f"{prefix}-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", case_id).strip("-") or "case")
    anchor, n = base, 1
    while anchor in taken:
        n += 1
        anchor = f"{base}-{n}"
    taken.add(anchor)
    return anchor


def _failover(run: Run, chart_ids: list[int]) -> FailoverView | None:
    """Every failover case as a summary row (the figures it recorded, each against its limit, and the verdict),
    a row per host under it, and the chart of its hosts' IOPS when the series were recorded; None without
    failover cases."""
    cases = [c for c in run.cases if c.suite == "failover"]
    if not cases:
        return None
    measured = [*FAILOVER_METRICS]
    if any("path_imbalance_pct" in c.figures for c in cases):
        measured.append("path_imbalance_pct")
    rows: list[FailoverRow] = []
    drawn: list[FailoverChart] = []
    taken = {"failover-summary"}  # the summary table's own id (report.html.j2)
    for case in cases:
        raw = case.extras.get("failover")
        data: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        what = str(data.get("what", ""))
        anchor = ""
        if "series" in data:
            chart_ids[0] += 1
            svg = _failover_chart(data, f"c{chart_ids[0]}")
            if svg is not None:
                anchor = _anchor("failover", case.case_id, taken)
                drawn.append(FailoverChart(anchor, case.case_id, what, svg))
        target = run.case_target(case)
        several = len(case.hosts) > 1
        rows.append(
            FailoverRow(
                "case",
                [_figure_cell(m, case.figures, case.thresholds) for m in measured],
                case_id=case.case_id,
                scope=protocol_name(case.protocol) + (f" · {target}" if target else ""),
                fault=str(data.get("outage", "–")),
                what=what,
                host=f"{len(case.hosts)} hosts" if several else next(iter(case.hosts), ""),
                verdict=case.verdict,
                chart=anchor,
            )
        )
        if several:
            for host, figures in sorted(case.hosts.items()):
                cells = [_figure_cell(m, figures, case.thresholds) for m in measured]
                rows.append(FailoverRow("host", cells, host=host))
        if case.verdict in ("failed", "error"):
            rows.append(FailoverRow("reasons", verdict=case.verdict, reasons=_reasons(case)))
        account = kernel_account(case)
        if account:
            rows.append(FailoverRow("kernel", kernel=account))
    rules = [d["stall_rule"] for c in cases if isinstance(d := c.extras.get("failover"), dict) and d.get("stall_rule")]
    return FailoverView([METRIC_LABELS[m] for m in measured], rows, drawn, str(rules[0]) if rules else "")


def kernel_account(case: Case) -> list[tuple[str, str]]:
    """(host, its storage kernel lines during the case, newline-joined) for each host the case's
    ``extras["kernel_log"]`` names, in its order; empty when the case kept none."""
    raw = case.extras.get("kernel_log")
    if not isinstance(raw, dict):
        return []
    return [(str(h), "\n".join(str(x) for x in lines)) for h, lines in raw.items() if isinstance(lines, list) and lines]


def skip_reason(case: Case) -> str:
    """Why a skipped case did not run: pytest's skip message (``extras["skip_reason"]``, recorded by
    :func:`~pytest_fabricqa.report.gather.finish_case`), else its skipped checks' details."""
    reason = case.extras.get("skip_reason")
    if isinstance(reason, str) and reason:
        return reason
    checks = [f"{c.name}: {c.detail}" if c.detail else c.name for c in case.checks if c.verdict == "skipped"]
    return "; ".join(checks) or "no reason recorded (see the pytest output for this test)"


def _skipped(run: Run) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every skipped case and why, grouped by protocol and target (``NVMe/TCP · nvmet``; ``Lab`` for lab-wide
    cases) in the order the groups first appear."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for case in run.cases:
        if case.verdict != "skipped":
            continue
        target = run.case_target(case)
        scope = protocol_name(case.protocol) + (f" · {target}" if target else "")
        groups.setdefault(scope, []).append((case.case_id, skip_reason(case)))
    return list(groups.items())


def _scaling_view(case: Case, chart_id: str) -> ScalingView | None:
    raw = case.extras.get("scaling")
    if not isinstance(raw, list):
        return None
    try:
        steps = [ScalingPoint.from_dict(item) for item in raw]
    except (ValueError, KeyError, TypeError):
        return None
    minimum = case.thresholds.get("min_scaling_efficiency")
    rows = [
        [
            str(p.n),
            ", ".join(p.hosts),
            format_figure("iops", p.iops),
            format_figure("lat_p99_us", p.lat_p99_us) if p.lat_p99_us is not None else "–",
            format_figure("scaling_efficiency", p.efficiency) if p.efficiency is not None else "–",
        ]
        for p in steps
    ]
    chart = None
    if steps:
        chart = charts.scaling_chart(
            [(p.n, p.iops, p.lat_p99_us, p.efficiency) for p in steps], min_efficiency=minimum, chart_id=chart_id
        )
    w = case.workload
    title = f"Scaling: {w.name if w else case.case_id} from 1 to {len(steps)} initiators"
    reasons = _reasons(case) if case.verdict in ("failed", "error") else []
    return ScalingView(title, case.verdict, chart, rows, reasons)


def _is_scaling(case: Case) -> bool:
    return "scaling" in case.extras


def _protocol_section(run: Run, protocol: str, chart_ids: list[int]) -> ProtocolSection:
    performance = [c for c in run.cases_for(protocol) if c.suite == "performance" and c.workload is not None]
    cases = [c for c in performance if not _is_scaling(c)]
    # With several targets serving the protocol, each target has its own tables, titled by its name.
    per_target = len(_targets_of(run, protocol)) > 1

    def target(case: Case) -> str | None:
        return run.case_target(case) if per_target else None

    grouped: dict[GroupKey, list[Case]] = {}
    order = {t: i for i, t in enumerate(_targets_of(run, protocol))}
    for case in sorted(cases, key=lambda c: (order.get(target(c) or "", 0), workload_sort_key(c.workload))):  # type: ignore[arg-type]
        grouped.setdefault(_group_key(case, target(case)), []).append(case)
    groups: list[Group] = []
    for members in grouped.values():
        # Columns nobody in the group measured are dropped, not shown as a wall of dashes.
        metrics = [m for m in TABLE_METRICS if any(m in c.figures for c in members)]
        headers = [h for m, h in zip(TABLE_METRICS, TABLE_HEADERS, strict=True) if m in metrics]
        rows = []
        for case in members:
            w = case.workload
            assert w is not None
            several = len(case.hosts) > 1
            rows.append(
                Row(
                    jobs=str(w.numjobs),
                    qd=str(w.iodepth) if w.iodepth is not None else "–",
                    host=f"{len(case.hosts)} hosts" if several else (next(iter(case.hosts), "")),
                    cells=_cells(case.figures, metrics),
                    verdict=case.verdict,
                    case_id=case.case_id,
                )
            )
            if several:
                for host, figures in sorted(case.hosts.items()):
                    rows.append(Row("", "", host, _cells(figures, metrics), "", kind="host"))
            notes = case_notes(case)
            if notes:
                rows.append(Row("", "", "", [], "", kind="info", reasons=notes))
            if case.verdict in ("failed", "error"):
                # Reasons go below the host rows so the numbers of one case stay together.
                rows.append(Row("", "", "", [], case.verdict, kind="reasons", reasons=_reasons(case)))
        chart = None
        knee_text = ""
        sweep = _sweep_series(members)
        if sweep is not None:
            chart_ids[0] += 1
            series, options, knee_text = sweep
            chart = charts.sweep_chart(series, chart_id=f"c{chart_ids[0]}", **options)
        over_time = []
        for case in members:
            chart_ids[0] += 1
            svg = _timeseries_chart(case, f"c{chart_ids[0]}")
            if svg is not None:
                over_time.append((case.case_id, svg))
        title = _group_title(members[0], target(members[0]))
        show_qd = any(c.workload is not None and c.workload.iodepth is not None for c in members)
        show_host = any(c.hosts for c in members)
        groups.append(
            Group(
                title, f"{protocol}-{len(groups) + 1}", chart, rows, headers, show_qd, show_host, knee_text, over_time
            )
        )
    scaling = []
    for case in performance:
        if _is_scaling(case):
            chart_ids[0] += 1
            view = _scaling_view(case, f"c{chart_ids[0]}")
            if view is not None:
                scaling.append(view)
    all_cases = run.cases_for(protocol)
    counts = {v: sum(1 for c in all_cases if c.verdict == v) for v in ("passed", "failed", "error", "skipped")}
    return ProtocolSection(protocol_name(protocol), protocol, run.verdict(protocol), counts, groups, scaling)


def _comparison(run: Run, chart_ids: list[int]) -> tuple[str, list[tuple[str, str]]] | None:
    """The protocol-against-protocol table (a column per protocol, or per target of a protocol with several) and
    one chart per access pattern, for runs with more than one column."""
    columns = [replace(c, label=protocol_name(c.protocol)) for c in columns_from_run(run)]
    if len(columns) < 2:
        return None
    comparison = compare_columns(columns, metrics=("iops", "lat_p99_us"))
    table = render_html_table(comparison)
    by_group: dict[GroupKey, dict[str, list[Case]]] = {}
    titles: dict[GroupKey, str] = {}
    for column in comparison.columns:
        for case in column.cases.values():
            if _is_scaling(case):
                continue
            key = _group_key(case)
            titles[key] = _group_title(case)
            by_group.setdefault(key, {}).setdefault(column.label, []).append(case)
    figures = []
    for key in sorted(by_group):
        per_protocol = by_group[key]
        if len(per_protocol) < 2:
            continue
        points = sorted(
            {
                (c.workload.numjobs * (c.workload.iodepth or 1), c.workload.numjobs, c.workload.iodepth)
                for cs in per_protocol.values()
                for c in cs
                if c.workload is not None
            },
        )
        if len(points) < 2:
            continue
        index = {p[1:]: i for i, p in enumerate(points)}
        series = []
        for label, members in per_protocol.items():
            pts = sorted(
                (
                    _point(c, float(index[(c.workload.numjobs, c.workload.iodepth)]))
                    for c in members
                    if c.workload is not None
                ),
                key=lambda p: p.x,
            )
            series.append(charts.Series(label, tuple(pts)))
        if not any(p.iops is not None or p.p99_us is not None for ser in series for p in ser.points):
            continue
        labels = [f"{j}×{d}" if d is not None else f"{j}" for _, j, d in points]
        chart_ids[0] += 1
        svg = charts.sweep_chart(
            series,
            chart_id=f"c{chart_ids[0]}",
            x_label="jobs × queue depth",
            x_ticks=[float(i) for i in range(len(points))],
            x_tick_labels=labels,
            log_x=False,
        )
        figures.append((titles[key], svg))
    return table, figures


def _target_comparisons(run: Run) -> list[tuple[str, str]]:
    """Seed 000's comparison for every protocol served by several targets: per target, fio's latency (mean, p99)
    and the target host's CPU split (usr, sys, idle), with the trend against the first target."""
    out = []
    for protocol in run.protocols:
        columns = [c for c in columns_from_run(run) if c.protocol == protocol and c.target]
        if len(columns) < 2:
            continue
        metrics = [
            m
            for m in METRIC_SETS["latency-cpu"]
            if any(m in case.figures for c in columns for case in c.cases.values())
        ]
        comparison = compare_columns([replace(c, label=protocol_name(protocol)) for c in columns], metrics=metrics)
        out.append((protocol_name(protocol), render_html_table(comparison)))
    return out


def _targets(run: Run) -> str:
    """``nvmet (nvmet on el72h3: nvme-rdma); spdk (spdk on el72h3: nvme-rdma; reactor cores 0x3)``."""
    parts = []
    for name, info in run.targets.items():
        where = f"{info.kind} on {info.host}" if info.host else f"{info.kind}, external"
        text = f"{name} ({where}: {', '.join(protocol_name(p) for p in info.protocols)}"
        if info.kind == "spdk":
            text += f"; reactor cores {info.reactor_cores or 'not known'}"
        parts.append(text + ")")
    return "; ".join(parts)


def _environment(run: Run) -> list[tuple[str, str]]:
    env = run.environment
    items = [
        ("Lab", run.lab),
        ("Target", _targets(run) or run.target_kind),
        ("Protocols", ", ".join(protocol_name(p) for p in run.protocols)),
        ("Started", _when(run.started)),
        ("Finished", f"{_when(run.finished)} ({_duration(run.started, run.finished)})"),
        ("Device", " · firmware ".join(x for x in (env.device_model, env.device_firmware) if x) or "not recorded"),
        ("fio", env.fio_version or "not recorded"),
    ]
    for host, kernel in sorted(env.kernels.items()):
        items.append((f"Kernel on {host}", kernel))
    items += [
        ("pytest-fabricqa", " · commit ".join(x for x in (env.plugin_version, env.git_commit) if x) or "not recorded"),
        ("Python, pytest", " · ".join(x for x in (env.python_version, env.pytest_version) if x) or "not recorded"),
    ]
    source = run.extras.get("source")
    if isinstance(source, str):
        items.append(("Source of these figures", source))
    return items


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S") + (f" {t.strftime('%z')[:3]}:{t.strftime('%z')[3:]}" if t.tzinfo else "")


def _duration(start: datetime, end: datetime) -> str:
    seconds = int((end - start).total_seconds())
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"


def _cell(value: object, spec: str = ",", missing: str = "–") -> str:
    """One cell of the Oracle tables: a number in ``spec``, a text as it is, nothing as ``missing``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return format(value, spec)
    return missing if value is None else str(value)


AWR_COLUMNS = ("Node", "Wait event", "Waits", "IOPS", "Avg wait (ms)", "p99 (ms)", "Max (ms)", "% of time waiting")


def _awr_rows(raw: object) -> list[tuple[str, ...]]:
    """The oracle profile's figures as AWR would show them: one row per node and wait event (``extras
    ["oracle_profile"]``); empty for a case without them."""
    if not isinstance(raw, list):
        return []

    def cell(value: object, spec: str) -> str:
        return _cell(value, spec, missing="")

    return [
        (
            str(r.get("node", "")),
            str(r.get("event", "")),
            cell(r.get("waits"), ","),
            cell(r.get("iops"), ",.0f"),
            cell(r.get("avg_ms"), ".2f"),
            cell(r.get("p99_ms"), ".2f"),
            cell(r.get("max_ms"), ".2f"),
            cell(r.get("waiting_pct"), ".0f"),
        )
        for r in raw
        if isinstance(r, dict)
    ]


def _oracle_scaling(raw: object) -> tuple[list[str], list[tuple[str, ...]]]:
    """The oracle profile's scaling steps (``extras["oracle_scaling"]``): the header (nodes, database IOPS, read,
    write, efficiency against linear, then each event's average and worst node's 99th percentile) and one row per
    step, the knee marked; empty for a case without them."""
    if not isinstance(raw, list):
        return [], []
    steps = [r for r in raw if isinstance(r, dict)]
    events = list(dict.fromkeys(e for r in steps for e in (r.get("events") or {})))
    header = ["Nodes", "Database IOPS", "Read", "Write", "Efficiency", *(f"{e}: avg / p99 (ms)" for e in events)]

    rows = []
    for r in steps:
        given = r.get("iops")
        iops = given if isinstance(given, dict) else {}
        nodes = ", ".join(str(n) for n in r.get("nodes") or [])
        cells = [
            f"{r.get('n', '')} ({nodes})" + (" · knee" if r.get("knee") else ""),
            _cell(iops.get("total"), ",.0f"),
            _cell(iops.get("read"), ",.0f"),
            _cell(iops.get("write"), ",.0f"),
            _cell(r.get("efficiency"), ".2f"),
        ]
        for event in events:
            figures = (r.get("events") or {}).get(event) or {}
            cells.append(f"{_cell(figures.get('avg_ms'), '.2f')} / {_cell(figures.get('p99_ms'), '.2f')}")
        rows.append(tuple(cells))
    return header, rows


def _waits_rows(raw: object) -> tuple[list[str], list[tuple[str, ...]]]:
    """A live database's waits (``extras["database_waits"]``, :func:`pytest_fabricqa.oracle.waits.table`'s rows):
    its columns as the header and one row per instance and event; empty for a case without them."""
    if not isinstance(raw, list):
        return [], []
    rows = [r for r in raw if isinstance(r, dict)]
    header = list(dict.fromkeys(k for r in rows for k in r))
    return [h[:1].upper() + h[1:] for h in header], [tuple(_cell(r.get(k)) for k in header) for r in rows]


def _oracle(run: Run) -> list[dict[str, Any]]:
    sections = []
    for case in run.cases:
        if case.suite != "oracle":
            continue
        calibrate = case.extras.get("calibrate_io")
        rows = []
        if isinstance(calibrate, dict):
            for key, value in calibrate.items():
                label = CALIBRATE_LABELS.get(key, key)
                rows.append((label, _cell(value)))
        shown = ("calibrate_io", "oracle_profile", "oracle_scaling", "database_iops", "nodes", "skip_reason",
                 "kernel_log", "database_waits", "database_waits_notes")  # fmt: skip
        waits_header, waits_rows = _waits_rows(case.extras.get("database_waits"))
        notes = case.extras.get("database_waits_notes")
        scaling_header, scaling_rows = _oracle_scaling(case.extras.get("oracle_scaling"))
        details = [(k.replace("_", " ").capitalize(), str(v)) for k, v in case.extras.items() if k not in shown]
        sections.append(
            {
                "title": f"{protocol_name(case.protocol)} · {case.case_id}",
                "verdict": case.verdict,
                "checks": case.checks,
                "calibrate": rows,
                "awr": _awr_rows(case.extras.get("oracle_profile")),
                "waits_header": waits_header,
                "waits": waits_rows,
                "notes": [str(n) for n in notes] if isinstance(notes, list) else [],
                "scaling_header": scaling_header,
                "scaling": scaling_rows,
                "details": details,
                "reasons": _reasons(case) if case.verdict in ("failed", "error") else [],
            }
        )
    return sections


def report_context(run: Run, *, title: str | None = None) -> dict[str, Any]:
    """Everything the template shows, as plain values; separate from rendering so tests can inspect it."""
    chart_ids = [0]
    failures = []
    failure_counts: dict[str, int] = {}
    for c in run.cases:
        if c.verdict in ("failed", "error"):
            reasons = _reasons(c)
            # One line per failed case; the count of further reasons points to its table row.
            failures.append(Failure(protocol_name(c.protocol), c.case_id, reasons[0]))
            failure_counts[c.case_id] = len(reasons)
    summary = []
    for protocol in run.protocols:
        cases = [c for c in run.cases if c.protocol == protocol]
        summary.append(
            {
                "name": protocol_name(protocol),
                "verdict": run.verdict(protocol),
                "passed": sum(c.verdict == "passed" for c in cases),
                "failed": sum(c.verdict in ("failed", "error") for c in cases),
                "skipped": sum(c.verdict == "skipped" for c in cases),
                "total": len(cases),
            }
        )
    lab_cases = [c for c in run.cases if c.protocol is None]
    if lab_cases:
        summary.append(
            {
                "name": "Lab-wide checks",
                "verdict": overall_verdict(c.verdict for c in lab_cases),
                "passed": sum(c.verdict == "passed" for c in lab_cases),
                "failed": sum(c.verdict in ("failed", "error") for c in lab_cases),
                "skipped": sum(c.verdict == "skipped" for c in lab_cases),
                "total": len(lab_cases),
            }
        )
    comparison = _comparison(run, chart_ids)
    target_comparisons = _target_comparisons(run)
    other = [c for c in run.cases if c.suite in ("prerequisite", "connectivity", "integrity", "failover")]
    not_exercised = run.extras.get("oracle_not_exercised")
    return {
        "title": title or "Storage fabric qualification",
        "run": run,
        "verdict": run.verdict(),
        "summary": summary,
        "failures": failures,
        "failure_counts": failure_counts,
        "environment": _environment(run),
        "protocols": [_protocol_section(run, p, chart_ids) for p in run.protocols],
        "comparison": comparison,
        "target_comparisons": target_comparisons,
        "oracle": _oracle(run),
        "awr_columns": AWR_COLUMNS,
        "oracle_not_exercised": not_exercised if isinstance(not_exercised, str) else NO_ORACLE,
        "oracle_without_database": not_exercised if isinstance(not_exercised, str) else None,
        "other_checks": [
            {
                "suite": SUITE_NAMES[c.suite],
                "scope": protocol_name(c.protocol),
                "case_id": c.case_id,
                "verdict": c.verdict,
                "detail": "; ".join(
                    ([integrity_summary(c.integrity)] if c.integrity is not None else [])
                    + (_reasons(c) if c.verdict in ("failed", "error") else [ch.detail or ch.name for ch in c.checks])
                ),
            }
            for c in other
        ],
        "failover": _failover(run, chart_ids),
        "skipped": _skipped(run),
        "baseline": run.baseline,
        "baseline_notes": [str(n) for n in run.extras.get("baseline_notes", []) if isinstance(n, str)]
        if isinstance(run.extras.get("baseline_notes"), list)
        else [],
        "regressed": [c for c in run.cases if c.regression is not None and c.regression.messages],
        "generated_by": f"pytest-fabricqa {run.environment.plugin_version or __version__}",
        "started": _when(run.started),
        "protocol_name": protocol_name,
    }


def integrity_summary(done: Integrity) -> str:
    """``16 MiB written, 32 MiB verified, no mismatch`` (and the expected ones of the corruption case), then each
    write's generation: ``; generations 0x3a7f0001 (vnode1's write 1 at byte 134,217,728), ...``."""

    def mib(n: int) -> str:
        return f"{n / (1 << 20):,.1f} MiB".replace(".0 MiB", " MiB")

    found = len(done.mismatches)
    unexpected = found - done.expected_mismatches
    text = f"{mib(done.bytes_written)} written, {mib(done.bytes_verified)} verified, "
    text += f"{unexpected} mismatch{'es' if unexpected != 1 else ''}" if unexpected else "no mismatch"
    if done.expected_mismatches:
        text += f"; {done.expected_mismatches} changed block(s) detected as expected"
    if done.writes:
        text += "; generations " + ", ".join(
            f"0x{w.generation:08x} ({w.host}'s write {w.number} at byte {w.region_offset:,})" for w in done.writes
        )
    return text


_TABLE_TAG = re.compile(r"<(/?)table\b[^>]*>", re.IGNORECASE)


def scroll_boxes(page: str) -> Markup:
    """Every outermost ``<table>`` of ``page`` inside its own ``<div class="table-scroll">``: a table wider than
    the page scrolls in that box (its first column held in place by the stylesheet) instead of widening the
    page. The template passes its whole body through this once, so the comparison tables rendered by
    :mod:`~pytest_fabricqa.report.compare` get their box too. Only our own markup reaches a tag here: text from
    results is escaped before it does."""
    page = str(page)  # Jinja hands over Markup, which would escape the <div> added to it
    out: list[str] = []
    depth = 0
    at = 0
    for tag in _TABLE_TAG.finditer(page):
        closing = tag.group(1) == "/"
        if not closing:
            if depth == 0:
                out.append(page[at : tag.start()] + '<div class="table-scroll">')
                at = tag.start()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                out.append(page[at : tag.end()] + "</div>")
                at = tag.end()
    out.append(page[at:])
    return Markup("".join(out))


def _environment_loader() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["scroll_boxes"] = scroll_boxes
    return env


def render_html(run: Run, *, title: str | None = None) -> str:
    """The report as one HTML document (inline CSS and SVG; no scripts, fonts or images fetched)."""
    template = _environment_loader().get_template("report.html.j2")
    return template.render(**report_context(run, title=title))


def write_html(run: Run, path: Path | str, *, title: str | None = None) -> Path:
    """Render the report and write it atomically to ``path``."""
    return write_atomic(path, render_html(run, title=title))


def case_extra_html(case: Case, *, chart_id: str = "case") -> str:
    """A case's figures (with the baseline's and the change, when compared) and its chart, as an HTML
    fragment for pytest-html's per-test extras. Inline styles: pytest-html's stylesheet is not ours."""
    from html import escape

    from pytest_fabricqa.report.formatting import format_trend, trend_pct

    before = case.regression.baseline_figures if case.regression is not None else {}
    cell = 'style="padding:2px 10px;text-align:right"'
    head = "<tr><th style='text-align:left'>figure</th><th>this run</th>"
    head += "<th>baseline</th><th>change</th></tr>" if before else "</tr>"
    rows = []
    for metric, value in case.figures.items():
        row = f"<tr><td>{escape(METRIC_LABELS.get(metric, metric))}</td><td {cell}>{format_figure(metric, value)}</td>"
        if before:
            old = before.get(metric)
            row += f"<td {cell}>{format_figure(metric, old) if old is not None else '-'}</td>"
            row += f"<td {cell}>{format_trend(trend_pct(old, value)) if old is not None else '-'}</td>"
        rows.append(row + "</tr>")
    parts = [f"<div class='fabricqa-case'><p><b>{escape(case.case_id)}</b> · {escape(case.verdict)}</p>"]
    if rows:
        parts.append(f"<table style='border-collapse:collapse;margin:4px 0'>{head}{''.join(rows)}</table>")
    reasons = list(case.violations) + (list(case.regression.messages) if case.regression else [])
    if reasons:
        parts.append("<ul>" + "".join(f"<li>{escape(r)}</li>" for r in reasons) + "</ul>")
    for note in case_notes(case):
        parts.append(f"<p style='margin:2px 0;color:#57606a'>{escape(note)}</p>")
    if case.figures:
        svg = charts.case_chart(case.figures, case.hosts, baseline=before or None, chart_id=chart_id)
        if svg:
            parts.append(f"<div style='max-width:720px'>{svg}</div>")
    over_time = _timeseries_chart(case, f"{chart_id}-ts")
    if over_time:
        parts.append(f"<div style='max-width:960px'>{over_time}</div>")
    for host, text in kernel_account(case):
        parts.append(
            f"<details><summary>kernel log {escape(host)} (storage lines during the case)</summary>"
            f"<pre style='white-space:pre-wrap;font-size:12px'>{escape(text)}</pre></details>"
        )
    parts.append("</div>")
    return "".join(parts)
