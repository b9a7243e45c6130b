"""What tests/vlab's modules share: the three-guest lab they run on -- labs/vlab.yaml itself, in the state folder
`pytest --lab=vlab` uses (``.fabricqa/`` under the repository), so that a lab already up (`fabricqa-vlab up --lab
vlab`, as `.ci/run` does for the main job and these tests) is attached to instead of booted a second time."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from pytest_fabricqa.lab import LabModel

ROOT = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("FABRICQA_PROVISION_VLAB_STATE", str(ROOT / ".fabricqa")))


def lab_data() -> dict[str, Any]:
    """labs/vlab.yaml as data."""
    data: dict[str, Any] = yaml.safe_load((ROOT / "labs" / "vlab.yaml").read_text())
    return data


def make_lab(mutate: Callable[[dict[str, Any]], None] | None = None) -> LabModel:
    """The test lab's model, after ``mutate`` changed its data (for bad-input cases)."""
    data = lab_data()
    if mutate is not None:
        mutate(data)
    return LabModel.model_validate(data)
