"""Protocol against protocol, target against target: each workload's figures side by side with the trend of
each later column against the first.

This is the table field report 001 builds by hand (iSCSI over TCP against Soft-RoCE, 8 KiB blocks): IOPS
and MB/s per protocol and a trend column, ``(later - first) / first * 100`` rounded to two decimals. A column
is one (protocol, target) of a results file, so the same table compares targets too: seed 000's kernel nvmet
against SPDK, by fio latency and the target host's CPU split (``--metrics latency-cpu``).
``fabricqa-compare`` prints it from one or more results files as text, Markdown or an HTML fragment.
"""

from __future__ import annotations

import argparse
import html
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_fabricqa.core.metrics import METRICS
from pytest_fabricqa.core.workloads import Workload
from pytest_fabricqa.report.formatting import (
    format_figure,
    format_trend,
    rw_label,
    trend_pct,
)
from pytest_fabricqa.report.model import (
    Case,
    Figures,
    ResultsFileError,
    Run,
    TargetInfo,
    load_json,
)

DEFAULT_METRICS: tuple[str, ...] = ("iops", "mbps")
#: Named metric lists for ``--metrics``: ``latency-cpu`` is what seed 000 compared its targets by.
METRIC_SETS: dict[str, tuple[str, ...]] = {
    "latency-cpu": (
        "iops",
        "lat_mean_us",
        "lat_p99_us",
        "target_cpu_usr_pct",
        "target_cpu_sys_pct",
        "target_cpu_idle_pct",
    ),
}
TARGET_CPU = ("target_cpu_usr_pct", "target_cpu_sys_pct", "target_cpu_idle_pct")

WorkloadKey = tuple[str, str, str, int, int | None, tuple[str, ...]]


def workload_key(case: Case) -> WorkloadKey:
    """What makes two cases the same experiment across protocols: the fio job and the hosts that ran it.

    The case id and workload name are not used because they may carry the protocol.
    """
    w = case.workload
    assert w is not None  # callers pass performance cases only
    return (w.size or "", w.rw, w.bs, w.numjobs, w.iodepth, tuple(sorted(case.hosts)))


@dataclass(frozen=True)
class Column:
    """One protocol's cases (of one target) from one results file."""

    label: str
    protocol: str
    source: str
    cases: dict[WorkloadKey, Case]
    target: str | None = None
    """The lab's name of the target; None for cases recorded without one."""
    target_info: TargetInfo | None = None
    """What the run recorded about the target (kind, host, SPDK's reactor cores)."""


@dataclass(frozen=True)
class Row:
    """One workload across the columns; ``None`` where a column did not run it."""

    workload: Workload
    hosts: tuple[str, ...]
    figures: tuple[Figures | None, ...]

    def trend(self, column: int, metric: str) -> float | None:
        """Trend of ``column`` against the first column for ``metric`` (None when either side lacks it)."""
        first, later = self.figures[0], self.figures[column]
        if first is None or later is None or metric not in first or metric not in later:
            return None
        return trend_pct(first[metric], later[metric])


@dataclass(frozen=True)
class Comparison:
    """The whole table: columns in the order given, rows in first-seen order."""

    columns: tuple[Column, ...]
    metrics: tuple[str, ...]
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()


def columns_from_run(run: Run, source: str = "") -> list[Column]:
    """One column per protocol and target of ``run`` that has performance cases with figures."""
    columns = []
    for protocol in run.protocols:
        by_target: dict[str | None, dict[WorkloadKey, Case]] = {}
        for case in run.cases_for(protocol, "performance"):
            if case.workload is None or not case.figures:
                continue
            by_target.setdefault(run.case_target(case), {}).setdefault(workload_key(case), case)
        for target, cases in by_target.items():
            info = run.targets.get(target) if target is not None else None
            columns.append(Column(protocol, protocol, source, cases, target, info))
    return columns


def select_columns(
    columns: Sequence[Column], protocols: Sequence[str] = (), targets: Sequence[str] = ()
) -> list[Column]:
    """The columns of the given protocols and targets (all when none is given); ValueError names what matched
    nothing and what there is."""
    for wanted, have, what in ((protocols, [c.protocol for c in columns], "protocol"),
                               (targets, [c.target or "" for c in columns], "target")):  # fmt: skip
        for name in wanted:
            if name not in have:
                known = ", ".join(dict.fromkeys(h for h in have if h)) or "none"
                raise ValueError(f"no {what} {name!r} in the results (they hold: {known})")
    return [
        c
        for c in columns
        if (not protocols or c.protocol in protocols) and (not targets or (c.target or "") in targets)
    ]


