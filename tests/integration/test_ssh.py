"""The SSH transport against a real sshd on 127.0.0.1 (a throwaway server this test starts and stops)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_fabricqa.transport.base import CommandError, HostUnreachable
from pytest_fabricqa.transport.fanout import GroupError, run_all
from pytest_fabricqa.transport.ssh import SSHHost
from pytest_fabricqa.transport.testinfra import infra_host

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
pytestmark = pytest.mark.skipif(not Path(SSHD).exists(), reason="openssh-server is not installed (.ci/run installs it)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(self, folder: Path, port: int, client_key: Path, known_hosts: Path) -> None:
        self.folder, self.port, self.client_key, self.known_hosts = folder, port, client_key, known_hosts


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("sshd")
    host_key, client_key = folder / "host_ed25519", folder / "client_ed25519"
    for key in (host_key, client_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (folder / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    port = _free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {folder / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nStrictModes no\nPasswordAuthentication no\n"
        "PermitRootLogin prohibit-password\nUsePAM no\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key.with_suffix('.pub').read_text()}")
    # sshd's log goes to a file beside its config: a pipe nobody reads would stall sshd once it filled.
    log = (folder / "sshd.log").open("wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log)
    for _ in range(50):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield Server(folder, port, client_key, known_hosts)
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


def _host(server: Server, name: str = "el72h1", **kwargs: object) -> SSHHost:
    options: dict[str, object] = {
        "user": "root",
        "port": server.port,
        "key": server.client_key,
        "known_hosts": server.known_hosts,
    }
    options.update(kwargs)
    return SSHHost(name, "127.0.0.1", **options)  # type: ignore[arg-type]


def test_runs_commands_and_reuses_one_connection(sshd: Server) -> None:
    host = _host(sshd)
    try:
        assert host.run(["echo", "hello"]).stdout == "hello\n"
        first = host._connection
        assert host.run(["uname", "-s"]).stdout.strip() == "Linux"
        assert host._connection is first
    finally:
        host.close()
    assert host._connection is None


def test_hostile_value_stays_one_argument_over_ssh(sshd: Server, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    host = _host(sshd)
    try:
        value = f"x;touch {pwned} $(touch {pwned}) `touch {pwned}`"
        assert host.run(["printf", "%s", value]).stdout == value
        assert not pwned.exists()
    finally:
        host.close()


def test_failure_shows_host_command_exit_code_and_stderr(sshd: Server) -> None:
    host = _host(sshd, name="el72h3")
    try:
        with pytest.raises(CommandError, match=r"^el72h3: `ls /no/such/dev` exited 2; stderr tail:\n.*No such file"):
            host.run(["ls", "/no/such/dev"])
        assert host.run(["sh", "-c", "cat"], stdin="from stdin").stdout == "from stdin"
        # A job file's worth and more: invoke's own stdin pump sends ~100 bytes/s and would time out here.
        big = "".join(f"line {i} of a fio job file\n" for i in range(1500))
        assert host.run(["sh", "-c", "cat"], stdin=big, timeout=20).stdout == big
    finally:
        host.close()


def test_unknown_host_key_is_rejected_by_default(sshd: Server, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    host = _host(sshd, known_hosts=empty)
    with pytest.raises(HostUnreachable, match=r"el72h1: SSH to 127.0.0.1:\d+ failed: .*verify_host_keys: false"):
        host.run(["true"])


def test_verification_off_is_an_explicit_setting(sshd: Server, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    host = _host(sshd, known_hosts=empty, verify_host_keys=False)
    try:
        assert host.run(["true"]).ok
    finally:
        host.close()


def test_password_is_never_shown(sshd: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRICQA_TEST_PW", "s3cr3t-value")
    host = _host(sshd, key=None, password_env="FABRICQA_TEST_PW")
    with pytest.raises(HostUnreachable) as info:
        host.run(["true"])
    assert "s3cr3t-value" not in str(info.value) and "s3cr3t-value" not in repr(host)
    monkeypatch.delenv("FABRICQA_TEST_PW")
    with pytest.raises(HostUnreachable, match=r"names \$FABRICQA_TEST_PW for the SSH password, but it is not set"):
        _host(sshd, key=None, password_env="FABRICQA_TEST_PW").run(["true"])


def test_unreachable_port_names_the_host(tmp_path: Path) -> None:
    host = SSHHost("el72h2", "127.0.0.1", port=_free_port(), connect_timeout=3)
    with pytest.raises(HostUnreachable, match=r"el72h2: cannot reach 127.0.0.1:\d+ over SSH"):
        host.run(["true"])


def test_fanout_over_ssh_keeps_partial_results(sshd: Server) -> None:
    good, bad = _host(sshd, "el72h1"), SSHHost("el72h2", "127.0.0.1", port=_free_port(), connect_timeout=3)
    with pytest.raises(GroupError) as info:
        run_all([good, bad], ["hostname"])
    assert isinstance(info.value.results["el72h1"].stdout, str)  # type: ignore[union-attr]
    assert isinstance(info.value.results["el72h2"], HostUnreachable)
    good.close()


def test_testinfra_runs_over_the_same_transport(sshd: Server) -> None:
    host = _host(sshd)
    try:
        infra = infra_host(host)
        assert infra.exists("sh")
        assert infra.file("/etc/hostname").exists
        assert infra.run("echo %s", "a b;c").stdout == "a b;c\n"
        assert host._connection is not None
    finally:
        host.close()


def test_commands_share_a_session_without_leaking_into_each_other(sshd: Server) -> None:
    host = _host(sshd)
    try:
        assert host.run(["cd", "/tmp"]).ok and host.run(["pwd"]).stdout != "/tmp\n"
        assert host.run(["sh", "-c", "exit 3"], check=False).exit_code == 3
        assert host.run(["exec", "true"]).ok and host.run(["echo", "still here"]).stdout == "still here\n"
        # Output without a final newline, and stderr kept apart from stdout.
        both = host.run(["sh", "-c", "printf out; printf err >&2"])
        assert (both.stdout, both.stderr) == ("out", "err")
        # A command reading stdin without one given sees its end at once instead of waiting for it.
        assert host.run(["cat"], timeout=10).stdout == ""
        assert len(host._shells) == 1
    finally:
        host.close()


def test_commands_at_the_same_time_get_a_session_each(sshd: Server, tmp_path: Path) -> None:
    # Each command waits (up to 20 s) for the other's file: one after the other, the first would time out.
    wait = 'touch "$1/$2"; for i in $(seq 200); do [ -e "$1/$3" ] && exit 0; sleep 0.1; done; exit 1'
    host = _host(sshd)
    try:
        results: dict[str, int] = {}

        def meet(mine: str, other: str) -> None:
            results[mine] = host.run(["sh", "-c", wait, "-", str(tmp_path), mine, other], check=False).exit_code

        threads = [threading.Thread(target=meet, args=pair) for pair in (("a", "b"), ("b", "a"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == {"a": 0, "b": 0}
        assert len(host._shells) == 2
    finally:
        host.close()


def test_a_timed_out_command_ends_its_session_and_the_next_command_gets_a_new_one(sshd: Server) -> None:
    host = _host(sshd)
    try:
        result = host.run(["sh", "-c", "echo partial; sleep 30"], timeout=1, check=False)
        assert (result.exit_code, result.stdout, result.stderr) == (124, "partial\n", "timed out after 1 s")
        assert host._shells == []
        assert host.run(["echo", "next"]).stdout == "next\n"
    finally:
        host.close()


def test_a_dropped_connection_is_opened_again(sshd: Server) -> None:
    host = _host(sshd)
    try:
        assert host.run(["true"]).ok
        host._connection.client.get_transport().close()
        assert host.run(["echo", "again"]).stdout == "again\n"
    finally:
        host.close()
