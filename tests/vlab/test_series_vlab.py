"""Issue 11 parts 4-6 on the virtual lab: a spread figure per case, fio's time series kept in the report folder
and charted, and a scaling table and chart for 1..2 initiators -- through the performance suite itself, run with
pytest against the session's lab (it attaches to the lab tests/vlab/conftest.py booted).

Run by the lead (it boots QEMU guests): ``pytest tests/vlab/test_series_vlab.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml
from vlab_support import ROOT, STATE, lab_data

from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab


def test_spread_time_series_and_scaling_reach_results_and_report(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], tmp_path: Path
) -> None:
    data = lab_data()
    # One read point (and its scaling run) and one write point (the batched guard runs before it), 4 s each.
    only = ["randread-4k-qd32-j1", "write-1m-qd4-j1"]
    data["workloads"]["only"] = only
    # A threshold pattern that matches no selected workload stops the load (issue 11.2): keep the ones that match.
    data["thresholds"] = {
        protocol: {pattern: limits for pattern, limits in table.items() if any(fnmatch(n, pattern) for n in only)}
        for protocol, table in data["thresholds"].items()
    }
    data["workloads"]["samples"] = 2
    lab_file = tmp_path / "vlab.yaml"
    lab_file.write_text(yaml.safe_dump(data))
    report = tmp_path / "report"
    argv = [
        sys.executable, "-m", "pytest", f"--lab={lab_file}", "--protocol=nvme-tcp", "-p", "no:cacheprovider",
        "-o", f"fabricqa_state_dir={STATE}", f"--report-dir={report}", str(ROOT / "suites" / "test_performance.py"),
        "-k", "test_fio or test_scaling",
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]

    results = json.loads((report / "results.json").read_text())
    cases = {c["case_id"]: c for c in results["cases"] if c["suite"] == "performance"}
    for cid in ("nvme-tcp-nvmet-randread-4k-qd32-j1", "nvme-tcp-nvmet-write-1m-qd4-j1"):
        case = cases[cid]
        spread = case["extras"]["spread"]
        assert spread["basis"] == "samples" and spread["rounds"] == 2, spread
        assert spread["figures"]["iops"]["n"] == 2 and "iops_rsd_pct" in case["figures"]
        series = case["extras"]["timeseries"]
        assert set(series["hosts"]) == {"vnode1", "vnode2"} and series["cluster"], series.get("notes")
        # A window whose histogram holds no I/O (fio's last, partial one) has no percentile, never an invented one.
        assert any(w["p99_us"] for w in series["cluster"])
        assert all(w["p99_us"] for w in series["cluster"] if w.get("ios"))
        kept = [report / f for f in case["extras"]["timeseries_files"]]
        assert kept and all(p.is_file() and p.stat().st_size for p in kept)
        assert any(p.name.endswith(".log.10.10.10.18") for p in kept)  # vnode2's logs, named after its address
        assert "target_cpu_sys_pct" in case["figures"]

    scaling = cases["nvme-tcp-nvmet-randread-4k-qd32-j1-scaling"]
    steps = scaling["extras"]["scaling"]
    assert [s["n"] for s in steps] == [1, 2] and steps[0]["hosts"] == ["vnode1"]
    assert steps[1]["efficiency"] == pytest.approx(steps[1]["iops"] / (2 * steps[0]["iops"]))
    assert scaling["figures"]["scaling_efficiency"] == pytest.approx(steps[1]["efficiency"])
    assert scaling["thresholds"]["min_scaling_efficiency"] == 0.25

    page = (report / "report.html").read_text()
    assert page.count("IOPS over time") == 2
    assert "Scaling: randread-4k-qd32-j1 from 1 to 2 initiators" in page and "IOPS RSD %" in page
