"""Benchmark the virtual lab engine: image build (cold and warm), 3-guest boot to SSH, QEMU memory.

    python3 benchmarks/bench_vlab.py [--cold] [--switch stream|vde]

``--cold`` builds into a fresh temporary cache (mmdebstrap downloads every package again); without it the
cold figure is skipped. Other QEMU guests running on the machine slow everything down: run it on an idle host.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from pytest_fabricqa.vlab import Drive, Guest, VirtualLab, VlabSpec, build_image

SPEC = VlabSpec(
    name="bench",
    guests=(
        Guest("vstor", 13022, "10.10.10.10/24", drives=(Drive("BENCH0001", 1024),)),
        Guest("vnode1", 13023, "10.10.10.11/24"),
        Guest("vnode2", 13024, "10.10.10.12/24"),
    ),
)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _quiet(_line: str) -> None:
    pass


def main() -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cold", action="store_true", help="also time a build into an empty cache")
    parser.add_argument("--switch", default="stream", choices=("stream", "vde"))
    args = parser.parse_args()

    others = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _is_qemu(p))
    print(f"QEMU processes already running on this host: {others}")
    if args.cold:
        cold_dir = Path(tempfile.mkdtemp(prefix="fabricqa-bench-cache-"))
        try:
            t0 = time.monotonic()
            build_image(cold_dir, log=_quiet)
            print(f"image build, cold (fresh cache, bootstrap + cpio): {time.monotonic() - t0:.1f} s")
        finally:
            shutil.rmtree(cold_dir, ignore_errors=True)
    t0 = time.monotonic()
    image = build_image(log=_quiet)
    print(f"image build, warm (cache hit): {time.monotonic() - t0:.2f} s")
    print(f"image: {image.root}  kernel {image.kernel_version}  cpio {image.initrd.stat().st_size / 2**20:.0f} MiB")

    run_dir = Path(tempfile.mkdtemp(prefix="fabricqa-bench-lab-"))
    try:
        t0 = time.monotonic()
        lab = VirtualLab.start(SPEC, run_dir, image, owner_pid=os.getpid(), log=_quiet, switch=args.switch)
        total = time.monotonic() - t0
        try:
            print(f"3-guest lab ({args.switch} switch), start to every guest answering SSH: {total:.1f} s")
            for name, seconds in lab.boot_seconds.items():
                print(f"  {name}: SSH after {seconds} s")
            t0 = time.monotonic()
            lab.ssh("vnode1", ["true"])
            print(f"one SSH command round trip: {time.monotonic() - t0:.2f} s")
            for proc in lab.qemu_processes():
                print(
                    f"  {proc.role}: RSS {_rss_mib(proc.pid):.0f} MiB (guest RAM {SPEC.guest(proc.role[5:]).memory_mb} MiB)"
                )
        finally:
            t0 = time.monotonic()
            lab.stop()
            print(f"stop: {time.monotonic() - t0:.1f} s")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


def _is_qemu(proc: Path) -> bool:
    try:
        return (proc / "comm").read_text().strip().startswith("qemu-system")
    except OSError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
