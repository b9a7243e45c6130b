"""Root conftest: the qualification suites under suites/ need a lab; the plugin's own tests do not."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Running suites/ without --lab is a usage mistake: say how to run them (or the plugin's own tests)."""
    if config.getoption("lab", None):
        return
    if any(item.path.is_relative_to(config.rootpath / "suites") for item in items):
        raise pytest.UsageError(
            "the suites in suites/ qualify a lab: run `pytest --lab=vlab` (or --lab=NAME); "
            "the plugin's own tests run with `pytest tests`"
        )
