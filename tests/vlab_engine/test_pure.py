"""Pure tests of the virtual-lab engine: cache keys, sources, QEMU argv, guest config, stale cleanup.

Nothing here boots a guest; the real end-to-end test is test_lab_e2e.py (marked ``vlab``).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.vlab import image as image_mod
from pytest_fabricqa.vlab import procs
from pytest_fabricqa.vlab.image import Image, cache_key, debian_sources, module_closure
from pytest_fabricqa.vlab.lab import LabInTheWay, check_attachable, run_dir_for, spec_from_lab
from pytest_fabricqa.vlab.machine import (
    BOOT_MODULES,
    TB_SIZE_MB,
    VirtualLab,
    guest_config_tar,
    guest_env,
    host_nqn,
    initiator_name,
    known_hosts_line,
    lab_forwarding,
    qemu_argv,
    socket_dir,
    storage_links,
)
from pytest_fabricqa.vlab.spec import (
    Drive,
    Guest,
    SpecError,
    VlabSpec,
    load_spec_json,
    spec_differences,
    spec_from_dict,
)

SPEC = VlabSpec(
    name="lab1",
    guests=(
        Guest("vstor", 10022, "10.10.10.10/24", storage_mtu=9000, drives=(Drive("NVME0001", 512),)),
        Guest("init1", 10023, "10.10.10.11/24"),
    ),
)


def test_cache_key_changes_with_each_input() -> None:
    base = cache_key(build_script="x")
    assert base == cache_key(build_script="x")
    assert cache_key(packages=(*image_mod.PACKAGES, "xfsprogs"), build_script="x") != base
    assert cache_key(suite="trixie", build_script="x") != base
    assert cache_key(modules=("nvme",), build_script="x") != base
    assert cache_key(build_script="y") != base
    # Order of the package list is not an input: the same set gives the same image.
    assert cache_key(packages=reversed(image_mod.PACKAGES), build_script="x") == base


def test_cache_key_default_hashes_the_builder_source() -> None:
    assert cache_key() == cache_key(build_script=Path(image_mod.__file__).read_text())


def test_cache_root_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert image_mod.cache_root() == tmp_path / "fabricqa" / "vlab"


def test_debian_sources_keeps_only_the_suite(tmp_path: Path) -> None:
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n"
    )
    one_line = tmp_path / "x.list"
    one_line.write_text(
        "deb [signed-by=/k.gpg] http://security.example/debian-security bookworm-security main\n"
        "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n# deb http://x bookworm main\n"
    )
    text = debian_sources([deb822, one_line, tmp_path / "missing.list"])
    assert "nodesource" not in text and "cloud.google" not in text and "http://x" not in text
    assert "Suites: bookworm bookworm-updates" in text
    assert "URIs: http://security.example/debian-security\nSuites: bookworm-security" in text
    assert "Signed-By: /k.gpg" in text


MODULES_DEP = """\
kernel/drivers/nvme/host/nvme-tcp.ko: kernel/drivers/nvme/host/nvme-fabrics.ko kernel/drivers/nvme/host/nvme-core.ko
kernel/drivers/nvme/host/nvme-fabrics.ko: kernel/drivers/nvme/host/nvme-core.ko
kernel/drivers/nvme/host/nvme-core.ko:
kernel/crypto/crc32_generic.ko:
kernel/crypto/xts.ko: kernel/lib/libx.ko
kernel/lib/libx.ko:
kernel/sound/snd.ko:
"""


def test_module_closure_follows_dependencies_and_dash_names() -> None:
    keep = module_closure(MODULES_DEP, ["nvme_tcp", "not_a_module"], ["kernel/crypto/"])
    assert keep == {
        "kernel/drivers/nvme/host/nvme-tcp.ko",
        "kernel/drivers/nvme/host/nvme-fabrics.ko",
        "kernel/drivers/nvme/host/nvme-core.ko",
        "kernel/crypto/crc32_generic.ko",
        "kernel/crypto/xts.ko",
        "kernel/lib/libx.ko",
    }


def test_cpio_writer_output_is_read_back_by_cpio(tmp_path: Path) -> None:
    out = io.BytesIO()
    writer = image_mod._CpioWriter(out)
    writer.add("etc", 0o040755)
    writer.add("etc/hostname", 0o100644, b"vstor\n")
    writer.add("bin", 0o120777, b"usr/bin")
    writer.close()
    archive = tmp_path / "a.cpio"
    archive.write_bytes(out.getvalue())
    listing = subprocess.run(
        ["cpio", "-itv", "--quiet"], input=archive.read_bytes(), capture_output=True, check=True
    ).stdout.decode()
    assert "etc/hostname" in listing and "bin -> usr/bin" in listing
    dest = tmp_path / "x"
    dest.mkdir()
    subprocess.run(["cpio", "-id", "--quiet"], input=archive.read_bytes(), cwd=dest, check=True)
    assert (dest / "etc" / "hostname").read_text() == "vstor\n"


def test_image_load_needs_manifest_and_files(tmp_path: Path) -> None:
    assert Image.load(tmp_path) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"key": "k", "kernel_version": "6.1.0-1-amd64"}))
    assert Image.load(tmp_path) is None  # kernel and cpio missing
    (tmp_path / "vmlinuz").write_bytes(b"k")
    (tmp_path / "rootfs.cpio").write_bytes(b"c")
    image = Image.load(tmp_path)
    assert image is not None and image.kernel_version == "6.1.0-1-amd64"


def test_qemu_argv() -> None:
    image = Image(Path("/cache/k"), "k", "6.1.0-1-amd64")
    guest = SPEC.guests[0]
    argv = qemu_argv(guest, 0, image, Path("/run/lab/vstor"), Path("/run/lab/sock"))
    joined = shlex.join(argv)
    assert argv[0] == "qemu-system-x86_64"
    assert f"-accel tcg,tb-size={TB_SIZE_MB} -cpu max" in joined
    assert "user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:10022-:22" in argv
    assert "stream,id=storage,server=off,addr.type=unix,addr.path=/run/lab/sock/switch.sock" in argv
    vde = qemu_argv(guest, 0, image, Path("/run/lab/vstor"), Path("/run/lab/sock"), switch="vde")
    assert "vde,id=storage,sock=/run/lab/sock/switch" in vde
    assert "virtio-net-pci,netdev=mgmt,mac=52:54:00:fa:00:00" in argv
    assert "virtio-net-pci,netdev=storage,mac=52:54:00:fa:01:00" in argv
    assert "nvme,serial=NVME0001,drive=drv-NVME0001" in argv
    assert any(a.startswith("if=none,id=drv-NVME0001,file=/run/lab/vstor/drive-NVME0001.raw,") for a in argv)
    assert argv[argv.index("-kernel") + 1] == "/cache/k/vmlinuz"
    assert argv[argv.index("-initrd") + 1] == "/cache/k/rootfs.cpio"
    assert argv[argv.index("-m") + 1] == "1024" and argv[argv.index("-smp") + 1] == "1"
    assert "file:/run/lab/vstor/console.log" in argv
    assert "name=opt/fabricqa/config.tar,file=/run/lab/vstor/config.tar" in argv
    # Nothing may listen or forward beyond the loopback address.
    assert "0.0.0.0" not in joined and "hostfwd=tcp::" not in joined
    second = qemu_argv(SPEC.guests[1], 1, image, Path("/g"), Path("/s"))
    assert "virtio-net-pci,netdev=storage,mac=52:54:00:fa:01:01" in second
    assert not any(a.startswith("nvme,") for a in second)


PATHS = VlabSpec(
    name="lab2",
    guests=(
        Guest("vstor", 10022, "10.10.10.10/24", storage_paths=("10.10.20.10/24",)),
        Guest("init1", 10023, "10.10.10.11/24", storage_paths=("10.10.20.11/24",)),
    ),
)


def test_a_second_path_is_a_second_nic_on_a_second_switch() -> None:
    image = Image(Path("/cache/k"), "k", "6.1.0-1-amd64")
    argv = qemu_argv(PATHS.guests[1], 1, image, Path("/g"), Path("/run/lab/sock"))
    assert PATHS.segments == 2 and SPEC.segments == 1
    assert "stream,id=storage,server=off,addr.type=unix,addr.path=/run/lab/sock/switch.sock" in argv
    assert "stream,id=storage2,server=off,addr.type=unix,addr.path=/run/lab/sock/switch2.sock" in argv
    assert "virtio-net-pci,netdev=storage2,mac=52:54:00:fa:02:01" in argv
    vde = qemu_argv(PATHS.guests[1], 1, image, Path("/g"), Path("/run/lab/sock"), switch="vde")
    assert "vde,id=storage2,sock=/run/lab/sock/switch2" in vde
    # One storage NIC only without further paths, as before.
    assert not any("storage2" in a for a in qemu_argv(SPEC.guests[1], 1, image, Path("/g"), Path("/s")))


def test_the_guest_learns_each_further_paths_mac_and_address(tmp_path: Path) -> None:
    def sourced(spec: VlabSpec, index: int) -> str:
        env = tmp_path / "guest.env"
        env.write_text(guest_env(spec, spec.guests[index], index))
        argv = ["sh", "-c", '. "$1"; echo "[$FQ_PATH_MACS|$FQ_PATH_ADDRESSES]"', "-", str(env)]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    assert sourced(PATHS, 1) == "[52:54:00:fa:02:01|10.10.20.11/24]"
    assert sourced(SPEC, 1) == "[|]"


def test_the_vlab_lab_file_gives_every_guest_two_paths() -> None:
    spec = spec_from_lab(load_lab(Path(__file__).parents[2] / "labs" / "vlab.yaml"))
    assert spec.segments == 2
    assert {g.name: g.storage_paths for g in spec.guests} == {
        "vstor": ("10.10.20.19/24",), "vnode1": ("10.10.20.17/24",), "vnode2": ("10.10.20.18/24",),
    }  # fmt: skip


def test_a_guests_storage_interfaces_must_be_eth1_eth2_in_order(tmp_path: Path) -> None:
    data = yaml.safe_load((Path(__file__).parents[2] / "labs" / "vlab.yaml").read_text())
    data["hosts"]["vnode1"]["storage"] = [
        {"interface": "eth2", "address": "10.10.20.17"}, {"interface": "eth1", "address": "10.10.10.17"},
    ]  # fmt: skip
    with pytest.raises(SpecError, match=r"hosts\.vnode1\.storage: .* are eth1, eth2 in that order"):
        spec_from_lab(LabModel.model_validate(data))


def test_virtio_drive_argv() -> None:
    guest = Guest("g", 10030, "10.0.0.1/24", drives=(Drive("D1", 64, kind="virtio"),))
    argv = qemu_argv(guest, 0, Image(Path("/c"), "k", "v"), Path("/g"), Path("/s"))
    assert "virtio-blk-pci,serial=D1,drive=drv-D1" in argv


def test_known_hosts_line() -> None:
    line = known_hosts_line(10022, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake vstor\n")
    assert line == "[127.0.0.1]:10022 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake"


def test_known_hosts_verifies_with_real_ssh_keygen(tmp_path: Path) -> None:
    key = tmp_path / "host"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(known_hosts_line(10022, key.with_suffix(".pub").read_text()) + "\n")
    found = subprocess.run(["ssh-keygen", "-F", "[127.0.0.1]:10022", "-f", str(known)], capture_output=True, text=True)
    assert found.returncode == 0 and "ssh-ed25519" in found.stdout
    other = subprocess.run(["ssh-keygen", "-F", "[127.0.0.1]:10023", "-f", str(known)], capture_output=True)
    assert other.returncode != 0


def test_guest_env_is_shell_quoted_and_sourced(tmp_path: Path) -> None:
    env = tmp_path / "guest.env"
    env.write_text(guest_env(SPEC, SPEC.guests[0], 0))
    out = subprocess.run(
        ["sh", "-c", '. "$1"; echo "$FQ_HOSTNAME|$FQ_STORAGE_ADDRESS|$FQ_STORAGE_MTU|$FQ_MODULES"', "-", str(env)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == f"vstor|10.10.10.10/24|9000|{' '.join(BOOT_MODULES)}"
    env.write_text(guest_env(SPEC, replace(SPEC.guests[0], hugepages_mb=512), 0))
    out = subprocess.run(
        ["sh", "-c", '. "$1"; echo "$FQ_HUGEPAGES_MB"', "-", str(env)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "512"  # guest_init.sh reserves 256 pages of 2 MiB and mounts hugetlbfs


def test_guest_config_tar(tmp_path: Path) -> None:
    key = tmp_path / "ssh_host_ed25519_key"
    key.write_text("PRIVATE")
    key.with_suffix(".pub").write_text("ssh-ed25519 AAAA vstor\n")
    blob = guest_config_tar(SPEC, SPEC.guests[1], 1, key, "ssh-ed25519 CLIENT x\n", "#!/bin/sh\n")
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        members = {m.name: m for m in tar.getmembers()}

        def read(name: str) -> str:
            handle = tar.extractfile(name)
            assert handle is not None
            return handle.read().decode()

        assert read("etc/hostname") == "init1\n"
        assert read("etc/iscsi/initiatorname.iscsi") == f"InitiatorName={initiator_name(SPEC, SPEC.guests[1])}\n"
        assert read("root/.ssh/authorized_keys") == "ssh-ed25519 CLIENT x\n"
        assert "10.10.10.10\tvstor" in read("etc/hosts")
        nqn, host_id = host_nqn(SPEC, SPEC.guests[1])
        assert read("etc/nvme/hostnqn") == f"{nqn}\n" and nqn.endswith(host_id)
        assert read("etc/nvme/hostid") == f"{host_id}\n"
        assert members["etc/ssh/ssh_host_ed25519_key"].mode == 0o600
        assert members["sbin/fabricqa-init"].mode == 0o755
        assert members["root/.ssh"].isdir() and members["root/.ssh"].mode == 0o700
        assert all(m.uid == 0 and m.gid == 0 for m in members.values())


def test_initiator_names_are_unique_per_guest() -> None:
    names = {initiator_name(SPEC, g) for g in SPEC.guests}
    nqns = {host_nqn(SPEC, g) for g in SPEC.guests}
    assert len(names) == len(nqns) == len(SPEC.guests)
    assert host_nqn(SPEC, SPEC.guests[0]) == host_nqn(SPEC, SPEC.guests[0])  # stable across runs


def test_socket_dir_stays_short(tmp_path: Path) -> None:
    assert socket_dir(Path("/r")) == Path("/r/sock")
    long_dir = tmp_path / ("x" * 120)
    short = socket_dir(long_dir)
    assert len(str(short / "switch" / "ctl")) < 100
    assert socket_dir(long_dir) == short  # stable: stop() finds it again


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "Bad Name"}, "name:"),
        ({"guests": []}, "at least one guest"),
        ({"guests": [{"name": "a", "ssh_port": 22, "storage_address": "10.0.0.1/24"}]}, "ssh_port: 22"),
        ({"guests": [{"name": "a", "ssh_port": 10022, "storage_address": "10.0.0.1"}]}, "IPv4 /prefix"),
        ({"guests": [{"name": "a", "ssh_port": 10022, "storage_address": "nope/24"}]}, "not an address"),
        (
            {"guests": [{"name": "a", "ssh_port": 10022, "storage_address": "10.0.0.1/24", "storage_mtu": 9500}]},
            "storage_mtu",
        ),
        (
            {
                "guests": [
                    {"name": "a", "ssh_port": 10022, "storage_address": "10.0.0.1/24"},
                    {"name": "a", "ssh_port": 10023, "storage_address": "10.0.0.2/24"},
                ]
            },
            "used twice",
        ),
        (
            {
                "guests": [
                    {"name": "a", "ssh_port": 10022, "storage_address": "10.0.0.1/24"},
                    {"name": "b", "ssh_port": 10023, "storage_address": "10.0.1.2/24"},
                ]
            },
            "2 subnets",
        ),
        (
            {
                "guests": [
                    {
                        "name": "a",
                        "ssh_port": 10022,
                        "storage_address": "10.0.0.1/24",
                        "drives": [{"id": "D1", "size_mb": 8, "kind": "scsi"}],
                    }
                ]
            },
            "drives[0].kind",
        ),
        ({"guests": [{"name": "a", "ssh_port": 10022, "storage_address": "10.0.0.1/24", "cpu": 2}]}, "unknown"),
        (
            {
                "guests": [
                    {
                        "name": "a",
                        "ssh_port": 10022,
                        "storage_address": "10.0.0.1/24",
                        "storage_paths": ["10.0.1.1/24"],
                    },
                    {
                        "name": "b",
                        "ssh_port": 10023,
                        "storage_address": "10.0.0.2/24",
                        "storage_paths": ["10.0.2.2/24"],
                    },
                ]
            },
            "guests[*].storage_paths[0]: the guests share one L2 segment there but are in 2 subnets",
        ),
        (
            {
                "guests": [
                    {"name": "a", "ssh_port": 10022, "storage_address": "10.0.0.1/24", "storage_paths": ["10.0.0.9/24"]}
                ]
            },
            "guests[*].storage_paths[0]: segment 2 is in 10.0.0.0/24, which overlaps another segment's subnet",
        ),
        (
            {
                "guests": [
                    {"name": "a", "ssh_port": 10022, "storage_address": "10.0.0.1/24", "storage_paths": ["10.0.0.1/24"]}
                ]
            },
            "guests[0].storage_paths[0]: 10.0.0.1 is used twice",
        ),
        (
            {"guests": [{"name": "a", "ssh_port": 10022, "storage_address": "10.0.0.1/24", "hugepages_mb": 511}]},
            "guests[0].hugepages_mb: 511 must be an even number of MiB (2 MiB pages), at most half of memory_mb",
        ),
        (
            {
                "guests": [
                    {
                        "name": "a",
                        "ssh_port": 10022,
                        "storage_address": "10.0.0.1/24",
                        "memory_mb": 1024,
                        "hugepages_mb": 1024,
                    }
                ]
            },
            "hugepages_mb: 1024 must be an even number of MiB (2 MiB pages), at most half of memory_mb (1024)",
        ),
    ],
)
def test_spec_errors_name_the_key(change: dict[str, object], message: str, tmp_path: Path) -> None:
    data = {**SPEC.to_dict(), **change}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match=re.escape(message)) as info:
        load_spec_json(path)
    assert str(path) in str(info.value)


def test_spec_round_trips_through_json(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC.to_dict()))
    assert load_spec_json(path) == SPEC
    assert spec_from_dict(json.loads(path.read_text())) == SPEC


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _dead_owner() -> procs.ProcessRef:
    owner = _spawn([sys.executable, "-c", "import time; time.sleep(0.3)"])
    ref = procs.ref("owner", owner.pid)
    owner.wait()
    return ref


def _write_state(run_dir: Path, owner: procs.ProcessRef | None, processes: list[procs.ProcessRef]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    state = procs.LabState(spec=SPEC.to_dict(), owner=owner, processes=tuple(processes), image_root="", sock_dir="")
    procs.write_state(run_dir, state)


def test_cleanup_stale_kills_processes_of_a_dead_owner(tmp_path: Path) -> None:
    stand_in = _spawn(["sleep", "300"])  # stands in for a qemu left behind by a killed run
    try:
        _write_state(tmp_path / "lab1", _dead_owner(), [procs.ref("qemu vstor", stand_in.pid)])
        cleaned = procs.cleanup_stale(tmp_path)
        assert cleaned == [f"qemu vstor (pid {stand_in.pid})"]
        assert stand_in.wait(timeout=10) == -15  # SIGTERM
        assert not (tmp_path / "lab1" / procs.STATE_FILE).exists()
        assert procs.cleanup_stale(tmp_path) == []
    finally:
        stand_in.kill()


def test_cleanup_stale_spares_live_owner_cli_labs_and_reused_pids(tmp_path: Path) -> None:
    stand_in = _spawn(["sleep", "300"])
    try:
        me = procs.ref("owner", __import__("os").getpid())
        _write_state(tmp_path / "live", me, [procs.ref("qemu a", stand_in.pid)])
        _write_state(tmp_path / "cli", None, [procs.ref("qemu b", stand_in.pid)])
        # Same pid, other start time: the pid was reused by a stranger, which must never be signalled.
        stranger = procs.ProcessRef("qemu c", stand_in.pid, procs.ref("x", stand_in.pid).start + 1)
        _write_state(tmp_path / "reused", _dead_owner(), [stranger])
        assert procs.cleanup_stale(tmp_path) == []
        assert stand_in.poll() is None
        assert not (tmp_path / "reused" / procs.STATE_FILE).exists()
    finally:
        stand_in.kill()
        stand_in.wait()


def test_watchdog_kills_the_lab_when_its_owner_dies(tmp_path: Path) -> None:
    owner = _spawn(["sleep", "300"])
    stand_in = _spawn(["sleep", "300"])
    try:
        _write_state(tmp_path, procs.ref("owner", owner.pid), [procs.ref("qemu vstor", stand_in.pid)])
        watchdog = subprocess.Popen(
            [sys.executable, "-m", "pytest_fabricqa.vlab.watchdog", str(tmp_path)],
            cwd=Path(image_mod.__file__).parents[2],
        )
        time.sleep(1)
        assert stand_in.poll() is None  # owner alive: the lab lives
        owner.kill()
        owner.wait()
        assert stand_in.wait(timeout=15) == -15
        assert watchdog.wait(timeout=15) == 0
    finally:
        for proc in (owner, stand_in):
            proc.kill()
            proc.wait()


def test_watchdog_started_before_the_guests_keeps_watching(tmp_path: Path) -> None:
    """VirtualLab.start runs the watchdog before any process is recorded: it must not take the empty list for a
    stopped lab (it once did, and a SIGKILLed pytest left its guests running)."""
    owner = _spawn(["sleep", "300"])
    stand_in = _spawn(["sleep", "300"])
    try:
        _write_state(tmp_path, procs.ref("owner", owner.pid), [])
        watchdog = subprocess.Popen(
            [sys.executable, "-m", "pytest_fabricqa.vlab.watchdog", str(tmp_path)],
            cwd=Path(image_mod.__file__).parents[2],
        )
        time.sleep(1)
        assert watchdog.poll() is None
        _write_state(tmp_path, procs.ref("owner", owner.pid), [procs.ref("qemu vstor", stand_in.pid)])
        owner.kill()
        owner.wait()
        assert stand_in.wait(timeout=15) == -15
        assert watchdog.wait(timeout=15) == 0
    finally:
        for proc in (owner, stand_in):
            proc.kill()
            proc.wait()


def _frame(dst: bytes, src: bytes, size: int) -> bytes:
    frame = dst + src + b"\x08\x00" + bytes(size - 14)
    return len(frame).to_bytes(4, "big") + frame


def _recv_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    size = int.from_bytes(head, "big")
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return body


def test_switch_floods_learns_and_passes_jumbo_frames(tmp_path: Path) -> None:
    path = tmp_path / "switch.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_fabricqa.vlab.switch", str(path)],
        stdout=subprocess.PIPE,
        cwd=Path(image_mod.__file__).parents[2],
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        ports = []
        for _ in range(3):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            sock.connect(str(path))
            ports.append(sock)
        time.sleep(0.2)
        mac = [bytes([0x52, 0x54, 0, 0xFA, 1, i]) for i in range(3)]
        broadcast = b"\xff" * 6
        ports[0].sendall(_frame(broadcast, mac[0], 60))  # flooded to 1 and 2; switch learns mac0 -> port 0
        assert _recv_frame(ports[1])[6:12] == mac[0]
        assert _recv_frame(ports[2])[6:12] == mac[0]
        ports[1].sendall(_frame(mac[0], mac[1], 9014))  # a full 9000-MTU frame, unicast to a learned MAC
        jumbo = _recv_frame(ports[0])
        assert len(jumbo) == 9014 and jumbo[:6] == mac[0]
        ports[2].setblocking(False)
        with pytest.raises(BlockingIOError):
            ports[2].recv(1)  # the unicast frame did not reach the third port
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    assert not path.exists()


# -- lab identity: which running lab a lab file attaches to ---------------------------------------------------

REORDERED = VlabSpec(name="lab1", guests=tuple(reversed(SPEC.guests)))


def test_a_lab_is_its_guests_by_name_not_their_order() -> None:
    assert spec_differences(SPEC, REORDERED) == []
    bigger = VlabSpec(
        name="lab1",
        guests=(
            replace(SPEC.guests[0], memory_mb=2048, hugepages_mb=512),
            SPEC.guests[1],
            Guest("init2", 10024, "10.10.10.12/24"),
        ),
    )
    assert spec_differences(SPEC, bigger) == [
        "guest init2 is wanted but not running",
        "vstor.memory_mb: running 1024, wanted 2048",
        "vstor.hugepages_mb: running 0, wanted 512",  # SPDK on a guest without hugepages is not the lab asked for
    ]


def test_drive_order_matters_only_within_a_kind() -> None:
    """The guest names each kind's devices in spec order (nvme0n1, nvme1n1): that order is part of the lab."""
    a, b, v = Drive("A", 64), Drive("B", 128), Drive("V", 32, kind="virtio")
    one = VlabSpec(name="lab1", guests=(Guest("g", 10022, "10.10.10.10/24", drives=(a, b, v)),))
    kinds_moved = VlabSpec(name="lab1", guests=(Guest("g", 10022, "10.10.10.10/24", drives=(v, a, b)),))
    nvme_swapped = VlabSpec(name="lab1", guests=(Guest("g", 10022, "10.10.10.10/24", drives=(b, a, v)),))
    assert spec_differences(one, kinds_moved) == []
    assert spec_differences(one, nvme_swapped) == [
        "g.drives: running nvme A 64 MB, B 128 MB; virtio V 32 MB, wanted nvme B 128 MB, A 64 MB; virtio V 32 MB"
    ]