def _labels(columns: Sequence[Column]) -> list[str]:
    """Each column's heading: its protocol; with its target where that protocol has several columns of different
    targets; with its file's name where that still leaves two alike."""
    labels = []
    for column in columns:
        same = [c for c in columns if c.protocol == column.protocol]
        targets = {c.target for c in same}
        label = column.label
        if len(same) > 1 and len(targets) > 1 and column.target:
            label = f"{label} {column.target}"
        labels.append(label)
    out = []
    for label, column in zip(labels, columns, strict=True):
        if labels.count(label) > 1 and column.source:
            label = f"{label} ({Path(column.source).stem})"
        out.append(label)
    return out


def _target_notes(columns: Sequence[Column], metrics: Sequence[str]) -> list[str]:
    """What the target CPU columns stand on: the whole target host, and where SPDK's reactors poll."""
    if not any(m in TARGET_CPU for m in metrics):
        return []
    notes = [
        "target CPU: the target host's /proc/stat over each run, all cores together; usr + sys + idle is 100 less "
        "iowait and steal. Figures from a virtual lab say nothing about hardware."
    ]
    for column in columns:
        info = column.target_info
        if info is None or info.kind != "spdk":
            continue
        if info.reactor_cores:
            notes.append(
                f"{column.label}: SPDK's reactors poll on cores {info.reactor_cores}; those cores show busy (usr) "
                "whatever the load."
            )
        else:
            notes.append(f"{column.label}: SPDK's reactor cores are not known (the lab gives no core mask).")
    return notes


