"""Faults injected under I/O (a link down or dropping frames, a target port away, an ANA or ALUA state, path timeouts),
each recorded on its host first and restored, also a killed run's."""

from __future__ import annotations

from pytest_fabricqa.core.moved import forward

__getattr__ = forward(__name__)  # the flat module this package replaced: its names, with a warning
