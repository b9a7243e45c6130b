"""The plugin's options, inertness, usage errors, parametrization and xdist grouping (pytester)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL_LAB = ROOT / "tests" / "data" / "labs" / "local.yaml"


def test_inert_without_lab(pytester: pytest.Pytester) -> None:
    """Another project's suite, with the plugin installed and its own `lab`/`protocol` names, is unaffected."""
    pytester.makeconftest(
        """
        import pytest
        @pytest.fixture
        def protocol():
            return "theirs"
        """
    )
    pytester.makepyfile(
        """
        def test_theirs(protocol):
            assert protocol == "theirs"
        def test_plain():
            assert 1 + 1 == 2
        """
    )
    # A fresh process: in-process runs see pytest_fabricqa already imported (an assert-rewrite warning names it).
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    lines = [line for line in result.outlines if not line.startswith("plugins:")]
    assert not [line for line in lines if "fabricqa" in line]


def test_plugin_registers_through_entry_point(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--lab=NAME|PATH*", "*--protocol=P*"])


def test_collect_only_lists_the_matrix_without_network_or_fabric(pytester: pytest.Pytester) -> None:
    """`pytest --lab=rac3 --protocol=nvme-rdma --collect-only` touches no host and never imports fabric/paramiko."""
    code = (
        "import sys, pytest\n"
        "ret = pytest.main(['--lab=rac3', '--protocol=nvme-rdma', '--collect-only', '-q', '-p', 'no:cacheprovider'])\n"
        "bad = [m for m in ('fabric', 'paramiko', 'invoke') if m in sys.modules]\n"
        "print('HEAVY', bad)\n"
        "sys.exit(ret)\n"
    )
    # unshare -n: a fresh network namespace with no network at all, when this machine allows it.
    prefix = ["unshare", "-n"] if shutil.which("unshare") and _unshare_works() else []
    proc = subprocess.run([*prefix, sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HEAVY []" in proc.stdout
    assert "test_rdma_link[nvme-rdma-el72h1]" in proc.stdout
    assert "nvme-tcp" not in proc.stdout


def _unshare_works() -> bool:
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


def test_protocol_option_accepts_commas_and_repeats(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_p(protocol):\n    pass\n")
    result = pytester.runpytest(
        f"--lab={ROOT / 'labs' / 'vlab.yaml'}", "--protocol=iser,nvme-tcp", "--protocol", "iser", "--co", "-q"
    )
    result.stdout.fnmatch_lines(["*test_p[[]iser[]]", "*test_p[[]nvme-tcp[]]", "*2 tests collected*"])


def test_default_protocols_are_the_labs(pytester: pytest.Pytester) -> None:
    """rac3 declares nvme-rdma and iser (seed 000's kernel had no NVMe/TCP; SCST served iSER only)."""
    pytester.makepyfile("def test_p(protocol):\n    pass\n")
    result = pytester.runpytest(f"--lab={ROOT / 'labs' / 'rac3.yaml'}", "--co", "-q")
    result.stdout.fnmatch_lines(["*2 tests collected*"])


def test_roles_marker_narrows_hosts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.roles("initiator")
        def test_i(lab_host_name):
            pass
        def test_all(lab_host_name):
            pass
        """
    )
    result = pytester.runpytest(f"--lab={ROOT / 'labs' / 'rac3.yaml'}", "--co", "-q")
    result.stdout.fnmatch_lines(["*test_i[[]el72h1[]]", "*test_i[[]el72h2[]]", "*5 tests collected*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lab=nosuchlab"], "ERROR: --lab=nosuchlab: unknown lab name (known labs: *"),
        (["--lab=/nonexistent/lab.yaml"], "ERROR: --lab=/nonexistent/lab.yaml: no such lab file *"),
        (["--lab=rac3", "--protocol=fc"], "*argument --protocol: unknown protocol 'fc'; choose from nvme-tcp*"),
        (["--lab=LOCAL", "--protocol=iser"], "ERROR: --protocol=iser: lab 'local' (*) does not declare it*"),
        (["--lab=LOCAL", "-n", "2"], "ERROR: *with -n, add --dist loadgroup*"),
    ],
    ids=["unknown-lab", "missing-file", "unknown-protocol", "undeclared-protocol", "xdist-without-loadgroup"],
)
def test_usage_errors_are_one_line_exit_4(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    args = [a.replace("LOCAL", str(LOCAL_LAB)) for a in args]
    pytester.mkdir("labs")
    shutil.copy(ROOT / "labs" / "rac3.yaml", pytester.path / "labs" / "rac3.yaml")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in output


def test_a_path_option_that_pytest_took_for_the_rootdir_is_one_line_saying_to_write_it_with_an_equals_sign(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """pytest picks the rootdir before plugins load: with ``--report-dir DIR`` (a space) and DIR existing outside
    the folder, DIR became the rootdir and the second run of the same command said "unknown lab name (no lab files
    in DIR/labs)". Refused in one line naming the fix; the ``=`` form, and a lab file in the folder itself given
    with a space, run as before."""
    pytester.mkdir("labs")
    shutil.copy(ROOT / "labs" / "rac3.yaml", pytester.path / "labs" / "rac3.yaml")
    shutil.copy(ROOT / "labs" / "rac3.yaml", pytester.path / "mylab.yaml")
    pytester.makepyfile("def test_x():\n    pass\n")
    out = tmp_path_factory.mktemp("report")
    result = pytester.runpytest_subprocess("--lab=rac3", "--report-dir", str(out), "--co", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --report-dir {out}: pytest read {out} as a test path * write --report-dir={out}"]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert pytester.runpytest_subprocess("--lab=rac3", f"--report-dir={out}", "--co", "-q").ret == 0
    assert pytester.runpytest_subprocess("--lab", "mylab.yaml", "--co", "-q").ret == 0


def test_invalid_lab_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    lab = pytester.path / "broken.yaml"
    lab.write_text(LOCAL_LAB.read_text().replace("kind: nvmet", "kind: netapp"))
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(f"--lab={lab}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: *broken.yaml:*: targets[[]0[]].kind: 'netapp' is not a target kind; allowed: *"]
    )
    assert "Traceback" not in result.stderr.str()


def test_a_threshold_pattern_matching_no_workload_stops_the_run(pytester: pytest.Pytester) -> None:
    # The mistake labs/rac3.yaml carried until issue 11: "seqread" is not how the matrix names sequential reads.
    lab = pytester.path / "typo.yaml"
    lab.write_text(LOCAL_LAB.read_text() + "thresholds:\n  '*':\n    seqread-1m*: {min_mbps: 3500}\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(f"--lab={lab}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: *typo.yaml:*: thresholds.*.seqread-1m*: matches no workload of the selected sets; did you mean read-1m-*"
        ]
    )
    assert "Traceback" not in result.stderr.str()


def test_a_user_error_while_running_is_one_line_and_exit_4(pytester: pytest.Pytester) -> None:
    """A UserError raised by a fixture (here: Oracle credentials missing) is its message, not a traceback;
    other errors of the package keep pytest's usual report."""
    pytester.makepyfile(
        """
        import pytest
        from pytest_fabricqa.oracle.sql import OracleConfigError
        from pytest_fabricqa.transport.base import CommandError, CommandResult

        @pytest.fixture(scope="session")
        def credentials():
            raise OracleConfigError("Set the environment variable ORACLE_USER to the Oracle user for +ASM1")

        def test_needs_credentials(credentials):
            pass

        def test_command_fails():
            raise CommandError(CommandResult("vstor", ("false",), 1, "", "boom"))
        """
    )
    result = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*ERROR at setup of test_needs_credentials*", "Set the environment variable ORACLE_USER to the Oracle user*"]
    )
    setup_section = output.split("ERROR at setup of test_needs_credentials")[1].split("FAILURES")[0]
    assert "raise OracleConfigError" not in setup_section  # no traceback for the user's mistake
    assert "raise CommandError" in output  # a failed command keeps its traceback


def _fake_running_vlab(state_dir: Path, lab_text: str) -> list[subprocess.Popen[bytes]]:
    """Record stand-in processes (sleep) in the run dir as the lab ``lab_text`` describes, up and whole."""
    from pytest_fabricqa.lab.load import load_lab
    from pytest_fabricqa.vlab import procs
    from pytest_fabricqa.vlab.lab import run_dir_for, spec_from_lab

    (state_dir / "booted.yaml").parent.mkdir(parents=True, exist_ok=True)
    (state_dir / "booted.yaml").write_text(lab_text)
    lab = load_lab(state_dir / "booted.yaml")
    spec = spec_from_lab(lab)
    roles = ["switch", *(f"qemu {g.name}" for g in spec.guests)]
    children = [subprocess.Popen(["sleep", "300"]) for _ in roles]
    run_dir = run_dir_for(state_dir, lab)
    run_dir.mkdir(parents=True)
    processes = tuple(procs.ref(role, c.pid) for role, c in zip(roles, children, strict=True))
    procs.write_state(run_dir, procs.LabState(spec.to_dict(), None, processes, "", ""))
    return children


def test_another_virtual_lab_in_the_way_is_one_line_and_the_same_lab_reordered_is_not(
    pytester: pytest.Pytester,
) -> None:
    vlab_text = (ROOT / "labs" / "vlab.yaml").read_text()
    pytester.makeini("[pytest]\nfabricqa_state_dir = state\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    # The lab file's hosts in another order: the same lab.
    vstor = vlab_text[vlab_text.index("  vstor:\n") : vlab_text.index("  vnode1:\n")]
    reordered = vlab_text.replace(vstor, "").replace("\nnetwork:", vstor.rstrip("\n") + "\n\nnetwork:", 1)
    assert reordered.index("  vnode1:") < reordered.index("  vstor:")
    (pytester.path / "reordered.yaml").write_text(reordered)
    (pytester.path / "bigger.yaml").write_text(vlab_text.replace("memory_mb: 3072", "memory_mb: 3584"))
    children = _fake_running_vlab(pytester.path / "state", vlab_text)
    try:
        pytester.runpytest_subprocess("--lab=reordered.yaml", "-p", "no:cacheprovider").assert_outcomes(passed=1)
        result = pytester.runpytest_subprocess("--lab=bigger.yaml", "-p", "no:cacheprovider")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [
                "ERROR: lab 'vlab': the virtual lab running in */state/vlab/vlab is not this lab file's: it runs "
                "other guests (vstor.memory_mb: running 3072, wanted 3584); stop it with "
                "`fabricqa-vlab down --run-dir */state/vlab/vlab` and run again, or run with the lab file it was "
                "started from to attach to it"
            ]
        )
        assert "Traceback" not in result.stderr.str() + result.stdout.str()
    finally:
        for child in children:
            child.kill()
            child.wait()


# A stand-in for another folder's lab guest: listens on PORT with QEMU's words for it on its command line.
LISTENER = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
time.sleep(300)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_lab_s_ports_held_by_a_lab_from_another_folder_is_one_line_saying_how_to_attach_or_stop(
    pytester: pytest.Pytester,
) -> None:
    """`pytest --lab=.../vlab.yaml` from a folder other than the one the lab was started in: its run state lives
    under that folder, so this run would boot a second lab on the same ports (a VlabError traceback in a fixture)."""
    vlab_text = (ROOT / "labs" / "vlab.yaml").read_text()
    ports = [_free_port() for _ in range(3)]
    for old, new in zip((22191, 22192, 22193), ports, strict=True):
        vlab_text = vlab_text.replace(f"port: {old}", f"port: {new}")
    (pytester.path / "vlab.yaml").write_text(vlab_text)
    pytester.makepyfile("def test_x():\n    pass\n")
    other = pytester.path / "elsewhere" / ".fabricqa" / "vlab" / "vlab"
    fake_qemu = [
        sys.executable, "-c", LISTENER, str(ports[0]),
        "-pidfile", str(other / "vstor" / "qemu.pid"),
        "-netdev", f"user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:{ports[0]}-:22",
    ]  # fmt: skip
    for argv, expected in (
        (
            fake_qemu,
            f"ERROR: lab 'vlab': SSH port(s) [{ports[0]}] on 127.0.0.1 are in use by the virtual lab running in "
            f"{other}, not in {pytester.path}/.fabricqa/vlab/vlab where this run keeps its lab; attach to it with "
            f"-o fabricqa_state_dir={other.parent.parent}, or stop it with `fabricqa-vlab down --run-dir {other}` "
            "and run again",
        ),
        (
            [sys.executable, "-c", LISTENER, str(ports[0])],
            f"ERROR: lab 'vlab': SSH port(s) [{ports[0]}] on 127.0.0.1 are in use by a process other than a virtual "
            "lab; stop it, or give the lab file's hosts other ports",
        ),
    ):
        listener = subprocess.Popen(argv, stdout=subprocess.PIPE)
        try:
            assert listener.stdout is not None and listener.stdout.readline() == b"listening\n"
            result = pytester.runpytest_subprocess("--lab=vlab.yaml", "-p", "no:cacheprovider")
        finally:
            listener.kill()
            listener.wait()
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert result.stderr.lines[0] == expected  # (fnmatch would read the ports' brackets as a pattern)
        assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_loads_on_one_target_never_overlap_under_xdist(pytester: pytest.Pytester) -> None:
    """Cases marked loads_target share an xdist group per target host; prerequisite-like cases spread out."""
    pytester.makepyfile(
        test_grouping="""
        import fcntl, os, time, pytest

        def _exclusive(path):
            fd = os.open(path, os.O_CREAT | os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails if another load holds the target
            except BlockingIOError:
                pytest.fail("two loads on one target at once")
            time.sleep(0.3)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

        @pytest.mark.loads_target
        @pytest.mark.parametrize("n", range(4))
        def test_load(protocol, n, tmp_path_factory):
            _exclusive(str(tmp_path_factory.getbasetemp().parent / "target.lock"))

        @pytest.mark.parametrize("n", range(4))
        def test_check(n, tmp_path_factory):
            time.sleep(0.3)
        """
    )
    result = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}", "-n", "2", "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=8)
    workers = {line.split("]", 1)[0] for line in result.outlines if "PASSED" in line and "::test_load[" in line}
    assert len(workers) == 1, f"loads on one target ran on several workers: {sorted(workers)}"


