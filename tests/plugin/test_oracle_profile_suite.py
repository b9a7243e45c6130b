"""The oracle profile suite from suites/, run by pytester with the real fio on this machine: two "initiators" are
this machine (local transport), the shared disk is a regular file, and a conftest stands in for the fabric. Each
node writes its own regions with the four streams at once; the case records every node's events as AWR would
name them and fails on a limit the lab sets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from labfiles import local_lab

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "test_oracle_profile.py"

pytestmark = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio on this machine")

PROFILE = """
oracle_profile:
  redo: {region_mb: 4}
  data_mb: 8
  runtime_s: 1
  limits:
    log file parallel write: {max_ms: LIMIT}
"""
SCALING = {"on": "", "off": "  scaling: false\n", "judged": "  min_scaling_efficiency: 5\n"}

CONFTEST = """
import pytest

from pytest_fabricqa.initiators.connect import FabricDevice

DISK = "@DISK@"


class FakeFabric:
    def __init__(self, lab, protocol):
        self.lab, self.protocol = lab, protocol
        self.target = lab.target_for(protocol).name
        self.devices = [
            FabricDevice(name, DISK, "ram0", "nqn.2026-11.io.fabricqa:localora", 1, 160 << 20, 512, True, False)
            for name in lab.hosts_with("initiator")
        ]


class Guard:
    calls = []

    def before_writes(self, protocol, devices, target=None):
        self.calls.append(sorted(d.initiator for d in devices))


@pytest.fixture(scope="session")
def fabric(lab, protocol):
    return FakeFabric(lab, protocol)


@pytest.fixture(scope="session")
def write_guard():
    return Guard()


def pytest_sessionfinish(session):
    assert Guard.calls == [["n1", "n2"]], Guard.calls
"""


@pytest.mark.parametrize(
    ("limit", "scaling", "outcome"),
    [(100_000, "on", "passed"), (0.001, "on", "failed"), (100_000, "off", "passed"), (100_000, "judged", "failed")],
)
def test_every_node_runs_the_mix_on_its_own_regions_and_a_limit_fails_the_case(
    pytester: pytest.Pytester, limit: float, scaling: str, outcome: str
) -> None:
    disk = pytester.path / "disk.img"
    with open(disk, "wb") as fh:
        fh.truncate(160 << 20)
    lab = local_lab("localora", "nqn.2026-11.io.fabricqa:localora", "{path: DISK, writable: true}")
    (pytester.path / "lab.yaml").write_text(
        lab.replace("DISK", str(disk)) + PROFILE.replace("LIMIT", str(limit)) + SCALING[scaling]
    )
    pytester.makeconftest(CONFTEST.replace("@DISK@", str(disk)))
    (pytester.path / "test_oracle_profile.py").write_text(SUITE.read_text())
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess("--lab=lab.yaml", "-p", "no:cacheprovider", f"--report-dir={report}")
    result.assert_outcomes(**{outcome: 1})
    (case,) = json.loads((report / "results.json").read_text())["cases"]
    rows = case["extras"]["oracle_profile"]
    assert {(r["node"], r["event"]) for r in rows} == {
        (n, e) for n in ("n1", "n2") for e in ("log file parallel write", "db file sequential read",
                                               "db file parallel write", "db file scattered read")
    }  # fmt: skip
    assert all(r["waits"] > 0 for r in rows) and case["figures"]["iops"] > 0
    html = (report / "report.html").read_text()
    assert "As AWR would show it: the database&#39;s I/O mix per node and wait event" in html or (
        "As AWR would show it: the database's I/O mix per node and wait event" in html
    )
    assert "<td>n2</td><td>db file sequential read</td>" in html
    assert "ASM health and CALIBRATE_IO were not exercised (the lab declares no database)" in html
    steps = case["extras"].get("oracle_scaling")
    if scaling == "off":
        assert steps is None and "Scaling on the database" not in html
    else:
        # 1 then 2 nodes, in the lab file's order; efficiency is IOPS(2) / (2 x IOPS(1)), as the table shows it.
        assert [(s["n"], s["nodes"]) for s in steps] == [(1, ["n1"]), (2, ["n1", "n2"])]
        one, two = (s["iops"]["total"] for s in steps)
        assert steps[1]["efficiency"] == pytest.approx(two / (2 * one), abs=0.002)
        assert case["figures"]["scaling_efficiency"] == steps[1]["efficiency"]
        assert (
            set(steps[0]["events"]) == {r["event"] for r in rows}
            and steps[0]["events"]["db file sequential read"]["avg_ms"] > 0
        )
        assert (
            "Scaling on the database&#39;s I/O mix: 1 to 2 nodes" in html
            or "Scaling on the database's I/O mix: 1 to 2 nodes" in html
        )
        assert f"<td>{steps[1]['efficiency']:.2f}</td>" in html
    if outcome == "passed":
        assert case["violations"] == []
    elif scaling == "judged":
        (breach,) = case["violations"]
        assert breach.startswith(
            f"oracle profile database IOPS: scaling efficiency {steps[1]['efficiency']:.2f} at 2 initiators ("
        ) and breach.endswith(" is below the minimum of 5"), breach
    else:
        breaches = case["violations"]
        assert any(v.startswith("n1, 'log file parallel write': longest wait") for v in breaches), breaches
        assert any(v.startswith("1 of 2 nodes: n1, 'log file parallel write': longest wait") for v in breaches), (
            breaches
        )
