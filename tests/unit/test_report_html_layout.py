"""The HTML report's layout: the failover summary, the skipped cases in one place, and wide tables that scroll in
their own box instead of widening the page. Pages are read back with the standard library's HTML parser."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from factories import make_run, perf_case

from pytest_fabricqa.failover.figures import stall_rule
from pytest_fabricqa.report.html import render_html, report_context, scroll_boxes, skip_reason
from pytest_fabricqa.report.model import Case, Check, Run, TargetInfo

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parent: Element | None
    nodes: list[Element | str] = field(default_factory=list)
    """Its content in page order: elements and text."""

    @property
    def children(self) -> list[Element]:
        return [n for n in self.nodes if isinstance(n, Element)]

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all_text(self) -> str:
        """The element's text with its descendants', as a reader sees it (whitespace runs as one space)."""
        parts = [n if isinstance(n, str) else n.all_text() for n in self.nodes]
        return re.sub(r"\s+", " ", "".join(parts)).strip()

    def walk(self) -> list[Element]:
        return [self, *(e for child in self.children for e in child.walk())]


class Tree(HTMLParser):
    """The page as a tree of elements: enough to ask what sits inside what."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.root = Element("#root", {}, None)
        self.at = self.root
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, self.at)
        self.at.nodes.append(element)
        if tag not in VOID:
            self.at = element

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.at.nodes.append(Element(tag, {k: v or "" for k, v in attrs}, self.at))  # <path ... /> in the SVGs

    def handle_endtag(self, tag: str) -> None:
        open_at: Element | None = self.at
        while open_at is not None and open_at.tag != tag:
            open_at = open_at.parent
        if open_at is not None and open_at.parent is not None:
            self.at = open_at.parent

    def handle_data(self, data: str) -> None:
        self.at.nodes.append(data)

    def all(self, tag: str) -> list[Element]:
        return [e for e in self.root.walk() if e.tag == tag]

    def by_id(self) -> dict[str, Element]:
        return {e.attrs["id"]: e for e in self.root.walk() if "id" in e.attrs}


def _series(fault_s: tuple[float, float], iops: float) -> dict[str, list[float]]:
    """A host's IOPS over time as the failover suite records it (outage.throughput_points' form)."""
    t_s = [round(0.1 * i, 1) for i in range(1, 61)]
    values = [0.0 if fault_s[0] <= t <= fault_s[1] else iops for t in t_s]
    return {"t_s": t_s, "iops": values, "fault_s": list(fault_s)}


