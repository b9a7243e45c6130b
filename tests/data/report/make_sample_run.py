"""Build sample_run.json and sample_baseline.json: SYNTHETIC runs that exercise every part of the report.

Run from anywhere: ``PYTHONPATH=/work/main python3 tests/data/report/make_sample_run.py``.

Nothing here was measured. The lab is seed 000's "rac3" (two RAC nodes and a storage node with Intel P750
cards on 40 GbE); the figures come from a toy model (Little's law with a saturating IOPS curve) whose peaks
are loosely set after seeds 000 and 002, so charts and tables have realistic shapes. Some cases are made to
fail on purpose (an iSER latency threshold, an NVMe/TCP regression against the baseline) so the report shows
its failure presentation. Use recorded runs, not these files, for any test about real figures.
"""

from __future__ import annotations

import math
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))  # tests/: the shared factories
from factories import perf_case

from pytest_fabricqa.report.model import (
    BaselineUse,
    Case,
    Check,
    Environment,
    RegressionInfo,
    Run,
    write_json,
)

HERE = Path(__file__).parent
HOSTS = ("el72h1", "el72h2")
SHARES = (0.52, 0.48)  # el72h2 gets a little less of the target: uneven but plausible
TZ = timezone(timedelta(hours=8))

# protocol -> (peak 8k randread IOPS, peak 8k randwrite IOPS, base read latency us, initiator CPU factor,
#              1m read MB/s, 1m write MB/s)
PROFILE = {
    "nvme-rdma": (236_000, 168_000, 88.0, 0.8, 2_560, 1_880),
    "nvme-tcp": (198_000, 142_000, 112.0, 1.6, 2_410, 1_700),
    "iser": (131_000, 97_000, 151.0, 1.3, 2_080, 1_620),
}
TARGETS = {"nvme-rdma": "nvmet", "nvme-tcp": "nvmet", "iser": "scst"}


def _figures(protocol: str, rw: str, bs: str, numjobs: int, iodepth: int, share: float) -> dict[str, float]:
    read_peak, write_peak, base_lat, cpu_factor, seq_read, seq_write = PROFILE[protocol]
    outstanding = numjobs * iodepth * share
    if bs == "8k":
        peak = read_peak if rw == "randread" else write_peak
        base = base_lat if rw == "randread" else base_lat * 0.45
        size = 8192
    else:
        peak = (seq_read if rw == "read" else seq_write) * 1e6 / 1048576
        base = base_lat * 4.2
        size = 1048576
    peak *= share
    iops = peak * (1 - math.exp(-outstanding * 1e6 / base / peak))
    mean = outstanding / iops * 1e6
    wobble = 1 + 0.03 * math.sin(numjobs * 7 + iodepth)  # keeps the lines from looking drawn by ruler
    iops *= wobble
    return {
        "iops": round(iops, 1),
        "mbps": round(iops * size / 1e6, 1),
        "lat_mean_us": round(mean, 2),
        "lat_p50_us": round(mean * 0.86, 2),
        "lat_p99_us": round(mean * (2.1 + 0.004 * iodepth), 2),
        "lat_p999_us": round(mean * (3.4 + 0.01 * iodepth), 2),
        "lat_p9999_us": round(mean * (5.8 + 0.02 * iodepth), 2),
        "cpu_usr_pct": round(min(95.0, 2 + 9 * cpu_factor * iops / peak * (numjobs**0.5)), 1),
        "cpu_sys_pct": round(min(95.0, 6 + 24 * cpu_factor * iops / peak * (numjobs**0.5)), 1),
    }


def _aggregate(per_host: dict[str, dict[str, float]]) -> dict[str, float]:
    hosts = list(per_host.values())
    total_iops = sum(h["iops"] for h in hosts)
    out = {"iops": round(total_iops, 1), "mbps": round(sum(h["mbps"] for h in hosts), 1)}
    for metric in ("lat_mean_us", "lat_p50_us"):
        out[metric] = round(sum(h[metric] * h["iops"] for h in hosts) / total_iops, 2)
    for metric in ("lat_p99_us", "lat_p999_us", "lat_p9999_us"):
        out[metric] = max(h[metric] for h in hosts)
    for metric in ("cpu_usr_pct", "cpu_sys_pct"):
        out[metric] = round(sum(h[metric] for h in hosts) / len(hosts), 1)
    return out


