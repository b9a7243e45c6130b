"""The SPDK target kind against a real nvmf_tgt on this machine (local transport, TCP on 127.0.0.1, AIO over a file,
no hugepages): provisioning, teardown, a killed run's nvmf_tgt found and stopped by the next start, and objects made
by hand in an app we attach to left alone.

nvmf_tgt comes from ``FABRICQA_SPDK_NVMF_TGT`` (a path), PATH, /opt/spdk, or the virtual lab's SPDK build cache
(~/.cache/fabricqa/vendor/spdk-*/tree/opt/spdk/bin: CI builds the image first); SPDK's own rpc.py client is used
too where ``FABRICQA_SPDK_RPC_PY`` names one, or beside the cached nvmf_tgt (else the plugin's own client only).
Without nvmf_tgt the tests skip, saying so.
"""

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
from pytest_fabricqa.targets.spdk import SpdkTarget
from pytest_fabricqa.transport.local import LocalHost

ROOT = Path(__file__).resolve().parents[2]
NQN = "nqn.2026-11.io.fabricqa:spdk-local"
FOREIGN_NQN = "nqn.2014-08.org.example:foreign"


def _binary() -> str | None:
    given = os.environ.get("FABRICQA_SPDK_NVMF_TGT")
    if given:
        return given if os.access(given, os.X_OK) else None
    # The virtual lab's image build leaves a host-runnable nvmf_tgt in its cache: that is how CI gets one.
    cached = sorted(Path.home().glob(".cache/fabricqa/vendor/spdk-*/tree/opt/spdk/bin/nvmf_tgt"))
    places = ["/opt/spdk/bin/nvmf_tgt", "/opt/spdk/build/bin/nvmf_tgt", *map(str, cached)]
    return shutil.which("nvmf_tgt") or next((p for p in places if os.access(p, os.X_OK)), None)


BINARY = _binary()


def _rpc_py() -> str | None:
    given = os.environ.get("FABRICQA_SPDK_RPC_PY")
    if given or BINARY is None:
        return given or None
    beside = Path(BINARY).parents[1] / "scripts" / "rpc.py"  # the image build's /opt/spdk/{bin,scripts}
    return str(beside) if beside.is_file() else None


RPC_PY = _rpc_py()