@pytest.fixture(scope="module")
def run() -> Run:
    """MADE UP FOR THIS TEST, not measured: no recorded sample run has failover cases (tests/data/report holds
    none), so this one is built from the model's dataclasses in the shape suites/test_failover.py records (figures
    each the worst host's, per-host figures, the limits applied, ``extras["failover"]`` with the outage and the
    series). NVMe/RDMA is served by nvmet and SPDK (two targets: per-target tables and the target comparison),
    NVMe/TCP by nvmet; one failover case fails its stall limit, one has no chart, one was skipped by pytest, and
    a lab-wide prerequisite was skipped with its reason in its check."""
    hosts = ("el72h1", "el72h2")
    brief = Case(
        nodeid="suites/test_failover.py::test_all_paths_down[nvme-tcp-nvmet-all-paths-down-brief]",
        case_id="nvme-tcp-nvmet-failover-all-paths-down-brief",
        suite="failover",
        verdict="passed",
        protocol="nvme-tcp",
        target="nvmet",
        figures={"stall_s": 2.3, "first_io_s": 2.4, "recovery_s": 2.9, "io_errors": 0.0, "verify_errors": 0.0},
        hosts={
            "el72h1": {"stall_s": 2.3, "first_io_s": 2.4, "recovery_s": 2.9, "io_errors": 0.0, "verify_errors": 0.0},
            "el72h2": {"stall_s": 2.1, "first_io_s": 2.2, "recovery_s": 2.6, "io_errors": 0.0, "verify_errors": 0.0},
        },
        thresholds={"max_stall_s": 10.0, "max_io_errors": 0.0, "max_verify_errors": 0.0},
        extras={
            "failover": {
                "outage": "all-paths-down-brief",
                "what": "every path down for less than the path timeout, then back: I/O resumes, no error",
                "series": {h: _series((2.0, 4.0), 5000.0) for h in hosts},
                "stall_rule": stall_rule(100),
            }
        },
    )
    long = Case(
        nodeid="suites/test_failover.py::test_all_paths_down[nvme-rdma-spdk-all-paths-down-long]",
        case_id="nvme-rdma-spdk-failover-all-paths-down-long",
        suite="failover",
        verdict="failed",
        protocol="nvme-rdma",
        target="spdk",
        figures={"stall_s": 14.2, "first_io_s": 14.3, "io_errors": 12.0, "verify_errors": 0.0},
        hosts={
            "el72h1": {"stall_s": 14.2, "first_io_s": 14.3, "io_errors": 12.0, "verify_errors": 0.0},
            "el72h2": {"stall_s": 9.5, "first_io_s": 9.6, "recovery_s": 11.0, "io_errors": 7.0, "verify_errors": 0.0},
        },
        thresholds={"max_stall_s": 10.0, "max_recovery_s": 20.0},
        violations=(
            "el72h1, fault every storage link down 12 s: the fault's stall 14.2 s is above the maximum of 10 s",
            "el72h1, fault every storage link down 12 s: throughput never came back to 90% of its pre-fault mean "
            "within the run (the maximum to recovery is 20 s)",
        ),
        extras={
            "failover": {
                "outage": "all-paths-down-long",
                "what": "every path down for longer than the path timeout, then back: I/O errors are seen",
                "series": {h: _series((1.0, 5.5), 7000.0) for h in hosts},
            },
            "kernel_log": {  # lines of tests/data/kernlog's recorded dmesg, as kernlog.Account.to_dict keeps them
                "el72h1": [
                    "23:32:01.317 nvme nvme0: starting error recovery",
                    "23:32:14.728 nvme nvme2: failed to connect socket: -111",
                ],
            },
        },
    )
    parity = Case(
        nodeid="suites/test_failover.py::test_paths_carry_alike[nvme-rdma-nvmet]",
        case_id="nvme-rdma-nvmet-failover-path-parity",
        suite="failover",
        verdict="passed",
        protocol="nvme-rdma",
        target="nvmet",
        figures={"path_imbalance_pct": 4.2},
        hosts={"el72h1": {"path_imbalance_pct": 4.2}, "el72h2": {"path_imbalance_pct": 3.1}},
        thresholds={"max_path_imbalance_pct": 10.0},
        extras={"parity": {"device": "/dev/nvme0n1", "iops_per_path": {"el72h1": {}, "el72h2": {}}}},
    )
    one_path = Case(  # as report/gather.py records a test that skipped before recording a case
        nodeid="suites/test_failover.py::test_one_path_down[nvme-tcp-nvmet]",
        case_id="test_one_path_down[nvme-tcp-nvmet]",
        suite="failover",
        verdict="skipped",
        protocol="nvme-tcp",
        target="nvmet",
        extras={"skip_reason": "nvme-tcp-nvmet: the target serves on one path (10.10.10.19), so there is no path "
                               "to fail over to"},
    )  # fmt: skip
    mtu = Case(
        nodeid="suites/test_prerequisites.py::test_mtu[el72h1-ens2]",
        case_id="prereq-mtu-el72h1",
        suite="prerequisite",
        verdict="skipped",
        checks=(Check("MTU 9000 on the storage link", "skipped", "the lab does not ask for jumbo frames"),),
    )

    def perf(target: str, p99: float, usr: float, sys: float, idle: float) -> Case:
        figures = {"iops": 300000.0, "mbps": 2457.6, "lat_mean_us": 1700.0, "lat_p99_us": p99,
                   "lat_p999_us": p99 * 1.6, "cpu_usr_pct": 9.0, "cpu_sys_pct": 31.0, "target_cpu_usr_pct": usr,
                   "target_cpu_sys_pct": sys, "target_cpu_idle_pct": idle}  # fmt: skip
        cid = f"nvme-rdma-{target}-randread-8k-qd128-j4"
        return perf_case("nvme-rdma", "randread-8k-qd128-j4", case_id=cid, target=target, figures=figures)

    targets = {
        "nvmet": TargetInfo("nvmet", "el72h3", ("nvme-rdma", "nvme-tcp")),
        "spdk": TargetInfo("spdk", "el72h3", ("nvme-rdma",), reactor_cores="0x3"),
    }
    return make_run(
        mtu,
        perf("nvmet", 3000.0, 3.0, 80.0, 17.0),
        perf("spdk", 2400.0, 50.0, 2.5, 47.5),
        brief,
        long,
        parity,
        one_path,
        target_kind="nvmet+spdk",
        targets=targets,
    )


