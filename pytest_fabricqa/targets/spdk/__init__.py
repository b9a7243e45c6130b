"""SPDK's NVMe-oF target (``nvmf_tgt``, SPDK 23.01) through its JSON-RPC socket on the target host.

The lab's ``spdk`` section says whether the plugin starts nvmf_tgt (detached, its log and pid kept under
/run/fabricqa/) or attaches to one already running. What to create comes from the same lab keys nvmet reads
(``nvme.subsystems`` with ``allow_any_host`` / ``allowed_hosts``, or ``nvme.saved_config``): one AIO bdev per
device, subsystems with namespaces, allowed hosts and a listener on the protocol's transport.

Split by job: :mod:`.jsonrpc` (the RPC client run on the host, and its one-line errors), :mod:`.app` (what the host
has; starting and stopping nvmf_tgt) and :mod:`.driver` (provisioning, clean-up, leftovers, prerequisites).
"""

from __future__ import annotations

from pytest_fabricqa.targets.spdk.app import PROBE_SCRIPT, SpdkHost, parse_probe, start_argv
from pytest_fabricqa.targets.spdk.driver import (
    MAX_MODEL,
    SpdkSnapshot,
    SpdkTarget,
    bdev_name,
    mark_serial,
    parse_snapshot,
    spdk_problems,
)
from pytest_fabricqa.targets.spdk.jsonrpc import CLIENT_SCRIPT, RpcClient, SpdkRpcError, SpdkUnreachable

__all__ = [
    "CLIENT_SCRIPT",
    "MAX_MODEL",
    "PROBE_SCRIPT",
    "RpcClient",
    "SpdkHost",
    "SpdkRpcError",
    "SpdkSnapshot",
    "SpdkTarget",
    "SpdkUnreachable",
    "bdev_name",
    "mark_serial",
    "parse_probe",
    "parse_snapshot",
    "spdk_problems",
    "start_argv",
]