pytestmark = [
    pytest.mark.skipif(
        BINARY is None,
        reason="SPDK's nvmf_tgt is not on this machine: set FABRICQA_SPDK_NVMF_TGT=/path/to/nvmf_tgt (SPDK 23.01.1, "
        "see tests/data/spdk/README.md for a build) or put it on PATH",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the state file lives under /run/fabricqa (root)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lab(tmp: Path, start: bool = True, rpc_py: str | None = None, prefix: str = "") -> LabModel:
    disk = tmp / "disk0.img"
    if not disk.exists():
        with disk.open("wb") as f:
            f.truncate(64 * 1024 * 1024)
    spdk: dict[str, Any] = {"rpc_socket": str(tmp / "spdk.sock"), "start_timeout": 60}
    if start:
        spdk |= {"binary": BINARY, "core_mask": "0x1", "mem_size_mb": 512, "no_huge": True}
    else:
        spdk["start"] = False
    if rpc_py:
        spdk["rpc_py"] = rpc_py
    data = {
        "name": "spdk-local",
        "hosts": {
            "localhost": {
                "transport": "local",
                "roles": ["target", "initiator"],
                "storage": {"interface": "lo", "address": "127.0.0.1"},
            }
        },
        "network": {"link_speed_gbps": 10, "mtu": 65536},
        "protocols": ["nvme-tcp"],
        "targets": [
            {
                "kind": "spdk",
                "host": "localhost",
                "protocols": ["nvme-tcp"],
                "devices": {"disk0": {"path": str(disk), "writable": True}},
                "nvme": {"port": _free_port(), "subsystems": [{"nqn": NQN, "namespaces": ["disk0"]}]},
                "name_prefix": prefix or f"fqa-it{os.getpid()}",
                "spdk": spdk,
            }
        ],
    }
    return LabModel.model_validate(data)


def _target(lab: LabModel) -> SpdkTarget:
    return SpdkTarget(lab, lab.targets[0], {"localhost": LocalHost("localhost")})


@pytest.fixture(scope="module", autouse=True)
def _no_dead_runs_app(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A test process killed mid-test leaves its nvmf_tgt (prefix ``fqa-it<its pid>``) holding core 0's lock, and
    every start here then fails ("Cannot create lock on core 0"): such an app is stopped first, by the clean-up a
    user's next run does. A live process's app is never touched."""
    for state in Path("/run/fabricqa").glob("fqa-it*-spdk.json"):
        prefix = state.name.removesuffix("-spdk.json")
        pid = prefix.removeprefix("fqa-it")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _target(_lab(tmp_path_factory.mktemp("dead"), prefix=prefix)).cleanup_stale()


@pytest.fixture
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # A short path: a UNIX socket path has at most 107 bytes.
    path = Path(f"/tmp/fqa-spdk-{os.getpid()}")
    path.mkdir(exist_ok=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)
    Path(f"/run/fabricqa/fqa-it{os.getpid()}-spdk-nvmf_tgt.log").unlink(missing_ok=True)  # kept by design; ours here


@pytest.mark.parametrize("client", ["own", "rpc.py"])
def test_provision_and_teardown_leave_nothing(tmp: Path, client: str) -> None:
    if client == "rpc.py" and RPC_PY is None:
        pytest.skip("FABRICQA_SPDK_RPC_PY does not name SPDK's scripts/rpc.py")
    target = _target(_lab(tmp, rpc_py=RPC_PY if client == "rpc.py" else None))
    undo = UndoStack()
    try:
        export = target.provision("nvme-tcp", undo)
        assert export.subsystems == (NQN,) and export.address == "127.0.0.1"
        snap = target.snapshot()
        sub = snap.subsystems[NQN]
        assert sub["model_number"] == target.mark and sub["serial_number"] == target.serial
        assert [ns["bdev_name"] for ns in sub["namespaces"]] == [f"{target.model.name_prefix}_disk0"]
        assert sub["listen_addresses"][0]["trsvcid"] == str(export.port)
        assert "TCP" in snap.transports
        assert target.leftovers()  # the app, the subsystem, the bdev and the state file
    finally:
        errors = undo.unwind()
    assert errors == []
    assert target.leftovers() == []
    assert not target.snapshot().loaded


KILLED_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pytest_fabricqa.lab.model import LabModel
    from pytest_fabricqa.core.undo import UndoStack
    from pytest_fabricqa.targets.spdk import SpdkTarget
    from pytest_fabricqa.transport.local import LocalHost

    lab = LabModel.model_validate(json.loads(sys.argv[1]))
    SpdkTarget(lab, lab.targets[0], {"localhost": LocalHost("localhost")}).provision("nvme-tcp", UndoStack())
    print("PROVISIONED", flush=True)
    time.sleep(600)
    """
)


def test_a_killed_runs_nvmf_tgt_is_found_and_stopped_by_the_next_start(tmp: Path) -> None:
    lab = _lab(tmp)
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD, json.dumps(lab.model_dump(mode="json"))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert line.strip() == "PROVISIONED", child.stderr.read() if child.stderr else ""
    target = _target(lab)
    left = target.leftovers()
    assert any("nvmf_tgt pid" in s for s in left), left  # detached: it outlived the run that started it
    removed = target.cleanup_stale()
    assert removed and "stopped nvmf_tgt" in removed[0]
    assert target.leftovers() == []
    undo = UndoStack()  # and the next run starts afresh on the same socket and port
    try:
        target.provision("nvme-tcp", undo)
    finally:
        assert undo.unwind() == []
    assert target.leftovers() == []


def test_attached_app_keeps_what_we_did_not_make(tmp: Path) -> None:
    assert BINARY is not None
    sock = str(tmp / "spdk.sock")
    app = subprocess.Popen(
        [BINARY, "-m", "0x1", "-r", sock, "-s", "512", "-u", "--env-context=--no-huge --legacy-mem"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        lab = _lab(tmp, start=False)
        target = _target(lab)
        foreign_disk = tmp / "foreign.img"
        with foreign_disk.open("wb") as f:
            f.truncate(16 * 1024 * 1024)
        rpc = target.rpc()
        rpc.batch([("framework_wait_init", None)], wait=60)
        rpc.call("bdev_aio_create", {"name": "foreign_disk", "filename": str(foreign_disk), "block_size": 512})
        rpc.call("nvmf_create_subsystem", {"nqn": FOREIGN_NQN, "model_number": target.mark})  # our model, not ours
        rpc.call("nvmf_subsystem_add_ns", {"nqn": FOREIGN_NQN, "namespace": {"bdev_name": "foreign_disk"}})
        before = target.snapshot()
        undo = UndoStack()
        try:
            target.provision("nvme-tcp", undo)
            assert NQN in target.snapshot().subsystems
            # The record names the app provisioned into, as ss sees it: one that replaces it holds nothing of ours.
            assert json.loads(Path(target.state_file).read_text())["attached_pid"] == app.pid
        finally:
            assert undo.unwind() == []
        after = target.snapshot()
        assert set(after.subsystems) == set(before.subsystems) == {FOREIGN_NQN}
        assert set(after.bdevs) == set(before.bdevs) == {"foreign_disk"}
        assert target.leftovers() == [] and target.cleanup_stale() == []
        assert app.poll() is None  # the app we attached to still runs
    finally:
        app.terminate()
        try:
            app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait(timeout=30)
        deadline = time.monotonic() + 5
        while Path(sock).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
