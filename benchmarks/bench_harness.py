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

4. Per point through the package's own point runner (:func:`pytest_fabricqa.measure.point.run_point`, what the suite
   calls), every host wrapped in a counting transport: the commands a point costs and the sequential round trips
   (aim: the fio run plus at most one other), and the wall time of a point without time-series logging, with it,
   and with 2 samples, interleaved so drift hits all three alike (aim: logging adds < 2%).

    python3 benchmarks/bench_harness.py --local [--runtime 5] [--repeat 5]

runs step 4 alone on this machine: two ``fio --server`` on 127.0.0.1 and 127.0.0.2 over 256 MiB files in
/var/tmp (no lab, no block device), the target's CPU sampled from this machine too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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
    from pytest_fabricqa.core.workloads import case_id
    from pytest_fabricqa.fabric.provision import connect_fabric
    from pytest_fabricqa.fio import figures, fio_argv, parse_fio_output
    from pytest_fabricqa.lab.load import load_lab, resolve_lab_path
    from pytest_fabricqa.plugin import _workloads
    from pytest_fabricqa.plugin.session import LabSession

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


def _point_costs(
    controller: Any, target: Any, jobs: list[Any], workload: Any, repeat: int, log: list[Any]
) -> dict[str, Any]:
    """Commands, round trips and wall time per point: plain, with time-series logging, with 2 samples."""
    from pytest_fabricqa.measure.point import MeasurePlan, SeriesPlan, run_point
    from pytest_fabricqa.measure.spread import SamplingPlan
    from pytest_fabricqa.transport.counting import round_trips

    plans = {
        "plain": MeasurePlan(),
        "time series": MeasurePlan(series=SeriesPlan(1000)),
        "2 samples": MeasurePlan(SamplingPlan(2)),
    }
    walls: dict[str, list[float]] = {name: [] for name in plans}
    counts: dict[str, tuple[int, int]] = {}
    for _ in range(repeat):
        for name, plan in plans.items():  # interleaved: drift on a shared machine hits every variant alike
            del log[:]
            start = time.monotonic()
            run_point(controller, jobs, workload, plan, target=target)
            walls[name].append(time.monotonic() - start)
            counts[name] = (len(log), round_trips(log))
    return {"walls": walls, "counts": counts}


def _print_costs(title: str, fio_s: float, costs: dict[str, Any]) -> None:
    from statistics import median

    print(title)
    print(f"{'variant':14} {'commands':>8} {'round trips':>11} {'median wall s':>13} {'fio s':>6} {'vs plain':>9}")
    plain = median(costs["walls"]["plain"])
    for name, walls in costs["walls"].items():
        commands, trips = costs["counts"][name]
        wall = median(walls)
        print(f"{name:14} {commands:8} {trips:11} {wall:13.3f} {fio_s:6.1f} {100 * (wall - plain) / plain:+8.2f}%")


def _local(runtime: int, repeat: int) -> None:
    """Step 4 on this machine: two loopback fio servers, files in /var/tmp."""
    from pytest_fabricqa.core.workloads import make_workload
    from pytest_fabricqa.fio import FioServer, server_argv, server_stop_argv
    from pytest_fabricqa.transport.counting import CountingHost
    from pytest_fabricqa.transport.local import LocalHost

    folder = Path(tempfile.mkdtemp(prefix="fabricqa-bench-", dir="/var/tmp"))
    servers: list[tuple[FioServer, str]] = []
    try:
        jobs = []
        for index, address in enumerate(("127.0.0.1", "127.0.0.2"), 1):
            server = FioServer(f"node{index}", address, 8790 + index)
            pidfile = str(folder / f"server{index}.pid")
            subprocess.run(server_argv(address=address, port=server.port, pidfile=pidfile), check=True)
            servers.append((server, pidfile))
            image = folder / f"node{index}.img"
            subprocess.run(["fallocate", "-l", "256M", str(image)], check=True)
            jobs.append((server, [str(image)]))
        time.sleep(0.5)
        log: list[Any] = []
        controller, target = CountingHost(LocalHost("node1"), log), CountingHost(LocalHost("target"), log)
        workload = make_workload("randread", "4k", iodepth=16, numjobs=2, runtime=runtime, ramp_time=1)
        costs = _point_costs(controller, target, jobs, workload, repeat, log)
        _print_costs(
            f"point costs, local loopback fio servers, {workload.name}, {runtime} s + 1 s ramp, {repeat} runs each",
            runtime + 1,
            costs,
        )
    finally:
        for _, pidfile in servers:
            subprocess.run(server_stop_argv(pidfile), check=False)
        shutil.rmtree(folder, ignore_errors=True)


def _lab_costs(lab_name: str, protocol: str, runtime: int, repeat: int) -> None:
    """Step 4 on a lab: the first read workload through the fabric, from every initiator."""
    from pytest_fabricqa.fabric.provision import connect_fabric
    from pytest_fabricqa.fio import FioServer, server_argv, server_stop_argv
    from pytest_fabricqa.lab.load import load_lab, resolve_lab_path
    from pytest_fabricqa.plugin import _workloads
    from pytest_fabricqa.plugin.session import LabSession
    from pytest_fabricqa.transport.counting import CountingHost

    path = resolve_lab_path(lab_name, ROOT)
    lab = load_lab(path)
    session = LabSession.open(lab, ROOT, log=lambda _line: None)
    fabric = connect_fabric(lab, protocol, session.hosts)
    pidfile = "/run/fabricqa-bench-fio-server.pid"
    servers = []
    try:
        log: list[Any] = []
        hosts = {name: CountingHost(host, log) for name, host in session.hosts.items()}
        for name in lab.hosts_with("initiator"):
            storage = lab.hosts[name].storage
            address = str(storage.address) if storage else name
            session.hosts[name].run(server_stop_argv(pidfile), check=False)
            session.hosts[name].run(server_argv(address=address, pidfile=pidfile))
            servers.append(FioServer(name, address))
        workload = next(w for w in _workloads(lab, path, runtime) if not w.writes)
        jobs = [(s, [d.path for d in fabric.devices_on(s.name) if d.load]) for s in servers]
        jobs = [(s, d) for s, d in jobs if d]
        target = lab.target_for(protocol)
        costs = _point_costs(
            hosts[jobs[0][0].name], hosts[target.host] if target.host else None, jobs, workload, repeat, log
        )
        _print_costs(
            f"point costs, lab {lab_name}, {protocol}, {workload.name}, {runtime} s + {workload.ramp_time} s ramp",
            runtime + workload.ramp_time,
            costs,
        )
    finally:
        for server in servers:
            session.hosts[server.name].run(server_stop_argv(pidfile), check=False)
        fabric.teardown()
        session.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="vlab")
    parser.add_argument("--protocol", default="nvme-tcp")
    parser.add_argument("--runtime", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each point variant (step 4)")
    parser.add_argument("--local", action="store_true", help="step 4 only, on this machine (no lab)")
    args = parser.parse_args()
    os.chdir(ROOT)
    if args.local:
        _local(args.runtime, args.repeat)
        return 0
    from pytest_fabricqa.lab.load import load_lab, resolve_lab_path
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
    _lab_costs(args.lab, args.protocol, args.runtime, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
