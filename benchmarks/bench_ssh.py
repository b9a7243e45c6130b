"""Benchmark the SSH transport's cost per command: a command in a long-lived session (what the transport does)
against a new SSH session per command (what it did before, and what ``ssh host cmd`` does).

    python3 benchmarks/bench_ssh.py [--lab vlab] [--host vnode1] [--repeat 30]

On the virtual lab (``fabricqa-vlab up --lab vlab`` first, or any lab whose hosts are reachable) it runs ``true``
(the shell's builtin: the transport's own cost) and ``nvme list`` (a typical short command), the two ways in
alternating blocks so drift hits both alike, and prints the median milliseconds and their ratio. It asserts
nothing: machines here are shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_fabricqa.lab.load import load_lab, resolve_lab_path  # noqa: E402
from pytest_fabricqa.plugin.session import LabSession  # noqa: E402
from pytest_fabricqa.transport.ssh import SSHHost  # noqa: E402


def session_per_command(host: SSHHost, command: str) -> None:
    """One SSH session (channel) per command, as ``ssh host cmd`` and the transport before sessions were kept."""
    channel = host._connect().client.get_transport().open_session()
    try:
        channel.exec_command(command)
        channel.recv_exit_status()
    finally:
        channel.close()


def timed_ms(run: Callable[..., object], *args: object) -> float:
    started = time.perf_counter()
    run(*args)
    return (time.perf_counter() - started) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="vlab")
    parser.add_argument("--host", default="vnode1")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    lab = load_lab(resolve_lab_path(args.lab, ROOT))
    session = LabSession.open(lab, ROOT, log=lambda _line: None)
    host = session.hosts[args.host]
    assert isinstance(host, SSHHost), f"{args.host} is not reached over SSH"
    host.run(["true"])
    block = max(1, args.repeat // 3)
    print(f"{args.host}: median ms per command, {3 * block} runs each way in alternating blocks")
    print(f"{'command':<12} {'in a session':>13} {'a session each':>15} {'ratio':>6}")
    for argv in (["true"], ["nvme", "list"]):
        kept: list[float] = []
        each: list[float] = []
        # In alternating blocks, not one by one: a session's end keeps the guest's CPU busy for a while after the
        # command returns (sshd's child exits), which would land on the next command measured.
        for _ in range(3):
            kept += [timed_ms(host.run, argv) for _ in range(block)]
            each += [timed_ms(session_per_command, host, " ".join(argv)) for _ in range(block)]
        a, b = statistics.median(kept), statistics.median(each)
        print(f"{' '.join(argv):<12} {a:13.0f} {b:15.0f} {b / a:6.1f}")
    session.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
