"""The HTML report shows a case's time series, a scaling run's table and chart, and a sweep's knee."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from factories import make_run, perf_case, workload

from pytest_fabricqa.core.scaling import scaling_points
from pytest_fabricqa.fio.logs import build_timeseries
from pytest_fabricqa.report.html import case_extra_html, render_html, report_context
from pytest_fabricqa.report.model import Case, Run

LOGS = Path(__file__).parents[1] / "data" / "fio" / "series" / "logs"
T0 = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)


def _case(name: str, iops: float, *, verdict: str = "passed", **extras: object) -> Case:
    return perf_case(
        "nvme-tcp",
        workload(name, runtime=4, ramp_time=1),
        verdict=verdict,
        figures={"iops": iops, "lat_p99_us": 100.0},
        hosts={"vnode1": {"iops": iops / 2}, "vnode2": {"iops": iops / 2}},
        extras=dict(extras),
    )


def _run(*cases: Case) -> Run:
    return make_run(*cases, lab="vlab", protocols=("nvme-tcp",), started=T0)


def test_a_case_with_logs_gets_its_time_series_chart() -> None:
    files = {p.name: p.read_text() for p in LOGS.glob("vnode*")}
    series = build_timeseries(files, host_of={"vnode1": "vnode1", "vnode2": "vnode2"}, interval_ms=500)
    run = _run(_case("randread-4k-qd8-j2", 850_000.0, timeseries=series.to_dict()), _case("randread-4k-qd1-j2", 9e4))
    section = report_context(run)["protocols"][0]
    (group,) = section.groups
    assert [cid for cid, _ in group.series] == ["nvme-tcp-randread-4k-qd8-j2"]
    page = render_html(run)
    assert "IOPS over time" in page and "summed histogram bins" in page
    # pytest-html's per-test extras carry it too.
    assert "IOPS over time" in case_extra_html(run.cases[0], chart_id="x1")
    assert "IOPS over time" not in case_extra_html(run.cases[1], chart_id="x2")


def test_a_sweep_marks_its_knee_at_the_lab_percentage() -> None:
    # Seed 002's iSCSI shape at 1 job: rising to QD 32, then flat.
    iops = {1: 20_000.0, 8: 60_000.0, 32: 100_000.0, 128: 103_000.0}
    cases = [_case(f"randread-4k-qd{qd}-j1", v, knee_gain_pct=10) for qd, v in iops.items()]
    (group,) = report_context(_run(*cases))["protocols"][0].groups
    assert group.knee.startswith("Knee: 1 job × QD 32 (32 outstanding I/Os)")
    assert "more than 10% IOPS" in group.knee
    assert group.chart is not None and "knee" in group.chart and "outstanding I/O" in group.chart
    (lenient,) = report_context(_run(*[replace(c, extras={"knee_gain_pct": 2}) for c in cases]))["protocols"][0].groups
    assert lenient.knee.startswith("Knee: 1 job × QD 128")


def test_a_scaling_run_has_its_table_and_chart_and_stays_out_of_the_sweep() -> None:
    points = scaling_points(
        [(("vnode1",), {"iops": 1000.0, "lat_p99_us": 90.0}), (("vnode1", "vnode2"), {"iops": 1500.0})]
    )
    scaling = replace(
        _case("randread-4k-qd32-j1", 1500.0, verdict="failed", scaling=[p.to_dict() for p in points]),
        case_id="nvme-tcp-randread-4k-qd32-j1-scaling",
        thresholds={"min_scaling_efficiency": 0.8},
        violations=("randread-4k-qd32-j1: scaling efficiency 0.75 at 2 initiators ... below the minimum of 0.8",),
    )
    run = _run(_case("randread-4k-qd32-j1", 1400.0), scaling)
    section = report_context(run)["protocols"][0]
    assert len(section.groups) == 1 and len(section.groups[0].rows) == 3  # the fio case and its two hosts
    (view,) = section.scaling
    assert view.rows == [["1", "vnode1", "1,000", "90.0", "1.00"], ["2", "vnode1, vnode2", "1,500", "–", "0.75"]]
    assert view.verdict == "failed" and "below the minimum of 0.8" in view.reasons[0]
    page = render_html(run)
    assert "Scaling: randread-4k-qd32-j1 from 1 to 2 initiators" in page and "minimum 0.8" in page
