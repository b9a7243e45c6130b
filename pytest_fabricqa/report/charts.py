"""Sweep charts as inline SVG: IOPS and p99 latency against queue depth x jobs, drawn with matplotlib (Agg).

The SVG keeps text as text (smaller, and the report's stylesheet sets its font) and is rewritten so its
element ids are unique within the page, because several charts share one HTML document.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

# One hue in several shades: charts carry no verdict colour except the red ring on a failed point.
SHADES = ("#0b3d66", "#2f6ea3", "#6b9fcb", "#a9c6e2", "#1c2b36", "#587387")
FAILED = "#c62828"
INK = "#1f2328"
MUTED = "#59636e"
GRID = "#e3e7eb"
KNEE = "#b26a00"


@dataclass(frozen=True)
class Point:
    """One measured point of a series."""

    x: float
    iops: float | None
    p99_us: float | None
    failed: bool = False


@dataclass(frozen=True)
class Series:
    """A line on both panels (one jobs count, or one protocol)."""

    label: str
    points: tuple[Point, ...]
    knee: float | None = None
    """x of the sweep's knee (the last point where IOPS still rose by more than the lab's percentage)."""


def _style(ax: Axes) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#8c959f")
    ax.tick_params(colors=MUTED, labelsize=8.5, length=3)
    ax.grid(True, axis="y", color=GRID, linewidth=0.8)
    ax.set_axisbelow(True)


def _thousands(value: float, _pos: int) -> str:
    if value >= 1000:
        return f"{value / 1000:,.0f}k" if value % 1000 == 0 or value >= 10_000 else f"{value / 1000:,.1f}k"
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def sweep_chart(
    series: Sequence[Series],
    *,
    x_label: str,
    x_ticks: Sequence[float] | None = None,
    x_tick_labels: Sequence[str] | None = None,
    log_x: bool = True,
    chart_id: str,
) -> str:
    """Two panels side by side, IOPS and p99 latency, one line per series; returns an ``<svg>`` element."""
    with plt.rc_context(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": chart_id,  # stable, page-unique ids: same input, same bytes
            "font.size": 9,
            "axes.titlesize": 10,
            "axes.titleweight": "bold",
            "axes.titlecolor": INK,
            "axes.labelcolor": MUTED,
            "axes.labelsize": 8.5,
        }
    ):
        wanted = [
            (attr, title)
            for attr, title in (("iops", "IOPS"), ("p99_us", "p99 latency (µs)"))
            if any(getattr(p, attr) is not None for s in series for p in s.points)
        ]
        if not wanted:
            raise ValueError("nothing to draw: no series has IOPS or p99 latency")
        # A panel without data is left out rather than drawn empty (transcribed runs may lack latency).
        fig, axes = plt.subplots(1, len(wanted), figsize=(4.8 * len(wanted), 3.0), squeeze=False)
        panels = list(axes[0])
        left = panels[0]
        for panel, (attr, title) in zip(panels, wanted, strict=True):
            _style(panel)
            panel.set_title(title, loc="left", pad=8)
            panel.set_xlabel(x_label)
            for i, s in enumerate(series):
                pts = [p for p in s.points if getattr(p, attr) is not None]
                if not pts:
                    continue
                colour = SHADES[i % len(SHADES)]
                xs = [p.x for p in pts]
                ys = [float(getattr(p, attr)) for p in pts]
                marker = "osD^v<>"[i % 7]
                panel.plot(xs, ys, color=colour, marker=marker, markersize=4, linewidth=1.6, label=s.label)
                if attr == "iops" and s.knee is not None:
                    at = [p for p in pts if p.x == s.knee]
                    if at:
                        panel.scatter([s.knee], [float(at[0].iops or 0)], s=110, marker="v", color=KNEE, zorder=6,
                                      label="_knee")  # fmt: skip
                        panel.annotate("knee", (s.knee, float(at[0].iops or 0)), textcoords="offset points",
                                       xytext=(0, 9), ha="center", fontsize=8, color=KNEE)  # fmt: skip
                bad = [(p.x, float(getattr(p, attr))) for p in pts if p.failed]
                if bad:
                    panel.scatter(
                        [b[0] for b in bad],
                        [b[1] for b in bad],
                        s=90,
                        facecolors="none",
                        edgecolors=FAILED,
                        linewidths=1.6,
                        zorder=5,
                        label="_failed",
                    )
            if log_x:
                panel.set_xscale("log", base=2)
            if x_ticks is not None:
                panel.set_xticks(list(x_ticks))
                if x_tick_labels is not None:
                    panel.set_xticklabels(list(x_tick_labels))
                panel.xaxis.set_minor_locator(NullLocator())
            if attr == "p99_us":
                # Latency spans decades across a queue-depth sweep; 1-2-5 ticks keep the labels readable.
                panel.set_yscale("log")
                panel.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                panel.yaxis.set_minor_formatter(NullFormatter())
            else:
                panel.set_ylim(bottom=0)
            panel.yaxis.set_major_formatter(FuncFormatter(_thousands))
            if x_tick_labels is not None and max((len(t) for t in x_tick_labels), default=0) > 3:
                panel.tick_params(axis="x", labelrotation=45)
        handles, labels = left.get_legend_handles_labels()
        any_failed = any(p.failed for s in series for p in s.points)
        if any_failed:
            handles.append(
                plt.Line2D(
                    [],
                    [],
                    marker="o",
                    linestyle="none",
                    markersize=8,
                    markerfacecolor="none",
                    markeredgecolor=FAILED,
                    markeredgewidth=1.6,
                )
            )
            labels.append("failed")
        top = 1.0
        if len(series) > 1 or any_failed:
            # The legend gets its own band above the panels so it never covers a title or a line.
            fig.legend(
                handles,
                labels,
                loc="upper right",
                ncol=len(labels),
                frameon=False,
                fontsize=8.5,
                labelcolor=MUTED,
                bbox_to_anchor=(1.0, 1.0),
                handlelength=2.2,
                columnspacing=1.6,
            )
            top = 0.9
        fig.tight_layout(w_pad=3.0, rect=(0.0, 0.0, 1.0, top))
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    return _inline(buffer.getvalue(), chart_id)


_ID = re.compile(r'\bid="([^"]+)"')


def _inline(svg: str, prefix: str) -> str:
    """Make a standalone SVG file embeddable: no XML prologue or metadata, scalable, page-unique ids."""
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.DOTALL)
    # Scale down with the page but never up past the drawn size (a one-panel chart would balloon).
    svg = re.sub(
        r'(<svg[^>]*?)\swidth="([^"]+)"\s+height="[^"]+"',
        r'\1 width="100%" style="max-width: \2"',
        svg,
        count=1,
    )
    ids = set(_ID.findall(svg))
    for old in sorted(ids, key=len, reverse=True):
        new = f"{prefix}-{old}"
        svg = svg.replace(f'id="{old}"', f'id="{new}"')
        svg = svg.replace(f'href="#{old}"', f'href="#{new}"')
        svg = svg.replace(f"url(#{old})", f"url(#{new})")
    return svg.replace("<svg ", '<svg class="chart" role="img" ', 1).strip()


#: Latency percentiles a case chart shows, in order, with their axis labels.
PERCENTILES: tuple[tuple[str, str], ...] = (
    ("lat_p50_us", "p50"),
    ("lat_p99_us", "p99"),
    ("lat_p999_us", "p99.9"),
    ("lat_p9999_us", "p99.99"),
)


def case_chart(
    figures: dict[str, float],
    hosts: dict[str, dict[str, float]],
    *,
    baseline: dict[str, float] | None = None,
    chart_id: str,
) -> str | None:
    """One case at a glance: IOPS per initiator (and the total), and its latency percentiles.

    With a baseline, its total IOPS is a dashed line and its percentiles a second bar beside each of
    this run's. Returns an ``<svg>`` element, or None when the case has neither IOPS nor percentiles.
    """
    iops_bars = [(h, f["iops"]) for h, f in hosts.items() if "iops" in f]
    if "iops" in figures and len(iops_bars) != 1:
        iops_bars.append(("total", figures["iops"]))
    elif not iops_bars and "iops" in figures:
        iops_bars = [("total", figures["iops"])]
    pcts = [(label, figures[m]) for m, label in PERCENTILES if m in figures]
    panels_wanted = [p for p, ok in (("iops", bool(iops_bars)), ("lat", bool(pcts))) if ok]
    if not panels_wanted:
        return None
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": chart_id, "font.size": 9}):
        fig, axes = plt.subplots(1, len(panels_wanted), figsize=(3.4 * len(panels_wanted), 2.4), squeeze=False)
        for panel, kind in zip(axes[0], panels_wanted, strict=True):
            _style(panel)
            if kind == "iops":
                panel.set_title("IOPS", loc="left", fontsize=10, fontweight="bold", color=INK)
                names = [n for n, _ in iops_bars]
                panel.bar(names, [v for _, v in iops_bars], color=SHADES[1], width=0.6)
                if baseline and "iops" in baseline:
                    panel.axhline(baseline["iops"], color=MUTED, linestyle="--", linewidth=1.2, label="baseline")
                    panel.legend(frameon=False, fontsize=8)
                panel.set_ylim(bottom=0)
                panel.yaxis.set_major_formatter(FuncFormatter(_thousands))
            else:
                panel.set_title("latency (µs)", loc="left", fontsize=10, fontweight="bold", color=INK)
                xs = list(range(len(pcts)))
                before = [baseline.get(m) if baseline else None for m, label in PERCENTILES if m in figures]
                with_base = any(b is not None for b in before)
                width = 0.38 if with_base else 0.6
                shift = width / 2 if with_base else 0.0
                panel.bar([x - shift for x in xs], [v for _, v in pcts], width=width, color=SHADES[0], label="this run")
                if with_base:
                    panel.bar(
                        [x + shift for x, b in zip(xs, before, strict=True) if b is not None],
                        [b for b in before if b is not None],
                        width=width,
                        color=SHADES[3],
                        label="baseline",
                    )
                    panel.legend(frameon=False, fontsize=8)
                panel.set_xticks(xs)
                panel.set_xticklabels([label for label, _ in pcts])
                panel.set_yscale("log")
                panel.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                panel.yaxis.set_major_formatter(FuncFormatter(_thousands))
                panel.yaxis.set_minor_formatter(NullFormatter())
        fig.tight_layout(w_pad=2.0)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    return _inline(buffer.getvalue(), chart_id)


def _svg(fig: Any, chart_id: str) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return _inline(buffer.getvalue(), chart_id)


_RC: dict[str, Any] = {"svg.fonttype": "none", "font.size": 9, "axes.labelcolor": MUTED, "axes.labelsize": 8.5}


def _rc(chart_id: str) -> Any:
    return {**_RC, "svg.hashsalt": chart_id}


def timeseries_chart(
    hosts: Mapping[str, Sequence[tuple[float, float | None, float | None]]],
    cluster: Sequence[tuple[float, float | None, float | None]],
    *,
    chart_id: str,
) -> str | None:
    """IOPS and p99 latency over time: one line per host and the cluster (IOPS summed, p99 from the hosts'
    summed histogram bins). Points are (seconds, IOPS, p99 µs). None when there is nothing to draw."""
    lines = [(name, pts) for name, pts in hosts.items() if pts]
    if cluster and len(lines) > 1:
        lines.append(("all hosts", cluster))
    if not lines:
        return None
    with plt.rc_context(_rc(chart_id)):
        fig, axes = plt.subplots(1, 2, figsize=(9.6, 2.8), squeeze=False)
        for panel, index, title in ((axes[0][0], 1, "IOPS over time"), (axes[0][1], 2, "p99 latency (µs) over time")):
            _style(panel)
            panel.set_title(title, loc="left", fontsize=10, fontweight="bold", color=INK)
            panel.set_xlabel("seconds since the measured window started")
            for i, (name, pts) in enumerate(lines):
                xy = [(p[0], p[index]) for p in pts if p[index] is not None]
                if not xy:
                    continue
                total = name == "all hosts"
                panel.plot([x for x, _ in xy], [float(y) for _, y in xy], label=name,  # type: ignore[arg-type]
                           color=INK if total else SHADES[(i + 1) % len(SHADES)],
                           linewidth=2.0 if total else 1.3, linestyle="-" if total else "--")  # fmt: skip
            if index == 1:
                panel.set_ylim(bottom=0)
            panel.yaxis.set_major_formatter(FuncFormatter(_thousands))
        axes[0][0].legend(frameon=False, fontsize=8, labelcolor=MUTED)
        fig.tight_layout(w_pad=3.0)
        return _svg(fig, chart_id)


def failover_chart(
    hosts: Mapping[str, tuple[Sequence[float], Sequence[float], tuple[float, float]]], *, chart_id: str
) -> str | None:
    """IOPS over time per host through a fault, the fault's window shaded (the hosts' windows together: the
    earliest start to the latest end). ``hosts``: name -> (seconds, IOPS, (fault start s, fault end s)).
    None when there is nothing to draw."""
    lines = [(name, t, v, w) for name, (t, v, w) in hosts.items() if t]
    if not lines:
        return None
    with plt.rc_context(_rc(chart_id)):
        fig, axes = plt.subplots(1, 1, figsize=(9.6, 2.6), squeeze=False)
        panel = axes[0][0]
        _style(panel)
        panel.set_title("IOPS over time through the fault", loc="left", fontsize=10, fontweight="bold", color=INK)
        panel.set_xlabel("seconds since the host's first logged I/O")
        start = min(w[0] for _, _, _, w in lines)
        end = max(w[1] for _, _, _, w in lines)
        panel.axvspan(start, max(end, start + 0.05), color=FAILED, alpha=0.12, linewidth=0, label="paths down")
        for i, (name, t, v, _) in enumerate(lines):
            panel.plot(list(t), list(v), label=name, color=SHADES[i % len(SHADES)], linewidth=1.2)
        panel.set_ylim(bottom=0)
        panel.yaxis.set_major_formatter(FuncFormatter(_thousands))
        panel.legend(frameon=False, fontsize=8, labelcolor=MUTED)
        fig.tight_layout()
        return _svg(fig, chart_id)


def scaling_chart(
    points: Sequence[tuple[int, float, float | None, float | None]],
    *,
    min_efficiency: float | None = None,
    chart_id: str,
) -> str:
    """Seed 003's question at a glance: IOPS against initiators with the linear ideal, and the scaling
    efficiency per step (with the lab's minimum). Points are (n, IOPS, p99 µs, efficiency)."""
    if not points:
        raise ValueError("nothing to draw: no scaling steps")
    with plt.rc_context(_rc(chart_id)):
        fig, axes = plt.subplots(1, 2, figsize=(9.6, 2.8), squeeze=False)
        iops_panel, eff_panel = axes[0]
        ns = [p[0] for p in points]
        for panel in (iops_panel, eff_panel):
            _style(panel)
            panel.set_xlabel("initiators")
            panel.set_xticks(ns)
        iops_panel.set_title("IOPS", loc="left", fontsize=10, fontweight="bold", color=INK)
        iops_panel.plot(ns, [p[1] for p in points], color=SHADES[0], marker="o", markersize=4, linewidth=1.6,
                        label="measured")  # fmt: skip
        iops_panel.plot(ns, [n * points[0][1] for n in ns], color=MUTED, linestyle=":", linewidth=1.2,
                        label="linear")  # fmt: skip
        iops_panel.set_ylim(bottom=0)
        iops_panel.yaxis.set_major_formatter(FuncFormatter(_thousands))
        iops_panel.legend(frameon=False, fontsize=8, labelcolor=MUTED)
        eff_panel.set_title("scaling efficiency", loc="left", fontsize=10, fontweight="bold", color=INK)
        effs = [(p[0], p[3]) for p in points if p[3] is not None]
        eff_panel.plot([n for n, _ in effs], [float(e) for _, e in effs], color=SHADES[1], marker="s",
                       markersize=4, linewidth=1.6)  # fmt: skip
        if min_efficiency is not None:
            eff_panel.axhline(min_efficiency, color=FAILED, linestyle="--", linewidth=1.0)
            eff_panel.annotate(f"minimum {min_efficiency:g}", (ns[0], min_efficiency), textcoords="offset points",
                               xytext=(2, 4), fontsize=8, color=FAILED)  # fmt: skip
        eff_panel.set_ylim(0, max(1.1, *(float(e) for _, e in effs)) if effs else 1.1)
        fig.tight_layout(w_pad=3.0)
        return _svg(fig, chart_id)
