"""Linux kernel NVMe target (nvmet) through configfs: ports, subsystems, namespaces, hosts.

What to create is an :class:`NvmetPlan`, built from the lab (``targets[i].nvme``) or from an nvmetcli saved
configuration (``nvme.saved_config``, the JSON ``nvmetcli save`` writes, as in seed 000), and dumped back to that
same format by :func:`dump_saved_config`.

Ownership: subsystem NQNs are the user's, so they cannot carry a name prefix. Instead the target host keeps a
state file, ``/run/fabricqa/<name_prefix>-nvmet.json``, listing every port, subsystem and host entry this plugin
is about to create; it is written *before* the first object is made and removed after the last one is gone.
/run is a tmpfs, so the file lives exactly as long as the configfs objects. Each subsystem also gets
``attr_model`` = the name prefix (where the kernel allows it), so an engineer sees on the initiator
(``nvme list``) and on the target who made it. An object is ours only when both say so (checked twice, issue 28):
a subsystem the record lists *and* that carries the mark the record gives it; a port the record lists whose every
subsystem is ours; a host entry the record lists that no other subsystem allows. A subsystem that is only one of
the two (recorded but unmarked, marked but unrecorded) is named by the stale clean-up and never touched.

The package is split by job: :mod:`.plan` (what to create), :mod:`.saved` (nvmetcli's JSON in and out),
:mod:`.snapshot` (what is on the target, and removing one object) and :mod:`.driver` (provisioning).
"""

from __future__ import annotations

from pytest_fabricqa.targets.nvmet.declared import plan_from_lab
from pytest_fabricqa.targets.nvmet.driver import MAX_MODEL, PORT_IDS, PORT_TRIES, ROOT, NvmetTarget
from pytest_fabricqa.targets.nvmet.plan import NvmetNamespace, NvmetPlan, NvmetPort, NvmetSubsystem, check_nqn
from pytest_fabricqa.targets.nvmet.saved import SavedConfigError, dump_saved_config, load_saved_config
from pytest_fabricqa.targets.nvmet.snapshot import (
    REMOVE_PORT_SCRIPT,
    REMOVE_SUBSYSTEM_SCRIPT,
    SNAPSHOT_SCRIPT,
    NvmetSnapshot,
    parse_snapshot,
    port_conflict,
    remove_port,
    remove_subsystem,
)

__all__ = [
    "MAX_MODEL",
    "PORT_IDS",
    "PORT_TRIES",
    "REMOVE_PORT_SCRIPT",
    "REMOVE_SUBSYSTEM_SCRIPT",
    "ROOT",
    "SNAPSHOT_SCRIPT",
    "NvmetNamespace",
    "NvmetPlan",
    "NvmetPort",
    "NvmetSnapshot",
    "NvmetSubsystem",
    "NvmetTarget",
    "SavedConfigError",
    "check_nqn",
    "dump_saved_config",
    "load_saved_config",
    "parse_snapshot",
    "plan_from_lab",
    "port_conflict",
    "remove_port",
    "remove_subsystem",
]
