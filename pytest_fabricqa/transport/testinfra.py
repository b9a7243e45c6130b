"""testinfra host objects that run through the lab's own transport (same SSH connection and host-key policy)."""

from __future__ import annotations

from typing import Any

import testinfra.backend.base
import testinfra.host

from pytest_fabricqa.transport.base import Host


class LabBackend(testinfra.backend.base.BaseBackend):
    """A testinfra backend over a lab :class:`Host`: commands run as ``sh -c`` through that host."""

    NAME = "fabricqa"

    def __init__(self, lab_host: Host, **kwargs: Any) -> None:
        super().__init__(lab_host.name, **kwargs)
        self.lab_host = lab_host

    def get_pytest_id(self) -> str:
        return self.lab_host.name

    def run(self, command: str, *args: str, **kwargs: Any) -> testinfra.backend.base.CommandResult:
        cmd = self.get_command(command, *args)
        res = self.lab_host.run(["sh", "-c", cmd], check=False)
        return self.result(res.exit_code, self.encode(cmd), res.stdout, res.stderr)


def infra_host(lab_host: Host) -> testinfra.host.Host:
    """A testinfra ``Host`` for a lab host."""
    backend = LabBackend(lab_host)
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host
