"""The lab model: a lab file loaded, validated and checked against its rules, as pure data (limits, workloads, the
database section). Imports only ``core``."""

from __future__ import annotations

from pytest_fabricqa.core.moved import forward

__getattr__ = forward(__name__)  # the flat module this package replaced: its names, with a warning
