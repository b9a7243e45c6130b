"""Measuring a point: fio rounds with the target's CPU alongside, spread and steady state, scaling over initiators, and
the performance case against the lab's limits."""

from __future__ import annotations

from pytest_fabricqa.core.moved import forward

__getattr__ = forward(__name__)  # the flat module this package replaced: its names, with a warning
