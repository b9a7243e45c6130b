"""One line per point as it ends, with how far the run is and how long is left (pytester, no hosts)."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pyte
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
    # First run: nothing known before the first case ended; then this run's means, so every line has an estimate
    # (its size is this run's timing: 0.3 s points read "about 1 s left" on a loaded machine, the full run of
    # 26e49cd) and the last one nothing left. The last line carries pytest's "[100%]".
    assert all(re.search(r"; about \d+ s left", line) for line in lines), lines
    assert "; about 0 s left" in lines[-1], lines
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


def _in_a_terminal(pytester: pytest.Pytester, *args: str, columns: int = 120) -> str:
    """Run pytest in a pseudo-terminal ``columns`` wide, as a person at a terminal does; all it wrote."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm", "COLUMNS": str(columns)}
    env.pop("CI", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=pytester.path,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the pytest side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        proc.wait(timeout=120)
    return b"".join(chunks).decode(errors="replace")


def _screens(output: str, columns: int = 120) -> list[list[str]]:
    """What the terminal showed just before each time the status line was taken away (pyte), and at the end."""
    screen = pyte.Screen(columns, 50)
    stream = pyte.Stream(screen)
    shown = []
    for piece in re.split(r"(?=\r\x1b\[K)", output):  # the line is taken away by a carriage return and xterm's erase
        stream.feed(piece)
        shown.append([row.rstrip() for row in screen.display])
    return shown


def test_on_a_terminal_a_live_line_under_pytests_output_shows_where_the_run_is_and_leaves_no_trace(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_points=CASES.replace("time.sleep(0.3)", "time.sleep(0.5)"))
    output = _in_a_terminal(pytester, f"--lab={LOCAL_LAB}", "-p", "pytester")
    screens = _screens(output)
    # While the third point ran: pytest's line of results above, the live line under it.
    during = next(s for s in screens if any("test_point[3] running since" in row for row in s))
    row = next(i for i, text in enumerate(during) if "test_point[3] running since" in text)
    assert re.fullmatch(
        r"fabricqa 2/4 points, about \d+ s left \| test_point\[3\] running since \d\d:\d\d:\d\d", during[row]
    )
    assert during[row - 1] == "test_points.py ...", during
    final = screens[-1]
    assert not any(text.startswith("fabricqa ") and "points" in text for text in final), final  # taken away
    assert any(text.startswith("test_points.py ....F") for text in final), final  # pytest's own line, whole
    assert "fabricqa: point " not in output  # the plain lines are for -q and logs


def test_on_a_terminal_under_xdist_the_live_line_shows_every_workers_case_and_phase(pytester: pytest.Pytester) -> None:
    slower = CASES.replace("time.sleep(0.3)", "time.sleep(1.5)").replace("    pass", "    time.sleep(4)")
    pytester.makepyfile(test_points=slower)
    output = _in_a_terminal(pytester, f"--lab={LOCAL_LAB}", "-n", "2", "--dist", "loadgroup", columns=200)
    both = [row for screen in _screens(output, 200) for row in screen if re.search(r"\| gw\d .* \| gw\d ", row)]
    assert any("test_quick_check running since" in row and "test_point[" in row for row in both), output
    assert "1 failed, 4 passed" in output, output


def test_with_q_on_a_terminal_the_plain_lines_are_written_instead(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_points=CASES)
    output = _in_a_terminal(pytester, f"--lab={LOCAL_LAB}", "-q")
    assert output.count("fabricqa: point ") == 4, output
    assert "running since" not in output
