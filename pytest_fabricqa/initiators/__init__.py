"""Initiators: nvme-cli for NVMe over Fabrics, open-iscsi for iSCSI and iSER.

Each module turns the tool's output (JSON where the tool has it) and sysfs into frozen dataclasses once, at
the edge, and finds block devices by subsystem NQN + NSID or target IQN + LUN, never by guessing /dev names.
"""

from __future__ import annotations

from pytest_fabricqa.transport.base import Host

# Fixed text: probes that the portal answers before a slow tool times out against it.
TCP_PROBE = 'exec 3<>"/dev/tcp/$1/$2"'


def portal_reachable(host: Host, address: str, port: int, transport: str, timeout_s: int = 5) -> bool:
    """True when ``host`` reaches the portal: a TCP connect for tcp-based portals, a ping for RDMA ones."""
    if transport == "rdma":
        argv = ["ping", "-c", "1", "-W", str(timeout_s), address]
    else:
        argv = ["timeout", str(timeout_s), "bash", "-c", TCP_PROBE, "bash", address, str(port)]
    return host.run(argv, check=False, timeout=timeout_s + 10).ok