@pytest.fixture(scope="module")
def page(run: Run) -> Tree:
    return Tree(render_html(run))


def _row_cells(row: Element) -> list[Element]:
    return [c for c in row.children if c.tag == "td"]


def _figure(td: Element) -> tuple[str, str, bool]:
    """A figure cell as (figure, its limit, marked beyond the limit)."""
    limits = [e.all_text() for e in td.children if "limit" in e.classes]
    return "".join(n for n in td.nodes if isinstance(n, str)).strip(), "".join(limits), "over" in td.classes


def _case_id(row: Element) -> str:
    return next(e for e in row.walk() if e.tag == "code").all_text()


def test_failover_summary_has_a_row_per_case_linked_to_its_chart(run: Run, page: Tree) -> None:
    ids = page.by_id()
    summary = ids["failover-summary"]
    assert summary.tag == "table"
    failover_at = [e.attrs.get("id") for e in page.root.walk() if "id" in e.attrs].index("failover")
    assert [e.attrs.get("id") for e in page.root.walk() if "id" in e.attrs].index("failover-summary") > failover_at
    rows = [r for r in summary.walk() if r.tag == "tr" and "case" in r.classes]
    failover_cases = [c for c in run.cases if c.suite == "failover"]
    assert [_case_id(r) for r in rows] == [c.case_id for c in failover_cases]
    # Protocol and target lead each row.
    scopes = ["".join(n for n in _row_cells(r)[0].nodes if isinstance(n, str)) for r in rows]
    assert scopes == ["NVMe/TCP · nvmet", "NVMe/RDMA · spdk", "NVMe/RDMA · nvmet", "NVMe/TCP · nvmet"]
    # Every link points at an element of the page: the figure holding that case's chart.
    links = {_case_id(r): [a.attrs["href"] for a in r.walk() if a.tag == "a"] for r in rows}
    charted = [c.case_id for c in failover_cases if "series" in c.extras.get("failover", {})]
    assert charted == ["nvme-tcp-nvmet-failover-all-paths-down-brief", "nvme-rdma-spdk-failover-all-paths-down-long"]
    for case_id, hrefs in links.items():
        if case_id not in charted:
            assert hrefs == [], f"{case_id} has no chart, so nothing to link to"
            continue
        (href,) = hrefs
        target = ids[href.removeprefix("#")]
        assert target.tag == "figure" and any(e.tag == "svg" for e in target.walk())
        (caption,) = [e for e in target.children if e.tag == "figcaption"]
        assert caption.all_text().startswith(f"{case_id}: ")


