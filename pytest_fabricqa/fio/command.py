"""Building fio command lines and job files from a workload, and running fio on lab hosts.

Everything is an argv list (the transport quotes it once); job files are plain text the caller ships.
Client/server mode ("all initiators at once"): each initiator runs ``fio --server``, one client drives them
all with ``fio --client=ip:HOST1,PORT JOB1 --readonly --client=ip:HOST2,PORT JOB2 --readonly``, so each
host gets its own job file (its own device paths).

Two fio 3.33 facts found while recording ``tests/data/fio`` shape this module:

- ``readonly`` is a command-line-only option: a job file saying ``readonly`` makes the server drop the job
  ("Bad option <readonly>", "job global dropped"); a ``--readonly`` given to the client before every
  ``--client`` does not reach the servers, which then run write jobs unguarded.
- Per-server options must come after that server's job file: ``--client=A --readonly JOB_A --client=B
  --readonly JOB_B`` ran JOB_A on both servers, while ``--client=A JOB_A --readonly --client=B JOB_B
  --readonly`` ran each server's own file with the read-only guard.

And one fact of fio's random generator: with ``randrepeat`` (the default) fio seeds its random offsets from a
fixed seed times the job's number, and every ``fio --server`` numbers its jobs from 1, so two initiators sent
the *same* offset stream to the same LUN (a caching array then served the second from cache). Each host's job
file therefore carries its own ``randseed`` (:func:`host_randseed`), in every job section, where fio's JSON
echoes it back per job under ``job options``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import re
from collections.abc import Sequence

from pytest_fabricqa.core.workloads import Workload
from pytest_fabricqa.fio.model import ClientServerResult, FioResult, FioServer
from pytest_fabricqa.fio.parse import fio_messages, parse_client_server, parse_fio_output, split_output
from pytest_fabricqa.transport.base import CommandError, CommandResult, Host

# json+ adds the latency histograms; with them, percentiles of several jobs or hosts combine exactly.
DEFAULT_OUTPUT_FORMAT = "json+"
OUTPUT_FORMATS = ("json", "json+")
FIO_SERVER_PORT = 8765  # fio's default
# Seconds fio may take beyond runtime + ramp_time: job setup, file layout, connecting to servers.
TIMEOUT_MARGIN = 120.0

_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


class FioError(CommandError):
    """fio failed on a host (bad option, missing device, a job ending with an errno).

    ``messages`` are fio's own words (its stderr, its ``fio: ...`` lines, the jobs' errors);
    ``result`` is the command that ran, ``fio_result`` the parsed output when fio still reported.
    """

    def __init__(
        self,
        result: CommandResult,
        messages: Sequence[str],
        fio_result: FioResult | ClientServerResult | None = None,
    ) -> None:
        self.result = result
        self.host = result.host
        self.messages = tuple(messages)
        self.fio_result = fio_result
        said = "; ".join(self.messages[:8]) or "no message from fio"
        Exception.__init__(
            self,
            f"{result.host}: fio failed: {said}\n  command (exit {result.exit_code}): {result.command}",
        )


def job_names(devices: Sequence[str], *, prefix: str = "") -> list[str]:
    """One fio job name per device, from its file name (``/dev/nvme0n1`` -> ``nvme0n1``), made unique."""
    names: list[str] = []
    for device in devices:
        base = _UNSAFE_NAME_CHARS.sub("_", posixpath.basename(device.rstrip("/")) or "device")
        name = f"{prefix}{base}"
        candidate, n = name, 2
        while candidate in names:
            candidate, n = f"{name}-{n}", n + 1
        names.append(candidate)
    return names


def host_randseed(case: str, host: str) -> int:
    """The ``randseed`` of one host in one case: derived from both names (SHA-256, 32 bits), so a case repeats
    its offsets run after run, while two hosts in the same case never share an offset stream."""
    digest = hashlib.sha256(f"{case}\0{host}".encode()).digest()
    return int.from_bytes(digest[:4], "big") or 1


def _workload_options(workload: Workload, *, group_reporting: bool) -> list[tuple[str, str]]:
    """The global options of a run, in the order fio prints them: engine, timing, pattern, extras."""
    options = [("ioengine", "libaio"), ("direct", "1"), ("time_based", "")]
    options.extend(workload.options.items())
    if group_reporting:
        options.append(("group_reporting", ""))
    return options


def _check_devices(devices: Sequence[str]) -> None:
    if not devices:
        raise ValueError("fio needs at least one device")
    for device in devices:
        if not device or "\n" in device or "\r" in device:
            raise ValueError(f"not a device path: {device!r}")


def fio_argv(
    workload: Workload,
    devices: Sequence[str],
    *,
    fio: str = "fio",
    output_format: str = DEFAULT_OUTPUT_FORMAT,
    group_reporting: bool = True,
) -> list[str]:
    """The argv that runs ``workload`` on every device at once, one job section per device.

    Read workloads get ``--readonly``: fio itself then refuses any write, whatever the options say.
    """
    _check_devices(devices)
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {OUTPUT_FORMATS}, not {output_format!r}")
    argv = [fio, f"--output-format={output_format}"]
    argv.extend(f"--{name}={value}" if value else f"--{name}" for name, value in
                _workload_options(workload, group_reporting=group_reporting))  # fmt: skip
    if not workload.writes:
        argv.append("--readonly")
    for name, device in zip(job_names(devices), devices, strict=True):
        argv.extend((f"--name={name}", f"--filename={device}"))
    return argv


def job_file(
    workload: Workload,
    devices: Sequence[str],
    *,
    group_reporting: bool = True,
    prefix: str = "",
    options: Sequence[tuple[str, str]] = (),
    randseed: int | None = None,
) -> str:
    """A job file running ``workload`` on every device: a ``[global]`` section (with ``options`` last), one
    section per device.

    It never says ``readonly`` (fio rejects that in a job file): pass ``readonly=not workload.writes`` to
    :func:`client_argv`, which puts ``--readonly`` on the command line. ``randseed`` goes into every job
    section (not ``[global]``: fio's client/server JSON reports global options once for all hosts, job options
    per host), so the raw output shows which seed each host used.
    """
    _check_devices(devices)
    lines = [f"; pytest-fabricqa workload {workload.name}", "[global]"]
    lines.extend(f"{name}={value}" if value else name for name, value in
                 _workload_options(workload, group_reporting=group_reporting))  # fmt: skip
    for name, value in options:
        if "\n" in name or "\n" in value or "\r" in value:
            raise ValueError(f"job file option {name!r} must be one line")
        lines.append(f"{name}={value}" if value else name)
    for name, device in zip(job_names(devices, prefix=prefix), devices, strict=True):
        lines.extend(("", f"[{name}]", f"filename={device}"))
        if randseed is not None:
            lines.append(f"randseed={randseed}")
    return "\n".join(lines) + "\n"


def server_argv(
    *, address: str | None = None, port: int = FIO_SERVER_PORT, pidfile: str | None = None, fio: str = "fio"
) -> list[str]:
    """``fio --server=ip:ADDRESS,PORT`` (all addresses when None), daemonized with a pid file if given."""
    spec = f",{port}" if address is None else FioServer("server", address, port).connect_string
    argv = [fio, f"--server={spec}"]
    if pidfile is not None:
        argv.append(f"--daemonize={pidfile}")
    return argv


def server_stop_argv(pidfile: str) -> list[str]:
    """Stop the fio server whose pid is in ``pidfile``: by that pid, and only while that pid is still fio (a pid
    reused since by another program is left alone)."""
    return ["pkill", "-x", "fio", "--pidfile", pidfile]


def client_argv(
    clients: Sequence[tuple[FioServer, str]],
    *,
    readonly: bool,
    fio: str = "fio",
    output_format: str = DEFAULT_OUTPUT_FORMAT,
) -> list[str]:
    """``fio --client=SERVER JOBFILE [--readonly] ...``: each server runs its own job file (a path on the
    host running the client). ``--readonly`` follows each job file; see the module docstring for why."""
    if not clients:
        raise ValueError("a client/server run needs at least one fio server")
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {OUTPUT_FORMATS}, not {output_format!r}")
    argv = [fio, f"--output-format={output_format}"]
    for server, path in clients:
        argv.extend((f"--client={server.connect_string}", path))
        if readonly:
            argv.append("--readonly")
    return argv


def fio_timeout(workload: Workload) -> float:
    """How long to wait for fio before calling it hung: runtime + ramp_time + a margin for setup."""
    if workload.runtime is None:
        raise ValueError(f"workload {workload.name!r} has no runtime, so it cannot run")
    return float(workload.runtime + workload.ramp_time) + TIMEOUT_MARGIN


def run_fio(
    host: Host,
    workload: Workload,
    devices: Sequence[str],
    *,
    fio: str = "fio",
    output_format: str = DEFAULT_OUTPUT_FORMAT,
    group_reporting: bool = True,
    timeout: float | None = None,
) -> FioResult:
    """Run ``workload`` on ``devices`` of ``host`` and return its figures; raise :class:`FioError` with
    fio's own message when fio fails or a job ends with an error."""
    argv = fio_argv(workload, devices, fio=fio, output_format=output_format, group_reporting=group_reporting)
    command = host.run(argv, check=False, timeout=fio_timeout(workload) if timeout is None else timeout)
    return result_or_raise(command)


