"""Benchmark the harness's own cost on the virtual lab (issue 5): overhead per point, and IOPS it reports
against a bare fio run on the same devices.

    python3 benchmarks/bench_harness.py [--lab vlab] [--protocol nvme-tcp] [--runtime 4]

1. Runs the performance suite (``test_fio`` cases) through pytest for one protocol and reads each case's
   call-phase duration from JUnit and its IOPS from results.json. Overhead per point = call duration minus
   fio's own time (ramp + runtime).
2. In the same run, connects the fabric with the plugin's library and runs the same workloads with bare fio
   over plain ``ssh`` on every initiator at once (no client/server, no parsing, no guard), summing the IOPS.
3. Prints, per point: the case's call time, fio's own time (ramp + runtime), the overhead (call - fio), the
   bare run's wall time over ssh, what the harness adds on top of a bare run (call - bare), and the ratio
   plugin IOPS / bare IOPS.

It prints figures; it asserts nothing (machines here are shared and noisy). Aim: overhead < 2 s per point,
IOPS ratio >= 0.98.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _plugin_run(lab: str, protocol: str, runtime: int, report: Path) -> tuple[float, dict[str, dict[str, float]]]:
    junit = report / "bench-junit.xml"
    argv = [
        sys.executable, "-m", "pytest", f"--lab={lab}", f"--protocol={protocol}", "-q", "-p", "no:cacheprovider",
        "suites/test_performance.py", "-k", "test_fio", f"--fio-runtime={runtime}", f"--report-dir={report}",
        f"--junitxml={junit}", "-o", "junit_duration_report=call",
    ]  # fmt: skip
    start = time.monotonic()
    subprocess.run(argv, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - start
    durations = {
        case.get("name", ""): float(case.get("time", "0")) for case in ET.parse(junit).getroot().iter("testcase")
    }
    results = json.loads((report / "results.json").read_text())
    points: dict[str, dict[str, float]] = {}
    for case in results["cases"]:
        name = case["nodeid"].rsplit("::", 1)[-1]
        if name.startswith("test_fio[") and case.get("figures"):
            points[case["case_id"]] = {"call_s": durations.get(name, float("nan")), "iops": case["figures"]["iops"]}
    return wall, points


def _bare_run(lab_name: str, protocol: str, runtime: int) -> dict[str, tuple[float, float]]:
    from pytest_fabricqa.fio import figures, fio_argv, parse_fio_output
    from pytest_fabricqa.lab import load_lab, resolve_lab_path
    from pytest_fabricqa.plugin import _workloads
    from pytest_fabricqa.provision import connect_fabric
    from pytest_fabricqa.session import LabSession
    from pytest_fabricqa.workloads import case_id

    path = resolve_lab_path(lab_name, ROOT)
    lab = load_lab(path)
    session = LabSession.open(lab, ROOT, log=lambda _line: None)
    fabric = connect_fabric(lab, protocol, session.hosts)
    out: dict[str, tuple[float, float]] = {}
    try:
        for workload in _workloads(lab, path, runtime):
            jobs = []
            for initiator in lab.hosts_with("initiator"):
                devices = [d.path for d in fabric.devices_on(initiator) if d.writable or not workload.writes]
                if devices:
                    jobs.append((session.hosts[initiator], fio_argv(workload, devices, output_format="json")))
            start = time.monotonic()
            with ThreadPoolExecutor(len(jobs)) as pool:
                runs = list(pool.map(lambda job: job[0].run(job[1], timeout=600).stdout, jobs))
            wall = time.monotonic() - start
            out[case_id(protocol, workload)] = (sum(figures(parse_fio_output(t))["iops"] for t in runs), wall)
    finally:
        fabric.teardown()
        session.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="vlab")
    parser.add_argument("--protocol", default="nvme-tcp")
    parser.add_argument("--runtime", type=int, default=4)
    args = parser.parse_args()
    os.chdir(ROOT)
    from pytest_fabricqa.lab import load_lab, resolve_lab_path
    from pytest_fabricqa.plugin import _workloads

    path = resolve_lab_path(args.lab, ROOT)
    ramp = {w.name: w.ramp_time for w in _workloads(load_lab(path), path, args.runtime)}
    with tempfile.TemporaryDirectory() as folder:
        wall, plugin = _plugin_run(args.lab, args.protocol, args.runtime, Path(folder))
    bare = _bare_run(args.lab, args.protocol, args.runtime)
    print(f"harness benchmark: lab {args.lab}, {args.protocol}, runtime {args.runtime} s; suite wall time {wall:.1f} s")
    print(
        f"{'point':34} {'call s':>7} {'fio s':>6} {'overhead s':>10} {'bare s':>7} {'added s':>7} "
        f"{'plugin IOPS':>12} {'bare IOPS':>10} {'ratio':>6}"
    )
    for cid, point in plugin.items():
        fio_s = args.runtime + ramp[cid.removeprefix(f"{args.protocol}-")]
        bare_iops, bare_wall = bare.get(cid, (float("nan"), float("nan")))
        print(
            f"{cid:34} {point['call_s']:7.1f} {fio_s:6.1f} {point['call_s'] - fio_s:10.2f} {bare_wall:7.1f} "
            f"{point['call_s'] - bare_wall:7.2f} {point['iops']:12,.0f} {bare_iops:10,.0f} "
            f"{point['iops'] / bare_iops:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
