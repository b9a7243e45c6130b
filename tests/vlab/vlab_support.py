"""What tests/vlab's modules share: the three-guest lab they run on (labs/vlab.yaml's shape on SSH ports
22291-22293, so a suite lab on 22191-22193 can run beside it) and its state folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from pytest_fabricqa.lab import LabModel

ROOT = Path(__file__).resolve().parents[2]
PORTS = {"vstor": 22291, "vnode1": 22292, "vnode2": 22293}
STATE = Path(os.environ.get("FABRICQA_PROVISION_VLAB_STATE", str(ROOT / ".fabricqa" / "provision-vlab")))


def lab_data() -> dict[str, Any]:
    """labs/vlab.yaml as data, moved to the test lab's ports."""
    data = yaml.safe_load((ROOT / "labs" / "vlab.yaml").read_text())
    for name, port in PORTS.items():
        data["hosts"][name]["port"] = port
    return data


def make_lab(mutate: Callable[[dict[str, Any]], None] | None = None) -> LabModel:
    """The test lab's model, after ``mutate`` changed its data (for bad-input cases)."""
    data = lab_data()
    if mutate is not None:
        mutate(data)
    return LabModel.model_validate(data)
