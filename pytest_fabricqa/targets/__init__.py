"""Target kinds, found by name: one module per kind, loaded only when a lab uses it.

Adding a kind (SPDK over JSON-RPC, SCST, tgt) is one new module with a class satisfying
:class:`~pytest_fabricqa.targets.base.Target` and one line in :data:`REGISTRY`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from pytest_fabricqa.lab import LabModel, TargetModel
from pytest_fabricqa.targets.base import Export, ExportedUnit, ProvisionError, Target, UndoStack, target_index
from pytest_fabricqa.transport.base import Host

# kind -> "module:Class"; None marks a kind the lab format knows but this plugin does not drive yet.
REGISTRY: dict[str, str | None] = {
    "nvmet": "pytest_fabricqa.targets.nvmet:NvmetTarget",
    "lio": "pytest_fabricqa.targets.lio:LioTarget",
    "external": "pytest_fabricqa.targets.external:ExternalTarget",
    "spdk": None,
    "scst": None,
    "tgt": None,
}

__all__ = ["REGISTRY", "Export", "ExportedUnit", "ProvisionError", "Target", "UndoStack", "load_target"]


def load_target(lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> Target:
    """The driver for ``model`` (a target of ``lab``), bound to its host's transport."""
    where = f"lab {lab.name!r} targets[{target_index(lab, model)}].kind"
    path = REGISTRY.get(model.kind)
    if path is None:
        raise ProvisionError(
            model.host or model.address or lab.name,
            f"target kind {model.kind!r} ({where}) is not implemented yet",
            f"use kind nvmet, lio or external (an array provisioned by hand) for now; supported: "
            f"{', '.join(k for k, v in REGISTRY.items() if v)}",
        )
    module_name, class_name = path.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    target: Target = cls(lab, model, hosts)
    return target
