"""Prerequisite checks our users run by hand before a qualification: each returns None or a sentence."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Whether the running kernel has each module named after "sh": loaded (/sys/module), built in (modules.builtin of
# the running release, where module files spell '_' as '-' or '_'), or installed for modprobe (modinfo). A
# capability, not a version: RHEL/Oracle Linux 8's 4.18 kernels carry nvme_tcp, which mainline got in 5.0.
# Fixed text; module names arrive as "$@" (constants of pytest_fabricqa.protocols).
MODULES_SCRIPT = r"""rel=$(uname -r)
echo "release $rel"
[ -d "/lib/modules/$rel" ] || echo "no-modules-dir /lib/modules/$rel"
for m in "$@"; do
  if [ -d "/sys/module/$m" ]; then echo "module $m loaded"; continue; fi
  d=$(printf %s "$m" | tr _ -)
  if grep -qE "/($m|$d)\.ko" "/lib/modules/$rel/modules.builtin" 2>/dev/null; then echo "module $m builtin"; continue; fi
  if modinfo -F filename "$m" >/dev/null 2>&1; then echo "module $m loadable"; continue; fi
  echo "module $m missing"
done
exit 0
"""

MODULE_STATES = ("loaded", "builtin", "loadable", "missing")


@dataclass(frozen=True)
class ModuleReport:
    """What :data:`MODULES_SCRIPT` found on one host: the kernel release and each module's state."""

    release: str
    modules: dict[str, str]
    modules_dir_missing: bool = False


def parse_module_report(text: str) -> ModuleReport:
    """:data:`MODULES_SCRIPT` output -> :class:`ModuleReport`."""
    release = ""
    modules: dict[str, str] = {}
    no_dir = False
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == ["release"] and len(fields) == 2:
            release = fields[1]
        elif fields[:1] == ["no-modules-dir"]:
            no_dir = True
        elif fields[:1] == ["module"] and len(fields) == 3 and fields[2] in MODULE_STATES:
            modules[fields[1]] = fields[2]
    return ModuleReport(release, modules, no_dir)


def module_problems(host: str, report: ModuleReport, wanted: Sequence[str], what: str) -> list[str]:
    """The modules ``what`` (e.g. "an NVMe/TCP host") needs that the kernel neither has loaded, built in nor
    installed; one sentence naming the kernel and the fix. A module not reported at all counts as missing."""
    missing = [m for m in wanted if report.modules.get(m, "missing") == "missing"]
    if not missing:
        return []
    kernel = f"kernel {report.release}" if report.release else "the kernel"
    where = (
        f" (and /lib/modules/{report.release} does not exist, so installed modules cannot be seen: a container?)"
        if report.modules_dir_missing
        else ""
    )
    return [
        f"{host}: {kernel} cannot run {what}: module(s) {', '.join(missing)} neither loaded, built in nor "
        f"installed{where}; install the kernel package that carries them or boot a kernel built with them"
    ]


def interface_problems(host: str, ip_json: str, interface: str, address: str, mtu: int) -> list[str]:
    """``ip -j addr show dev IF`` against the lab's storage address and MTU; every mismatch at once."""
    try:
        links: list[dict[str, Any]] = json.loads(ip_json or "[]")
    except json.JSONDecodeError:
        return [f"{host}: cannot read `ip -j addr` output for {interface}"]
    link = next((item for item in links if item.get("ifname") == interface), None)
    if link is None:
        return [f"{host}: storage interface {interface} does not exist; check hosts.{host}.storage.interface"]
    problems = []
    flags = link.get("flags", [])
    if "UP" not in flags or ("LOWER_UP" not in flags and link.get("operstate") == "DOWN"):
        problems.append(f"{host}: storage interface {interface} is down (flags {','.join(flags)}); bring it up")
    addresses = [a.get("local") for a in link.get("addr_info", [])]
    if address not in addresses:
        shown = ", ".join(a for a in addresses if a) or "none"
        problems.append(f"{host}: {interface} does not carry {address} (it has {shown}); fix the address or the lab")
    if link.get("mtu") != mtu:
        problems.append(f"{host}: {interface} MTU is {link.get('mtu')}, the lab expects {mtu}")
    return problems


def rdma_problem(host: str, rdma_json: str, interface: str) -> str | None:
    """``rdma -j link show`` must list an ACTIVE RDMA link on the storage interface (rxe or a real RNIC)."""
    try:
        links: list[dict[str, Any]] = json.loads(rdma_json or "[]")
    except json.JSONDecodeError:
        return f"{host}: cannot read `rdma -j link show` output"
    on_interface = [link for link in links if link.get("netdev") == interface]
    if not on_interface:
        names = ", ".join(f"{link.get('ifname')} on {link.get('netdev')}" for link in links) or "none"
        return (
            f"{host}: no RDMA link on {interface} (links: {names}); add one, e.g. "
            f"`rdma link add rxe0 type rxe netdev {interface}` for Soft-RoCE"
        )
    if not any(link.get("state") == "ACTIVE" for link in on_interface):
        states = ", ".join(f"{link.get('ifname')} {link.get('state')}" for link in on_interface)
        return f"{host}: the RDMA link on {interface} is not ACTIVE ({states})"
    return None