def compare_columns(columns: Sequence[Column], metrics: Sequence[str] = DEFAULT_METRICS) -> Comparison:
    """Line up the columns' workloads; the first column is the reference every trend is taken against."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; known metrics are {', '.join(METRICS)}")
    if len(columns) < 2:
        raise ValueError(f"need at least two protocols or targets to compare, found {len(columns)}")
    # Two targets of one protocol, or two files measuring the same one (say before and after a kernel update),
    # need telling apart.
    fixed = [replace(column, label=label) for column, label in zip(columns, _labels(columns), strict=True)]
    order: list[WorkloadKey] = []
    workloads: dict[WorkloadKey, Workload] = {}
    for column in fixed:
        for key, case in column.cases.items():
            if key not in workloads:
                order.append(key)
                assert case.workload is not None
                workloads[key] = case.workload
    rows = tuple(
        Row(
            workload=workloads[key],
            hosts=key[5],
            figures=tuple(c.cases[key].figures if key in c.cases else None for c in fixed),
        )
        for key in order
    )
    notes = _target_notes(fixed, metrics)
    for column in fixed[1:]:
        missing = [key for key in order if key not in column.cases]
        if missing:
            notes.append(f"{column.label} did not run {len(missing)} of the {len(order)} workloads.")
    return Comparison(columns=tuple(fixed), metrics=tuple(metrics), rows=rows, notes=tuple(notes))


def compare_runs(
    runs: Sequence[tuple[str, Run]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    protocols: Sequence[str] = (),
    targets: Sequence[str] = (),
) -> Comparison:
    """Compare the protocols and targets of several runs, given as ``(source name, run)`` pairs, in that order
    (only ``protocols`` and ``targets`` when given)."""
    columns: list[Column] = []
    for source, run in runs:
        columns.extend(columns_from_run(run, source))
    return compare_columns(select_columns(columns, protocols, targets), metrics)


# --- rendering --------------------------------------------------------------------------------------------


def _short_metric(metric: str) -> str:
    return {
        "iops": "IOPS",
        "mbps": "MB/s",
        "lat_mean_us": "mean µs",
        "lat_p50_us": "p50 µs",
        "lat_p99_us": "p99 µs",
        "lat_p999_us": "p99.9 µs",
        "lat_p9999_us": "p99.99 µs",
        "target_cpu_usr_pct": "target usr %",
        "target_cpu_sys_pct": "target sys %",
        "target_cpu_idle_pct": "target idle %",
    }.get(metric, metric)


def _workload_cells(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """The leading columns that name each workload; size, queue depth and hosts only when they vary."""
    rows = comparison.rows
    show_size = any(r.workload.size for r in rows)
    show_qd = any(r.workload.iodepth is not None for r in rows)
    show_hosts = len({r.hosts for r in rows}) > 1
    headers = ["workload", "bs"]
    headers += ["size"] if show_size else []
    headers += ["jobs"]
    headers += ["QD"] if show_qd else []
    headers += ["hosts"] if show_hosts else []
    cells = []
    for r in rows:
        w = r.workload
        line = [rw_label(w.rw), w.bs]
        line += [w.size or ""] if show_size else []
        line += [str(w.numjobs)]
        line += ([str(w.iodepth) if w.iodepth is not None else "?"]) if show_qd else []
        line += [", ".join(r.hosts) or "-"] if show_hosts else []
        cells.append(line)
    return headers, cells


def _groups(comparison: Comparison) -> list[tuple[str, list[str]]]:
    """Two-level header: one group per column and per trend, each spanning the metrics."""
    metrics = [_short_metric(m) for m in comparison.metrics]
    first = comparison.columns[0].label
    groups = [(c.label, metrics) for c in comparison.columns]
    for c in comparison.columns[1:]:
        groups.append((f"{c.label} vs {first}", metrics))
    return groups


def _value_cells(comparison: Comparison, row: Row) -> list[str]:
    cells = []
    for figures in row.figures:
        for m in comparison.metrics:
            cells.append(format_figure(m, figures[m]) if figures and m in figures else "-")
    for i in range(1, len(comparison.columns)):
        for m in comparison.metrics:
            cells.append(format_trend(row.trend(i, m)))
    return cells


def render_text(comparison: Comparison) -> str:
    """A fixed-width table for the terminal; numbers right-aligned, one row per workload."""
    lead_headers, lead = _workload_cells(comparison)
    groups = _groups(comparison)
    sub = lead_headers + [m for _, metrics in groups for m in metrics]
    body = [lead[i] + _value_cells(comparison, r) for i, r in enumerate(comparison.rows)]
    widths = [max(len(line[i]) for line in [sub, *body]) for i in range(len(sub))]
    # A group label wider than its metric columns widens them evenly.
    col = len(lead_headers)
    for label, metrics in groups:
        span = sum(widths[col : col + len(metrics)]) + 2 * (len(metrics) - 1)
        for extra in range(max(0, len(label) - span)):
            widths[col + extra % len(metrics)] += 1
        col += len(metrics)
    nlead = len(lead_headers)

    def fmt(line: list[str]) -> str:
        parts = [cell.ljust(widths[i]) if i < nlead else cell.rjust(widths[i]) for i, cell in enumerate(line)]
        return "  ".join(parts).rstrip()

    top = ["".ljust(widths[i]) for i in range(nlead)]
    col = nlead
    for label, metrics in groups:
        span = sum(widths[col : col + len(metrics)]) + 2 * (len(metrics) - 1)
        top.append(label.center(span))
        col += len(metrics)
    lines = ["  ".join(top).rstrip(), fmt(sub), "  ".join("-" * w for w in widths)]
    lines += [fmt(line) for line in body]
    lines += [f"note: {n}" for n in comparison.notes]
    return "\n".join(lines) + "\n"


def render_markdown(comparison: Comparison) -> str:
    """A GitHub-flavoured Markdown table with one header row (``iscsi IOPS``, ``trend ... MB/s``)."""
    lead_headers, lead = _workload_cells(comparison)
    headers = lead_headers + [f"{label} {m}" for label, metrics in _groups(comparison) for m in metrics]
    align = [":--"] * len(lead_headers) + ["--:"] * (len(headers) - len(lead_headers))

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [line(headers), line(align)]
    out += [line(lead[i] + _value_cells(comparison, r)) for i, r in enumerate(comparison.rows)]
    text = "\n".join(out) + "\n"
    if comparison.notes:
        text += "\n" + "\n".join(f"- {n}" for n in comparison.notes) + "\n"
    return text


def render_html_table(comparison: Comparison) -> str:
    """The table as an HTML fragment (no styles of its own; the qualification report styles it)."""
    esc = html.escape
    lead_headers, lead = _workload_cells(comparison)
    groups = _groups(comparison)
    ntrend_cols = (len(comparison.columns) - 1) * len(comparison.metrics)
    first_trend_col = len(lead_headers) + len(comparison.columns) * len(comparison.metrics)
    out = ['<table class="figures compare">', "<thead>", "<tr>"]
    out += [f'<th rowspan="2" class="wl">{esc(h)}</th>' for h in lead_headers]
    out += [f'<th colspan="{len(metrics)}" class="group">{esc(label)}</th>' for label, metrics in groups]
    out += ["</tr>", "<tr>"]
    out += [f'<th class="num">{esc(m)}</th>' for _, metrics in groups for m in metrics]
    out += ["</tr>", "</thead>", "<tbody>"]
    for i, row in enumerate(comparison.rows):
        cells = lead[i] + _value_cells(comparison, row)
        tds = []
        for j, cell in enumerate(cells):
            if j < len(lead_headers):
                tds.append(f'<td class="wl">{esc(cell)}</td>')
            elif first_trend_col <= j < first_trend_col + ntrend_cols:
                sign = "up" if cell.startswith("+") and cell != "+0.00%" else "down" if cell[:1] == "-" else ""
                tds.append(f'<td class="num trend {sign}">{esc(cell)}</td>')
            else:
                tds.append(f'<td class="num">{esc(cell)}</td>')
        out.append("<tr>" + "".join(tds) + "</tr>")
    out += ["</tbody>", "</table>"]
    out += [f'<p class="note">{esc(n)}</p>' for n in comparison.notes]
    return "\n".join(out) + "\n"


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328; margin: 2rem; }}
h1 {{ font-size: 1.3rem; font-weight: 600; }}
table {{ border-collapse: collapse; font-size: 0.85rem; }}
th, td {{ padding: 0.3rem 0.6rem; border-bottom: 1px solid #d8dee4; }}
th {{ font-weight: 600; background: #f6f8fa; }}
th.group {{ text-align: center; border-left: 1px solid #d8dee4; }}
td.num, th.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
td.wl {{ text-align: left; white-space: nowrap; }}
p.src, p.note {{ color: #59636e; font-size: 0.85rem; }}
</style></head><body>
<h1>{title}</h1>
<p class="src">{sources}</p>
{table}</body></html>
"""


