"""The guests themselves, end to end over the real ssh client: the shared lab's kernel, Soft-RoCE, storage
segment, MTU, drives and initiator names, as a suite would find them.

Runs on the lab tests/vlab/conftest.py shares (booted once, or attached to); booting and stopping, SIGKILL and
restart are tests/vlab/test_lifecycle_vlab.py's.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from vlab_support import make_lab

from pytest_fabricqa.vlab import VirtualLab
from pytest_fabricqa.vlab.lab import spec_from_lab

pytestmark = pytest.mark.vlab


def test_every_guest_answers_the_real_ssh_client_with_the_lab_it_was_asked_for(virtual_lab: VirtualLab) -> None:
    spec = spec_from_lab(make_lab())
    assert len(virtual_lab.qemu_processes()) == len(spec.guests)
    assert VirtualLab.attach(spec, virtual_lab.run_dir) is not None
    kernels = set()
    for guest in spec.guests:
        # The real ssh client, host key checked against the pinned known_hosts (StrictHostKeyChecking=yes).
        argv = [*virtual_lab.ssh_argv(guest.name), "hostname; uname -r; rdma -j link; ip -j addr show"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
        name, kernel, rdma, addr = out.split("\n", 3)
        assert name == guest.name
        kernels.add(kernel)
        # Every storage segment: eth1, eth2, ... with its address, the lab's MTU and an ACTIVE Soft-RoCE link.
        links = {link["ifname"]: link for link in json.loads(addr)}
        rxe = {link.get("netdev"): link for link in json.loads(rdma)}
        for n, address in enumerate((guest.storage_address, *guest.storage_paths), 1):
            port = links[f"eth{n}"]
            assert port["mtu"] == guest.storage_mtu
            inet = [a for a in port["addr_info"] if a["family"] == "inet"]
            assert f"{inet[0]['local']}/{inet[0]['prefixlen']}" == address
            assert rxe[f"eth{n}"]["ifname"] == f"rxe{n - 1}" and rxe[f"eth{n}"]["state"] == "ACTIVE"
        assert "fabricqa-init: READY " + guest.name in virtual_lab.console_log(guest.name).read_text()
    assert len(kernels) == 1  # one image, one kernel


def test_the_storage_segment_carries_full_frames_unfragmented(virtual_lab: VirtualLab) -> None:
    spec = spec_from_lab(make_lab())
    target, initiator = spec.guests[0], spec.guests[1]
    payload = str(target.storage_mtu - 28)  # IPv4 + ICMP headers
    peer = initiator.storage_address.split("/")[0]
    ping = virtual_lab.ssh(target.name, ["ping", "-c", "2", "-W", "5", "-M", "do", "-s", payload, peer], check=False)
    assert ping.ok, ping.stdout + ping.stderr
    ping = virtual_lab.ssh(initiator.name, ["ping", "-c", "2", "-W", "5", target.name], check=False)
    assert ping.ok, ping.stdout + ping.stderr
    # Each further segment carries full frames too, and only its own subnet: its own path.
    for mine, theirs in zip(target.storage_paths, initiator.storage_paths, strict=True):
        peer = theirs.split("/")[0]
        ping = virtual_lab.ssh(
            target.name, ["ping", "-c", "2", "-W", "5", "-M", "do", "-s", payload, peer], check=False
        )
        assert ping.ok, ping.stdout + ping.stderr
        route = virtual_lab.ssh(target.name, ["ip", "-o", "route", "get", peer]).stdout
        assert f"src {mine.split('/')[0]}" in route, route


def test_drives_and_initiator_names_are_the_labs(virtual_lab: VirtualLab) -> None:
    spec = spec_from_lab(make_lab())
    target = spec.guests[0]
    nvme = [d.id for d in target.drives if d.kind == "nvme"]
    drives = json.loads(virtual_lab.ssh(target.name, ["nvme", "list", "-o", "json"]).stdout)["Devices"]
    assert sorted(d["SerialNumber"].strip() for d in drives) == sorted(nvme)
    names = {virtual_lab.ssh(g.name, ["cat", "/etc/iscsi/initiatorname.iscsi"]).stdout for g in spec.guests}
    assert len(names) == len(spec.guests)
    for guest in spec.guests[1:]:
        assert virtual_lab.ssh(guest.name, ["pgrep", "-x", "iscsid"], check=False).ok  # iscsiadm needs it
