"""nvme-cli: discover, connect with the lab's host NQN, find each namespace's block device, disconnect.

Devices are found in sysfs by subsystem NQN and NSID. With native NVMe multipath a second path (an rdma connect
to a subsystem already connected over tcp) joins the existing ``/dev/nvmeXnY`` head instead of making a new
device, so the head under ``/sys/class/nvme-subsystem/*/`` is what counts; without multipath the namespace sits
under its controller. Kernels before 4.15 (RHEL/Oracle Linux 7's 3.10 and 4.1-4.14 UEK) have no
``/sys/class/nvme-subsystem``: there the namespace is a child of its controller, ``/sys/class/nvme/nvmeX/nvmeXnY``,
and takes the controller's ``subsysnqn``.

nvme-cli before 1.14 has no ``-o json`` for ``discover``; its option parser refuses ``-o`` and prints usage.
:func:`discover` then asks again without it and reads the text discovery log (:func:`parse_discovery_text`).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from pytest_fabricqa.transport.base import CommandError, Host

# Controllers and namespaces, one line each. Fixed text; $1 is an optional root the /sys paths hang under (empty on
# a host; the unit tests point it at a copied sysfs tree of an older kernel).
SYSFS_SCRIPT = r"""
r=${1:-}
for c in "$r"/sys/class/nvme/nvme*; do
  [ -d "$c" ] || continue
  printf 'C\t%s\t%s\t%s\t%s\t%s\n' "${c##*/}" "$(cat "$c/subsysnqn" 2>/dev/null)" "$(cat "$c/transport" 2>/dev/null)" \
    "$(cat "$c/state" 2>/dev/null)" "$(tr '\n' ' ' < "$c/address" 2>/dev/null)"
done
ns() {
  n=${2##*/}
  case "$n" in nvme*c*n*) return ;; esac
  [ -e "$r/sys/block/$n" ] || return
  printf 'N\t%s\t%s\t%s\t%s\t%s\n' "$n" "$1" "$(cat "$2/nsid" 2>/dev/null)" "$(cat "$r/sys/block/$n/size")" \
    "$(cat "$r/sys/block/$n/queue/logical_block_size")"
}
if [ -d "$r/sys/class/nvme-subsystem" ]; then
  for s in "$r"/sys/class/nvme-subsystem/nvme-subsys*; do
    [ -d "$s" ] || continue
    q=$(cat "$s/subsysnqn")
    for d in "$s"/nvme[0-9]*n[0-9]* "$s"/nvme[0-9]*/nvme[0-9]*n[0-9]*; do
      [ -d "$d" ] && ns "$q" "$d"
    done
  done
else
  # Before Linux 4.15: no subsystem class; each namespace sits under its controller.
  for c in "$r"/sys/class/nvme/nvme*; do
    [ -d "$c" ] || continue
    q=$(cat "$c/subsysnqn" 2>/dev/null)
    for d in "$c"/nvme[0-9]*n[0-9]*; do
      [ -d "$d" ] && ns "$q" "$d"
    done
  done
fi
exit 0
"""


@dataclass(frozen=True)
class DiscoveryRecord:
    """One discovery log entry: a subsystem reachable at a transport address."""

    subnqn: str
    trtype: str
    traddr: str
    trsvcid: str
    subtype: str
    portid: int | None = None


@dataclass(frozen=True)
class Controller:
    """An NVMe controller on the initiator (``/sys/class/nvme/nvmeX``)."""

    name: str
    subsysnqn: str
    transport: str
    state: str
    address: str


@dataclass(frozen=True)
class NamespaceDevice:
    """A namespace's block device on the initiator, found by subsystem NQN and NSID."""

    name: str  # nvme1n1
    subsysnqn: str
    nsid: int
    size_bytes: int
    logical_block_size: int

    @property
    def path(self) -> str:
        """The device node."""
        return f"/dev/{self.name}"


@dataclass(frozen=True)
class ConnectOptions:
    """Queue options passed to ``nvme connect`` when set (the kernel's defaults otherwise)."""

    nr_io_queues: int | None = None
    queue_size: int | None = None
    ctrl_loss_tmo: int | None = None
    keep_alive_tmo: int | None = None