def render_html(comparison: Comparison) -> str:
    """A self-contained HTML page holding the table (inline CSS, nothing fetched)."""
    title = " vs ".join(c.label for c in comparison.columns)
    sources = "; ".join(f"{c.label}: {c.source}" for c in comparison.columns if c.source)
    return _PAGE.format(title=html.escape(title), sources=html.escape(sources), table=render_html_table(comparison))


RENDERERS = {"text": render_text, "md": render_markdown, "html": render_html}


def main(argv: Sequence[str] | None = None) -> int:
    """``fabricqa-compare A.json B.json [...]``: the protocol comparison table; exit 2 on unusable input."""
    parser = argparse.ArgumentParser(
        prog="fabricqa-compare",
        description="Compare protocols and targets across pytest-fabricqa results files: figures per workload "
        "and the trend of each later column (a protocol, or a protocol's target) against the first.",
    )
    parser.add_argument("results", nargs="+", type=Path, help="results files (the first is the reference)")
    parser.add_argument("--format", choices=sorted(RENDERERS), default="text", help="output format")
    parser.add_argument("-o", "--output", type=Path, help="write to FILE instead of standard output")
    parser.add_argument(
        "--metrics",
        default=",".join(DEFAULT_METRICS),
        help=f"comma-separated metrics to compare (default {','.join(DEFAULT_METRICS)}), or "
        + "; ".join(f"{name}: {','.join(ms)}" for name, ms in METRIC_SETS.items())
        + " (seed 000's target comparison)",
    )
    parser.add_argument("--protocol", action="append", default=[], metavar="P[,P]", help="compare only these protocols")
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help="compare only these targets (the lab's target names), e.g. --protocol nvme-rdma --target nvmet,spdk",
    )
    args = parser.parse_args(argv)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    metrics = [m for name in metrics for m in METRIC_SETS.get(name, (name,))]
    protocols = [p.strip() for value in args.protocol for p in value.split(",") if p.strip()]
    targets = [t.strip() for value in args.target for t in value.split(",") if t.strip()]
    try:
        runs = [(str(path), load_json(path)) for path in args.results]
        comparison = compare_runs(runs, metrics, protocols=protocols, targets=targets)
    except (ResultsFileError, ValueError) as exc:
        print(f"fabricqa-compare: {exc}", file=sys.stderr)
        return 2
    text = RENDERERS[args.format](comparison)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
