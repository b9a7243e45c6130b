"""An external array: the lab describes its portal, NQNs and IQN; nothing is provisioned or torn down.

Initiators still connect and disconnect (that part is the plugin's own), so leftovers on the initiators are
checked as for any other target.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_fabricqa.core.export import Export, ExportedUnit
from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import ProvisionError, UndoStack
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.targets.base import target_index
from pytest_fabricqa.transport.base import Host


class ExternalTarget:
    """A target the lab only describes (``kind: external``)."""

    kind = "external"

    def __init__(self, lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> None:
        self.lab = lab
        self.model = model
        self.where = f"targets[{target_index(lab, model)}]"

    def provision(self, protocol: str, undo: UndoStack) -> Export:
        """Describe what the array exports for ``protocol``; nothing is created, so nothing is registered."""
        model = self.model
        address = self.lab.target_address(model)

        def unit(subsystem: str, address: int, name: str) -> ExportedUnit:
            dev = model.devices.get(name)
            return ExportedUnit(
                subsystem,
                address,
                name,
                dev.path if dev else "",
                dev.writable if dev else False,
                dev.destructive_ok if dev else False,
            )

        if protocol_spec(protocol).family == "nvme":
            if model.nvme is None:
                raise ProvisionError(address, f"{self.where} has no 'nvme' section", "describe the array's subsystems")
            units = tuple(
                unit(sub.nqn, nsid, name)
                for sub in model.nvme.subsystems
                for nsid, name in enumerate(sub.namespaces, start=1)
            )
            return Export(protocol, protocol_spec(protocol).transport, address, model.nvme.port, units, None)
        if model.iscsi is None:
            raise ProvisionError(address, f"{self.where} has no 'iscsi' section", "describe the array's target IQN")
        units = tuple(unit(model.iscsi.iqn, lun, name) for lun, name in enumerate(model.iscsi.luns))
        return Export(protocol, protocol_spec(protocol).transport, address, model.iscsi.port, units, None)

    def cleanup_stale(self) -> list[str]:
        """Nothing of ours lives on an external array."""
        return []

    def leftovers(self) -> list[str]:
        """Nothing of ours lives on an external array."""
        return []
