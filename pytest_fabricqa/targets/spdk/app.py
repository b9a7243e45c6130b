"""The SPDK app on the target host: what the host has (probe), starting ``nvmf_tgt`` detached with its log kept, and
stopping the one this plugin started (found again by the pid in the state file and its command line).

Every script is fixed text; paths and numbers arrive as positional arguments (``sh -c SCRIPT sh ARG...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_fabricqa.lab.model import SPDK_DEFAULT_CORE_MASK, SpdkSettings
from pytest_fabricqa.transport.base import Host

# argv: binary (lab's or ""), rpc.py (lab's or ""), socket. One line per fact. Where the lab names neither, nvmf_tgt
# and rpc.py are looked for on PATH, then under /opt/spdk (the virtual lab's image: bin/, scripts/; or SPDK's build
# tree: build/bin/), then under /usr/local.
PROBE_SCRIPT = r"""
b=$1
if [ -z "$b" ]; then
  b=$(command -v nvmf_tgt 2>/dev/null)
  [ -n "$b" ] || for c in /opt/spdk/bin/nvmf_tgt /opt/spdk/build/bin/nvmf_tgt /usr/local/bin/nvmf_tgt; do [ -x "$c" ] && { b=$c; break; }; done
fi
if [ -n "$b" ] && [ -x "$b" ]; then
  echo "binary $b"
  ldd "$b" 2>/dev/null | grep -q librdmacm && echo "binary-rdma yes"
else
  echo "no-binary ${1:-nvmf_tgt}"
fi
r=$2
if [ -z "$r" ]; then
  r=$(command -v rpc.py 2>/dev/null)
  [ -n "$r" ] || for c in /opt/spdk/scripts/rpc.py /usr/local/share/spdk/scripts/rpc.py; do [ -f "$c" ] && { r=$c; break; }; done
fi
if [ -n "$r" ] && [ -f "$r" ]; then
  echo "rpc-py $r"
  d=$(cd "$(dirname "$(readlink -f "$r")")/../python" 2>/dev/null && pwd)
  [ -n "$d" ] && [ -f "$d/spdk/rpc/client.py" ] && echo "rpc-pydir $d"
elif [ -n "$2" ]; then
  echo "no-rpc-py $2"
fi
command -v python3 >/dev/null 2>&1 && echo "python3 yes"
[ -S "$3" ] && echo "socket yes"
awk '/^HugePages_Total:/ {t=$2} /^HugePages_Free:/ {f=$2} /^Hugepagesize:/ {s=$2} END {print "hugepages", t+0, f+0, s+0}' /proc/meminfo
exit 0
"""


@dataclass(frozen=True)
class SpdkHost:
    """What :data:`PROBE_SCRIPT` found on the target host."""

    binary: str | None = None
    binary_rdma: bool = False
    missing_binary: str | None = None
    rpc_py: str | None = None
    rpc_pydir: str | None = None
    missing_rpc_py: str | None = None
    python3: bool = False
    socket: bool = False
    hugepages: tuple[int, int, int] = (0, 0, 0)  # total, free, page size in KiB
    lines: tuple[str, ...] = field(default=(), compare=False)

    @property
    def client_mode(self) -> str:
        """The RPC client to use: SPDK's own (the ``python`` folder beside rpc.py's ``scripts``) or fabricqa's."""
        if self.rpc_py is not None and self.rpc_pydir is not None:
            return f"spdk:{self.rpc_pydir}"
        return "own"

    @property
    def free_hugepage_mb(self) -> int:
        """Free hugepage memory in MiB."""
        return self.hugepages[1] * self.hugepages[2] // 1024


def parse_probe(text: str) -> SpdkHost:
    """:data:`PROBE_SCRIPT` output -> :class:`SpdkHost`."""
    facts: dict[str, str] = {}
    hugepages = (0, 0, 0)
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key == "hugepages":
            numbers = [int(n) for n in value.split() if n.isdigit()]
            if len(numbers) == 3:
                hugepages = (numbers[0], numbers[1], numbers[2])
        elif key:
            facts[key] = value.strip()
    return SpdkHost(
        binary=facts.get("binary"),
        binary_rdma="binary-rdma" in facts,
        missing_binary=facts.get("no-binary"),
        rpc_py=facts.get("rpc-py"),
        rpc_pydir=facts.get("rpc-pydir"),
        missing_rpc_py=facts.get("no-rpc-py"),
        python3="python3" in facts,
        socket="socket" in facts,
        hugepages=hugepages,
        lines=tuple(text.splitlines()),
    )


def probe(host: Host, settings: SpdkSettings) -> SpdkHost:
    """Look at the target host: nvmf_tgt, rpc.py and its client, python3, the socket, hugepages (one command)."""
    out = host.run(["sh", "-c", PROBE_SCRIPT, "sh", settings.binary or "", settings.rpc_py or "", settings.rpc_socket])
    return parse_probe(out.stdout)


