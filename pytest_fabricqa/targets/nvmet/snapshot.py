"""What is on an nvmet target: its configfs tree read in one round trip, and the scripts that remove one object."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_fabricqa.targets.nvmet.plan import NvmetPort
from pytest_fabricqa.transport.base import Host

# Everything this module needs to know about the nvmet tree, in one round trip. Fixed text; no arguments.
SNAPSHOT_SCRIPT = r"""
root=/sys/kernel/config/nvmet
[ -d "$root" ] || { echo NOCONFIGFS; exit 0; }
cd "$root" || exit 1
for s in subsystems/*; do
  [ -d "$s" ] || continue
  q=${s#subsystems/}
  printf 'S\t%s\n' "$q"
  for f in "$s"/attr_*; do
    [ -f "$f" ] && printf 'SA\t%s\t%s\t%s\n' "$q" "${f##*/attr_}" "$(head -n1 "$f" 2>/dev/null)"
  done
  for n in "$s"/namespaces/*; do
    [ -d "$n" ] || continue
    printf 'N\t%s\t%s\t%s\t%s\t%s\t%s\n' "$q" "${n##*/}" "$(cat "$n/device_path")" "$(cat "$n/enable")" \
      "$(cat "$n/device_nguid" 2>/dev/null)" "$(cat "$n/device_uuid" 2>/dev/null)"
  done
  for h in "$s"/allowed_hosts/*; do [ -L "$h" ] && printf 'SH\t%s\t%s\n' "$q" "${h##*/}"; done
done
for p in ports/*; do
  [ -d "$p" ] || continue
  i=${p#ports/}
  printf 'P\t%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$(cat "$p/addr_trtype")" "$(cat "$p/addr_adrfam")" \
    "$(cat "$p/addr_traddr")" "$(cat "$p/addr_trsvcid")" "$(cat "$p/addr_treq" 2>/dev/null)"
  for l in "$p"/subsystems/*; do [ -L "$l" ] && printf 'PS\t%s\t%s\n' "$i" "${l##*/}"; done
  for r in "$p"/referrals/*; do [ -d "$r" ] && printf 'PR\t%s\t%s\n' "$i" "${r##*/}"; done