def test_target_groups_do_not_depend_on_node_id_suffixes(pytester: pytest.Pytester) -> None:
    """pytest 9.2 ignores xdist's ``@group`` node-id suffix (pytest-dev/pytest-xdist#1386): the groups must hold
    anyway. Many grouped cases next to ungrouped ones, on two workers: every grouped one on one worker."""
    pytester.makepyfile(
        test_many="""
        import pytest

        @pytest.mark.loads_target
        @pytest.mark.parametrize("n", range(12))
        def test_load(protocol, n):
            pass

        @pytest.mark.parametrize("n", range(12))
        def test_check(n):
            pass
        """
    )
    result = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}", "-n", "2", "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=24)
    loads = {line.split("]", 1)[0] for line in result.outlines if "PASSED" in line and "::test_load[" in line}
    assert len(loads) == 1, f"loads on one target ran on several workers: {sorted(loads)}"


def test_oracle_cases_run_first_and_last_only_when_the_lab_declares_a_database(pytester: pytest.Pytester) -> None:
    suite = ROOT / "suites"
    result = pytester.runpytest_subprocess(f"--lab={ROOT / 'labs' / 'rac3.yaml'}", str(suite), "--co", "-q")
    lines = [line for line in result.outlines if "::" in line]
    assert lines[0].endswith("test_oracle.py::test_asm_healthy_before_io")
    assert [line.rsplit("::", 1)[1] for line in lines[-3:]] == [
        "test_asm_healthy_after_io", "test_calibrate_io", "test_database_waits"
    ]  # fmt: skip

    result = pytester.runpytest_subprocess(f"--lab={ROOT / 'labs' / 'vlab.yaml'}", str(suite), "--co", "-q")
    assert "test_oracle.py" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*Oracle checks were not exercised (lab 'vlab' declares no database)*"])