def result_or_raise(command: CommandResult) -> FioResult:
    """Parse a finished stand-alone fio command, raising :class:`FioError` if fio or any job failed."""
    try:
        result = parse_fio_output(command.stdout, host=command.host)
    except ValueError as exc:
        if command.ok:
            raise
        notes = _notes(command.stdout)
        raise FioError(command, fio_messages(notes, command.stderr) or (str(exc),)) from None
    result = dataclasses.replace(result, raw_output=command.stdout)
    if not command.ok or result.errors:
        raise FioError(command, fio_messages(result.notes, command.stderr) + result.errors, result)
    return result


# One round trip per run: the controller writes each server's job file into a fresh folder, runs the fio client
# there (its logs land beside the job files), prints fio's output, then every log after a marker line, and
# removes the folder. Fixed text: the folder base, the job files (name, text) and fio's argv arrive as "$@".
_CLIENT_SCRIPT = """set -u
dir=$(mktemp -d "$1/fabricqa-fio.XXXXXX") || exit 125
shift
trap 'rm -rf "$dir"' EXIT
n=$1; shift
while [ "$n" -gt 0 ]; do printf '%s' "$2" >"$dir/$1" || exit 125; shift 2; n=$((n - 1)); done
cd "$dir" || exit 125
"$@"
rc=$?
for f in *.log.*; do
  [ -e "$f" ] || continue
  printf '\\n%s %s\\n' '@@fabricqa-log' "$f"
  cat "$f"
done
exit $rc
"""
LOG_MARKER = "\n@@fabricqa-log "


