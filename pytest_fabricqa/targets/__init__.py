"""Target drivers, found by kind: one module per kind, loaded only when a lab uses it (the kinds and what each
serves: :data:`pytest_fabricqa.core.kinds.REGISTRY`)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from pytest_fabricqa.core.kinds import REGISTRY
from pytest_fabricqa.core.undo import ProvisionError
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.targets.base import Target, target_index
from pytest_fabricqa.transport.base import Host

__all__ = ["Target", "load_target"]


def load_target(lab: LabModel, model: TargetModel, hosts: Mapping[str, Host]) -> Target:
    """The driver for ``model`` (a target of ``lab``), bound to its host's transport."""
    where = f"lab {lab.name!r} targets[{target_index(lab, model)}].kind"
    kind = REGISTRY.get(model.kind)
    path = kind.driver if kind is not None else None
    if path is None:
        raise ProvisionError(
            model.host or model.address or lab.name,
            f"target kind {model.kind!r} ({where}) is not implemented yet",
            f"use kind nvmet, spdk, lio or external (an array provisioned by hand) for now; supported: "
            f"{', '.join(k for k, v in REGISTRY.items() if v.driver)}",
        )
    module_name, class_name = path.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    target: Target = cls(lab, model, hosts)
    return target