def start_argv(binary: str, settings: SpdkSettings) -> list[str]:
    """nvmf_tgt's command line for the lab's settings (SPDK 23.01 takes ``--no-huge`` through ``--env-context``)."""
    argv = [binary, "-m", settings.core_mask or SPDK_DEFAULT_CORE_MASK, "-r", settings.rpc_socket]
    if settings.mem_size_mb is not None:
        argv += ["-s", str(settings.mem_size_mb)]
    if settings.no_pci:
        argv.append("-u")
    if settings.no_huge:
        argv.append("--env-context=--no-huge --legacy-mem")
    return argv


# argv: log file, pid file, then the command. Detached from our session (setsid, no terminal, stdin from /dev/null)
# so the SSH channel closes and the app outlives this command; its output goes to the log, its pid to the pid file
# at once (a run killed right after the start still leaves the pid for the next run). Prints "PID <pid>".
# A background job of a non-interactive shell is no process-group leader, so setsid does not fork: $! is the app.
START_SCRIPT = r"""
log=$1; pidfile=$2; shift 2
mkdir -p "$(dirname "$log")" "$(dirname "$pidfile")"
setsid "$@" > "$log" 2>&1 < /dev/null &
echo $! > "$pidfile"
echo "PID $!"
"""

# argv: pid, binary, socket. RUNNING when that pid is alive AND its command line is the binary with the socket
# (a pid reused by another process is not ours), else GONE.
ALIVE_SCRIPT = r"""
[ -r "/proc/$1/cmdline" ] || { echo GONE; exit 0; }
cmd=$(tr '\0' ' ' < "/proc/$1/cmdline")
case "$cmd" in
  "$2 "*"-r $3 "*|"$2 "*"-r $3") echo RUNNING ;;
  *) echo GONE ;;
esac
"""

# argv: pid, binary, socket. Stops the app if it is ours (as ALIVE_SCRIPT judges): SIGTERM, up to 20 s, then
# SIGKILL. Prints GONE, STOPPED or KILLED.
STOP_SCRIPT = r"""
[ -r "/proc/$1/cmdline" ] || { echo GONE; exit 0; }
cmd=$(tr '\0' ' ' < "/proc/$1/cmdline")
case "$cmd" in
  "$2 "*"-r $3 "*|"$2 "*"-r $3") ;;
  *) echo GONE; exit 0 ;;
esac
kill -TERM "$1" 2>/dev/null
i=0
while [ -d "/proc/$1" ] && [ $i -lt 100 ]; do sleep 0.2; i=$((i+1)); done
if [ -d "/proc/$1" ]; then kill -KILL "$1" 2>/dev/null; sleep 0.5; echo KILLED; else echo STOPPED; fi
"""


def start_detached(host: Host, argv: list[str], log: str, pidfile: str) -> int:
    """Start ``argv`` detached on ``host``, its output in ``log`` and its pid in ``pidfile``; its pid."""
    out = host.run(["sh", "-c", START_SCRIPT, "sh", log, pidfile, *argv]).stdout
    for line in out.splitlines():
        if line.startswith("PID ") and line[4:].strip().isdigit():
            return int(line[4:].strip())
    raise ValueError(f"no pid in {out!r}")


def alive(host: Host, pid: int, binary: str, socket: str) -> bool:
    """True when ``pid`` on ``host`` is still the nvmf_tgt started with ``binary`` on ``socket``."""
    out = host.run(["sh", "-c", ALIVE_SCRIPT, "sh", str(pid), binary, socket]).stdout
    return out.strip() == "RUNNING"


def stop(host: Host, pid: int, binary: str, socket: str) -> str:
    """Stop the nvmf_tgt ``pid`` if it is still the one we started; GONE, STOPPED or KILLED."""
    out = host.run(["sh", "-c", STOP_SCRIPT, "sh", str(pid), binary, socket], timeout=60).stdout
    return out.strip().splitlines()[-1] if out.strip() else "GONE"


def socket_pid(host: Host, socket: str) -> int | None:
    """The pid of the process listening on the UNIX socket ``socket`` on ``host``, as ``ss -Hxlp`` names it; None
    when no process listens there or ``ss`` cannot say (it names the holder only to root)."""
    out = host.run(["ss", "-Hxlp"], check=False).stdout
    return parse_socket_pid(out, socket)


def parse_socket_pid(text: str, socket: str) -> int | None:
    """``ss -Hxlp`` output -> the pid listening on ``socket`` (the path is the fifth field), or None."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == socket:
            found = re.search(r"pid=(\d+)", line)
            return int(found.group(1)) if found else None
    return None


def log_tail(host: Host, log: str) -> str:
    """The app's last error line from its log (or its last line), for a one-line message."""
    out = host.run(["sh", "-c", '[ ! -r "$1" ] || tail -n 40 "$1"', "sh", log], check=False).stdout
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line]
    return (errors or lines or ["the log is empty"])[-1]
