"""Which target kinds exist and what each serves: the one place that says so.

Adding a kind (SPDK over JSON-RPC, SCST, tgt) is one new module under ``targets/`` with a class satisfying
:class:`~pytest_fabricqa.targets.base.Target`, and one line in :data:`REGISTRY`: the driver's class path and the
protocols the kind serves. The lab file's ``kind`` is checked against it, and so is every protocol a target is asked
to serve (at load time); the driver itself is loaded only when a lab uses it
(:func:`pytest_fabricqa.targets.load_target`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """A target kind: its driver (``"module:Class"``; None while the lab format knows the kind but this plugin
    does not drive it yet) and the protocols it can serve."""

    driver: str | None
    serves: tuple[str, ...]
    no_reservations: str | None = None
    """Why the kind cannot take part in persistent reservations (cluster fencing), one sentence; None when it
    implements them (SPC-3 PR for SCSI kinds, NVMe reservations for NVMe-oF kinds; an external array's own)."""


# NVMe reservations came to Linux's nvmet in 6.13 (drivers/nvme/target/pr.c), only for namespaces whose resv_enable
# is set before they are enabled; 6.1 (the virtual lab's) has none.
NVMET_NO_RESERVATIONS = (
    "Linux nvmet implements NVMe reservations only from kernel 6.13 on, per namespace with resv_enable, "
    "which this plugin does not set"
)

NVME_OF: tuple[str, ...] = ("nvme-tcp", "nvme-rdma")
SCSI: tuple[str, ...] = ("iscsi", "iser")

REGISTRY: dict[str, Kind] = {
    "nvmet": Kind("pytest_fabricqa.targets.nvmet:NvmetTarget", NVME_OF, no_reservations=NVMET_NO_RESERVATIONS),
    "spdk": Kind("pytest_fabricqa.targets.spdk:SpdkTarget", NVME_OF),
    "lio": Kind("pytest_fabricqa.targets.lio:LioTarget", SCSI),
    "scst": Kind("pytest_fabricqa.targets.scst:ScstTarget", SCSI),
    "tgt": Kind("pytest_fabricqa.targets.tgt:TgtTarget", SCSI),
    "external": Kind("pytest_fabricqa.targets.external:ExternalTarget", (*NVME_OF, *SCSI)),
}


def kinds_serving(protocol: str) -> list[str]:
    """The kinds that can serve ``protocol``, in registry order."""
    return [name for name, kind in REGISTRY.items() if protocol in kind.serves]
