"""Transports: one small interface (:class:`Host`), one module per member, found by name."""

from __future__ import annotations

import importlib
from typing import Any

from pytest_fabricqa.transport.base import CommandError, CommandResult, Host, HostUnreachable

# name -> "module:Class"; members load lazily so fabric/paramiko import only when SSH is really used.
REGISTRY: dict[str, str] = {
    "local": "pytest_fabricqa.transport.local:LocalHost",
    "ssh": "pytest_fabricqa.transport.ssh:SSHHost",
}


def transport_class(name: str) -> Any:
    """Return the class registered for transport ``name``."""
    module_name, _, attr = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)


__all__ = ["REGISTRY", "CommandError", "CommandResult", "Host", "HostUnreachable", "transport_class"]
