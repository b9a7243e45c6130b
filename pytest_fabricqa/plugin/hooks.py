"""pytest-fabricqa's hook specifications, for plugins and conftest files that add to what it records."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_fabricqa.lab.model import LabModel
    from pytest_fabricqa.transport.base import Host


@pytest.hookspec
def pytest_fabricqa_update_environment(lab: LabModel, lab_hosts: dict[str, Host], environment: dict[str, Any]) -> None:
    """Add to (or change) the environment recorded with every performance case, once per session.

    The plugin's own implementation runs first (tryfirst) and puts in ``kernels`` ({host: release}) and, when a target host
    has an NVMe backing device, ``device_model`` and ``device_firmware``; the report records these and flags a
    baseline taken with others. An external array's model and firmware, which the plugin cannot read over SSH,
    come from a conftest.py or plugin of the user's, which can also change what the plugin found::

        def pytest_fabricqa_update_environment(lab, lab_hosts, environment):
            environment["device_model"], environment["device_firmware"] = "PowerStore 500T", "3.6.1.0"

    Keys other than ``kernels``, ``device_model`` and ``device_firmware`` are not recorded.
    """
