"""Failover cases under fio: paths and ports taken away and back, and what fio saw across the fault (stall, first I/O,
recovery, errors, path parity) against the lab's limits."""

from __future__ import annotations

from pytest_fabricqa.core.moved import forward

__getattr__ = forward(__name__)  # the flat module this package replaced: its names, with a warning