def test_the_failover_section_says_how_the_stall_is_measured_from_the_figures_constants(page: Tree) -> None:
    text = page.by_id()["stall-rule"].all_text()
    assert text == stall_rule(100)
    assert text.startswith(
        "The fault's stall is the longest time without a completed I/O that begins between 0.2 s before the fault and "
        "3 s after it and is longer than every gap before the fault, read from fio's IOPS log in 100 ms intervals "
        "(up to 0.2 s short)."
    )


def test_failover_summary_shows_each_figure_against_its_limit_and_each_host(page: Tree) -> None:
    summary = page.by_id()["failover-summary"]
    headers = [th.all_text() for th in summary.walk() if th.tag == "th"]
    assert headers == ["Case", "Fault", "Host", "fault's stall (s)", "longest other gap (s)", "first I/O after fault (s)",
                       "recovery to 90% (s)", "failback (s)", "I/O errors", "verify errors", "path imbalance (%)",
                       "Verdict"]  # fmt: skip
    body = [r for r in summary.walk() if r.tag == "tr" and r.parent is not None and r.parent.tag == "tbody"]
    texts = [[td.all_text() for td in _row_cells(r)] for r in body]
    brief = next(i for i, t in enumerate(texts) if "nvme-tcp-nvmet-failover-all-paths-down-brief" in t[0])
    assert texts[brief][1] == (
        "all-paths-down-brief" + "every path down for less than the path timeout, then back: I/O resumes, no error"
    )
    assert [texts[brief + i][2] for i in range(3)] == ["2 hosts", "el72h1", "el72h2"]
    assert texts[brief][-1] == "PASSED"
    figures = [[_figure(td) for td in _row_cells(body[brief + i])[3:-1]] for i in range(3)]
    assert figures == [
        [("2.30", "≤ 10", False), ("–", "", False), ("2.40", "", False), ("2.90", "", False), ("–", "", False), ("0", "≤ 0", False), ("0", "≤ 0", False),
         ("–", "", False)],
        [("2.30", "≤ 10", False), ("–", "", False), ("2.40", "", False), ("2.90", "", False), ("–", "", False), ("0", "≤ 0", False), ("0", "≤ 0", False),
         ("–", "", False)],
        [("2.10", "≤ 10", False), ("–", "", False), ("2.20", "", False), ("2.60", "", False), ("–", "", False), ("0", "≤ 0", False), ("0", "≤ 0", False),
         ("–", "", False)],
    ]  # fmt: skip
    # The failed case: its stall beyond the limit and its recovery missing while limited, both marked; why below.
    long = next(i for i, t in enumerate(texts) if "nvme-rdma-spdk-failover-all-paths-down-long" in t[0])
    assert [_figure(td) for td in _row_cells(body[long])[3:-1]] == [
        ("14.2", "≤ 10", True), ("–", "", False), ("14.3", "", False), ("–", "≤ 20", True), ("–", "", False), ("12", "", False), ("0", "", False),
        ("–", "", False),
    ]  # fmt: skip
    el72h2 = [_figure(td) for td in _row_cells(body[long + 2])[3:7]]
    assert el72h2 == [("9.50", "≤ 10", False), ("–", "", False), ("9.60", "", False), ("11.0", "≤ 20", False)]
    assert texts[long][-1] == "FAILED"
    assert "the fault's stall 14.2 s is above the maximum of 10 s" in texts[long + 3][1]
    assert "reasons" in _row_cells(body[long + 3])[1].classes
    # The parity case: its imbalance against the parity limit.
    parity = next(i for i, t in enumerate(texts) if "nvme-rdma-nvmet-failover-path-parity" in t[0])
    assert _figure(_row_cells(body[parity])[-2]) == ("4.2", "≤ 10", False)