def performance_cases(protocol: str, *, baseline: bool) -> list[Case]:
    cases = []
    points = [("randread", "8k", j, qd) for j in (1, 2, 4) for qd in (1, 8, 32, 128)]
    points += [("randwrite", "8k", j, qd) for j in (1, 2, 4) for qd in (1, 8, 32, 128)]
    points += [(rw, "1m", 1, qd) for rw in ("read", "write") for qd in (1, 4, 16, 32)]
    for rw, bs, numjobs, iodepth in points:
        name = f"{rw}-{bs}-qd{iodepth}-j{numjobs}"
        case_id = f"{protocol}-{name}"
        per_host = {
            h: _figures(protocol, rw, bs, numjobs, iodepth, share) for h, share in zip(HOSTS, SHARES, strict=True)
        }
        if protocol == "nvme-tcp" and name == "randwrite-8k-qd32-j4" and not baseline:
            # The planted regression: one point 18% slower than the baseline.
            per_host = {
                h: {**f, "iops": round(f["iops"] * 0.82, 1), "mbps": round(f["mbps"] * 0.82, 1)}
                for h, f in per_host.items()
            }
        figures = _aggregate(per_host)
        figures["target_cpu_usr_pct"] = round(3 + figures["iops"] / 12_000, 1)
        figures["target_cpu_sys_pct"] = round(min(92.0, 8 + figures["iops"] / 2_600), 1)
        if bs == "8k" and rw == "randread":
            figures["fabric_efficiency"] = round(min(1.0, figures["iops"] / 250_000 / 0.97), 3)
        figures["link_utilisation"] = round(figures["mbps"] * 8 / 40_000, 3)
        thresholds: dict[str, float] = {}
        violations: list[str] = []
        if numjobs == 4 and iodepth == 128 and bs == "8k":
            thresholds = {"min_iops": 80_000.0, "max_lat_p99_us": 12_000.0}
            if figures["iops"] < thresholds["min_iops"]:
                violations.append(f"iops {figures['iops']:,.0f} is below the minimum 80,000")
            if figures["lat_p99_us"] > thresholds["max_lat_p99_us"]:
                violations.append(f"lat_p99_us {figures['lat_p99_us']:,.0f} µs is above the maximum 12,000 µs")
        regression = None
        if not baseline:
            before = {
                h: _figures(protocol, rw, bs, numjobs, iodepth, share) for h, share in zip(HOSTS, SHARES, strict=True)
            }
            before_figures = _aggregate(before)
            messages: list[str] = []
            change = (figures["iops"] - before_figures["iops"]) / before_figures["iops"] * 100
            if change < -10:
                messages.append(
                    f"iops {figures['iops']:,.0f} is {-change:.1f}% below the baseline's "
                    f"{before_figures['iops']:,.0f} (tolerance 10%)"
                )
            regression = RegressionInfo(
                baseline_case_id=case_id,
                baseline_figures=before_figures,
                tolerances={"iops": 10.0, "mbps": 10.0, "lat_p99_us": 20.0, "lat_mean_us": 20.0},
                messages=tuple(messages),
            )
            violations.extend(messages)
        cases.append(
            perf_case(
                protocol,
                name,
                verdict="failed" if violations else "passed",
                hosts=per_host,
                figures=figures,
                thresholds=thresholds,
                violations=tuple(violations),
                regression=regression,
                raw_fio_json=f"fabricqa-results/fio/{case_id}.json",
            )
        )
    return cases


