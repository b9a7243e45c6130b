"""What tests/vlab's modules share: the three-guest lab they run on -- labs/vlab.yaml itself, in the state folder
`pytest --lab=vlab` uses (``.fabricqa/`` under the repository), so that a lab already up (`fabricqa-vlab up --lab
vlab`) is attached to instead of booted a second time.

``FABRICQA_TESTS_VLAB=NAME:PORT`` gives these tests a lab of their own instead: labs/vlab.yaml under another name, its
hosts on SSH ports PORT, PORT+1, ... in file order, in its own run folder (the storage segment is the lab's own UNIX
socket switch). `.ci/run` sets it so that these tests run beside the main job on a second set of guests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from pytest_fabricqa.lab.model import LabModel

ROOT = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("FABRICQA_PROVISION_VLAB_STATE", str(ROOT / ".fabricqa")))


def lab_data() -> dict[str, Any]:
    """labs/vlab.yaml as data, renamed and moved to other ports when ``FABRICQA_TESTS_VLAB`` asks."""
    data: dict[str, Any] = yaml.safe_load((ROOT / "labs" / "vlab.yaml").read_text())
    wanted = os.environ.get("FABRICQA_TESTS_VLAB")
    if wanted:
        name, _, port = wanted.partition(":")
        if not name or not port.isdigit():
            raise ValueError(f"FABRICQA_TESTS_VLAB={wanted!r}: expected NAME:PORT, e.g. vlabt:22291")
        data["name"] = name
        for offset, host in enumerate(data["hosts"].values()):
            host["port"] = int(port) + offset
    return data


def make_lab(mutate: Callable[[dict[str, Any]], None] | None = None) -> LabModel:
    """The test lab's model, after ``mutate`` changed its data (for bad-input cases)."""
    data = lab_data()
    if mutate is not None:
        mutate(data)
    return LabModel.model_validate(data)


# Each native-multipath path device of a namespace head (/dev/nvmeXnY -> nvmeXcZnY): its name, ANA state, its
# controller's traddr and the reads it has completed. $1: the head's name.
PATHS_OF_HEAD = r"""
h=$1
sub=${h%n*}
ns=${h##*n}
for p in /sys/class/block/${sub}c*n$ns; do
  n=${p##*/}
  c=${n#${sub}c}
  c=nvme${c%n*}
  a=$(sed -n 's/^traddr=\([^,]*\).*/\1/p' /sys/class/nvme/$c/address)
  printf '%s %s %s %s\n' "$n" "$(cat "$p/ana_state" 2>/dev/null || echo -)" "$a" "$(awk '{print $1}' "$p/stat")"
done
"""


def paths_of(host: Any, device: str) -> dict[str, tuple[str, str, int]]:
    """Path device -> (ANA state, traddr, reads completed) for each path of the namespace head ``device``."""
    out = host.run(["sh", "-c", PATHS_OF_HEAD, "sh", device.rsplit("/", 1)[-1]]).stdout
    return {w[0]: (w[1], w[2], int(w[3])) for w in (line.split() for line in out.splitlines()) if len(w) == 4}


def reads_per_path(host: Any, device: str, blocks: int = 1000) -> dict[str, int]:
    """Reads each path of ``device`` completed while ``blocks`` 4 KiB blocks were read from it (direct I/O)."""
    before = paths_of(host, device)
    host.run(["dd", f"if={device}", "of=/dev/null", "bs=4k", f"count={blocks}", "iflag=direct"])
    after = paths_of(host, device)
    return {path: after[path][2] - before.get(path, after[path])[2] for path in after}


def killed_once_down(script: str, lab: LabModel, ssh: dict[str, str], **extra: Any) -> list[str]:
    """Run ``script`` (a child run given the lab, its SSH settings and ``extra`` as JSON in argv[1]) until it says
    DOWN, then SIGKILL it; the words after DOWN."""
    args = {"lab": lab.model_dump(mode="json"), **ssh, **extra}
    child = subprocess.Popen(
        [sys.executable, "-c", script, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        words = child.stdout.readline().split()
        assert words[:1] == ["DOWN"], f"child said {words!r}; stderr: {child.stderr.read() if child.stderr else ''}"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    return words[1:]
