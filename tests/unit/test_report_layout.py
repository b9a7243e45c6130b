"""The HTML report fits the page: rendered in headless Chromium at 1,280 px, no table is wider than the page.

Chromium lays the report out for real (Debian's package, installed by scripts/install.sh): the report itself has no
scripts, so the test appends one to a copy that measures, after layout, every table's box and the page, and
writes what it found into the DOM that ``--dump-dom`` prints. A screenshot of the same page is kept beside it.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_fabricqa.report.html import render_html
from pytest_fabricqa.report.model import load_json

DATA = Path(__file__).parents[1] / "data" / "report"
CHROMIUM = shutil.which("chromium")
WIDTH = 1280
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
    f"--window-size={WIDTH},2000",
]  # fmt: skip

# After layout: the page's width against the window, and each table: the width its own box shows, the width of
# the table inside it (wider: it scrolls in its box), and where the box's right edge lies.
MEASURE = """
<script>
window.addEventListener("load", () => {
  const page = document.documentElement;
  const tables = [...document.querySelectorAll("table")].map((t) => {
    const box = t.parentElement.classList.contains("table-scroll") ? t.parentElement : t;
    const r = box.getBoundingClientRect();
    return {id: t.id || t.className || "table", right: Math.round(r.right), box: Math.round(r.width),
            table: Math.round(t.getBoundingClientRect().width), scrolls: box !== t};
  });
  const out = document.createElement("pre");
  out.id = "layout";
  out.textContent = JSON.stringify({client: page.clientWidth, scroll: page.scrollWidth, tables});
  document.body.appendChild(out);
});
</script>
"""


def _layout(html: str, folder: Path) -> dict:
    page = folder / "report.html"
    page.write_text(html.replace("</body>", MEASURE + "</body>"))
    profile = folder / "profile"
    common = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run(
        [*common, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    subprocess.run(
        [*common, f"--screenshot={folder / 'report.png'}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:] + dom.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: run scripts/install.sh")
@pytest.mark.parametrize("results", ["sample_run.json", "vlab_full_run.json.gz"])
def test_no_table_of_the_report_is_wider_than_the_page_at_1280_px(results: str, tmp_path: Path) -> None:
    """A wide table scrolls inside its own box; the page never scrolls sideways, and every box ends inside it.
    ``vlab_full_run.json.gz``: a real multi-target run (tests/data/report/README.md)."""
    source = DATA / results
    if source.suffix == ".gz":
        (tmp_path / source.stem).write_bytes(gzip.decompress(source.read_bytes()))
        source = tmp_path / source.stem
    run = load_json(source)
    layout = _layout(render_html(run), tmp_path)
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert layout["client"] == WIDTH and layout["tables"], layout
    assert layout["scroll"] <= layout["client"], layout  # no horizontal scrollbar on the page
    outside = [t for t in layout["tables"] if t["right"] > layout["client"]]
    assert not outside, outside
    # Every table sits in a box of its own (html.scroll_boxes), and a table wider than its box is one that scrolls.
    assert all(t["scrolls"] for t in layout["tables"]), [t for t in layout["tables"] if not t["scrolls"]]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: run scripts/install.sh")
def test_the_measure_sees_a_table_wider_than_the_page_when_it_has_no_box_of_its_own(tmp_path: Path) -> None:
    """The check above can fail: the same report without the scroll boxes' style overflows the page."""
    html = render_html(load_json(DATA / "sample_run.json")).replace(".table-scroll { overflow-x: auto;", ".x {")
    wide = "<table id='wide'><tr>" + "<td>column_with_a_long_unbreakable_name</td>" * 40 + "</tr></table>"
    layout = _layout(html.replace("</main>", wide + "</main>"), tmp_path)
    assert layout["scroll"] > layout["client"], layout
    assert any(t["id"] == "wide" and t["right"] > layout["client"] for t in layout["tables"]), layout
