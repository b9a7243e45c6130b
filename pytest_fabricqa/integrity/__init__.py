"""Data integrity across initiators (written on one host, verified on every other, concurrently, corruption detected)
and persistent reservations."""

from __future__ import annotations

from pytest_fabricqa.core.moved import forward

__getattr__ = forward(__name__)  # the flat module this package replaced: its names, with a warning