def _running_lab(run_dir: Path, spec: VlabSpec, owner: procs.ProcessRef | None = None) -> list[subprocess.Popen[bytes]]:
    """Stand-ins for a lab's switch and QEMU processes, recorded in ``run_dir`` as a running lab."""
    roles = ["switch", *(f"qemu {g.name}" for g in spec.guests)]
    children = [_spawn(["sleep", "300"]) for _ in roles]
    run_dir.mkdir(parents=True, exist_ok=True)
    state = procs.LabState(
        spec=spec.to_dict(),
        owner=owner,
        processes=tuple(procs.ref(role, c.pid) for role, c in zip(roles, children, strict=True)),
        image_root="",
        sock_dir="",
    )
    procs.write_state(run_dir, state)
    return children


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        child.kill()
        child.wait()


def test_a_running_lab_attaches_with_its_guests_listed_in_another_order(tmp_path: Path) -> None:
    children = _running_lab(tmp_path / "lab1", SPEC)
    try:
        attached = VirtualLab.attach(REORDERED, tmp_path / "lab1")
        assert attached is not None
        assert attached.spec == SPEC  # the order it booted in, which its MAC addresses follow
        assert VirtualLab.in_the_way(REORDERED, tmp_path / "lab1") is None
    finally:
        _stop(children)