def other_cases(protocol: str) -> list[Case]:
    kind = TARGETS[protocol]
    cases = [
        Case(
            nodeid=f"suites/test_connectivity.py::test_connect[{protocol}-{h}]",
            case_id=f"{protocol}-connect-{h}",
            suite="connectivity",
            verdict="passed",
            protocol=protocol,
            checks=(
                Check("discovery", "passed", f"{kind} target 10.10.10.19 answered discovery"),
                Check("namespaces visible", "passed", "2 of 2 namespaces visible"),
            ),
        )
        for h in HOSTS
    ]
    if protocol in ("nvme-rdma", "iser"):
        calibrate = (
            {"max_iops": 218_406, "max_mbps": 4_213, "actual_latency_ms": 0}
            if protocol == "nvme-rdma"
            else {"max_iops": 121_930, "max_mbps": 3_388, "actual_latency_ms": 1}
        )
        cases.append(
            Case(
                nodeid=f"suites/test_oracle.py::test_calibrate_io[{protocol}]",
                case_id=f"{protocol}-oracle-calibrate-io",
                suite="oracle",
                verdict="passed",
                protocol=protocol,
                checks=(
                    Check("ASM disk group FABRICQA mounted on all instances", "passed", "2 of 2 instances"),
                    Check("ASM disk group FABRICQA has no offline disks", "passed", "2 disks ONLINE, CACHED"),
                    Check("disk group dropped after the test", "passed", "DROP DISKGROUP FABRICQA"),
                ),
                extras={
                    "calibrate_io": {**calibrate, "num_physical_disks": 2, "max_latency_ms": 10},
                    "disk_group": "FABRICQA (external redundancy, 2 disks)",
                },
            )
        )
    return cases


def prerequisite_cases() -> list[Case]:
    return [
        Case(
            nodeid="suites/test_prerequisites.py::test_kernel[el72h1]",
            case_id="prereq-kernel-el72h1",
            suite="prerequisite",
            verdict="passed",
            checks=(Check("kernel >= 4.8 for NVMe-oF", "passed", "4.14.35-1902.300.11.el7uek.x86_64"),),
        ),
        Case(
            nodeid="suites/test_prerequisites.py::test_mtu[el72h1-ens2]",
            case_id="prereq-mtu-el72h1",
            suite="prerequisite",
            verdict="skipped",
            checks=(Check("MTU 9000 on the storage link", "skipped", "the lab does not ask for jumbo frames"),),
        ),
    ]


def build(*, baseline: bool) -> Run:
    started = datetime(2024, 5, 14, 9, 12, 5, tzinfo=TZ) - (timedelta(days=21) if baseline else timedelta(0))
    cases = prerequisite_cases()
    for protocol in PROFILE:
        cases += other_cases(protocol) + performance_cases(protocol, baseline=baseline)
    kernel = "4.14.35-1902.300.11.el7uek.x86_64"
    env = Environment(
        fio_version="fio-3.33" if baseline else "fio-3.35",
        kernels={
            "el72h1": kernel,
            "el72h2": kernel,
            "el72h3": "4.14.35-1902.3.2.el7uek.x86_64" if baseline else kernel,
        },
        device_model="INTEL SSDPEDMW012T4",
        device_firmware="8EV10174",
        plugin_version="0.1.0",
        git_commit="3f9c2a1d5b7e",
        python_version="3.11.2",
        pytest_version="8.3.3",
    )
    use = None
    if not baseline:
        use = BaselineUse(
            path="baselines/0003_rac3_nvme-rdma+nvme-tcp+iser_20240423T011205Z.json",
            lab="rac3",
            started=started - timedelta(days=21),
            tolerances={"iops": 10.0, "mbps": 10.0, "lat_p99_us": 20.0, "lat_mean_us": 20.0},
            environment_mismatch=(
                "baseline used fio-3.33, this run fio-3.35",
                "host el72h3: baseline used kernel 4.14.35-1902.3.2.el7uek.x86_64, "
                "this run kernel 4.14.35-1902.300.11.el7uek.x86_64",
            ),
        )
    return Run(
        lab="rac3",
        protocols=tuple(PROFILE),
        target_kind="nvmet (NVMe-oF), scst (iSER)",
        started=started,
        finished=started + timedelta(hours=2, minutes=47, seconds=31),
        environment=env,
        cases=tuple(cases),
        baseline=use,
        extras={"source": "SYNTHETIC sample for report development (make_sample_run.py); not measured"},
    )


if __name__ == "__main__":
    write_json(build(baseline=False), HERE / "sample_run.json")
    write_json(build(baseline=True), HERE / "sample_baseline.json")
