"""dm-multipath on an initiator: the map multipathd made of a LUN's paths, and what the plugin undoes of it.

An iSCSI or iSER LUN reached over several portals is one SCSI disk per session (``sdb``, ``sdc``: one per path);
multipathd (Debian's ``multipath-tools``) groups the disks that show the same WWID into one device-mapper map,
``/dev/mapper/<name>`` (the WWID, or ``mpathN`` with ``user_friendly_names``), which sends the I/O down a live
path and queues or fails it when none is left (``no_path_retry``). The plugin makes no map itself: it waits for
the one multipathd made of exactly the disks of the LUN (their holder with a ``mpath-`` device-mapper UUID) and
uses that. multipathd also remembers each WWID it mapped in ``/etc/multipath/wwids`` (and then maps it even over
one path): the plugin forgets at teardown the WWIDs that were not there before its login, so the host's file is
left as it was found.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_fabricqa.transport.base import Host

WWIDS_FILE = "/etc/multipath/wwids"

# Fixed text: for each disk name argument (sdb), every multipath map holding it: disk, dm node, map name.
HOLDERS_SCRIPT = r"""
for d in "$@"; do
  for h in /sys/block/"$d"/holders/*; do
    [ -e "$h/dm/uuid" ] || continue
    case $(cat "$h/dm/uuid") in mpath-*) printf '%s\t%s\t%s\n' "$d" "${h##*/}" "$(cat "$h/dm/name")" ;; esac
  done
done
exit 0
"""


@dataclass(frozen=True)
class Map:
    """A multipath map: its device-mapper node (``dm-3``), its name and the disks it holds."""

    node: str
    name: str
    disks: tuple[str, ...]

    @property
    def path(self) -> str:
        """The map's device as users name it."""
        return f"/dev/mapper/{self.name}"


def parse_holders(text: str) -> dict[str, tuple[str, str]]:
    """:data:`HOLDERS_SCRIPT` output -> disk -> (dm node, map name)."""
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and all(parts):
            found[parts[0]] = (parts[1], parts[2])
    return found


def map_of(holders: dict[str, tuple[str, str]], disks: Sequence[str]) -> Map | None:
    """The one map holding every disk of ``disks``; None while any disk is unheld or they are held apart."""
    held = {holders.get(d) for d in disks}
    if len(held) != 1 or None in held:
        return None
    node, name = next(iter(held))  # type: ignore[misc]
    return Map(node, name, tuple(disks))


def holders(host: Host, disks: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Disk -> (dm node, map name) of every multipath map holding one of ``disks`` on ``host``."""
    return parse_holders(host.run(["sh", "-c", HOLDERS_SCRIPT, "sh", *disks]).stdout)


def wait_for_map(host: Host, disks: Sequence[str], timeout_s: float) -> Map | None:
    """Poll until one multipath map holds every disk of ``disks`` (multipathd makes it on their uevents)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = map_of(holders(host, disks), disks)
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def parse_wwids_file(text: str) -> set[str]:
    """``/etc/multipath/wwids`` (lines ``/WWID/``, comments) -> the WWIDs it remembers."""
    return {line.strip().strip("/") for line in text.splitlines() if line.strip().startswith("/")}


def remembered(host: Host) -> set[str]:
    """The WWIDs multipath remembers on ``host`` (none when it has no such file)."""
    return parse_wwids_file(host.run(["sh", "-c", f"cat {WWIDS_FILE} 2>/dev/null || true"]).stdout)


def map_wwid(host: Host, node: str) -> str:
    """The WWID a map was made for (its device-mapper UUID without ``mpath-``)."""
    return host.run(["cat", f"/sys/block/{node}/dm/uuid"]).stdout.strip().removeprefix("mpath-")


def flush(host: Host, name: str) -> None:
    """Remove the map ``name`` (its paths stay); gone already is not an error. A map still open fails."""
    if host.run(["dmsetup", "info", name], check=False).ok:
        host.run(["multipath", "-f", name], timeout=120)


def forget(host: Host, wwid: str) -> None:
    """Take ``wwid`` out of multipath's remembered WWIDs (nothing to do when it is not there)."""
    if wwid in remembered(host):
        host.run(["multipath", "-w", wwid], timeout=60)
