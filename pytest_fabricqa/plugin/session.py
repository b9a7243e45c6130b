"""A test session's hold on a lab: one transport per host, opened lazily and closed at the end."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_fabricqa.lab.model import LabModel
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
    worker: bool = False  # an xdist worker: the session's controller is the parent process

    @classmethod
    def open(
        cls,
        lab: LabModel,
        rootdir: Path,
        state_dir: str | None = None,
        log: Callable[[str], None] = print,
        *,
        worker: bool = False,
    ) -> LabSession:
        """Build the transports for every host of ``lab``; for a virtual lab, boot it (or attach) first.

        ``worker``: this process is an xdist worker (the plugin knows from ``config.workerinput``; an environment
        variable would also be inherited by a pytest started from inside a worker). Real lab hosts are not
        contacted here except for the session lock.
        """
        folder = state_folder(rootdir, state_dir)
        owner = os.getppid() if worker else os.getpid()
        if lab.vlab is None:
            session = cls(lab, make_hosts(lab), folder, worker=worker)
        else:
            from pytest_fabricqa.vlab.lab import ensure_running

            virtual, booted = ensure_running(lab, folder, owner, log=log)
            hosts = make_hosts(lab, key=virtual.ssh_key, known_hosts=virtual.known_hosts)
            session = cls(lab, hosts, folder, virtual, booted and not worker, worker)
        session._lock(log)
        return session

    @property
    def controller(self) -> int:
        """The pid standing for the session (the xdist controller for a worker)."""
        return os.getppid() if self.worker else os.getpid()

    def _lock(self, log: Callable[[str], None]) -> None:
        """Take the lab's session lock on every host; on refusal close everything and re-raise (one line)."""
        from pytest_fabricqa.fabric.lock import LabInUse, acquire, me

        try:
            taken_over = [
                n
                for hosts, path in self._lock_places()
                for n in acquire(hosts, me(self.lab.name, self.controller), path)
            ]
        except LabInUse:
            self.close(release=False)
            raise
        for name in taken_over:
            log(f"fabricqa: {name}: took over the session lock of a session that is gone")

    def _lock_places(self) -> list[tuple[dict[str, Host], str]]:
        """Where the session lock lives: /run/fabricqa on remote hosts; the state folder for a host that is this
        machine (so that test sessions in separate folders on one machine do not lock each other out)."""
        return lock_places(self.lab, self.hosts, self.state_dir)

    def close(self, release: bool = True) -> None:
        """Close every connection; stop the virtual lab if this process booted it (idempotent).

        The session lock is released here except in an xdist worker: the session ends with its controller, which
        releases it (:func:`release_lock`) once every worker is done.
        """
        if release and not self.worker:
            from pytest_fabricqa.fabric.lock import me
            from pytest_fabricqa.fabric.lock import release as release_lock

            for hosts, path in self._lock_places():
                release_lock(hosts, me(self.lab.name, self.controller), path)
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


def release_lock(lab: LabModel, state_dir: Path) -> None:
    """At the end of an xdist run, on the controller: release the lock its workers took on a real lab's hosts.

    (A virtual lab the controller booted is stopped instead; one attached to stays locked by a controller that is
    gone, which the next session on this machine takes over.)
    """
    from pytest_fabricqa.fabric.lock import me, release

    hosts = make_hosts(lab)
    try:
        for group, path in lock_places(lab, hosts, state_dir):
            release(group, me(lab.name, os.getpid()), path)
    finally:
        for host in hosts.values():
            host.close()


def lock_places(lab: LabModel, hosts: dict[str, Host], state_dir: Path) -> list[tuple[dict[str, Host], str]]:
    """The hosts holding the session lock, grouped by where its file lives."""
    from pytest_fabricqa.fabric.lock import lock_path

    remote = {n: h for n, h in hosts.items() if not isinstance(h, LocalHost)}
    local: dict[str, Host] = {n: h for n, h in hosts.items() if isinstance(h, LocalHost)}
    places = [(remote, lock_path(lab.name))] if remote else []
    if local:
        places.append((local, str(state_dir / f"session-{lab.name}.lock")))
    return places
