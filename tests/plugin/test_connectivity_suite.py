"""The connectivity suite's path-settings case from suites/, run by pytester on this machine: two "initiators" are
this machine (local transport), a conftest stands in for the fabric, and the real script reads this machine's
/sys, where no controller of the lab's made-up NQN is connected. With nothing expected the case passes and records
what it read; with a value expected it fails saying it could not read any, and the report says so too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labfiles import local_lab

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "test_connectivity.py"
NQN = "nqn.2026-11.io.fabricqa:localpaths"

LAB = local_lab("localpaths", NQN)

CONFTEST = f"""
import pytest


class FakeExport:
    subsystems = ("{NQN}",)
    addresses = ("10.10.10.19",)


class FakeFabric:
    def __init__(self, lab, protocol):
        self.lab = lab
        self.target = lab.target_for(protocol).name
        self.export = FakeExport()

    def devices_on(self, name):
        return ["/dev/null"]


@pytest.fixture(scope="session")
def fabric(lab, protocol):
    return FakeFabric(lab, protocol)
"""


def _run(pytester: pytest.Pytester, lab: str) -> tuple[pytest.RunResult, dict[str, object]]:
    (pytester.path / "lab.yaml").write_text(lab)
    pytester.makeconftest(CONFTEST)
    (pytester.path / "test_connectivity.py").write_text(SUITE.read_text())  # beside the conftest that stands in
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess(
        "--lab=lab.yaml", "test_connectivity.py", "-p", "no:cacheprovider", "-k", "path_settings",
        f"--report-dir={report}",
    )  # fmt: skip
    run = json.loads((report / "results.json").read_text())
    (case,) = [c for c in run["cases"] if c["case_id"].endswith("path-settings")]
    return result, case


def test_with_nothing_expected_the_case_passes_and_records_what_it_read(pytester: pytest.Pytester) -> None:
    result, case = _run(pytester, LAB)
    result.assert_outcomes(passed=1)
    assert case["case_id"] == "nvme-tcp-nvmet-path-settings" and case["verdict"] == "passed"
    read = case["extras"]["path_settings"]["read"]
    assert set(read) == {"n1", "n2"} and read["n1"]["controllers"] == {}
    assert read["n1"]["nvme_core.multipath"] in ("Y", "N", "")
    assert case["extras"]["path_settings"]["expected"] == {"nvme": {}}
    assert [c["name"] for c in case["checks"]] == ["n1 path settings", "n2 path settings"]


def test_an_expected_value_that_cannot_be_read_fails_the_case_and_the_report_says_why(
    pytester: pytest.Pytester,
) -> None:
    result, case = _run(pytester, LAB + "multipath:\n  nvme: {ctrl_loss_tmo_s: 600, fast_io_fail_tmo_s: off}\n")
    result.assert_outcomes(failed=1)
    problem = f"n1: no NVMe-oF controller of {NQN} is connected: its settings cannot be read"
    result.stdout.fnmatch_lines([f"*{problem}*"])
    assert case["verdict"] == "failed"
    assert problem in case["violations"]
    assert case["extras"]["path_settings"]["expected"] == {
        "nvme": {"ctrl_loss_tmo_s": 600, "fast_io_fail_tmo_s": "off"}
    }
