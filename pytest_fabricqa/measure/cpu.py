"""A host's CPU use over an interval, from two ``/proc/stat`` snapshots (the target's CPU during fio).

Seed 000 compared targets by exactly this: SPDK ran at ~50% user CPU (idle 45-50%), the kernel target at
~80% system CPU (idle 15-20%). fio's own usr/sys figures are the initiator's; this is the other side.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.transport.base import Host


class ProcStatError(FabricQAError, ValueError):
    """The text is not /proc/stat (no aggregate ``cpu`` line), or the snapshots are out of order."""


@dataclass(frozen=True)
class CpuTimes:
    """The all-CPUs ``cpu`` line of /proc/stat, in clock ticks since boot.

    ``guest``/``guest_nice`` are not kept: the kernel already counts guest time inside ``user``/``nice``.
    """

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int
    cpus: int

    @property
    def total(self) -> int:
        """All ticks, every state counted once."""
        return self.user + self.nice + self.system + self.idle + self.iowait + self.irq + self.softirq + self.steal


@dataclass(frozen=True)
class CpuUsage:
    """Percent of all CPUs' time over an interval; the five figures add up to 100.

    ``usr_pct`` is user + nice; ``sys_pct`` is system + irq + softirq (where a kernel target such as
    nvmet or LIO does its work); ``steal_pct`` is time a hypervisor gave to other guests.
    """

    usr_pct: float
    sys_pct: float
    idle_pct: float
    iowait_pct: float
    steal_pct: float
    ticks: int
    cpus: int


def parse_proc_stat(text: str) -> CpuTimes:
    """Read the aggregate ``cpu`` line (and count the ``cpuN`` lines) of a /proc/stat snapshot."""
    aggregate: list[int] | None = None
    cpus = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name == "cpu":
            try:
                aggregate = [int(field) for field in rest.split()]
            except ValueError:
                raise ProcStatError(f"the cpu line of /proc/stat is not numbers: {line!r}") from None
        elif name.startswith("cpu") and name[3:].isdigit():
            cpus += 1
    if aggregate is None:
        raise ProcStatError("no aggregate 'cpu' line: this is not the text of /proc/stat")
    # Kernels before 2.6.11 had fewer columns; missing ones read as zero.
    user, nice, system, idle, iowait, irq, softirq, steal = (aggregate + [0] * 8)[:8]
    return CpuTimes(user, nice, system, idle, iowait, irq, softirq, steal, cpus=cpus)


def cpu_usage(before: CpuTimes, after: CpuTimes) -> CpuUsage:
    """The CPU use between two snapshots of the same host."""
    deltas = {
        name: getattr(after, name) - getattr(before, name)
        for name in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    }
    if any(delta < 0 for delta in deltas.values()):
        raise ProcStatError("the second /proc/stat snapshot is older than the first (or from another boot)")
    ticks = sum(deltas.values())
    if ticks == 0:
        raise ProcStatError("no clock ticks passed between the two /proc/stat snapshots")

    def pct(*names: str) -> float:
        return sum(deltas[name] for name in names) * 100.0 / ticks

    return CpuUsage(
        usr_pct=pct("user", "nice"),
        sys_pct=pct("system", "irq", "softirq"),
        idle_pct=pct("idle"),
        iowait_pct=pct("iowait"),
        steal_pct=pct("steal"),
        ticks=ticks,
        cpus=after.cpus,
    )


def read_cpu_times(host: Host) -> CpuTimes:
    """Take a /proc/stat snapshot on ``host``."""
    return parse_proc_stat(host.run(["cat", "/proc/stat"]).stdout)


# Started on the target with a run: the aggregate cpu line of /proc/stat now and then every INTERVAL seconds,
# COUNT more times. Sampling alongside fio (one command, in parallel) replaces a read before and one after it.
_SAMPLER_SCRIPT = """n=$1; i=0
while :; do head -n 1 /proc/stat; [ "$i" -ge "$n" ] && break; sleep "$2"; i=$((i + 1)); done
"""


def sampler_argv(seconds: int, *, interval: int = 1) -> list[str]:
    """A command printing the ``cpu`` line of /proc/stat every ``interval`` seconds for ``seconds`` seconds."""
    if seconds < 1 or interval < 1:
        raise ValueError("a CPU sampler runs for at least 1 second, at least 1 second apart")
    count = -(-seconds // interval)
    return ["sh", "-c", _SAMPLER_SCRIPT, "sh", str(count), str(interval)]


def parse_samples(stdout: str) -> list[CpuTimes]:
    """The sampler's snapshots, in order (each an aggregate ``cpu`` line)."""
    return [parse_proc_stat(line) for line in stdout.splitlines() if line.startswith("cpu ")]


def window_usage(samples: list[CpuTimes], start_s: int, end_s: int, *, interval: int = 1) -> CpuUsage:
    """CPU use between the snapshots taken ``start_s`` and ``end_s`` seconds after the sampler started (the
    last snapshot when the sampler stopped earlier). ProcStatError when fewer than two snapshots exist."""
    if len(samples) < 2:
        raise ProcStatError(f"the CPU sampler took {len(samples)} snapshot(s); two are needed")
    first = min(start_s // interval, len(samples) - 2)
    last = min(max(end_s // interval, first + 1), len(samples) - 1)
    return cpu_usage(samples[first], samples[last])
