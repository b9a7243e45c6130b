"""nvmetcli's saved configuration (the JSON ``nvmetcli save`` writes, as in seed 000), read into a plan and written back."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.lab.model import TargetModel
from pytest_fabricqa.targets.nvmet.plan import NvmetNamespace, NvmetPlan, NvmetPort, NvmetSubsystem, check_nqn


class SavedConfigError(UserError, ValueError):
    """An nvmetcli saved configuration is unreadable or invalid; the message names the file and the key."""


def load_saved_config(source: Path | str | Mapping[str, Any], model: TargetModel | None = None) -> NvmetPlan:
    """Read an nvmetcli saved configuration (``nvmetcli save`` / ``/etc/nvmet/config.json``) into a plan.

    Device paths are matched to the lab's device names through ``model.devices``; NQNs are checked against the
    NVMe naming rules here, at the edge, because a hand-edited file has not been through the lab validator.
    """
    if isinstance(source, Mapping):
        name, data = "saved config", dict(source)
    else:
        name = str(source)
        try:
            data = json.loads(Path(os.path.expanduser(str(source))).read_text())
        except OSError as exc:
            raise SavedConfigError(f"{name}: cannot read the nvmetcli saved configuration ({exc.strerror})") from None
        except ValueError as exc:
            raise SavedConfigError(f"{name}: not JSON ({exc}); give the file `nvmetcli save` wrote") from None
        if not isinstance(data, dict):
            raise SavedConfigError(f"{name}: the top level must be an object with ports, subsystems, hosts")
    by_path = {dev.path: dev_name for dev_name, dev in (model.devices.items() if model else ())}

    def fail(key: str, why: str) -> SavedConfigError:
        return SavedConfigError(f"{name}: {key}: {why}")

    hosts: list[str] = []
    for i, host in enumerate(data.get("hosts") or []):
        nqn = host.get("nqn") if isinstance(host, dict) else None
        if not isinstance(nqn, str):
            raise fail(f"hosts[{i}].nqn", "missing")
        if why := check_nqn(nqn):
            raise fail(f"hosts[{i}].nqn", why)
        hosts.append(nqn)
    subsystems: list[NvmetSubsystem] = []
    for i, sub in enumerate(data.get("subsystems") or []):
        if not isinstance(sub, dict) or not isinstance(sub.get("nqn"), str):
            raise fail(f"subsystems[{i}].nqn", "missing")
        nqn = sub["nqn"]
        if why := check_nqn(nqn):
            raise fail(f"subsystems[{i}].nqn", why)
        attr = {str(k): str(v) for k, v in (sub.get("attr") or {}).items()}
        allow_any = attr.pop("allow_any_host", "1" if not sub.get("allowed_hosts") else "0") == "1"
        namespaces = []
        for j, ns in enumerate(sub.get("namespaces") or []):
            key = f"subsystems[{i}].namespaces[{j}]"
            device = ns.get("device") or {}
            path = device.get("path")
            if not isinstance(path, str) or not path.startswith("/"):
                raise fail(f"{key}.device.path", f"{path!r} must be an absolute device path")
            try:
                nsid = int(ns["nsid"])
            except (KeyError, TypeError, ValueError):
                raise fail(f"{key}.nsid", "missing or not a number") from None
            if not 1 <= nsid <= 0xFFFFFFFE:
                raise fail(f"{key}.nsid", f"{nsid} is out of range 1..4294967294")
            backing = by_path.get(path, path)
            dev = model.devices.get(backing) if model else None
            namespaces.append(
                NvmetNamespace(
                    nsid,
                    path,
                    backing,
                    enable=int(ns.get("enable", 1)) == 1,
                    nguid=device.get("nguid") or None,
                    uuid=device.get("uuid") or None,
                    writable=dev.writable if dev else False,
                    destructive_ok=dev.destructive_ok if dev else False,
                )
            )
        allowed = tuple(str(h) for h in sub.get("allowed_hosts") or [])
        for h in allowed:
            if why := check_nqn(h):
                raise fail(f"subsystems[{i}].allowed_hosts", why)
        subsystems.append(NvmetSubsystem(nqn, tuple(namespaces), allow_any, allowed, tuple(sorted(attr.items()))))
    known = {s.nqn for s in subsystems}
    ports: list[NvmetPort] = []
    for i, port in enumerate(data.get("ports") or []):
        addr = port.get("addr") or {}
        trtype = addr.get("trtype")
        if trtype not in ("tcp", "rdma"):
            raise fail(f"ports[{i}].addr.trtype", f"{trtype!r}: this plugin drives tcp and rdma ports")
        try:
            trsvcid = int(addr.get("trsvcid", 4420))
        except ValueError:
            raise fail(f"ports[{i}].addr.trsvcid", f"{addr.get('trsvcid')!r} is not a port number") from None
        linked = tuple(str(s) for s in port.get("subsystems") or [])
        for s in linked:
            if s not in known:
                raise fail(f"ports[{i}].subsystems", f"{s!r} is not under subsystems")
        ports.append(
            NvmetPort(
                trtype,
                str(addr.get("traddr", "")),
                trsvcid,
                linked,
                str(addr.get("adrfam", "ipv4")),
                str(addr.get("treq", "not specified")),
                int(port["portid"]) if "portid" in port else None,
            )
        )
    return NvmetPlan(tuple(subsystems), tuple(ports), tuple(hosts))


def dump_saved_config(plan: NvmetPlan, portids: Mapping[int, int] | None = None) -> dict[str, Any]:
    """The plan in nvmetcli's saved JSON shape (what ``nvmetcli restore`` reads). ``portids`` maps port index ->
    the port ID actually used on the target."""
    subsystems = []
    for sub in plan.subsystems:
        attr = dict(sub.attrs)
        attr["allow_any_host"] = "1" if sub.allow_any_host else "0"
        subsystems.append(
            {
                "allowed_hosts": list(sub.allowed_hosts),
                "attr": dict(sorted(attr.items())),
                "namespaces": [
                    {
                        "device": {
                            **({"nguid": ns.nguid} if ns.nguid else {}),
                            "path": ns.path,
                            **({"uuid": ns.uuid} if ns.uuid else {}),
                        },
                        "enable": 1 if ns.enable else 0,
                        "nsid": ns.nsid,
                    }
                    for ns in sub.namespaces
                ],
                "nqn": sub.nqn,
            }
        )
    ports = []
    for index, port in enumerate(plan.ports):
        portid = (portids or {}).get(index, port.portid if port.portid is not None else index + 1)
        ports.append(
            {
                "addr": {
                    "adrfam": port.adrfam,
                    "traddr": port.traddr,
                    "treq": port.treq,
                    "trsvcid": str(port.trsvcid),
                    "trtype": port.trtype,
                },
                "portid": portid,
                "referrals": [],
                "subsystems": list(port.subsystems),
            }
        )
    return {"hosts": [{"nqn": h} for h in plan.hosts], "ports": ports, "subsystems": subsystems}
