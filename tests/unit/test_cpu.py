"""Target CPU from two real /proc/stat snapshots (tests/data/fio/proc-stat-*.txt, see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_fabricqa.measure.cpu import CpuTimes, ProcStatError, cpu_usage, parse_proc_stat, read_cpu_times

DATA = Path(__file__).resolve().parent.parent / "data" / "fio"
BEFORE = (DATA / "proc-stat-before.txt").read_text()
AFTER = (DATA / "proc-stat-after.txt").read_text()


def cpu_line(text: str) -> list[int]:
    """The aggregate line's columns, read independently of the parser under test."""
    return [int(v) for v in text.splitlines()[0].split()[1:]]


def test_parse_reads_the_all_cpus_line_and_counts_cpus() -> None:
    times = parse_proc_stat(BEFORE)
    columns = cpu_line(BEFORE)
    assert (times.user, times.nice, times.system, times.idle, times.iowait) == tuple(columns[:5])
    assert (times.irq, times.softirq, times.steal) == tuple(columns[5:8])
    assert times.cpus == sum(1 for line in BEFORE.splitlines() if line.split()[0][3:].isdigit()
                             and line.startswith("cpu"))  # fmt: skip
    assert times.cpus == 2  # the machine that recorded it


def test_usage_between_the_snapshots_adds_up_to_100() -> None:
    usage = cpu_usage(parse_proc_stat(BEFORE), parse_proc_stat(AFTER))
    delta = [a - b for a, b in zip(cpu_line(AFTER)[:8], cpu_line(BEFORE)[:8], strict=True)]
    ticks = sum(delta)

    assert usage.ticks == ticks
    assert usage.usr_pct == pytest.approx((delta[0] + delta[1]) * 100 / ticks)
    assert usage.sys_pct == pytest.approx((delta[2] + delta[5] + delta[6]) * 100 / ticks)
    assert usage.idle_pct == pytest.approx(delta[3] * 100 / ticks)
    assert usage.iowait_pct == pytest.approx(delta[4] * 100 / ticks)
    total = usage.usr_pct + usage.sys_pct + usage.idle_pct + usage.iowait_pct + usage.steal_pct
    assert total == pytest.approx(100.0)
    assert usage.idle_pct < 100.0  # fio ran between the two snapshots


def test_snapshots_out_of_order_or_not_proc_stat_are_errors() -> None:
    before, after = parse_proc_stat(BEFORE), parse_proc_stat(AFTER)
    with pytest.raises(ProcStatError, match="older than the first"):
        cpu_usage(after, before)
    with pytest.raises(ProcStatError, match="no clock ticks"):
        cpu_usage(before, before)
    with pytest.raises(ProcStatError, match="not the text of /proc/stat"):
        parse_proc_stat("MemTotal: 1 kB\n")


def test_short_cpu_lines_of_old_kernels_read_missing_columns_as_zero() -> None:
    assert parse_proc_stat("cpu  1 2 3 4\ncpu0 1 2 3 4\n") == CpuTimes(1, 2, 3, 4, 0, 0, 0, 0, cpus=1)


def test_read_cpu_times_from_this_machine() -> None:
    from pytest_fabricqa.transport.local import LocalHost

    times = read_cpu_times(LocalHost())
    assert times.cpus >= 1 and times.total > 0
