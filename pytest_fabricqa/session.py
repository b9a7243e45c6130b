"""A test session's hold on a lab: one transport per host, opened lazily and closed at the end."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.local import LocalHost

if TYPE_CHECKING:
    from pytest_fabricqa.vlab.machine import VirtualLab


@dataclass
class LabSession:
    """The lab model and one transport per host. SSH connections open on first use."""

    lab: LabModel
    hosts: dict[str, Host]
    state_dir: Path
    virtual_lab: VirtualLab | None = None
    owns_virtual_lab: bool = False

    @classmethod
    def open(
        cls, lab: LabModel, rootdir: Path, state_dir: str | None = None, log: Callable[[str], None] = print
    ) -> LabSession:
        """Build the transports for every host of ``lab``; for a virtual lab, boot it (or attach) first.

        Real lab hosts are not contacted here: SSH connections open on first use.
        """
        folder = state_folder(rootdir, state_dir)
        if lab.vlab is None:
            return cls(lab, make_hosts(lab), folder)
        from pytest_fabricqa.vlab_lab import controller_pid, ensure_running

        owner = controller_pid()
        virtual, booted = ensure_running(lab, folder, owner, log=log)
        hosts = make_hosts(lab, key=virtual.ssh_key, known_hosts=virtual.known_hosts)
        return cls(lab, hosts, folder, virtual, booted and owner == os.getpid())

    def close(self) -> None:
        """Close every connection; stop the virtual lab if this process booted it (idempotent)."""
        for host in self.hosts.values():
            host.close()
        if self.virtual_lab is not None and self.owns_virtual_lab:
            self.virtual_lab.stop()
            self.owns_virtual_lab = False


def state_folder(rootdir: Path, state_dir: str | None) -> Path:
    """The folder for run state (virtual-lab pidfiles, keys, console logs): .fabricqa/ under the rootdir."""
    folder = Path(state_dir) if state_dir else rootdir / ".fabricqa"
    return folder if folder.is_absolute() else rootdir / folder


def make_hosts(lab: LabModel, *, key: Path | None = None, known_hosts: Path | None = None) -> dict[str, Host]:
    """One transport per lab host, with the lab's SSH settings (``key``/``known_hosts`` override them)."""
    hosts: dict[str, Host] = {}
    for name, model in lab.hosts.items():
        if model.transport == "local":
            hosts[name] = LocalHost(name)
            continue
        from pytest_fabricqa.transport.ssh import SSHHost

        ssh = lab.ssh
        hosts[name] = SSHHost(
            name,
            model.address or model.ssh_alias or name,
            user=model.user or ssh.user,
            port=model.port or ssh.port,
            key=key or ssh.key,
            password_env=ssh.password_env,
            ssh_config=ssh.config,
            known_hosts=known_hosts or ssh.known_hosts,
            verify_host_keys=ssh.verify_host_keys,
            connect_timeout=ssh.connect_timeout,
            command_timeout=ssh.command_timeout,
        )
    return hosts