def test_a_second_session_on_a_lab_in_use_stops_at_once_with_one_line(pytester: pytest.Pytester) -> None:
    """A lab held by a live session (its lock names a running pytest) refuses a second session: exit 4, one line
    naming the holder; a lock left by a session that is gone is taken over."""
    import socket
    import subprocess
    import sys

    from pytest_fabricqa.fabric.lock import Holder

    pytester.makepyfile("def test_uses_the_lab(lab_hosts):\n    assert lab_hosts\n")
    lock = pytester.path / ".fabricqa" / "session-local.lock"
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "pytest"])
    try:
        lock.write_text(Holder("local", socket.gethostname(), holder.pid, "2026-12-01T00:00:00+0000").line())
        result = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stdout.fnmatch_lines(
            [f"*fabricqa: *lab 'local' is in use by the pytest session of pid {holder.pid} on *"]
        )
        assert "Traceback" not in result.stdout.str() + result.stderr.str()
    finally:
        holder.kill()
        holder.wait()
    result = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*took over the session lock of a session that is gone*"])
    assert not lock.exists(), "the session did not release its lock"


def test_other_plugins_add_to_the_environment_through_the_hook(pytester: pytest.Pytester) -> None:
    """The plugin's own probe runs first (kernels); a conftest's implementation adds an external array's
    model and firmware, and the session's ``lab_environment`` holds both."""
    pytester.makeconftest(
        """
        def pytest_fabricqa_update_environment(lab, lab_hosts, environment):
            assert "kernels" in environment  # the plugin's probe ran before this one
            environment["device_model"], environment["device_firmware"] = "PowerStore 500T", "3.6.1.0"
        """
    )
    pytester.makepyfile(
        """
        import platform

        def test_environment(lab_environment):
            assert lab_environment == {
                "kernels": {"localhost": platform.release()},
                "device_model": "PowerStore 500T",
                "device_firmware": "3.6.1.0",
            }
        """
    )
    result = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_suites_read_the_measuring_plan_and_workloads_through_fixtures(pytester: pytest.Pytester) -> None:
    """What the shipped suites need from the run's configuration comes through fixtures, not the plugin's stash."""
    pytester.makepyfile(
        """
        def test_plan(measure_plan, lab_workloads, workload):
            assert measure_plan.sampling.samples == 3
            assert workload in lab_workloads and len(lab_workloads) > 1
        """
    )
    result = pytester.runpytest_subprocess(f"--lab={LOCAL_LAB}", "--fio-samples=3", "-p", "no:cacheprovider", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