def test_what_is_in_the_way_of_attaching(tmp_path: Path) -> None:
    bigger = VlabSpec(name="lab1", guests=(replace(SPEC.guests[0], memory_mb=2048), SPEC.guests[1]))
    assert VirtualLab.in_the_way(SPEC, tmp_path / "none") is None  # no lab at all
    children = _running_lab(tmp_path / "lab1", SPEC)
    try:
        assert VirtualLab.attach(bigger, tmp_path / "lab1") is None
        assert VirtualLab.in_the_way(bigger, tmp_path / "lab1") == (
            "it runs other guests (vstor.memory_mb: running 1024, wanted 2048)",
            True,
        )
        children[1].kill()
        children[1].wait()
        assert VirtualLab.in_the_way(SPEC, tmp_path / "lab1") == ("some of its processes are gone (qemu vstor)", False)
    finally:
        _stop(children)
    # A lab whose owner (a killed pytest) is dead is not in the way: booting cleans it up.
    children = _running_lab(tmp_path / "lab2", SPEC, owner=_dead_owner())
    try:
        assert VirtualLab.in_the_way(bigger, tmp_path / "lab2") is None
    finally:
        _stop(children)


VLAB_YAML = Path(__file__).resolve().parents[2] / "labs" / "vlab.yaml"


