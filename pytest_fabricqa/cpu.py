"""A host's CPU use over an interval, from two ``/proc/stat`` snapshots (the target's CPU during fio).

Seed 000 compared targets by exactly this: SPDK ran at ~50% user CPU (idle 45-50%), the kernel target at
~80% system CPU (idle 15-20%). fio's own usr/sys figures are the initiator's; this is the other side.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_fabricqa.errors import FabricQAError
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