def client_script_argv(
    files: Sequence[tuple[str, str]], fio_argv: Sequence[str], *, workdir: str = "/tmp"
) -> list[str]:
    """``sh -c SCRIPT``: write ``files`` (name, text) into a fresh folder under ``workdir``, run ``fio_argv``
    there, print its output and then each log file fio's client wrote, remove the folder; exit as fio did."""
    for name, _ in files:
        if not name or "/" in name or name.startswith(".") or _UNSAFE_NAME_CHARS.search(name):
            raise ValueError(f"not a plain job file name: {name!r}")
    argv = ["sh", "-c", _CLIENT_SCRIPT, "sh", workdir, str(len(files))]
    for name, text in files:
        argv.extend((name, text))
    argv.extend(fio_argv)
    return argv


def split_logs(stdout: str) -> tuple[str, dict[str, str]]:
    """fio's own output, and the log files the client script printed after it (file name -> text)."""
    head, marker, rest = stdout.partition(LOG_MARKER)
    logs: dict[str, str] = {}
    if not marker:
        return stdout, logs
    for chunk in (LOG_MARKER + rest).split(LOG_MARKER)[1:]:
        name, _, text = chunk.partition("\n")
        logs[name.strip()] = text
    return head, logs


def log_prefix(server: FioServer) -> str:
    """The ``write_*_log`` prefix of one server's job file: its lab host name, made safe for a file name."""
    return _UNSAFE_NAME_CHARS.sub("_", server.name)