def _lab_with(tmp_path: Path, text: str) -> LabModel:
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return load_lab(path)


def _hosts_reversed(text: str) -> str:
    """labs/vlab.yaml with its hosts and its vlab guests listed in reverse order (as a YAML tool might re-save it)."""
    data = yaml.safe_load(text)
    data["hosts"] = dict(reversed(list(data["hosts"].items())))
    data["vlab"] = dict(reversed(list(data["vlab"].items())))
    return yaml.safe_dump(data, sort_keys=False)


def test_the_lab_file_with_hosts_reordered_attaches_and_another_lab_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    lab = load_lab(VLAB_YAML)
    state_dir = tmp_path / ".fabricqa"
    run_dir = run_dir_for(state_dir, lab)
    children = _running_lab(run_dir, spec_from_lab(lab))
    try:
        reordered = _lab_with(tmp_path, _hosts_reversed(VLAB_YAML.read_text()))
        assert [g.name for g in spec_from_lab(reordered).guests] == ["vnode2", "vnode1", "vstor"]
        check_attachable(reordered, state_dir)  # the same lab: attaches, nothing raised
        assert VirtualLab.attach(spec_from_lab(reordered), run_dir) is not None

        other = _lab_with(tmp_path, VLAB_YAML.read_text().replace("memory_mb: 3072", "memory_mb: 3584"))
        with pytest.raises(LabInTheWay) as caught:
            check_attachable(other, state_dir)
        message = str(caught.value)
        assert "\n" not in message
        assert message == (
            f"lab 'vlab': the virtual lab running in {run_dir} is not this lab file's: it runs other guests "
            "(vstor.memory_mb: running 3072, wanted 3584); stop it with "
            f"`fabricqa-vlab down --run-dir {run_dir}` and run again, "
            "or run with the lab file it was started from to attach to it"
        )
        # From a folder whose labs/vlab.yaml leads the CLI to this run dir, the hint is the short form.
        (tmp_path / "labs").mkdir()
        (tmp_path / "labs" / "vlab.yaml").write_text(VLAB_YAML.read_text())
        with pytest.raises(LabInTheWay, match=r"stop it with `fabricqa-vlab down --lab vlab` and run again"):
            check_attachable(other, state_dir)
    finally:
        _stop(children)


