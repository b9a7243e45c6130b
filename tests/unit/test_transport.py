"""Transports and fan-out: argv is never parsed by a shell; failures carry host, command, exit code, stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_fabricqa.transport import transport_class
from pytest_fabricqa.transport.base import CommandError, CommandResult, Host
from pytest_fabricqa.transport.fanout import GroupError, each, run_all
from pytest_fabricqa.transport.local import LocalHost


def test_hostile_lab_value_is_an_argument_not_a_command(tmp_path: Path) -> None:
    """A lab value such as the NQN `x;touch PWNED` reaches the command as one argument and runs nothing."""
    pwned = tmp_path / "pwned"
    nqn = f"x;touch {pwned}"
    host = LocalHost("node1")
    out = host.run(["printf", "%s", nqn])
    assert out.stdout == nqn
    host.run(["sh", "-c", 'printf "%s" "$1" >/dev/null', "sh", f"$(touch {pwned})"])
    assert not pwned.exists()


def test_failed_command_names_host_command_exit_code_and_stderr_tail() -> None:
    host = LocalHost("el72h3")
    with pytest.raises(CommandError) as info:
        host.run(["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do echo line$i >&2; done; exit 3", "probe"])
    message = str(info.value)
    assert message.startswith("el72h3: `sh -c")
    assert "exited 3" in message
    assert "line10" in message and "line1\n" not in message  # only the tail
    assert info.value.result.exit_code == 3


def test_missing_program_is_exit_127_not_a_traceback() -> None:
    result = LocalHost("h").run(["no-such-tool-fabricqa"], check=False)
    assert result.exit_code == 127 and "command not found" in result.stderr


def test_timeout_is_reported() -> None:
    result = LocalHost("h").run(["sleep", "5"], check=False, timeout=0.2)
    assert result.exit_code == 124 and "timed out" in result.stderr


def test_ssh_transport_command_is_quoted_once() -> None:
    """The SSH transport sends shlex.join(argv): the remote shell sees exactly the argv again."""
    result = CommandResult("h", ("nvme", "connect", "-n", "x;touch /tmp/pwned"), 0, "", "")
    assert result.command == "nvme connect -n 'x;touch /tmp/pwned'"


def test_registry_loads_members_lazily() -> None:
    assert transport_class("local") is LocalHost
    assert transport_class("ssh").__name__ == "SSHHost"


def test_fanout_keeps_every_result_when_one_host_fails() -> None:
    hosts = [LocalHost("el72h1"), LocalHost("el72h2"), LocalHost("el72h3")]

    def work(host: Host) -> str:
        if host.name == "el72h2":
            return host.run(["false"]).stdout
        return host.run(["echo", host.name]).stdout.strip()

    with pytest.raises(GroupError) as info:
        each(hosts, work)
    results = info.value.results
    assert results["el72h1"] == "el72h1" and results["el72h3"] == "el72h3"
    assert isinstance(results["el72h2"], CommandError)
    assert list(info.value.failed) == ["el72h2"]
    assert "1 of 3 hosts failed" in str(info.value)


def test_fanout_runs_hosts_at_the_same_time(tmp_path: Path) -> None:
    hosts = [LocalHost(f"n{i}") for i in range(3)]
    # Each host checks in, then waits until all three have: run one after the other, the first would wait
    # alone until timeout kills it (60 s, a deadlock guard, not a timing assertion a loaded machine can break).
    meet = f"touch {tmp_path}/$$; while [ $(ls {tmp_path} | wc -l) -lt 3 ]; do sleep 0.05; done"
    results = run_all(hosts, ["timeout", "60", "sh", "-c", meet])
    assert set(results) == {"n0", "n1", "n2"}
    assert all(not isinstance(r, Exception) for r in results.values())


def test_fanout_without_check_returns_exceptions() -> None:
    results = run_all([LocalHost("a"), LocalHost("b")], ["sh", "-c", "exit 2"], check=False)
    assert all(isinstance(r, CommandError) for r in results.values())
