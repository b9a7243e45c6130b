"""End to end: build (or reuse) the image, boot a 2-guest lab, check it over the real ssh client, stop it.

Slow (about a minute, plus the image build on a cold cache), so marked ``vlab``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pytest_fabricqa.vlab import Drive, Guest, VirtualLab, VlabSpec, build_image, procs

SPEC = VlabSpec(
    name="e2e",
    guests=(
        Guest("vstor", 12022, "10.10.10.10/24", storage_mtu=9000, drives=(Drive("E2E0001", 64),)),
        Guest("init1", 12023, "10.10.10.11/24", storage_mtu=9000),
    ),
)


def _processes_mentioning(text: str) -> set[int]:
    """Pids whose command line mentions ``text`` (other teams' labs may run beside ours)."""
    out = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


@pytest.mark.vlab
def test_two_guest_lab_boots_reaches_and_stops(tmp_path: Path) -> None:
    image = build_image(log=print)
    lab = VirtualLab.start(SPEC, tmp_path / "lab", image, owner_pid=os.getpid())
    started = list(lab.state.processes)
    try:
        assert len(lab.qemu_processes()) == 2
        assert VirtualLab.attach(SPEC, tmp_path / "lab") is not None
        for guest in SPEC.guests:
            # The real ssh client, host key checked against the pinned known_hosts (StrictHostKeyChecking=yes).
            argv = [*lab.ssh_argv(guest.name), "hostname; uname -r; rdma link; ip -j addr show eth1"]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
            name, kernel, rdma, addr = out.split("\n", 3)
            assert name == guest.name
            assert kernel == image.kernel_version
            assert "rxe0/1 state ACTIVE" in rdma and "netdev eth1" in rdma
            eth1 = json.loads(addr)[0]
            assert eth1["mtu"] == guest.storage_mtu
            inet = [a for a in eth1["addr_info"] if a["family"] == "inet"]
            assert f"{inet[0]['local']}/{inet[0]['prefixlen']}" == guest.storage_address
        # Over the storage segment, with a full jumbo frame that must not be fragmented.
        ping = lab.ssh("vstor", ["ping", "-c", "2", "-W", "5", "-M", "do", "-s", "8972", "10.10.10.11"], check=False)
        assert ping.ok, ping.stdout + ping.stderr
        ping = lab.ssh("init1", ["ping", "-c", "2", "-W", "5", "vstor"], check=False)
        assert ping.ok, ping.stdout + ping.stderr
        drives = json.loads(lab.ssh("vstor", ["nvme", "list", "-o", "json"]).stdout)["Devices"]
        assert [d["SerialNumber"].strip() for d in drives] == ["E2E0001"]
        names = {lab.ssh(g.name, ["cat", "/etc/iscsi/initiatorname.iscsi"]).stdout for g in SPEC.guests}
        assert len(names) == 2
        assert lab.ssh("init1", ["pgrep", "-x", "iscsid"], check=False).ok  # iscsiadm needs it
    finally:
        lab.stop()
    assert procs.read_state(tmp_path / "lab") is None
    assert not any(procs.alive(p) for p in started)
    assert _processes_mentioning(f"qemu-system-x86_64 -name .* -pidfile {tmp_path}") == set()
    lab.stop()  # idempotent
    assert "fabricqa-init: READY vstor" in lab.console_log("vstor").read_text()
