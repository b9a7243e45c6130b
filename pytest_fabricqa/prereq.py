"""Prerequisite checks our users run by hand before a qualification: each returns None or a sentence."""

from __future__ import annotations

import json
from typing import Any

from pytest_fabricqa.protocols import parse_kernel_version


def kernel_problem(host: str, release: str, minimum: tuple[int, int] | None, what: str) -> str | None:
    """``uname -r`` against the minimum kernel for ``what`` (e.g. "an NVMe/TCP host")."""
    if minimum is None:
        return None
    found = parse_kernel_version(release)
    if found < minimum:
        return (
            f"{host}: kernel {release.strip()} is older than {minimum[0]}.{minimum[1]}, "
            f"the first with {what}; upgrade the kernel"
        )
    return None


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
