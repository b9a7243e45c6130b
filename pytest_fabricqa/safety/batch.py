"""The data-safety guard's probe in one command per host, the hosts in parallel.

:func:`pytest_fabricqa.safety.guard` decides from read-only evidence gathered one command at a time (readlink,
stat, sysfs, the ASM header reads, blkid, wipefs, mountinfo, swaps, findmnt, lsblk): about eleven commands per
device, 23 for the first write point of a two-initiator lab. Here one fixed shell script per host runs exactly
those commands for all of the host's devices and prints each one's argv, exit code, stdout and stderr, framed by
a random marker; :class:`Prefetched` then answers the guard's own commands from that record. The guard's logic
is not copied: a command the script did not foresee (the guard changed) simply runs for real, and
``Prefetched.misses`` says so (a unit test keeps misses at zero).
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pytest_fabricqa.safety.signatures import _READ_SCRIPT, _SYSFS_SCRIPT, DeviceEvidence, DeviceRefused, guard
from pytest_fabricqa.transport.base import CommandError, CommandResult, Host
from pytest_fabricqa.transport.fanout import GroupError, each

# $1 marker, $2 the sysfs script, $3 the header-read script, then the devices, "--", the allow-list entries.
# probe() follows safety._probe_contents for the device and then each partition: block 0, then AU 1's backup
# header for 1-64 MiB AUs that fit (when block 0 holds an intact ASM header the guard reads only the backup its
# geometry names, a command not foreseen here: it then runs for real, on a device about to be refused anyway).
_BATCH_SCRIPT = """mark=$1; sysfs=$2; reads=$3; shift 3
t=$(mktemp -d) || exit 125
trap 'rm -rf "$t"' EXIT
step() {
  "$@" >"$t/o" 2>"$t/e"; rc=$?
  printf '@@%s %s\\n' "$mark" "$rc"; printf '%s\\0' "$@"; printf '@@%s =\\n' "$mark"
  cat "$t/o"; printf '\\n@@%s -\\n' "$mark"; cat "$t/e"; printf '\\n@@%s .\\n' "$mark"
  return $rc
}
probe() {
  step sh -c "$reads" sh "$1" 0
  skips=
  for mib in 1 2 4 8 16 32 64; do
    au=$((mib * 1048576)); off=$((au + (au / 4096 - 2) * 4096))
    if [ -z "$2" ] || [ $((off + 4096)) -le "$2" ]; then skips="$skips $((off / 256))"; fi
  done
  # $skips unquoted on purpose: one argument per offset.
  [ -z "$skips" ] || step sh -c "$reads" sh "$1" $skips
  step blkid -p -o export -- "$1"
  step wipefs --no-act --json -- "$1"
}
common=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  dev=$1; shift
  step readlink -e -- "$dev" || continue
  path=$(cat "$t/o")
  [ -n "$path" ] || continue
  name=${path##*/}
  step stat -L -c '%F %s' -- "$path" || continue
  kind=$(cat "$t/o"); ftype=${kind% *}; fsize=${kind##* }
  size=
  : >"$t/sysfs"
  case $ftype in
    "block special file")
      case $name in
        ''|*[!A-Za-z0-9._:+@-]*) ;;
        *) step sh -c "$sysfs" sh "$name"
           cp "$t/o" "$t/sysfs"
           s=$(awk -v n="$name" '$1 == "size" && $2 == n { print $3; exit }' "$t/sysfs")
           case $s in ''|*[!0-9]*) ;; *) size=$((s * 512)) ;; esac ;;
      esac ;;
    "regular file") case $fsize in ''|*[!0-9]*) ;; *) size=$fsize ;; esac ;;
    *) continue ;;
  esac
  probe "$path" "$size"
  for part in $(awk '$1 == "partition" { print $2 }' "$t/sysfs"); do
    case $part in ''|*[!A-Za-z0-9._:+@-]*) continue ;; esac
    s=$(awk -v n="$part" '$1 == "size" && $2 == n { print $3; exit }' "$t/sysfs")
    psize=
    case $s in ''|*[!0-9]*) ;; *) psize=$((s * 512)) ;; esac
    probe "/dev/$part" "$psize"
  done
  if [ -z "$common" ]; then
    common=1
    step cat /proc/self/mountinfo
    step cat /proc/swaps
    if step findmnt -n -o SOURCE /; then
      root=$(cat "$t/o"); root=${root%%\\[*}
      case $root in /dev/*) step lsblk -n -r -s -o KNAME "$root" ;; esac
    fi
  fi
done
[ "${1:-}" = "--" ] && shift
for entry in "$@"; do step readlink -e -- "$entry"; done
exit 0
"""


def batch_argv(marker: str, devices: Sequence[str], allowed: Collection[str]) -> list[str]:
    """The one command that runs every probe the guard needs for ``devices`` (and resolves ``allowed``)."""
    return ["sh", "-c", _BATCH_SCRIPT, "sh", marker, _SYSFS_SCRIPT, _READ_SCRIPT, *devices, "--", *sorted(allowed)]


def parse_batch(stdout: str, marker: str, host: str) -> dict[tuple[str, ...], CommandResult]:
    """The batch script's record: argv -> what that command did (the first time it ran)."""
    head = f"@@{marker} "
    argv_end_mark, out_end, err_end = f"\0@@{marker} =\n", f"\n@@{marker} -\n", f"\n@@{marker} .\n"
    results: dict[tuple[str, ...], CommandResult] = {}
    rest = stdout
    while True:
        start = rest.find(head)
        if start < 0:
            return results
        line_end = rest.find("\n", start)
        rc_text = rest[start + len(head) : line_end]
        argv_end = rest.find(argv_end_mark, line_end + 1)
        raw_argv = rest[line_end + 1 : argv_end + 1]
        out_stop = rest.find(out_end, argv_end + len(argv_end_mark) - 1)
        err_stop = rest.find(err_end, out_stop + len(out_end))
        if line_end < 0 or argv_end < 0 or out_stop < 0 or err_stop < 0 or not rc_text.strip().isdigit():
            return results  # a cut-off record: the guard runs what is missing for real
        argv = tuple(raw_argv.split("\0")[:-1])
        result = CommandResult(
            host,
            argv,
            int(rc_text),
            rest[argv_end + len(argv_end_mark) : out_stop],
            rest[out_stop + len(out_end) : err_stop],
        )
        results.setdefault(argv, result)
        rest = rest[err_stop + len(err_end) :]


class Prefetched:
    """A host whose commands are answered from a batch record when it has them, else run for real."""

    def __init__(self, host: Host, record: Mapping[tuple[str, ...], CommandResult]) -> None:
        self.host = host
        self.name = host.name
        self.record = dict(record)
        self.misses: list[tuple[str, ...]] = []

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """The recorded result of ``argv``, or the host's own."""
        found = self.record.get(tuple(argv)) if stdin is None else None
        if found is None:
            self.misses.append(tuple(argv))
            return self.host.run(argv, check=check, timeout=timeout, stdin=stdin)
        if check and not found.ok:
            raise CommandError(found)
        return found

    def close(self) -> None:
        """Nothing of its own to release."""


@dataclass(frozen=True)
class GuardRequest:
    """One device to clear before a write job: its path on the host, the lab's allow-list and allow key."""

    device: str
    allowed: tuple[str, ...] = ()
    allow_key: str | None = None


def prefetch(host: Host, requests: Sequence[GuardRequest], *, timeout: float = 120.0) -> Prefetched:
    """Run the batch probe for ``requests`` on ``host`` (one command) and wrap the host with its record."""
    marker = secrets.token_hex(8)
    allowed = {entry for r in requests for entry in r.allowed}
    result = host.run(batch_argv(marker, [r.device for r in requests], allowed), check=False, timeout=timeout)
    return Prefetched(host, parse_batch(result.stdout, marker, host.name) if result.ok else {})


def guard_host(host: Host, requests: Sequence[GuardRequest], *, timeout: float = 120.0) -> list[DeviceEvidence]:
    """:func:`safety.guard` for every request on one host, from one batch probe; raises the first refusal."""
    prefetched = prefetch(host, requests, timeout=timeout)
    return [guard(prefetched, r.device, r.allowed, allow_key=r.allow_key) for r in requests]


def guard_hosts(
    hosts: Mapping[str, Host], requests: Mapping[str, Sequence[GuardRequest]]
) -> dict[str, list[DeviceEvidence]]:
    """Every host's requests at once (one command per host, hosts in parallel). Raises :class:`DeviceRefused`
    (every refusal in one message when several hosts refuse) after all hosts finished, or the GroupError."""
    wanted = [hosts[name] for name in requests if requests[name]]
    try:
        results = each(wanted, lambda host: guard_host(host, requests[host.name]))
    except GroupError as exc:
        refused = [e for e in exc.failed.values() if isinstance(e, DeviceRefused)]
        if refused and len(refused) == len(exc.failed):
            raise refused[0] if len(refused) == 1 else DevicesRefused(refused) from None
        raise
    return {name: value for name, value in results.items() if isinstance(value, list)}


class DevicesRefused(DeviceRefused):
    """Several hosts refused a device: every refusal, one paragraph each (``refusal`` is the first)."""

    def __init__(self, refused: Sequence[DeviceRefused]) -> None:
        self.refusals = tuple(r.refusal for r in refused)
        self.refusal = self.refusals[0]
        Exception.__init__(self, "\n".join(str(r) for r in refused))
