"""The HTML report: self-contained, verdict first, every section present when its data is."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pytest_fabricqa.report import charts
from pytest_fabricqa.report.html import bs_label, render_html, report_context, write_html
from pytest_fabricqa.report.model import Run, load_json

DATA = Path(__file__).parent.parent / "data" / "report"
DRAW_SWEEP_CHART = charts.sweep_chart


@pytest.fixture(scope="module", autouse=True)
def _each_chart_drawn_once() -> Iterator[None]:
    """Within this module, a sweep chart asked for again with the same series, options and id is the SVG drawn
    the first time: matplotlib takes about a second a chart here, and several tests render the sample again with
    only its text changed. test_rendering_is_deterministic draws afresh, and so proves the reuse is exact."""
    drawn: dict[tuple[Any, ...], str] = {}

    def sweep_chart(series: Sequence[charts.Series], **options: Any) -> str:
        key = (tuple(series), *sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()))
        if key not in drawn:
            drawn[key] = DRAW_SWEEP_CHART(series, **options)
        return drawn[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(charts, "sweep_chart", sweep_chart)
        yield


@pytest.fixture(scope="module")
def sample() -> Run:
    return load_json(DATA / "sample_run.json")


@pytest.fixture(scope="module")
def page(sample: Run) -> str:
    return render_html(sample)


class _Refs(HTMLParser):
    """Collects every attribute that makes a browser fetch something, and every tag name."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "poster", "srcset", "data") and value:
                self.refs.append((tag, name, value))


def test_nothing_is_fetched_from_anywhere(page: str) -> None:
    parser = _Refs()
    parser.feed(page)
    external = [r for r in parser.refs if not r[2].startswith("#")]
    assert external == []
    assert not parser.tags & {"script", "link", "img", "iframe", "object", "embed"}
    assert not re.search(r"(src|href)\s*=\s*[\"']?\s*(https?:)?//", page, re.IGNORECASE)
    assert "@import" not in page and not re.search(r"url\(\s*['\"]?(https?:)?//", page)
    # Internal anchors all resolve (a broken table of contents is a small embarrassment in front of a customer).
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    assert {r[2][1:] for r in parser.refs} <= ids
    assert len(ids) == len(re.findall(r'\bid="', page)), "element ids must be unique across the inlined charts"


def test_verdict_comes_first_with_what_failed_and_why(page: str) -> None:
    verdict_at = page.index('<div class="word">FAIL</div>')
    assert verdict_at < page.index('id="environment"') < page.index('id="nvme-rdma"')
    failed = page[page.index("What failed") : page.index('id="environment"')]
    assert "nvme-tcp-randwrite-8k-qd32-j4</code>: iops 115,375 is 18.0% below the baseline&#39;s 140,702" in failed
    assert "iser-randwrite-8k-qd128-j4</code>: lat_p99_us 13,787 µs is above the maximum 12,000 µs" in failed
    assert failed.count("<li>") == 2
    summary = page[page.index('id="verdict"') : page.index("What failed")]
    for name, verdict in (("NVMe/RDMA", "PASS"), ("NVMe/TCP", "FAIL"), ("iSER", "FAIL")):
        assert re.search(
            rf"<td>{re.escape(name)}</td><td><span class=\"pill v-{verdict.lower()}\">{verdict}</span>", summary
        )


def test_sections_charts_and_environment(page: str, sample: Run) -> None:
    # One sweep chart per protocol and access pattern, plus one comparison chart per access pattern.
    assert page.count('<svg class="chart"') == 3 * 4 + 4
    assert "Protocol comparison" in page and "NVMe/TCP vs NVMe/RDMA" in page
    assert "fio-3.35" in page and "INTEL SSDPEDMW012T4 · firmware 8EV10174" in page
    assert "4.14.35-1902.300.11.el7uek.x86_64" in page
    assert "baseline used fio-3.33, this run fio-3.35" in page
    assert "Maximum MB/s</th><td>4,213" in page
    assert "Oracle checks were not exercised" not in page
    assert "SYNTHETIC" in page  # the sample says what it is
    # Per-host rows under each total.
    assert page.count('<tr class="sub">') == 2 * sum(1 for c in sample.cases if c.suite == "performance")