def parse_discovery(text: str) -> list[DiscoveryRecord]:
    """``nvme discover -o json`` output -> the NVM subsystems it lists (discovery subsystems left out)."""
    data = json.loads(text) if text.strip() else {}
    records = data.get("records", []) if isinstance(data, dict) else []
    out = []
    for rec in records:
        subtype = str(rec.get("subtype", ""))
        if "discovery" in subtype:
            continue
        portid = rec.get("portid")
        out.append(
            DiscoveryRecord(
                str(rec.get("subnqn", "")).strip(),
                str(rec.get("trtype", "")).strip(),
                str(rec.get("traddr", "")).strip(),
                str(rec.get("trsvcid", "")).strip(),
                subtype,
                int(portid) if isinstance(portid, int | str) and str(portid).isdigit() else None,
            )
        )
    return out


# nvme-cli 1.x prints each discovery log entry as "=====Discovery Log Entry N======" and "key: value" lines.
_TEXT_ENTRY = re.compile(r"^=+\s*Discovery Log Entry\s+\d+\s*=+$")
_TEXT_FIELD = re.compile(r"^(?P<key>[a-z_]+):\s*(?P<value>.*)$")
# glibc getopt's words when nvme-cli before 1.14 meets `-o json` ("nvme: unrecognized option '-o'").
_REFUSED_OPTION = re.compile(r"(unrecognized|invalid) option")


