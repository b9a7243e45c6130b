"""Acknowledged data across a target restart (issue 30, item 5): what the initiators wrote and flushed before the
target restarted, every initiator reads back after it.

What a suite calls (``suites/test_integrity.py``); no pytest here. :func:`restarted` restarts the target as the
failover suite's target-restart case does (:func:`pytest_fabricqa.faults.restart.target_restart`: every path away
for the lab's ``failover.brief_down_s``, then back; a recorded fault, restored even after SIGKILL), then waits until
every initiator reads each device again (within ``failover.recover_s``: NVMe controllers reconnect, iSCSI
sessions log in again, dm-multipath reinstates its paths). The writes before it and the verify after it are the
integrity suite's (:func:`pytest_fabricqa.integrity.checks.write_and_flush`,
:func:`~pytest_fabricqa.integrity.checks.verify_after_reconnect`): a block that comes back as an earlier write, or
not at all, is named with its host, device and offset.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.failover.outage import usable_after
from pytest_fabricqa.faults import restart
from pytest_fabricqa.faults.inject import FaultError
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host


def restarted(
    lab: LabModel,
    lab_hosts: Mapping[str, Host],
    target: str,
    protocol: str,
    readers: Sequence[tuple[Sequence[Host], Mapping[str, str]]],
) -> list[str]:
    """Restart ``target`` for ``protocol`` (down for ``failover.brief_down_s``, then back, everything undone), then
    wait until every initiator of each device in ``readers`` (its initiators, and their paths to it) reads it again.
    One sentence per problem: the restart that could not be made or undone, a device still unreadable
    ``failover.recover_s`` after it."""
    problems: list[str] = []
    undo = UndoStack()
    fault = restart.target_restart(lab, lab_hosts, target, protocol)
    try:
        fault.inject(undo)
        time.sleep(lab.failover.brief_down_s)
        fault.restore()
    except FaultError as exc:
        problems.append(f"the target restart ({fault.name}) failed: {exc}")
    finally:
        problems += undo.unwind()
    if problems:
        return problems
    for hosts, paths in readers:  # device by device, every initiator of one at once
        problems += usable_after(hosts, paths, lab.failover.recover_s)
    return problems
