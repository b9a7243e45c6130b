"""The identity a namespace or LUN shows its initiators (the WWID), and whether multipath could use it.

Multipath (dm-multipath for SCSI, the kernel's native NVMe multipath) takes two block devices with the same WWID
for two paths of one unit, and two with different WWIDs for two units. So every exported unit needs a WWID that
is the same on every path and every initiator, and no two units may share one: two units with one WWID would
be merged into one device whose paths lead to different disks, and a unit without one is left out of
multipath altogether (LIO configured through configfs alone reports no unit serial and no device
identification page: its LUNs show no WWID).

The kernel's own WWID is read, the one multipath reads too: ``/sys/block/NAME/wwid`` for an NVMe namespace
(``eui.``/``uuid.``/``nvme.`` from the namespace's NGUID, UUID or serial), ``/sys/block/NAME/device/wwid`` for a
SCSI disk (``naa.``/``t10.`` from VPD page 0x83).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pytest_fabricqa.initiators.connect import FabricDevice
from pytest_fabricqa.transport.base import Host

# Fixed text: for each device argument, the device and its WWID (empty when the kernel shows none), tab-separated.
# A dm-multipath map shows its paths' WWID: the one all of them show, or every distinct one comma-separated (paths
# of different units in one map, which wwid_problems then names).
WWID_SCRIPT = r"""
for d in "$@"; do
  n=$(basename "$(readlink -f "$d")")
  w=$(cat "/sys/block/$n/wwid" 2>/dev/null || cat "/sys/block/$n/device/wwid" 2>/dev/null || true)
  if [ -z "$w" ] && [ -d "/sys/block/$n/dm" ]; then
    w=$(for s in /sys/block/"$n"/slaves/*; do cat "$s/device/wwid" 2>/dev/null; done | sort -u | paste -sd, -)
  fi
  printf '%s\t%s\n' "$d" "$w"
done
"""


def parse_wwids(text: str) -> dict[str, str]:
    """Device path -> WWID (stripped; empty when the kernel shows none) from :data:`WWID_SCRIPT`'s output."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        path, _, wwid = line.partition("\t")
        if path:
            found[path] = wwid.strip()
    return found


def read_wwids(host: Host, paths: Iterable[str]) -> dict[str, str]:
    """The WWID of each of ``paths`` on ``host``, in one command."""
    paths = list(paths)
    if not paths:
        return {}
    return parse_wwids(host.run(["sh", "-c", WWID_SCRIPT, "sh", *paths]).stdout)


def _unit(device: FabricDevice) -> str:
    kind = "LUN" if device.subsystem.startswith("iqn.") else "namespace"
    return f"{device.subsystem} {kind} {device.address} ({device.backing})"


def wwid_problems(devices: Iterable[FabricDevice], wwids: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Every reason multipath could not tell the units apart or group their paths, one sentence each.

    ``wwids``: initiator -> device path -> WWID (:func:`read_wwids`). A unit must show a WWID, the same one on
    every initiator, and no other unit may show it."""
    problems: list[str] = []
    by_unit: dict[tuple[str, int], dict[str, str]] = {}
    names: dict[tuple[str, int], str] = {}
    for device in devices:
        key = (device.subsystem, device.address)
        names[key] = _unit(device)
        wwid = wwids.get(device.initiator, {}).get(device.path, "")
        if not wwid:
            problems.append(
                f"{device.initiator}: {device.path}, {names[key]}, shows no WWID: multipath would leave it out (does "
                "the target report a unit serial or namespace ID?)"
            )
            continue
        by_unit.setdefault(key, {})[device.initiator] = wwid
    owners: dict[str, list[tuple[str, int]]] = {}
    for key, seen in by_unit.items():
        distinct = sorted(set(seen.values()))
        if len(distinct) > 1:
            shown = "; ".join(f"{host} {wwid}" for host, wwid in sorted(seen.items()))
            problems.append(
                f"{names[key]} shows a different WWID on each initiator ({shown}): multipath would not group its paths"
            )
        for wwid in distinct:
            owners.setdefault(wwid, []).append(key)
    for wwid, keys in owners.items():
        if len(keys) > 1:
            problems.append(
                f"{' and '.join(names[k] for k in sorted(keys))} share the WWID {wwid}: multipath would take them for "
                "one unit"
            )
    return problems
