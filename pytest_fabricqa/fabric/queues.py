"""The queue limits that shape the figures, set from the lab file and read back from the hosts once per fabric.

A point of a QD x jobs sweep only means what it says when the fabric let that many I/Os through: open-iscsi
admits ``node.session.queue_depth`` commands per LUN and ``node.session.cmds_max`` per session (defaults 32 and
128: seed 002's "iSCSI peaks at QD 32" may be that default); LIO grants each initiator a command window of
``default_cmdsn_depth`` (64 by default); NVMe-oF has ``nr_io_queues`` I/O queues of ``queue_size`` entries.
What the hosts report is recorded with every case (``Case.queues``), whatever the lab asked for.

Values are read, one command per host, as:

- NVMe-oF initiator: ``/sys/class/nvme/nvmeX/queue_count`` (I/O queues + the admin queue) and ``sqsize``
  (0-based: queue_size - 1) of each controller connected to the exported subsystems (:data:`NVME_SCRIPT`);
- open-iscsi initiator: the node record, ``iscsiadm -m node -T IQN -p PORTAL -I IFACE`` (``key = value`` lines);
- LIO target: ``tpgt_1/attrib/default_cmdsn_depth`` and each explicit ACL's ``cmdsn_depth`` in configfs
  (:data:`LIO_SCRIPT`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

#: open-iscsi's node settings this module sets and records (iscsid.conf names).
ISCSI_KEYS: tuple[str, ...] = ("node.session.queue_depth", "node.session.cmds_max")

# Arguments: the subsystem NQNs. One line per matching controller: name, queue_count, sqsize.
NVME_SCRIPT = r"""
for c in /sys/class/nvme/nvme*; do
    [ -r "$c/subsysnqn" ] || continue
    nqn=$(cat "$c/subsysnqn")
    for want in "$@"; do
        [ "$nqn" = "$want" ] || continue
        printf '%s %s %s\n' "${c##*/}" "$(cat "$c/queue_count" 2>/dev/null || echo -)" \
            "$(cat "$c/sqsize" 2>/dev/null || echo -)"
    done
done
"""

# Arguments: the target IQN. "default_cmdsn_depth N", then "acl IQN N" per explicit ACL.
LIO_SCRIPT = r"""
t=/sys/kernel/config/target/iscsi/$1/tpgt_1
[ -r "$t/attrib/default_cmdsn_depth" ] && printf 'default_cmdsn_depth %s\n' "$(cat "$t/attrib/default_cmdsn_depth")"
for a in "$t"/acls/*; do
    [ -r "$a/cmdsn_depth" ] && printf 'acl %s %s\n' "${a##*/}" "$(cat "$a/cmdsn_depth")"
done
exit 0
"""


def parse_nvme(text: str) -> dict[str, int]:
    """:data:`NVME_SCRIPT`'s lines as ``nr_io_queues`` and ``queue_size``.

    With several controllers (one per subsystem) that agree, one pair; where they differ, one pair per controller
    (``nvme1.nr_io_queues``), so no figure hides a controller that got fewer queues than its siblings.
    """
    per_controller: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        name, queue_count, sqsize = parts
        values: dict[str, int] = {}
        if queue_count.isdigit():
            values["nr_io_queues"] = int(queue_count) - 1  # queue_count counts the admin queue too
        if sqsize.isdigit():
            values["queue_size"] = int(sqsize) + 1  # sqsize is 0-based
        per_controller[name] = values
    distinct = {tuple(sorted(v.items())) for v in per_controller.values()}
    if len(distinct) == 1:
        return dict(next(iter(per_controller.values())))
    return {f"{name}.{key}": value for name, values in per_controller.items() for key, value in values.items()}


def parse_iscsi_node(text: str) -> dict[str, int]:
    """The :data:`ISCSI_KEYS` of an ``iscsiadm -m node`` record (``key = value`` lines)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() in ISCSI_KEYS and value.strip().isdigit():
            found[key.strip()] = int(value.strip())
    return found


def parse_lio(text: str) -> dict[str, int]:
    """:data:`LIO_SCRIPT`'s lines: ``default_cmdsn_depth`` and ``cmdsn_depth[IQN]`` per explicit ACL."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "default_cmdsn_depth" and parts[1].isdigit():
            found["default_cmdsn_depth"] = int(parts[1])
        elif len(parts) == 3 and parts[0] == "acl" and parts[2].isdigit():
            found[f"cmdsn_depth[{parts[1]}]"] = int(parts[2])
    return found


def read_queues(
    initiators: Sequence[Host],
    target: Host | None,
    *,
    protocol: str,
    subsystems: Sequence[str],
    portal: str = "",
    iface: str = "",
    target_kind: str = "",
) -> dict[str, dict[str, int]]:
    """The queue settings of every host of a connected fabric, read in parallel: host name -> setting -> value.

    A host whose values cannot be read (a command that failed, a file the kernel does not have) is left out
    rather than given a guessed value; the report then shows no settings for it.
    """

    def initiator(host: Host) -> dict[str, int]:
        if protocol.startswith("nvme"):
            result = host.run(["sh", "-c", NVME_SCRIPT, "sh", *subsystems], check=False)
            return parse_nvme(result.stdout) if result.ok else {}
        result = host.run(["iscsiadm", "-m", "node", "-T", subsystems[0], "-p", portal, "-I", iface], check=False)
        return parse_iscsi_node(result.stdout) if result.ok else {}

    def lio(host: Host) -> dict[str, int]:
        result = host.run(["sh", "-c", LIO_SCRIPT, "sh", subsystems[0]], check=False)
        return parse_lio(result.stdout) if result.ok else {}

    found: dict[str, dict[str, int]] = {}
    for name, value in each(initiators, initiator, check=False).items():
        if isinstance(value, dict) and value:
            found[name] = value
    if target is not None and target_kind == "lio" and protocol in ("iscsi", "iser"):
        values = lio(target)
        if values:
            found.setdefault(target.name, {}).update(values)
    if target is not None and target_kind == "scst" and protocol in ("iscsi", "iser"):
        # SCST's per-session command window (scst.queued_commands; its 32 when unset), as the target holds it.
        path = f"/sys/kernel/scst_tgt/targets/iscsi/{subsystems[0]}/QueuedCommands"
        result = target.run(["sh", "-c", 'head -n 1 "$1"', "sh", path], check=False)
        if result.ok and result.stdout.strip().isdigit():
            found.setdefault(target.name, {})["QueuedCommands"] = int(result.stdout.strip())
    return found