def run_fio_clients(
    controller: Host,
    jobs: Sequence[tuple[FioServer, Sequence[str]]],
    workload: Workload,
    *,
    workdir: str = "/tmp",
    fio: str = "fio",
    output_format: str = DEFAULT_OUTPUT_FORMAT,
    group_reporting: bool = True,
    timeout: float | None = None,
    options: Sequence[tuple[str, str]] = (),
    logs: tuple[int, int | None] | None = None,
    case: str | None = None,
) -> ClientServerResult:
    """Run ``workload`` on every server's devices at once, from a fio client on ``controller``, in one command.

    The servers must already run ``fio --server`` (:func:`server_argv`). Each server's job file carries
    ``options`` (steady-state detection, say), its own ``randseed`` (:func:`host_randseed` of ``case``, default
    the workload's name, and the server's name) and, when ``logs`` is (log_avg_msec, log_hist_msec), the IOPS,
    latency and histogram logs under the server's lab name (:func:`log_prefix`; the IOPS log alone with
    log_hist_msec None); the files travel inside the
    command (:func:`client_script_argv`) and the logs come back in ``result.logs``. Raises :class:`FioError`
    when fio fails or any job on any server ends with an error.
    """
    from pytest_fabricqa.fio.logs import log_options

    files: list[tuple[str, str]] = []
    clients: list[tuple[FioServer, str]] = []
    for server, devices in jobs:
        extra = list(options)
        if logs is not None:
            extra.extend(log_options(log_prefix(server), avg_msec=logs[0], hist_msec=logs[1]))
        text = job_file(
            workload,
            devices,
            group_reporting=group_reporting,
            prefix=f"{server.name}.",
            options=extra,
            randseed=host_randseed(case or workload.name, server.name),
        )
        name = _UNSAFE_NAME_CHARS.sub("_", f"fabricqa-{server.name}-{workload.name}.fio")
        files.append((name, text))
        clients.append((server, name))
    argv = client_argv(clients, readonly=not workload.writes, fio=fio, output_format=output_format)
    command = controller.run(
        client_script_argv(files, argv, workdir=workdir),
        check=False,
        timeout=fio_timeout(workload) if timeout is None else timeout,
    )
    output, log_files = split_logs(command.stdout)
    command = dataclasses.replace(command, stdout=output)
    result = client_result_or_raise(command, servers=[server for server, _ in jobs])
    return dataclasses.replace(result, logs=log_files)


def client_result_or_raise(command: CommandResult, *, servers: Sequence[FioServer] = ()) -> ClientServerResult:
    """Parse a finished client/server fio command, raising :class:`FioError` if fio or any job failed."""
    try:
        result = parse_client_server(command.stdout, servers=servers, host=command.host)
    except ValueError as exc:
        if command.ok:
            raise
        raise FioError(command, fio_messages(_notes(command.stdout), command.stderr) or (str(exc),)) from None
    result = dataclasses.replace(result, raw_output=command.stdout)
    errors = tuple(error for host in result.hosts for error in host.errors)
    messages = fio_messages(result.notes, command.stderr)
    reported = {host.host for host in result.hosts}
    # A server that dropped its job (a bad option in its job file) is simply absent from client_stats.
    silent = tuple(f"server {s.name} ({s.connect_string}) reported no job" for s in servers if s.name not in reported)
    if not result.hosts:
        silent = silent or ("no server reported any job",)
    if not command.ok or errors or silent:
        raise FioError(command, messages + errors + silent, result)
    return result


def _notes(stdout: str) -> tuple[str, ...]:
    try:
        return split_output(stdout)[1]
    except ValueError:
        return tuple(line.rstrip() for line in stdout.splitlines() if line.strip())
