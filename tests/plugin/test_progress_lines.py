"""One line per point as it ends, with how far the run is and how long is left (pytester, no hosts)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

LOCAL_LAB = Path(__file__).resolve().parents[1] / "data" / "labs" / "local.yaml"

CASES = """
import time
import pytest

def test_quick_check():
    pass

@pytest.mark.loads_target
@pytest.mark.parametrize("n", [1, 2, 3])
def test_point(n):
    time.sleep(0.3)

@pytest.mark.loads_target
def test_point_that_fails():
    assert False
"""


def test_each_point_gets_a_line_and_the_second_run_knows_the_time_left_from_the_first(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_points=CASES)
    first = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}")
    lines = [line for line in first.stdout.lines if line.startswith("fabricqa: point ")]
    assert [re.sub(r" in \d+ s;.*", "", line) for line in lines] == [
        "fabricqa: point 1 of 4: test_point[1] passed",
        "fabricqa: point 2 of 4: test_point[2] passed",
        "fabricqa: point 3 of 4: test_point[3] passed",
        "fabricqa: point 4 of 4: test_point_that_fails failed",
    ]
    # First run: nothing known before the first case ended; then this run's means.
    assert all("; about 0 s left" in line for line in lines), lines  # the last carries pytest's "[100%]"
    assert "test_points.py" in first.stdout.str()  # pytest's own result lines go on around them
    cached = pytester.path / ".pytest_cache" / "v" / "fabricqa" / "durations" / "local"
    assert cached.is_file() and "test_points.py::test_point[3]" in cached.read_text()
    second = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}", "-q")
    assert sum(1 for line in second.stdout.lines if line.startswith("fabricqa: point ")) == 4


def test_under_xdist_the_controller_writes_the_lines_naming_what_the_other_workers_run(
    pytester: pytest.Pytester,
) -> None:
    # The points share one target, so one worker runs them all (loadgroup); the quick check runs on the other.
    slower = CASES.replace("time.sleep(0.3)", "time.sleep(1.5)").replace("    pass", "    time.sleep(4)")
    pytester.makepyfile(test_points=slower)
    result = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}", "-n", "2", "--dist", "loadgroup")
    lines = [line for line in result.stdout.lines if line.startswith("fabricqa: point ")]
    assert [line.split(":")[1].strip() for line in lines] == [f"point {n} of 4" for n in range(1, 5)], lines
    assert all("@" not in line for line in lines), lines  # xdist's group suffix is not part of a case's name
    # When the first point ends, the other worker is still on the quick check (4 s), and the line says so.
    assert "; running: test_quick_check;" in lines[0], lines
    # With -v each of xdist's result lines still starts a line of its own (scripts/check_xdist_groups.py reads them).
    verbose = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}", "-n", "2", "--dist", "loadgroup", "-v")
    text = verbose.stdout.str()
    assert sum(1 for line in verbose.stdout.lines if line.startswith("fabricqa: point ")) == 4, text
    assert len(re.findall(r"^\[gw\d\] \[\s*\d+%\] (?:PASSED|FAILED) ", text, re.M)) == 5, text
