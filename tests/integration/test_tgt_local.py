"""The tgt driver against a real tgtd on this machine: a daemon of the test's own on loopback only (its own
management port, a free TCP port on 127.0.0.1), LUNs on sparse files. Provision and undo, a run killed with
SIGKILL half-way and cleaned by the next, and an administrator's target beside ours that nothing touches."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.targets import load_target
from pytest_fabricqa.targets.tgt import TgtTarget
from pytest_fabricqa.transport.local import LocalHost

pytestmark = [
    pytest.mark.skipif(shutil.which("tgtd") is None, reason="Debian's tgt is not installed (scripts/install.sh)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="tgtd and /run/fabricqa need root"),
]

ROOT = Path(__file__).parents[2]
IQN = "iqn.2026-11.io.fabricqa:local"
FOREIGN = "iqn.2003-01.org.example:foreign"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lab_data(folder: Path, daemon: str, control_port: int, port: int) -> dict[str, Any]:
    return {
        "name": "tgt-local",
        "hosts": {
            "here": {"transport": "local", "roles": ["target"], "storage": {"interface": "lo", "address": "127.0.0.1"}},
            "node": {"transport": "local", "roles": ["initiator"], "initiator_iqn": "iqn.2026-11.io.fabricqa:node"},
        },
        "network": {"link_speed_gbps": 10},
        "protocols": ["iscsi"],
        "targets": [
            {
                "kind": "tgt",
                "host": "here",
                "protocols": ["iscsi"],
                "name_prefix": f"fqtest{os.getpid()}",
                "devices": {"a": {"path": str(folder / "a.img")}, "b": {"path": str(folder / "b.img")}},
                "iscsi": {"iqn": IQN, "port": port, "luns": ["a", "b"]},
                "tgt": {"daemon": daemon, "control_port": control_port},
            }
        ],
    }


@pytest.fixture
def files(tmp_path: Path) -> Path:
    for name, size in (("a.img", "64M"), ("b.img", "32M"), ("foreign.img", "16M")):
        subprocess.run(["truncate", "-s", size, str(tmp_path / name)], check=True)
    return tmp_path


def _target(data: dict[str, Any]) -> TgtTarget:
    lab = LabModel.model_validate(data)
    target = load_target(lab, lab.targets[0], {"here": LocalHost("here")})
    assert isinstance(target, TgtTarget)
    return target


def _adm(control_port: int, *args: str, check: bool = True) -> str:
    argv = ["tgtadm", "--control-port", str(control_port), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=check).stdout


@pytest.fixture
def admins_tgtd(files: Path) -> Iterator[int]:
    """A tgtd started as an administrator would, with a target of theirs on it; stopped afterwards."""
    control_port = 20000 + os.getpid() % 10000
    port = _free_port()
    pid_file = files / "admin-tgtd.pid"
    argv = [
        "tgtd",
        "--control-port",
        str(control_port),
        "--pid-file",
        str(pid_file),
        "--iscsi",
        f"portal=127.0.0.1:{port}",
    ]
    subprocess.run(argv, check=True)
    try:
        for _ in range(50):
            if (
                subprocess.run(
                    ["tgtadm", "--control-port", str(control_port), "--mode", "sys", "--op", "show"],
                    capture_output=True,
                ).returncode
                == 0
            ):
                break
            time.sleep(0.1)
        _adm(control_port, "--lld", "iscsi", "--mode", "target", "--op", "new", "--tid", "1", "--targetname", FOREIGN)
        _adm(control_port, "--lld", "iscsi", "--mode", "logicalunit", "--op", "new", "--tid", "1", "--lun", "1",
             "--backing-store", str(files / "foreign.img"))  # fmt: skip
        _adm(
            control_port,
            "--lld",
            "iscsi",
            "--mode",
            "target",
            "--op",
            "bind",
            "--tid",
            "1",
            "--initiator-address",
            "ALL",
        )
        yield control_port * 100_000 + port
    finally:
        _adm(control_port, "--lld", "iscsi", "--mode", "target", "--op", "delete", "--force", "--tid", "1", check=False)
        _adm(control_port, "--mode", "system", "--op", "delete", check=False)


def test_start_mode_provisions_on_its_own_tgtd_and_undoes_everything(files: Path) -> None:
    control_port = 30000 + os.getpid() % 2000  # tgtd takes up to 32767
    target = _target(_lab_data(files, "start", control_port, _free_port()))
    undo = UndoStack()
    try:
        export = target.provision("iscsi", undo)
        assert [u.address for u in export.units] == [1, 2]
        snap = target.snapshot()
        (ours,) = snap.targets.values()
        assert ours.iqn == IQN and ours.acls == ["iqn.2026-11.io.fabricqa:node"]
        assert [lun.path for lun in ours.luns.values()] == ["", str(files / "a.img"), str(files / "b.img")]
        assert len(target.leftovers()) == 3  # target, our tgtd, the state file
    finally:
        errors = undo.unwind()
    assert errors == [] and target.leftovers() == []
    assert target.lld_states() is None  # our tgtd is gone


KILLED_CHILD = textwrap.dedent(
    """
    import json, os, signal, sys
    from pytest_fabricqa.lab.model import LabModel
    from pytest_fabricqa.targets import load_target
    from pytest_fabricqa.core.undo import UndoStack
    from pytest_fabricqa.transport.local import LocalHost
    import pytest_fabricqa.targets.tgt as tgt

    lab = LabModel.model_validate(json.loads(sys.argv[1]))
    target = load_target(lab, lab.targets[0], {"here": LocalHost("here")})
    real = target._tgtadm
    count = []

    def killed_at_the_second_lun(what, *args, **kwargs):
        real(what, *args, **kwargs)
        count.append(1)
        if len(count) == 3:  # LUN 1 and its serial set, LUN 2 made: SIGKILL, no undo runs
            os.kill(os.getpid(), signal.SIGKILL)

    target._tgtadm = killed_at_the_second_lun
    target.provision("iscsi", UndoStack())
    """
)


def test_a_run_killed_half_way_is_cleaned_by_the_next_and_the_admins_target_stays(
    files: Path, admins_tgtd: int
) -> None:
    control_port, port = divmod(admins_tgtd, 100_000)
    data = _lab_data(files, "attach", control_port, port)
    data["targets"][0]["iscsi"]["port"] = port
    before = _adm(control_port, "--lld", "iscsi", "--mode", "target", "--op", "show")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", KILLED_CHILD, json.dumps(data)], env=env, capture_output=True, text=True
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    target = _target(data)
    half_made = target.leftovers()
    assert half_made[0].startswith(f"here: tgt target {IQN} (tid ") and len(half_made) == 2
    removed = target.cleanup_stale()
    assert removed[0].startswith(f"here: removed tgt target {IQN}") and len(removed) == 2
    assert target.leftovers() == []
    assert _adm(control_port, "--lld", "iscsi", "--mode", "target", "--op", "show") == before
