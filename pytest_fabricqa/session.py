"""A test session's hold on a lab: one transport per host, opened lazily and closed at the end."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pytest_fabricqa.lab import LabModel
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.local import LocalHost


@dataclass
class LabSession:
    """The lab model and one transport per host. SSH connections open on first use."""

    lab: LabModel
    hosts: dict[str, Host]
    state_dir: Path
    closers: list[object] = field(default_factory=list)

    @classmethod
    def open(cls, lab: LabModel, rootdir: Path, state_dir: str | None = None) -> LabSession:
        """Build the transports for every host of ``lab`` (nothing is contacted yet)."""
        folder = Path(state_dir) if state_dir else rootdir / ".fabricqa"
        if not folder.is_absolute():
            folder = rootdir / folder
        return cls(lab, make_hosts(lab), folder)

    def close(self) -> None:
        """Close every connection (idempotent)."""
        for host in self.hosts.values():
            host.close()


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
        )
    return hosts
