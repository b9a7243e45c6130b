"""A status line kept under the terminal's last line of output, drawn and taken away with the terminal's own
control sequences (its terminfo entry, through the standard library's ``curses``).

Whoever else writes to the terminal (pytest's results, a line of the plugin's own) writes on the line *above* it:
the line is taken away first (:meth:`StatusLine.hide`: erased, the cursor back up at the end of that line) and drawn
again afterwards (:meth:`StatusLine.show`). Nothing is written through the other writer, so its idea of where its
line ends (pytest aligns its ``[ 42%]`` by it) stays true. A line longer than the terminal is cut to fit, so it
never wraps and going one line up always lands where it started.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

ELLIPSIS = "…"


@dataclass(frozen=True)
class Controls:
    """The terminal's sequences for one line up, erase to the end of the line, and go to a column (0-based)."""

    up: str
    erase: str
    column_format: bytes

    def column(self, n: int) -> str:
        import curses

        return curses.tparm(self.column_format, n).decode()


def controls(term: str | None, fd: int) -> Controls | None:
    """The terminal ``term``'s (None: ``$TERM``) sequences from its terminfo entry; None when there is no entry or it
    lacks one of them (a dumb terminal gets no status line). curses reads the entry once per process: the first
    call's terminal is every later call's."""
    try:
        import curses

        curses.setupterm(term, fd)
        up, erase, column = (curses.tigetstr(cap) for cap in ("cuu1", "el", "hpa"))
    except Exception:  # no terminfo database, no such terminal, curses not built: no status line
        return None
    if not (up and erase and column):
        return None
    return Controls(up.decode(), erase.decode(), column)


class StatusLine:
    """One line under the output, written with ``write`` (raw, straight to the terminal), ``width()`` columns wide,
    under a line of output ``column()`` characters long."""

    def __init__(
        self, controls: Controls, write: Callable[[str], None], width: Callable[[], int], column: Callable[[], int]
    ) -> None:
        self.controls = controls
        self.write = write
        self.width = width
        self.column = column
        self.text: str | None = None
        self._under = 0

    @property
    def shown(self) -> bool:
        """Whether the line is on the terminal now."""
        return self.text is not None

    def show(self, text: str) -> None:
        """Draw ``text`` as the status line (replacing what it showed)."""
        self.hide()
        room = max(self.width() - 1, 1)
        if len(text) > room:
            text = text[: room - 1] + ELLIPSIS
        self._under = self.column() % max(self.width(), 1)
        self.write("\n" + text)
        self.text = text

    def hide(self) -> None:
        """Take the line away: erased, and the cursor back where the output above it ends."""
        if self.text is None:
            return
        c = self.controls
        self.write("\r" + c.erase + c.up + c.column(self._under))
        self.text = None