def test_no_database_gives_the_plain_sentence(sample: Run) -> None:
    cases = tuple(c for c in sample.cases if c.suite != "oracle" and c.protocol in ("iser", None))
    run = replace(sample, protocols=("iser",), cases=cases, baseline=None)
    page = render_html(run)
    assert "Oracle checks were not exercised (the lab declares no database)." in page
    assert 'id="baseline"' not in page
    run = replace(run, extras={"oracle_not_exercised": "--fabricqa-skip-oracle was given"})
    assert "Oracle checks were not exercised (--fabricqa-skip-oracle was given)." in render_html(run)


def test_passing_single_protocol_run_has_no_comparison_and_says_pass(sample: Run) -> None:
    cases = tuple(c for c in sample.cases if c.protocol in ("nvme-rdma", None))
    run = replace(sample, protocols=("nvme-rdma",), cases=cases, baseline=None)
    context = report_context(run)
    assert context["verdict"] == "PASS" and context["comparison"] is None and context["failures"] == []
    page = render_html(run)
    assert '<div class="word">PASS</div>' in page and "What failed" not in page
    assert 'id="comparison"' not in page


def test_transcribed_run_without_latency_or_queue_depth_renders(tmp_path: Path) -> None:
    run = load_json(DATA / "seed001_softroce.json")
    path = write_html(run, tmp_path / "out" / "report.html")
    page = path.read_text()
    assert "p99 µs" not in page and "<th>Host</th>" not in page  # columns nobody measured are dropped
    assert page.count('<svg class="chart"') == 4  # 2 GB file: one chart per access pattern, jobs on the x axis
    assert "6,825" in page
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.html"]