def test_skipped_cases_are_listed_in_one_place_with_their_reasons(page: Tree) -> None:
    ids = page.by_id()
    assert ids["skipped"].all_text() == "Skipped, and why"
    (listing,) = [e for e in page.all("dl") if "skipped" in e.classes]
    found = [(e.tag, e.all_text()) for e in listing.children]
    assert found == [
        ("dt", "Lab"),
        ("dd", "prereq-mtu-el72h1: MTU 9000 on the storage link: the lab does not ask for jumbo frames"),
        ("dt", "NVMe/TCP · nvmet"),
        ("dd", "test_one_path_down[nvme-tcp-nvmet]: nvme-tcp-nvmet: the target serves on one path (10.10.10.19), "
               "so there is no path to fail over to"),
    ]  # fmt: skip
    assert any(a.attrs.get("href") == "#skipped" for a in page.all("a")), "the table of contents leads there"


def test_a_skip_without_a_recorded_reason_says_so() -> None:
    case = Case(nodeid="suites/test_x.py::t", case_id="t", suite="connectivity", verdict="skipped")
    assert skip_reason(case) == "no reason recorded (see the pytest output for this test)"


def test_every_table_scrolls_in_its_own_box_with_a_sticky_first_column(run: Run, page: Tree) -> None:
    tables = page.all("table")
    kinds = {" ".join(sorted(t.classes)) or t.attrs.get("id", "") for t in tables}
    # The multi-target page has the wide ones this is for: the per-target tables and the target comparison.
    assert {"compare figures", "figures", "summary", "kv", "checks"} <= kinds
    assert len(report_context(run)["target_comparisons"]) == 1
    for table in tables:
        box = table.parent
        assert box is not None and box.tag == "div" and box.classes == {"table-scroll"}, (
            f"a <table class='{table.attrs.get('class', '')}'> sits in <{box.tag if box else '?'}>, not in a box"
        )
        assert [c.tag for c in box.children] == ["table"], "one table per box"
    style = page.all("style")[0]
    assert style.parent is not None and style.parent.tag == "head"
    css = style.all_text()
    assert re.search(r"\.table-scroll\s*\{[^}]*overflow-x:\s*auto", css)
    sticky = re.search(r"\.table-scroll > table > tbody > tr > :first-child,[^{]*\{([^}]*)\}", css)
    assert sticky is not None
    assert "position: sticky" in sticky.group(1) and "left: 0" in sticky.group(1)
    assert "background: #fff" in sticky.group(1)


def test_scroll_boxes_wraps_the_outermost_tables_only() -> None:
    page = "<p>a</p><table class=x><tr><td><table><tr><td>in</td></tr></table></td></tr></table><p>b</p><TABLE></TABLE>"
    assert str(scroll_boxes(page)) == (
        '<p>a</p><div class="table-scroll"><table class=x><tr><td><table><tr><td>in</td></tr></table></td></tr>'
        '</table></div><p>b</p><div class="table-scroll"><TABLE></TABLE></div>'
    )


def test_a_failover_case_shows_its_kernel_lines_as_the_faults_account_under_its_row(page: Tree) -> None:
    summary = page.by_id()["failover-summary"]
    body = [r for r in summary.walk() if r.tag == "tr" and r.parent is not None and r.parent.tag == "tbody"]
    at = next(i for i, r in enumerate(body) if "case" in r.classes and "all-paths-down-long" in _case_id(r))
    below = body[at + 1 :]
    kernel = next(r for r in below if any(e.tag == "details" for e in r.walk()))
    assert below.index(kernel) < next((below.index(r) for r in below if "case" in r.classes), len(below))
    (details,) = [e for e in kernel.walk() if e.tag == "details"]
    (summary_line,) = [e for e in details.children if e.tag == "summary"]
    assert summary_line.all_text() == "the kernel's account on el72h1 (2 storage lines)"
    (pre,) = [e for e in details.children if e.tag == "pre"]
    assert pre.all_text().endswith("nvme nvme2: failed to connect socket: -111")
    # A case that kept no account has no such row.
    assert sum(1 for r in body if any(e.tag == "details" for e in r.walk())) == 1
