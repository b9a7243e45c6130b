"""A case that fails after reaching the lab shows each host's storage kernel messages since it began, run by
pytester on this machine: the lab's hosts are this machine (local transport), and a ``dmesg`` earlier on PATH
prints what util-linux's ``dmesg --time-format iso`` prints (the line shape of tests/data/kernlog), stamped now,
so the test does not depend on this machine's own kernel log or on the right to read it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from labfiles import local_lab

LAB = local_lab("localkern", "nqn.2026-11.io.fabricqa:localkern", initiators=("n1",))

DMESG = """#!/bin/sh
now=$(date +%Y-%m-%dT%H:%M:%S,%6N%:z)
echo "2020-01-01T00:00:00,000001+00:00 nvme nvme0: an old line, before the case"
echo "$now nvme nvme0: starting error recovery"
echo "$now virtio_net virtio1 eth1: renamed from fqtmp1"
"""

TESTS = """
def test_fails_on_the_lab(lab_hosts):
    assert lab_hosts["n1"].run(["true"]).ok
    assert False, "the fabric broke"


def test_passes_on_the_lab(lab_hosts):
    assert lab_hosts["n1"].run(["true"]).ok


def test_fails_without_the_lab():
    assert False, "no lab reached"
"""


def test_a_failed_case_that_reached_the_lab_shows_each_hosts_storage_lines(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = pytester.path / "bin"
    bin_dir.mkdir()
    dmesg = bin_dir / "dmesg"
    dmesg.write_text(DMESG)
    dmesg.chmod(dmesg.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (pytester.path / "lab.yaml").write_text(LAB)
    pytester.makepyfile(test_cases=TESTS)
    result = pytester.runpytest_subprocess("--lab=lab.yaml", "-p", "no:cacheprovider", f"--report-dir={Path('r')}")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    sections = [line for line in out.splitlines() if "kernel log" in line]
    # Only the case that reached the lab, and every host of the lab, each once.
    assert len(sections) == 2 and "n1" in sections[0] and "stor" in sections[1], out
    assert out.count("nvme nvme0: starting error recovery") == 2
    assert "an old line" not in out and "renamed from" not in out
