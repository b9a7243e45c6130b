"""The protocols a lab can be qualified on, and what each needs of the hosts (one registry, found by name)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProtocolSpec:
    """What a protocol needs: initiator tools, kernel modules on each side, minimum kernels, RDMA."""

    name: str
    family: str  # "nvme" or "scsi"
    fabric: str  # "tcp" or "rdma"
    initiator_tools: tuple[str, ...]
    initiator_modules: tuple[str, ...]
    target_modules: dict[str, tuple[str, ...]]  # by target kind
    min_initiator_kernel: tuple[int, int] | None
    min_target_kernel: tuple[int, int] | None

    @property
    def needs_rdma(self) -> bool:
        """True when the protocol runs over RDMA (needs an RDMA link on the storage interface)."""
        return self.fabric == "rdma"


PROTOCOLS: dict[str, ProtocolSpec] = {
    # NVMe/TCP arrived in Linux 5.0 (host and target); seed 002 names it as a prerequisite.
    "nvme-tcp": ProtocolSpec(
        "nvme-tcp",
        "nvme",
        "tcp",
        ("fio", "nvme"),
        ("nvme_fabrics", "nvme_tcp"),
        {"nvmet": ("nvmet", "nvmet_tcp")},
        (5, 0),
        (5, 0),
    ),
    # NVMe over Fabrics (RDMA) arrived in Linux 4.8; seed 000 ran the target on 4.8.17.
    "nvme-rdma": ProtocolSpec(
        "nvme-rdma",
        "nvme",
        "rdma",
        ("fio", "nvme"),
        ("nvme_fabrics", "nvme_rdma"),
        {"nvmet": ("nvmet", "nvmet_rdma")},
        (4, 8),
        (4, 8),
    ),
    "iscsi": ProtocolSpec(
        "iscsi",
        "scsi",
        "tcp",
        ("fio", "iscsiadm"),
        ("iscsi_tcp", "sd_mod"),
        {"lio": ("target_core_mod", "target_core_iblock", "iscsi_target_mod")},
        None,
        None,
    ),
    "iser": ProtocolSpec(
        "iser",
        "scsi",
        "rdma",
        ("fio", "iscsiadm"),
        ("ib_iser", "sd_mod"),
        {"lio": ("target_core_mod", "target_core_iblock", "iscsi_target_mod", "ib_isert")},
        None,
        None,
    ),
}


def protocol(name: str) -> ProtocolSpec:
    """The spec for protocol ``name`` (KeyError for an unknown one: validate names at the option edge)."""
    return PROTOCOLS[name]


def parse_kernel_version(release: str) -> tuple[int, int]:
    """``uname -r`` text ("6.1.0-28-amd64", "4.8.17") -> (major, minor)."""
    parts = release.strip().split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        raise ValueError(f"cannot read a kernel version from {release!r}") from None