done
for h in hosts/*; do [ -d "$h" ] && printf 'H\t%s\n' "${h#hosts/}"; done
exit 0
"""

# Remove one subsystem whatever state it is in: port links, namespaces (disabled first), allowed hosts.
REMOVE_SUBSYSTEM_SCRIPT = r"""
set -e
s=/sys/kernel/config/nvmet/subsystems/$1
[ -d "$s" ] || exit 0
for l in /sys/kernel/config/nvmet/ports/*/subsystems/"$1"; do [ ! -L "$l" ] || rm -f "$l"; done
for n in "$s"/namespaces/*; do
  [ -d "$n" ] || continue
  echo 0 > "$n/enable"
  rmdir "$n"
done
for h in "$s"/allowed_hosts/*; do [ ! -L "$h" ] || rm -f "$h"; done
rmdir "$s"
"""

REMOVE_PORT_SCRIPT = r"""
set -e
p=/sys/kernel/config/nvmet/ports/$1
[ -d "$p" ] || exit 0
for l in "$p"/subsystems/*; do [ ! -L "$l" ] || rm -f "$l"; done
for r in "$p"/referrals/*; do [ ! -d "$r" ] || rmdir "$r"; done
rmdir "$p"
"""


@dataclass
class NvmetSnapshot:
    """The nvmet configfs tree as :data:`SNAPSHOT_SCRIPT` printed it."""

    loaded: bool = True
    subsystems: dict[str, dict[str, Any]] = field(default_factory=dict)
    ports: dict[int, dict[str, Any]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)

    def model_of(self, nqn: str) -> str:
        """The subsystem's ``attr_model`` ('' when unknown)."""
        return str(self.subsystems.get(nqn, {}).get("attr", {}).get("model", ""))

    def to_saved_config(self) -> dict[str, Any]:
        """What is on the target, in nvmetcli's saved JSON shape."""
        subsystems = []
        for nqn, sub in self.subsystems.items():
            attr = {k: v for k, v in sub["attr"].items() if k in ("allow_any_host", "model", "serial", "version")}
            subsystems.append(
                {
                    "allowed_hosts": list(sub["allowed_hosts"]),
                    "attr": attr,
                    "namespaces": [
                        {
                            "device": {"nguid": ns["nguid"], "path": ns["path"], "uuid": ns["uuid"]},
                            "enable": ns["enable"],
                            "nsid": nsid,
                        }
                        for nsid, ns in sorted(sub["namespaces"].items())
                    ],
                    "nqn": nqn,
                }
            )
        ports = [
            {
                "addr": {k: port[k] for k in ("adrfam", "traddr", "treq", "trsvcid", "trtype")},
                "portid": portid,
                "referrals": list(port["referrals"]),
                "subsystems": list(port["subsystems"]),
            }
            for portid, port in sorted(self.ports.items())
        ]
        return {"hosts": [{"nqn": h} for h in self.hosts], "ports": ports, "subsystems": subsystems}


def parse_snapshot(text: str) -> NvmetSnapshot:
    """Parse :data:`SNAPSHOT_SCRIPT` output."""
    snap = NvmetSnapshot()
    for line in text.splitlines():
        parts = line.split("\t")
        tag = parts[0]
        if tag == "NOCONFIGFS":
            snap.loaded = False
        elif tag == "S":
            snap.subsystems[parts[1]] = {"attr": {}, "namespaces": {}, "allowed_hosts": []}
        elif tag == "SA" and parts[1] in snap.subsystems:
            snap.subsystems[parts[1]]["attr"][parts[2]] = parts[3] if len(parts) > 3 else ""
        elif tag == "N" and parts[1] in snap.subsystems:
            nqn, nsid, path, enable, nguid, uuid = (parts + [""] * 7)[1:7]
            snap.subsystems[nqn]["namespaces"][int(nsid)] = {
                "path": path,
                "enable": int(enable or 0),
                "nguid": nguid,
                "uuid": uuid,
            }
        elif tag == "SH" and parts[1] in snap.subsystems:
            snap.subsystems[parts[1]]["allowed_hosts"].append(parts[2])
        elif tag == "P":
            portid, trtype, adrfam, traddr, trsvcid, treq = (parts + [""] * 7)[1:7]
            snap.ports[int(portid)] = {
                "trtype": trtype,
                "adrfam": adrfam,
                "traddr": traddr,
                "trsvcid": trsvcid,
                "treq": treq,
                "subsystems": [],
                "referrals": [],
            }
        elif tag == "PS" and int(parts[1]) in snap.ports:
            snap.ports[int(parts[1])]["subsystems"].append(parts[2])
        elif tag == "PR" and int(parts[1]) in snap.ports:
            snap.ports[int(parts[1])]["referrals"].append(parts[2])
        elif tag == "H":
            snap.hosts.append(parts[1])
    return snap


def port_conflict(snap: NvmetSnapshot, port: NvmetPort, ours: frozenset[int] = frozenset()) -> int | None:
    """The ID of an existing port (not in ``ours``) already serving ``port``'s transport address, or None."""
    wildcard = {"0.0.0.0", "::", port.traddr}
    for portid, existing in snap.ports.items():
        if portid in ours:
            continue
        if (
            existing["trtype"] == port.trtype
            and existing["traddr"] in wildcard
            and str(existing["trsvcid"]) == str(port.trsvcid)
        ):
            return portid
    return None


def remove_subsystem(host: Host, nqn: str) -> None:
    """Remove subsystem ``nqn`` with its namespaces, allowed-host links and port links (idempotent)."""
    host.run(["sh", "-c", REMOVE_SUBSYSTEM_SCRIPT, "sh", nqn])


def remove_port(host: Host, portid: int) -> None:
    """Remove nvmet port ``portid`` with its subsystem links and referrals (idempotent)."""
    host.run(["sh", "-c", REMOVE_PORT_SCRIPT, "sh", str(portid)])