def test_rendering_is_deterministic(sample: Run, page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(charts, "sweep_chart", DRAW_SWEEP_CHART)  # every chart drawn again, none reused
    assert render_html(sample) == page


def test_user_text_is_escaped() -> None:
    run = replace(load_json(DATA / "seed001_iscsi.json"), lab="<script>alert(1)</script>")
    page = render_html(run)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_bs_label() -> None:
    assert [bs_label(b) for b in ("8k", "4k", "1m", "512", "64K", "1536")] == [
        "8 KiB",
        "4 KiB",
        "1 MiB",
        "512",
        "64 KiB",
        "1536",
    ]


def test_each_case_shows_what_its_figures_stand_on(sample: Run, tmp_path: Path) -> None:
    from pytest_fabricqa.report.html import case_extra_html
    from pytest_fabricqa.report.model import write_json

    index, case = next((i, c) for i, c in enumerate(sample.cases) if c.suite == "performance" and len(c.hosts) > 1)
    hosts = sorted(case.hosts)
    stood_on = replace(
        case,
        randseeds={hosts[0]: 3528591611, hosts[1]: 618309420},
        queues={hosts[0]: {"node.session.queue_depth": 32, "node.session.cmds_max": 128}, "el72h3": {"default_cmdsn_depth": 64}},
        start_offsets_ms={hosts[0]: 0.0, hosts[1]: 37.0},
    )  # fmt: skip
    cases = list(sample.cases)
    cases[index] = stood_on
    run = replace(sample, cases=tuple(cases))
    again = load_json(write_json(run, tmp_path / "results.json")).cases[index]
    assert (again.randseeds, again.queues, again.start_offsets_ms) == (
        stood_on.randseeds, stood_on.queues, stood_on.start_offsets_ms
    )  # fmt: skip
    assert again.start_spread_ms == 37.0
    for html in (render_html(run), case_extra_html(stood_on)):
        assert f"hosts started within 37 ms of each other (last: {hosts[1]}; fio job_start)" in html
        assert f"randseed: {hosts[0]} 3528591611, {hosts[1]} 618309420" in html
        assert (
            f"queues: {hosts[0]} node.session.queue_depth 32, node.session.cmds_max 128; el72h3 default_cmdsn_depth 64"
            in html
        )
    # Without fio's job_start the report says the spread is not known rather than showing nothing.
    unknown = replace(stood_on, start_offsets_ms={})
    assert "start spread of the hosts not known" in case_extra_html(unknown)


def test_targets_of_one_protocol_get_their_own_tables_and_seed_000s_comparison() -> None:
    """nvme-rdma through nvmet and SPDK: per-target tables, and the target comparison with the CPU split."""
    from factories import make_run, perf_case

    from pytest_fabricqa.report.model import TargetInfo

    def case(target: str, usr: float, sys: float, idle: float, p99: float) -> object:
        figures = {"iops": 300000.0, "lat_mean_us": 1700.0, "lat_p99_us": p99, "target_cpu_usr_pct": usr,
                   "target_cpu_sys_pct": sys, "target_cpu_idle_pct": idle}  # fmt: skip
        cid = f"nvme-rdma-{target}-randread-8k-qd128-j4"
        return perf_case("nvme-rdma", "randread-8k-qd128-j4", case_id=cid, target=target, figures=figures)

    targets = {
        "nvmet": TargetInfo("nvmet", "el72h3", ("nvme-rdma",)),
        "spdk": TargetInfo("spdk", "el72h3", ("nvme-rdma",)),
    }
    run = make_run(
        case("nvmet", 3.0, 80.0, 17.0, 3000.0),  # type: ignore[arg-type]
        case("spdk", 50.0, 2.5, 47.5, 2400.0),  # type: ignore[arg-type]
        target_kind="nvmet+spdk",
        targets=targets,
    )
    context = report_context(run)
    titles = [g.title for s in context["protocols"] for g in s.groups]
    assert titles == ["nvmet: Random read, 8 KiB blocks", "spdk: Random read, 8 KiB blocks"]
    assert [t for t, _ in context["target_comparisons"]] == ["NVMe/RDMA"]
    table = context["target_comparisons"][0][1]
    for heading in ("target usr %", "target sys %", "target idle %", "p99 µs", "mean µs"):
        assert heading in table
    assert "-20.00%" in table and "+179.41%" in table
    assert "reactor cores are not known" in table
    html = render_html(run)
    assert 'id="targets"' in html and "nvmet (nvmet on el72h3: NVMe/RDMA); spdk (spdk on el72h3: NVMe/RDMA;" in html


def test_a_failover_case_gets_its_hosts_iops_over_time_with_the_fault_shaded() -> None:
    """The chart from a real recording (tests/data/failover: nvme-tcp on the virtual lab, vnode1, links down 2 s),
    through results.json's own round trip."""
    import json

    from factories import make_run, perf_case

    from pytest_fabricqa.failover import outage
    from pytest_fabricqa.report.model import Case, case_from_dict, case_to_dict

    folder = DATA.parent / "failover" / "nvme-tcp-brief-vnode1"
    logs = {p.name: p.read_text() for p in folder.iterdir() if p.name not in ("fio.json", "fault")}
    run = outage.HostRun("vnode1", (folder / "fio.json").read_text(), logs, int(logs["start"]), int(logs["end"]), 0)
    start, end = (int(v) for v in (folder / "fault").read_text().split())
    fault = outage.Fault("every storage link down 2 s", start, end)
    _, _, series = outage._figures(run, fault)
    assert series is not None
    extras = {
        "failover": {
            "what": "every storage link down 2 s",
            "series": {"vnode1": outage.throughput_points(series, fault)},
        }
    }
    case = Case(suite="failover", verdict="passed", protocol="nvme-tcp", case_id="nvme-tcp-nvmet-failover-brief",
                nodeid="suites/test_failover.py::test_all_paths_down[x]", extras=extras)  # fmt: skip
    case = case_from_dict(json.loads(json.dumps(case_to_dict(case))))
    page = render_html(make_run(case))
    assert 'id="failover"' in page and 'href="#failover"' in page
    assert "nvme-tcp-nvmet-failover-brief: every storage link down 2 s" in page
    svg = page[page.index('id="failover"') :]
    assert "paths down" in svg and "vnode1" in svg and "<svg" in svg
    anchor = "failover-nvme-tcp-nvmet-failover-brief"
    assert f'href="#{anchor}"' in svg and f'<figure id="{anchor}">' in svg
    # No series recorded: no chart and no link to one; the case keeps its row in the section's summary.
    without = render_html(make_run(replace(case, extras={"failover": {"what": "x"}})))
    section = without[without.index('id="failover"') :]
    assert "<figure" not in section and "<svg" not in section and 'href="#failover-' not in section
    assert "<code>nvme-tcp-nvmet-failover-brief</code>" in section
    assert 'id="failover"' not in render_html(make_run(perf_case())), "no failover case, no section"


def test_the_samples_skipped_case_is_listed_with_the_reason_its_check_gives(page: str) -> None:
    listing = page[page.index('<h3 id="skipped">Skipped, and why</h3>') : page.index('id="environment"')]
    assert "<dt>Lab</dt>" in listing
    reason = "MTU 9000 on the storage link: the lab does not ask for jumbo frames"  # the skipped check's own words
    assert f"<code>prereq-mtu-el72h1</code>: {reason}" in listing
    assert listing.count("<dd>") == 1
