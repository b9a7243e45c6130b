"""The protocols a lab can be qualified on, and what each needs of the hosts (one registry, found by name)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProtocolSpec:
    """What a protocol needs: initiator tools, kernel modules on each side, RDMA.

    The kernel's ability is judged by its modules (loaded, built in or installed), never by ``uname -r``:
    distribution kernels carry features their version number predates (RHEL/OL 8's 4.18 has nvme_tcp).
    """

    name: str
    family: str  # "nvme" or "scsi"
    fabric: str  # "tcp" or "rdma"
    transport: str  # what an export names it: the NVMe trtype ("tcp", "rdma"), the SCSI transport ("tcp", "iser")
    initiator_tools: tuple[str, ...]
    initiator_modules: tuple[str, ...]
    target_modules: dict[str, tuple[str, ...]]  # by target kind: the kernel modules it needs for this protocol

    @property
    def needs_rdma(self) -> bool:
        """True when the protocol runs over RDMA (needs an RDMA link on the storage interface)."""
        return self.fabric == "rdma"


PROTOCOLS: dict[str, ProtocolSpec] = {
    # NVMe/TCP (mainline 5.0, backported to RHEL/OL 8's 4.18): nvme-fabrics finds a transport by loading "nvme-<trtype>", so nvme_tcp present is the capability.
    "nvme-tcp": ProtocolSpec(
        "nvme-tcp",
        "nvme",
        "tcp",
        "tcp",
        ("fio", "nvme"),
        ("nvme_fabrics", "nvme_tcp"),
        # SPDK's TCP transport is user space: no target module.
        {"nvmet": ("nvmet", "nvmet_tcp"), "spdk": ()},
    ),
    # NVMe over Fabrics (RDMA, mainline 4.8): seed 000 ran the target on 4.8.17.
    "nvme-rdma": ProtocolSpec(
        "nvme-rdma",
        "nvme",
        "rdma",
        "rdma",
        ("fio", "nvme"),
        ("nvme_fabrics", "nvme_rdma"),
        # SPDK's RDMA transport runs on libibverbs and librdmacm, which reach the RNIC through these.
        {"nvmet": ("nvmet", "nvmet_rdma"), "spdk": ("ib_uverbs", "rdma_ucm")},
    ),
    "iscsi": ProtocolSpec(
        "iscsi",
        "scsi",
        "tcp",
        "tcp",
        ("fio", "iscsiadm"),
        ("iscsi_tcp", "sd_mod"),
        {
            "lio": ("target_core_mod", "target_core_iblock", "iscsi_target_mod"),
            "scst": ("scst", "scst_vdisk", "iscsi_scst"),
            "tgt": (),  # tgtd is user space: iSCSI/TCP needs no module of its own
        },
    ),
    "iser": ProtocolSpec(
        "iser",
        "scsi",
        "rdma",
        "iser",
        ("fio", "iscsiadm"),
        ("ib_iser", "sd_mod"),
        {
            "lio": ("target_core_mod", "target_core_iblock", "iscsi_target_mod", "ib_isert"),
            "scst": ("scst", "scst_vdisk", "iscsi_scst", "isert_scst"),
            # tgtd's iser driver reaches RDMA through libibverbs and librdmacm: their kernel halves.
            "tgt": ("ib_uverbs", "rdma_ucm"),
        },
    ),
}


def protocol(name: str) -> ProtocolSpec:
    """The spec for protocol ``name`` (KeyError for an unknown one: validate names at the option edge)."""
    return PROTOCOLS[name]