def test_the_lab_forwarding_a_port_is_read_from_its_qemu_command_line(tmp_path: Path) -> None:
    """A /proc of three processes: a lab guest's QEMU (its argv as :func:`qemu_argv` writes it), a process whose
    cmdline cannot be read, and another QEMU forwarding a port whose number starts the same."""
    run_dir = tmp_path / "elsewhere" / ".fabricqa" / "vlab" / "vlab"

    def process(pid: int, argv: list[str] | None) -> None:
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        cmdline = tmp_path / "proc" / str(pid) / "cmdline"
        if argv is None:
            cmdline.mkdir()  # reading it fails, as a process that ended while /proc was read does
        else:
            cmdline.write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")

    hostfwd = "user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:{}-:22"
    process(10, ["qemu-system-x86_64", "-pidfile", f"{run_dir}/vstor/qemu.pid", "-netdev", hostfwd.format(22191)])
    process(11, None)
    process(12, ["qemu-system-x86_64", "-pidfile", "/x/vlab/other/vstor/qemu.pid", "-netdev", hostfwd.format(221910)])
    assert lab_forwarding(22191, tmp_path / "proc") == run_dir
    assert lab_forwarding(22192, tmp_path / "proc") is None
    assert lab_forwarding(221910, tmp_path / "proc") == Path("/x/vlab/other")


