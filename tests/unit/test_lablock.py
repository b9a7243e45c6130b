"""One session per lab (issue 16): the lock taken on every host, shared by one session's xdist workers, refused
to a second live session with one line, taken over from a killed one. Real shell, local transport, a lock file in
a temporary folder."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_fabricqa.fabric.lock import Holder, LabInUse, acquire, release
from pytest_fabricqa.transport.local import LocalHost


def _holder(pid: int, machine: str | None = None) -> Holder:
    return Holder("vlab", machine or socket.gethostname(), pid, "2026-12-01T00:00:00+0000")


def test_second_live_session_is_refused_with_one_line_and_the_first_keeps_the_lock(tmp_path: Path) -> None:
    lock = str(tmp_path / "run" / "session.lock")
    hosts = {"vstor": LocalHost("vstor")}
    # A live pytest-like process stands for the first session's controller.
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "pytest"])
    try:
        assert acquire(hosts, _holder(first.pid), lock) == []
        with pytest.raises(LabInUse) as info:
            acquire(hosts, _holder(first.pid + 100000), lock)
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(f"vstor: lab 'vlab' is in use by the pytest session of pid {first.pid} on ")
        assert f"remove {lock} on vstor" in message
        # The same controller (another xdist worker of the session) shares it.
        assert acquire(hosts, Holder("vlab", socket.gethostname(), first.pid, "later"), lock) == []
        release(hosts, _holder(first.pid + 100000), lock)  # not the holder: nothing happens
        assert Path(lock).exists()
        release(hosts, Holder("vlab", socket.gethostname(), first.pid, "other since"), lock)
        assert not Path(lock).exists()
    finally:
        first.kill()
        first.wait()


def test_a_killed_sessions_lock_is_taken_over(tmp_path: Path) -> None:
    lock = str(tmp_path / "session.lock")
    hosts = {"vnode1": LocalHost("vnode1"), "vnode2": LocalHost("vnode2")}
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    Path(lock).write_text(_holder(dead.pid).line())
    assert acquire(hosts, _holder(12345678), lock) in (["vnode1"], ["vnode2"], ["vnode1", "vnode2"])
    assert Holder.parse(Path(lock).read_text()) == _holder(12345678)


def test_a_lock_from_another_machine_is_never_taken_over(tmp_path: Path) -> None:
    lock = str(tmp_path / "session.lock")
    Path(lock).write_text(_holder(1, machine="ci-runner-7").line())
    with pytest.raises(LabInUse, match=r"in use by the pytest session of pid 1 on ci-runner-7"):
        acquire({"vstor": LocalHost("vstor")}, _holder(2), lock)


# -- one driver per target kind on a host (issue 28, item 2) -------------------------------------------------------


def test_a_target_kind_driven_by_another_labs_live_session_is_refused_naming_lab_user_machine_and_pid(
    tmp_path: Path,
) -> None:
    from pytest_fabricqa.fabric.lock import TargetInUse, give_back_target, me, take_target

    vstor, folder = LocalHost("vstor"), str(tmp_path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # not a pytest: any process
    try:
        team_a = me("team-a", other.pid)
        assert take_target(vstor, "nvmet", team_a, folder) is False
        ours = me("team-b", 12345678)
        with pytest.raises(TargetInUse) as info:
            take_target(vstor, "nvmet", ours, folder)
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(
            f"vstor: nvmet on this host is driven by the session of lab 'team-a', pid {other.pid} of user "
            f"{team_a.user} on {socket.gethostname()} (since "
        )
        assert message.endswith(f"if that session is gone, remove {tmp_path}/target-nvmet.lock on vstor")
        # Another kind on the same host is the other lab's to drive, at the same time.
        assert take_target(vstor, "spdk", ours, folder) is False
        give_back_target(vstor, "nvmet", ours, folder)  # not its holder: nothing happens
        assert Holder.parse((tmp_path / "target-nvmet.lock").read_text()) == team_a
        give_back_target(vstor, "nvmet", team_a, folder)
        assert not (tmp_path / "target-nvmet.lock").exists()
    finally:
        other.kill()
        other.wait()


def test_a_target_lock_of_a_gone_process_or_a_reused_pid_is_taken_over_and_another_machines_never(
    tmp_path: Path,
) -> None:
    import os

    from pytest_fabricqa.fabric.lock import TargetInUse, me, take_target

    vstor, folder, lock = LocalHost("vstor"), str(tmp_path), tmp_path / "target-scst.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(me("team-a", dead.pid).line())  # SIGKILLed with its fabric up
    assert take_target(vstor, "scst", me("team-b", os.getpid()), folder) is True
    # A live pid that is not the process that took the lock (its start time differs): the pid was reused.
    lock.write_text(Holder("team-a", socket.gethostname(), os.getpid(), "then", "alice", 1).line())
    assert take_target(vstor, "scst", me("team-b", os.getpid() + 1), folder) is True
    lock.write_text(Holder("team-a", "ci-runner-7", 1, "then", "alice", 5).line())
    with pytest.raises(TargetInUse, match=r"pid 1 of user alice on ci-runner-7"):
        take_target(vstor, "scst", me("team-b", os.getpid()), folder)
