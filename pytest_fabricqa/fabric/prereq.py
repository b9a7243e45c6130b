"""Prerequisite checks our users run by hand before a qualification: each returns None or a sentence."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_fabricqa.lab.model import ScstSettings, TargetModel, TgtSettings

# Whether the running kernel has each module named after "sh": loaded (/sys/module), built in (modules.builtin of
# the running release, where module files spell '_' as '-' or '_'), or installed for modprobe (modinfo). A
# capability, not a version: RHEL/Oracle Linux 8's 4.18 kernels carry nvme_tcp, which mainline got in 5.0.
# Fixed text; module names arrive as "$@" (constants of pytest_fabricqa.core.protocols).
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
    """``ip -j addr show`` (every interface, or ``dev IF``) against the lab's storage address and MTU of ``interface``;
    every mismatch at once."""
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


# Whether a daemon runs (a process of that name) or is installed (its binary found); "$1" the process name,
# "$2" the binary (a name on PATH or a path). /proc rather than pgrep: minimal hosts lack procps.
DAEMON_SCRIPT = r"""for p in /proc/[0-9]*; do
  [ "$(cat "$p/comm" 2>/dev/null)" = "$1" ] || continue
  grep -q '^State:[[:space:]]*Z' "$p/status" 2>/dev/null && continue
  echo "running ${p#/proc/}"; exit 0
done
if command -v "$2" >/dev/null 2>&1 || [ -x "/usr/sbin/$2" ] || [ -x "/usr/local/sbin/$2" ]; then echo installed
else echo missing; fi
"""


@dataclass(frozen=True)
class TargetDaemon:
    """The user-space daemon a target kind needs on its host, and whether the plugin starts it."""

    kind: str
    name: str  # its process name (at most 15 characters, as the kernel keeps it)
    binary: str
    start: bool  # the plugin starts it (the lab's daemon: start); else it must run already
    key: str  # the lab key that chooses


def target_daemon(target: TargetModel, index: int) -> TargetDaemon | None:
    """The daemon ``target`` (a lab TargetModel, ``targets[index]``) needs: SCST's iscsi-scstd (its kernel half takes
    no target without it) or tgtd; None for kinds that live in the kernel or elsewhere."""
    if target.kind == "scst":
        scst = target.scst or ScstSettings()
        return TargetDaemon("scst", "iscsi-scstd", scst.binary, scst.daemon == "start", f"targets[{index}].scst")
    if target.kind == "tgt":
        tgt = target.tgt or TgtSettings()
        return TargetDaemon("tgt", "tgtd", tgt.binary, tgt.daemon == "start", f"targets[{index}].tgt")
    return None


def daemon_problem(host: str, daemon: TargetDaemon, report: str) -> str | None:
    """:data:`DAEMON_SCRIPT` output against what the lab needs: running (attach) or installed (start)."""
    state = report.strip().split(" ", 1)[0] if report.strip() else "missing"
    if daemon.start:
        if state == "missing":
            return (
                f"{host}: {daemon.binary} is not installed, and the lab has the plugin start it "
                f"({daemon.key}.daemon: start); install it or set {daemon.key}.binary to its path"
            )
        return None
    if state != "running":
        installed = "installed but not running" if state == "installed" else "neither running nor installed"
        return (
            f"{host}: {daemon.name} is {installed}, and the {daemon.kind} target needs it "
            f"({daemon.key}.daemon: attach); start it, or set {daemon.key}.daemon: start"
        )
    return None