def test_the_switch_logs_each_port_and_why_it_lost_one(tmp_path: Path) -> None:
    """A storage NIC whose switch connection ends is dead until the lab restarts (QEMU 7.2 does not reconnect), so
    the switch's log names every port it accepted (with the process on the other end) and why it dropped one."""
    path = tmp_path / "switch.sock"
    log = tmp_path / "switch.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_fabricqa.vlab.switch", str(path)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=Path(image_mod.__file__).parents[2],
        )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        garbled, leaving = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2))
        for sock in (garbled, leaving):
            sock.settimeout(5)
            sock.connect(str(path))
        garbled.sendall((70000).to_bytes(4, "big"))  # a length no frame has: the stream is out of step
        leaving.close()
        deadline = time.monotonic() + 10
        while log.read_text().count("dropped") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    lines = log.read_text().splitlines()
    me = f"pid {os.getpid()}"
    assert any(line.endswith(f"port 1, {me}: connected") for line in lines), lines
    assert any(
        f"port 1, {me}: dropped: a frame of 70000 bytes announced, over 65535: the framing is lost" in line
        for line in lines
    ), lines
    assert any(line.endswith(f"port 2, {me}: dropped: the peer closed the connection") for line in lines), lines


def test_the_lab_status_tells_a_storage_nic_cut_from_its_switch() -> None:
    """``fabricqa-vlab status`` reads QEMU's ``info network`` (recorded, tests/data/vlab/README.md): a stream
    netdev that no longer names its socket is a NIC whose link is gone for good."""
    data = Path(__file__).parents[1] / "data" / "vlab"
    assert storage_links((data / "info-network.txt").read_text()) == {"storage": True, "storage2": True}
    assert storage_links((data / "info-network-disconnected.txt").read_text()) == {"storage": False, "storage2": True}
