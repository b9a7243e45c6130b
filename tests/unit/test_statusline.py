"""The live status line's drawing on a terminal (pytest_fabricqa.report.statusline), read off pyte's screen."""

from __future__ import annotations

import os
import subprocess
import sys

import pyte
import pytest

from pytest_fabricqa.report.statusline import StatusLine, controls


class Terminal:
    """A 40-column terminal (pyte) that another writer and the status line both write to."""

    def __init__(self) -> None:
        self.screen = pyte.Screen(40, 6)
        self.stream = pyte.Stream(self.screen)
        self.line = ""  # what the other writer has on its open line (pytest's writer keeps this itself)

    def other(self, text: str) -> None:
        self.stream.feed(text.replace("\n", "\r\n"))  # a tty's output processing turns \n into \r\n
        self.line = (self.line + text).rsplit("\n", 1)[-1]

    def raw(self, text: str) -> None:
        self.stream.feed(text.replace("\n", "\r\n"))

    def rows(self) -> list[str]:
        return [row.rstrip() for row in self.screen.display]


@pytest.fixture
def terminal() -> Terminal:
    return Terminal()


@pytest.fixture
def status(terminal: Terminal) -> StatusLine:
    found = controls("xterm", os.open(os.devnull, os.O_WRONLY))
    assert found is not None, "the xterm terminfo entry (ncurses-base) is missing"
    return StatusLine(found, terminal.raw, lambda: 40, lambda: len(terminal.line))


def test_the_line_sits_under_the_output_and_the_output_goes_on_above_it(terminal: Terminal, status: StatusLine) -> None:
    terminal.other("suites/test_fio.py ..")
    status.show("fabricqa 2/9 points, about 3 min left")
    assert terminal.rows()[:2] == ["suites/test_fio.py ..", "fabricqa 2/9 points, about 3 min left"]
    status.hide()
    terminal.other(".F")  # pytest's next results go on at the end of its own line
    status.show("fabricqa 4/9 points")
    assert terminal.rows()[:3] == ["suites/test_fio.py ...F", "fabricqa 4/9 points", ""]
    status.hide()
    terminal.other("\nsuites/test_failover.py .")
    assert terminal.rows()[:3] == ["suites/test_fio.py ...F", "suites/test_failover.py .", ""]  # nothing left


def test_a_line_wider_than_the_terminal_is_cut_so_it_never_wraps(terminal: Terminal, status: StatusLine) -> None:
    terminal.other("x")
    status.show("fabricqa " + "gw0 test_fio[nvme-tcp-nvmet-randread] running " * 3)
    assert terminal.rows()[1].endswith("…") and len(terminal.rows()[1]) == 39
    assert terminal.rows()[2] == ""
    status.hide()
    terminal.other("y")
    assert terminal.rows()[:2] == ["xy", ""]


@pytest.mark.parametrize("term", ["dumb", "no-such-terminal-anywhere"])
def test_a_terminal_without_the_controls_gets_no_line(term: str) -> None:
    # Its own process: curses reads the terminfo entry once per process (the first setupterm wins).
    code = f"import os; from pytest_fabricqa.report.statusline import controls; print(controls({term!r}, 1))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "None"
