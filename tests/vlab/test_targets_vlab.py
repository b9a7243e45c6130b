"""Several targets of one host serving one protocol, for real (issue 12 item 4): LIO and SCST both serve iSCSI on
vstor, both want port 3260 and cannot be loaded side by side, so the plugin must run one (protocol, target) at a
time, each pair's cases together, and leave nothing behind. The run's results carry each case's target.

Needs the image's SCST (scst, scst_vdisk, iscsi_scst, isert_scst, iscsi-scstd), like test_scst_tgt_vlab.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from vlab_support import ROOT, STATE, lab_data

from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.provision import leftovers
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab


def test_lio_and_scst_take_turns_on_one_host_and_every_case_names_its_target(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], tmp_path: Path
) -> None:
    lab, hosts, _ = vlab
    data = lab_data()
    data["targets"] = [t for t in data["targets"] if t["kind"] in ("lio", "scst")]  # the lab's own two
    data["protocols"] = ["iscsi"]
    lab_file = tmp_path / "vlab.yaml"
    lab_file.write_text(yaml.safe_dump(data))
    report = tmp_path / "report"
    argv = [
        sys.executable, "-m", "pytest", f"--lab={lab_file}", "-p", "no:cacheprovider", "-v",
        "-o", f"fabricqa_state_dir={STATE}", f"--report-dir={report}", str(ROOT / "suites" / "test_connectivity.py"),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]

    # Each pair's cases ran in one stretch: LIO's five, then SCST's five.
    ran = [line.split("[", 1)[1].split("]", 1)[0] for line in proc.stdout.splitlines() if " PASSED" in line]
    assert ran == ["iscsi-lio"] * 5 + ["iscsi-scst"] * 5, ran
    results = json.loads((report / "results.json").read_text())
    assert sorted({c.get("target") for c in results["cases"]}) == ["lio", "scst"]
    assert set(results["targets"]) == {"lio", "scst"}
    junit = ET.parse(report / "junit.xml")
    for case in junit.iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props.get("target") == case.get("name", "").split("-")[-1].rstrip("]"), case.get("name")
    assert leftovers(lab, hosts) == []
