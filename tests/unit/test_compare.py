"""Protocol comparison: seed 001's trend column reproduced exactly from its own figures."""

from __future__ import annotations

import csv
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from factories import make_run, perf_case

from pytest_fabricqa.report.compare import (
    METRIC_SETS,
    compare_runs,
    main,
    render_html,
    render_markdown,
    render_text,
)
from pytest_fabricqa.report.formatting import format_trend, trend_pct
from pytest_fabricqa.report.model import Case, Run, load_json, write_json

DATA = Path(__file__).parent.parent / "data" / "report"
ISCSI = DATA / "seed001_iscsi.json"
SOFTROCE = DATA / "seed001_softroce.json"


def seed_rows() -> list[dict[str, str]]:
    """The seed's table as transcribed, with its own trend columns (never written into the results files)."""
    lines = [ln for ln in (DATA / "seed001_table.tsv").read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def signed(seed_trend: str) -> str:
    """The seed prints positive trends without a sign ("23.13%"); we always print one ("+23.13%")."""
    return seed_trend if seed_trend.startswith("-") else "+" + seed_trend


def test_trend_examples_from_the_digest() -> None:
    assert trend_pct(5543, 6825) == 23.13
    assert trend_pct(13400, 8457) == -36.89
    assert format_trend(trend_pct(5543, 6825)) == "+23.13%"
    assert format_trend(trend_pct(110, 69.3)) == "-37.00%"
    assert format_trend(trend_pct(0, 5)) == "n/a"
    assert format_trend(trend_pct(5, 5)) == "+0.00%"


def test_trend_rounds_half_up_like_a_spreadsheet() -> None:
    # 1.005 is 1.00499999... as a binary float; decimal arithmetic on the figure as written gives 1.01.
    assert trend_pct(1000, 1010.05) == 1.01
    assert trend_pct(200, 197.99) == -1.01


def test_seed001_trend_column_is_reproduced_exactly_for_every_row() -> None:
    comparison = compare_runs([(str(ISCSI), load_json(ISCSI)), (str(SOFTROCE), load_json(SOFTROCE))])
    rows = seed_rows()
    assert len(rows) == 24
    assert [c.label for c in comparison.columns] == ["iscsi", "soft-roce"]
    assert len(comparison.rows) == len(rows)
    mismatches = []
    for seed, row in zip(rows, comparison.rows, strict=True):
        w = row.workload
        assert (w.size, w.rw, w.numjobs) == (seed["size"], seed["rw"], int(seed["numjobs"]))
        for metric, column in (("iops", "trend_iops"), ("mbps", "trend_mbps")):
            ours = format_trend(row.trend(1, metric))
            if ours != signed(seed[column]):
                mismatches.append(f"{seed['size']} {seed['rw']} j{seed['numjobs']} {metric}: {ours} vs {seed[column]}")
    assert mismatches == []


@pytest.mark.parametrize("render", [render_text, render_markdown, render_html])
def test_every_rendering_carries_the_seed_trends(render: object) -> None:
    comparison = compare_runs([("a", load_json(ISCSI)), ("b", load_json(SOFTROCE))])
    out = render(comparison)  # type: ignore[operator]
    lines = out.splitlines()
    for seed in seed_rows():
        wanted = [signed(seed["trend_iops"]), signed(seed["trend_mbps"])]
        assert any(all(w in line for w in wanted) for line in lines), (seed, wanted)
    assert "5,543" in out and "6,825" in out


def test_text_table_has_one_line_per_workload_and_aligned_columns() -> None:
    text = render_text(compare_runs([("a", load_json(ISCSI)), ("b", load_json(SOFTROCE))]))
    lines = text.splitlines()
    assert "soft-roce vs iscsi" in lines[0]
    body = lines[3:]
    assert len(body) == 24
    assert body[19].split() == [
        "random",
        "read",
        "8k",
        "2g",
        "1",
        "5,543",
        "45.4",
        "6,825",
        "55.9",
        "+23.13%",
        "+23.13%",
    ]
    assert len({len(line) for line in body}) == 1  # right-aligned numbers end in the same column


def test_markdown_is_a_well_formed_table() -> None:
    md = render_markdown(compare_runs([("a", load_json(ISCSI)), ("b", load_json(SOFTROCE))]))
    lines = md.splitlines()
    assert lines[0].startswith("| workload | bs | size | jobs | iscsi IOPS")
    assert {line.count("|") for line in lines} == {11}
    assert "| random read | 8k | 2g | 1 | 5,543 | 45.4 | 6,825 | 55.9 | +23.13% | +23.13% |" in lines


def _run(protocol: str, figures: dict[tuple[str, int], float], lab: str = "lab") -> Run:
    cases = [
        perf_case(
            protocol,
            f"{rw}-8k-qd32-j{jobs}",
            nodeid=f"t::{protocol}-{rw}-{jobs}",
            figures={"iops": iops, "mbps": iops * 8192 / 1e6},
        )
        for (rw, jobs), iops in figures.items()
    ]
    return make_run(*cases, lab=lab, protocols=(protocol,), started=datetime(2024, 1, 1, tzinfo=UTC))


def test_three_protocols_give_a_trend_per_later_protocol_and_note_missing_workloads() -> None:
    a = _run("iscsi", {("randread", 1): 1000.0, ("randwrite", 1): 500.0})
    b = _run("nvme-tcp", {("randread", 1): 1500.0})
    c = _run("nvme-rdma", {("randread", 1): 2000.0, ("randwrite", 1): 400.0})
    comparison = compare_runs([("a", a), ("b", b), ("c", c)], metrics=["iops"])
    read, write = comparison.rows
    assert (read.trend(1, "iops"), read.trend(2, "iops")) == (50.0, 100.0)
    assert (write.trend(1, "iops"), write.trend(2, "iops")) == (None, -20.0)
    assert comparison.notes == ("nvme-tcp did not run 1 of the 2 workloads.",)
    text = render_text(comparison)
    assert "nvme-rdma vs iscsi" in text and "n/a" in text


def test_same_protocol_twice_is_labelled_by_file() -> None:
    a = _run("nvme-tcp", {("randread", 1): 1000.0})
    b = _run("nvme-tcp", {("randread", 1): 900.0})
    comparison = compare_runs([("before.json", a), ("after.json", b)])
    assert [c.label for c in comparison.columns] == ["nvme-tcp (before)", "nvme-tcp (after)"]


def test_fewer_than_two_protocols_or_unknown_metric_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least two"):
        compare_runs([("a", _run("iscsi", {("randread", 1): 1.0}))])
    a, b = _run("iscsi", {("randread", 1): 1.0}), _run("iser", {("randread", 1): 1.0})
    with pytest.raises(ValueError, match="unknown metric"):
        compare_runs([("a", a), ("b", b)], metrics=["speed"])


def test_cli_writes_each_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(ISCSI), str(SOFTROCE)]) == 0
    assert "+23.13%" in capsys.readouterr().out
    out = tmp_path / "cmp.html"
    assert main([str(ISCSI), str(SOFTROCE), "--format", "html", "-o", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "-36.89%" in page
    assert main([str(ISCSI), str(SOFTROCE), "--format", "md", "--metrics", "iops"]) == 0
    md = capsys.readouterr().out
    assert "MB/s" not in md and "+23.13%" in md


def test_cli_reports_unusable_input_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main([str(ISCSI), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fabricqa-compare: ") and "bad.json" in err and "Traceback" not in err
    assert main([str(ISCSI)]) == 2
    assert "at least two" in capsys.readouterr().err


def test_multi_protocol_run_compares_its_own_protocols(tmp_path: Path) -> None:
    run = load_json(DATA / "sample_run.json")
    path = write_json(run, tmp_path / "run.json")
    assert main([str(path), "-o", str(tmp_path / "out.txt")]) == 0
    text = (tmp_path / "out.txt").read_text()
    assert "nvme-tcp vs nvme-rdma" in text and "iser vs nvme-rdma" in text


# --- by target (seed 000: the kernel's nvmet against SPDK) ----------------------------------------------------


def seed000_run() -> Run:
    """One run, nvme-rdma through nvmet and through SPDK, with the target CPU split seed 000 reports in words
    (nvmet: ~80% sys, idle 15-20%; SPDK: ~50% usr, idle 45-50%); the latencies only say "SPDK lower"."""
    from pytest_fabricqa.report.model import TargetInfo

    def case(target: str, figures: dict[str, float]) -> Case:
        return perf_case(
            "nvme-rdma",
            "randread-8k-qd128-j4",
            case_id=f"nvme-rdma-{target}-randread-8k-qd128-j4",
            target=target,
            figures=figures,
        )

    nvmet = case(
        "nvmet",
        {"iops": 300000.0, "lat_mean_us": 1700.0, "lat_p99_us": 3000.0, "target_cpu_usr_pct": 3.0,
         "target_cpu_sys_pct": 80.0, "target_cpu_idle_pct": 17.0},
    )  # fmt: skip
    spdk = case(
        "spdk",
        {"iops": 310000.0, "lat_mean_us": 1650.0, "lat_p99_us": 2400.0, "target_cpu_usr_pct": 50.0,
         "target_cpu_sys_pct": 2.5, "target_cpu_idle_pct": 47.5},
    )  # fmt: skip
    targets = {
        "nvmet": TargetInfo("nvmet", "el72h3", ("nvme-rdma",)),
        "spdk": TargetInfo("spdk", "el72h3", ("nvme-rdma",), reactor_cores="0x3"),
    }
    return make_run(nvmet, spdk, target_kind="nvmet+spdk", targets=targets)


def test_one_run_compares_its_targets_with_latency_and_the_target_cpu_split() -> None:
    run = seed000_run()
    comparison = compare_runs([("r.json", run)], METRIC_SETS["latency-cpu"])
    assert [c.label for c in comparison.columns] == ["nvme-rdma nvmet", "nvme-rdma spdk"]
    row = comparison.rows[0]
    assert row.trend(1, "lat_p99_us") == -20.0 and row.trend(1, "target_cpu_idle_pct") == 179.41
    text = render_text(comparison)
    assert "nvme-rdma spdk vs nvme-rdma nvmet" in text
    assert "target usr %" in text and "target sys %" in text and "target idle %" in text
    assert "note: nvme-rdma spdk: SPDK's reactors poll on cores 0x3" in text
    assert "usr + sys + idle is 100 less iowait and steal" in text


def test_cli_compares_by_target_and_names_what_is_not_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_json(seed000_run(), tmp_path / "results.json")
    argv = [str(path), "--protocol", "nvme-rdma", "--target", "nvmet,spdk", "--metrics", "latency-cpu"]
    assert main([*argv, "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "nvme-rdma spdk vs nvme-rdma nvmet target idle %" in out.splitlines()[0]
    assert "+179.41%" in out and "-20.00%" in out
    assert main([str(path), "--target", "lio"]) == 2
    err = capsys.readouterr().err
    assert err == "fabricqa-compare: no target 'lio' in the results (they hold: nvmet, spdk)\n"


def test_a_target_compared_across_two_files_is_labelled_by_target() -> None:
    run = seed000_run()
    only = [(f"{t}.json", replace(run, cases=tuple(c for c in run.cases if c.target == t))) for t in ("nvmet", "spdk")]
    comparison = compare_runs(only, ("iops",))
    assert [c.label for c in comparison.columns] == ["nvme-rdma nvmet", "nvme-rdma spdk"]


def test_a_file_from_before_targets_compares_as_its_protocols() -> None:
    old = load_json(DATA / "sample_baseline.json")
    comparison = compare_runs([("old.json", old)])
    assert [c.label for c in comparison.columns] == ["nvme-rdma", "nvme-tcp", "iser"]
    assert [c.target for c in comparison.columns] == ["nvmet", "nvmet", "scst"]