def parse_discovery_text(text: str) -> list[DiscoveryRecord]:
    """nvme-cli 1.x ``nvme discover`` text output -> the NVM subsystems it lists (discovery subsystems left out)."""
    entries: list[dict[str, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if _TEXT_ENTRY.match(stripped):
            entries.append({})
            continue
        match = _TEXT_FIELD.match(stripped)
        if match and entries:
            entries[-1].setdefault(match["key"], match["value"].strip())
    out = []
    for entry in entries:
        subtype = entry.get("subtype", "")
        if "discovery" in subtype:
            continue
        portid = entry.get("portid", "")
        out.append(
            DiscoveryRecord(
                entry.get("subnqn", ""),
                entry.get("trtype", ""),
                entry.get("traddr", ""),
                entry.get("trsvcid", ""),
                subtype,
                int(portid) if portid.isdigit() else None,
            )
        )
    return out


def json_refused(stderr: str) -> bool:
    """True when nvme-cli refused ``-o json`` as an unknown option (nvme-cli before 1.14)."""
    return bool(_REFUSED_OPTION.search(stderr))


def traddr(address: str) -> str:
    """The target address in a controller's sysfs ``address`` (``traddr=10.10.10.19,trsvcid=4420,src_addr=...``,
    maybe newline- or space-ended); empty when it names none."""
    fields = dict(part.partition("=")[::2] for part in address.replace(" ", ",").split(",") if "=" in part)
    return fields.get("traddr", "").strip()


def parse_sysfs(text: str) -> tuple[list[Controller], list[NamespaceDevice]]:
    """:data:`SYSFS_SCRIPT` output -> controllers and namespace devices."""
    controllers: list[Controller] = []
    namespaces: dict[str, NamespaceDevice] = {}
    for line in text.splitlines():
        parts = line.split("\t") + [""] * 6
        if parts[0] == "C":
            controllers.append(Controller(parts[1], parts[2], parts[3], parts[4], parts[5].strip()))
        elif parts[0] == "N" and parts[3].strip().isdigit() and parts[4].strip().isdigit():
            lbs = int(parts[5]) if parts[5].strip().isdigit() else 512
            namespaces[parts[1]] = NamespaceDevice(parts[1], parts[2], int(parts[3]), int(parts[4]) * 512, lbs)
    return controllers, list(namespaces.values())


def discover(host: Host, trtype: str, address: str, port: int, hostnqn: str | None = None) -> list[DiscoveryRecord]:
    """Ask the portal's discovery controller which subsystems ``host`` may reach."""
    argv = ["nvme", "discover", "-t", trtype, "-a", address, "-s", str(port)]
    if hostnqn:
        argv.append(f"--hostnqn={hostnqn}")
    result = host.run([*argv, "-o", "json"], check=False, timeout=120)
    # nvme-cli 1.x refuses -o with its usage text and exits with whatever errno held, often 0: read stderr.
    if json_refused(result.stderr):
        return parse_discovery_text(host.run(argv, timeout=120).stdout)
    if not result.ok:
        raise CommandError(result, f"discovery at {address}:{port} over {trtype} failed")
    return parse_discovery(result.stdout)


def connect(
    host: Host,
    trtype: str,
    address: str,
    port: int,
    nqn: str,
    hostnqn: str | None = None,
    options: ConnectOptions | None = None,
    host_traddr: str | None = None,
) -> None:
    """Connect ``host`` to subsystem ``nqn`` at the portal (from its address ``host_traddr`` when given: the
    path's own port)."""
    argv = ["nvme", "connect", "-t", trtype, "-a", address, "-s", str(port), "-n", nqn]
    if host_traddr:
        argv.append(f"--host-traddr={host_traddr}")
    if hostnqn:
        argv.append(f"--hostnqn={hostnqn}")
    opts = options or ConnectOptions()
    if opts.nr_io_queues:
        argv.append(f"--nr-io-queues={opts.nr_io_queues}")
    if opts.queue_size:
        argv.append(f"--queue-size={opts.queue_size}")
    if opts.ctrl_loss_tmo is not None:
        argv.append(f"--ctrl-loss-tmo={opts.ctrl_loss_tmo}")
    if opts.keep_alive_tmo:
        argv.append(f"--keep-alive-tmo={opts.keep_alive_tmo}")
    host.run(argv, timeout=120)


# Fixed text. $1: the sysfs root (/sys on a host); $2: a subsystem NQN; $3: the policy. Prints the subsystem's name,
# its policy before and after the write; exit 3 when no subsystem has the NQN, 4 when the kernel refused the write.
IOPOLICY_SCRIPT = r"""
for d in "$1"/class/nvme-subsystem/nvme-subsys*; do
  [ "$(cat "$d/subsysnqn" 2>/dev/null)" = "$2" ] || continue
  before=$(cat "$d/iopolicy")
  echo "$3" > "$d/iopolicy" || exit 4
  printf '%s %s %s\n' "${d##*/}" "$before" "$(cat "$d/iopolicy")"
  exit 0
done
exit 3
"""


def set_iopolicy(host: Host, nqn: str, policy: str, sysfs: str = "/sys") -> tuple[str, str]:
    """Write ``policy`` to the native-multipath I/O policy of subsystem ``nqn`` on ``host`` and read it back;
    the subsystem's name and the policy it had. :class:`CommandError` when no subsystem has the NQN, the kernel
    refuses the value, or it reads back otherwise."""
    result = host.run(["sh", "-c", IOPOLICY_SCRIPT, "sh", sysfs, nqn, policy], check=False)
    if result.exit_code == 3:
        raise CommandError(result, f"no NVMe subsystem {nqn} in {sysfs}/class/nvme-subsystem")
    if not result.ok:
        raise CommandError(result, f"the kernel refused iopolicy {policy}")
    name, before, after = [*result.stdout.split(), "", "", ""][:3]
    if after != policy:
        raise CommandError(result, f"{name}/iopolicy reads {after or 'nothing'} after writing {policy}")
    return name, before


def disconnect(host: Host, nqn: str) -> None:
    """Disconnect every controller of subsystem ``nqn`` on ``host`` (nothing to do is not an error)."""
    result = host.run(["nvme", "disconnect", "-n", nqn], check=False, timeout=120)
    if not result.ok and controllers_of(host, nqn):
        raise CommandError(result, f"controllers of {nqn} are still there")


def state(host: Host) -> tuple[list[Controller], list[NamespaceDevice]]:
    """Every NVMe controller and namespace device on ``host``."""
    return parse_sysfs(host.run(["sh", "-c", SYSFS_SCRIPT]).stdout)


def controllers_of(host: Host, nqn: str) -> list[Controller]:
    """The controllers of subsystem ``nqn`` on ``host``."""
    return [c for c in state(host)[0] if c.subsysnqn == nqn]


def wait_for_namespaces(
    host: Host, wanted: list[tuple[str, int]], timeout_s: float = 60.0
) -> dict[tuple[str, int], NamespaceDevice]:
    """Poll sysfs until every (NQN, NSID) in ``wanted`` has a block device with a size; return what was found."""
    deadline = time.monotonic() + timeout_s
    found: dict[tuple[str, int], NamespaceDevice] = {}
    while True:
        _, namespaces = state(host)
        by_key = {(ns.subsysnqn, ns.nsid): ns for ns in namespaces if ns.size_bytes > 0}
        found = {key: by_key[key] for key in wanted if key in by_key}
        if len(found) == len(wanted) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)
