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


@pytest.mark.parametrize(("limit", "outcome"), [(100_000, "passed"), (0.001, "failed")])
def test_every_node_runs_the_mix_on_its_own_regions_and_a_limit_fails_the_case(
    pytester: pytest.Pytester, limit: float, outcome: str
) -> None:
    disk = pytester.path / "disk.img"
    with open(disk, "wb") as fh:
        fh.truncate(160 << 20)
    lab = local_lab("localora", "nqn.2026-11.io.fabricqa:localora", "{path: DISK, writable: true}")
    (pytester.path / "lab.yaml").write_text(lab.replace("DISK", str(disk)) + PROFILE.replace("LIMIT", str(limit)))
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
    if outcome == "failed":
        assert any("'log file parallel write': longest wait" in v for v in case["violations"]), case["violations"]
    else:
        assert case["violations"] == []
