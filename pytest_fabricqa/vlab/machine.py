"""Boot, reach and stop a virtual lab: QEMU guests (software emulation) joined by one Ethernet switch.

Each guest gets two NICs: ``eth0`` on QEMU user networking (``restrict=on``: no traffic leaves QEMU, only the
SSH port forward on 127.0.0.1 reaches in) and ``eth1`` on a switch listening on a UNIX socket, which is the
lab's storage segment: our own ``switch.py`` (default; passes jumbo frames) or ``vde_switch`` (frames up to
1518 bytes). Nothing is ever sent beyond 127.0.0.1 and UNIX sockets.

Run dir layout (all of it is the lab's; nothing outside but the image cache and, for long run dirs, a short
socket folder in /tmp)::

    lab.json                 state: spec, owner, pids (see procs.py)
    ssh/id_ed25519[.pub]     the run's client key;  ssh/known_hosts  the guests' pinned host keys
    <guest>/console.log      the guest's serial console (kernel messages and fabricqa-init steps)
    <guest>/config.tar       what the guest gets through fw_cfg; <guest>/drive-<id>.raw its drives
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.transport.base import CommandError, CommandResult
from pytest_fabricqa.vlab import procs
from pytest_fabricqa.vlab.image import Image, build_image
from pytest_fabricqa.vlab.spec import Drive, Guest, SpecError, VlabSpec, spec_differences, spec_from_dict

# Loaded at boot (no udev). null_blk, brd and loop are in the image but left unloaded, so a test can load
# them with the parameters it needs (``modprobe null_blk nr_devices=1 gb=1``).
BOOT_MODULES: tuple[str, ...] = (
    "virtio_pci",
    "virtio_net",
    "virtio_rng",
    "crc32_generic",  # rdma_rxe fails with "failed to init crc32 algorithm err:-2" without it
    "crc32c_generic",
    "sd_mod",  # an iSCSI LUN gets no /dev node without it
    "sg",
    "nvme_core",
    "nvme",
    "virtio_blk",  # the virtio scratch drive (/dev/vda) for destructive tests
    "nvme_fabrics",
    "nvme_tcp",
    "nvme_rdma",
    "nvmet",
    "nvmet_tcp",
    "nvmet_rdma",
    "ib_core",
    "rdma_rxe",
    "rdma_cm",
    "rdma_ucm",
    "ib_uverbs",
    "ib_umad",
    "target_core_mod",
    "target_core_iblock",
    "target_core_file",
    "iscsi_target_mod",
    "ib_isert",
    "scsi_transport_iscsi",
    "iscsi_tcp",
    "ib_iser",
    "dm_mod",
    "dm_multipath",  # multipathd exits at once, silently, when this is not loaded
)

INIT_SCRIPT = Path(__file__).with_name("guest_init.sh")
DEFAULT_BOOT_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 10.0
QEMU = "qemu-system-x86_64"
TB_SIZE_MB = 256
"""TCG's translated-code cache per guest (MiB)."""
IQN_PREFIX = "iqn.2024-01.io.fabricqa"
# Guest steps the init script reports as "fabricqa-init: step=<name> FAILED" and how the host names them.
INIT_STEPS = {
    "stub": "boot",
    "mounts": "boot",
    "config": "boot",
    "modules": "kernel modules",
    "network": "storage link",
    "storage-link": "storage link",
    "hugepages": "hugepages",
    "rxe": "rxe",
    "iscsid": "iscsid",
    "sshd": "SSH ready",
}


class VlabError(FabricQAError):
    """A lab step failed. ``step`` is one of: image build, qemu start, boot, SSH ready, storage link, rxe."""

    def __init__(self, step: str, message: str, console: Path | None = None) -> None:
        self.step = step
        self.console = console
        text = f"vlab {step}: {message}"
        if console is not None:
            text += f" (console log: {console})"
        super().__init__(text)


def guest_macs(index: int) -> tuple[str, str]:
    """The (management, storage) MAC addresses of the guest at ``index``: the guest names NICs by them."""
    if not 0 <= index < 256:
        raise ValueError(f"guest index {index} out of range 0..255")
    return f"52:54:00:fa:00:{index:02x}", f"52:54:00:fa:01:{index:02x}"


def path_mac(index: int, segment: int) -> str:
    """The MAC address of the guest at ``index`` on storage segment ``segment`` (2, 3, ...: its eth2, eth3)."""
    if not 2 <= segment <= 254:
        raise ValueError(f"storage segment {segment} out of range 2..254")
    return f"52:54:00:fa:{segment:02x}:{guest_macs(index)[1][-2:]}"


def switch_socket(sock_dir: Path, segment: int, switch: str = "stream") -> Path:
    """Where storage segment ``segment`` (1, 2, ...) listens: ``switch.sock`` (vde: ``switch``), then
    ``switch2.sock`` ..."""
    suffix = "" if segment == 1 else str(segment)
    return sock_dir / (f"switch{suffix}" if switch == "vde" else f"switch{suffix}.sock")


def _storage_netdev(sock_dir: Path, segment: int, switch: str) -> str:
    netdev = "storage" if segment == 1 else f"storage{segment}"
    if switch == "vde":
        return f"vde,id={netdev},sock={switch_socket(sock_dir, segment, switch)}"
    if switch == "stream":
        return f"stream,id={netdev},server=off,addr.type=unix,addr.path={switch_socket(sock_dir, segment, switch)}"
    raise ValueError(f"switch {switch!r}: use 'stream' or 'vde'")


def initiator_name(spec: VlabSpec, guest: Guest) -> str:
    """The guest's unique iSCSI initiator name (written to /etc/iscsi/initiatorname.iscsi)."""
    return f"{IQN_PREFIX}:{spec.name}.{guest.name}"


def host_nqn(spec: VlabSpec, guest: Guest) -> tuple[str, str]:
    """The guest's NVMe host NQN and host ID, stable per lab and guest name and unique between guests.

    The image's nvme-cli generated one /etc/nvme/hostnqn at build time, which every guest would share;
    a target's allowed-hosts list could then not tell the initiators apart.
    """
    host_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"fabricqa-vlab:{spec.name}/{guest.name}"))
    return f"nqn.2014-08.org.nvmexpress:uuid:{host_id}", host_id


def known_hosts_line(port: int, host_public_key: str) -> str:
    """A known_hosts line pinning a guest's host key for ``ssh -p PORT root@127.0.0.1``."""
    kind, blob = host_public_key.split()[:2]
    return f"[127.0.0.1]:{port} {kind} {blob}"


def socket_dir(run_dir: Path) -> Path:
    """Where the lab's UNIX sockets go: ``run_dir/sock``, or a short /tmp folder when that path is too long.

    A UNIX socket path is limited to 107 bytes and vde_switch appends its own file names.
    """
    inside = Path(run_dir).resolve() / "sock"
    if len(str(inside)) <= 60:
        return inside
    digest = hashlib.sha256(str(inside).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"fabricqa-vlab-{digest}"


def qemu_argv(
    guest: Guest,
    index: int,
    image: Image,
    guest_dir: Path,
    sock_dir: Path,
    *,
    accel: str = "tcg",
    switch: str = "stream",
) -> list[str]:
    """The qemu-system-x86_64 command line of one guest (daemonized, console to ``guest_dir/console.log``).

    ``switch`` is the storage segment: ``stream`` (our switch.py, jumbo frames) or ``vde`` (vde_switch,
    frames up to 1518 bytes only).
    """
    mgmt_mac, storage_mac = guest_macs(index)
    storage_netdev = _storage_netdev(sock_dir, 1, switch)
    argv = [
        QEMU,
        "-name", guest.name,
        "-nodefaults",
        "-machine", "q35",
        # KVM on these hosts cannot boot a stock kernel (see VLAB-NOTES): software emulation only.
        # The translated-code cache: at 256 MiB each guest flushes it whole every ~20 s under the main job (`info jit`:
        # vnode1 107 flushes, 2026-12-03), but at 1 GiB (3-4 flushes) one nvme-tcp pair's connectivity, integrity
        # and performance cases took 184 s against 169 s: no gain measured, so it stays at 256.
        "-accel", f"{accel},tb-size={TB_SIZE_MB}" if accel == "tcg" else accel,
        "-cpu", "max",
        "-smp", str(guest.cpus),
        "-m", str(guest.memory_mb),
        "-display", "none",
        "-daemonize",
        "-pidfile", str(guest_dir / "qemu.pid"),
        "-serial", f"file:{guest_dir / 'console.log'}",
        "-qmp", f"unix:{sock_dir / (guest.name + '.qmp')},server=on,wait=off",
        "-kernel", str(image.kernel),
        "-initrd", str(image.initrd),
        # Under software emulation on a shared 2-core host an I/O can wait longer than the kernel's 30 s
        # default: the NVMe host (local drive, nvme-tcp, nvme-rdma) would abort, reset and drop the namespace
        # mid-run. Real labs keep their defaults; the guests wait 60 s for an I/O (the slowest p99 seen is ~6 s).
        # Not longer: Soft-RoCE on 6.1 now and then loses an nvme-rdma I/O ("rxe_reg_fast_mr: mr->lkey = 0x4488
        # not free" on vnode1, CI 2026-12-02); the host notices only at the timeout, then reconnects and retries
        # it. At 600 s the integrity case's fio ran into its own 600 s bound first and failed, and the fio left
        # running on the guest wrote on into the next case's region once the retry went through; at 120 s a
        # performance point's fio (4 + 1 s, waited for 125 s) was called hung first (SPDK over RDMA, CI
        # 2026-12-02). At 60 s the retry, and the reconnect before it, fit inside that wait.
        # mitigations=off: the retpolines and barriers Spectre mitigations put on every indirect call and syscall
        # cost the emulated CPU dearly (measured in one guest: a fork+exec 55 -> 42 ms, psync 4 KiB reads from
        # null_blk +50%); the guests are the lab's own and run no untrusted code. For the same reason Debian's other
        # hardening defaults are off (init_on_alloc zeroes every kernel allocation, and the rest add work to each
        # syscall): a fork+exec 30 -> 27 ms, `nvme list` 67 -> 62 ms (vnode1, 2026-12-03).
        "-append",
        "console=ttyS0 panic=-1 quiet mitigations=off init_on_alloc=0 randomize_kstack_offset=off "
        "hardened_usercopy=off audit=0 nvme_core.io_timeout=60 nvme_core.admin_timeout=600",
        "-no-reboot",
        "-netdev", f"user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:{guest.ssh_port}-:22",
        "-device", f"virtio-net-pci,netdev=mgmt,mac={mgmt_mac}",
        "-netdev", storage_netdev,
        "-device", f"virtio-net-pci,netdev=storage,mac={storage_mac}",
    ]  # fmt: skip
    for segment in range(2, 2 + len(guest.storage_paths)):  # a further path: eth<segment> on its own switch
        argv += [
            "-netdev", _storage_netdev(sock_dir, segment, switch),
            "-device", f"virtio-net-pci,netdev=storage{segment},mac={path_mac(index, segment)}",
        ]  # fmt: skip
    argv += [
        "-device", "virtio-rng-pci",
        "-fw_cfg", f"name=opt/fabricqa/config.tar,file={guest_dir / 'config.tar'}",
    ]  # fmt: skip
    for drive in guest.drives:
        if drive.kind == "ram":
            continue  # made inside the guest by brd (see guest_config_tar), not by QEMU
        # Throwaway sparse files: cache=unsafe skips host flushes, the guest still sees a real NVMe drive.
        argv += [
            "-drive",
            f"if=none,id=drv-{drive.id},file={guest_dir / f'drive-{drive.id}.raw'},format=raw,cache=unsafe",
        ]
        if drive.kind == "nvme":
            argv += ["-device", f"nvme,serial={drive.id},drive=drv-{drive.id}"]
        else:
            argv += ["-device", f"virtio-blk-pci,serial={drive.id},drive=drv-{drive.id}"]
    return argv


def guest_env(spec: VlabSpec, guest: Guest, index: int) -> str:
    """The shell-sourced ``/etc/fabricqa/guest.env`` the guest's init reads (values quoted once)."""
    mgmt_mac, storage_mac = guest_macs(index)
    values = {
        "FQ_LAB": spec.name,
        "FQ_HOSTNAME": guest.name,
        "FQ_MODULES": " ".join((*BOOT_MODULES, "brd") if ram_drives(guest) else BOOT_MODULES),
        "FQ_MGMT_MAC": mgmt_mac,
        "FQ_STORAGE_MAC": storage_mac,
        "FQ_STORAGE_ADDRESS": guest.storage_address,
        "FQ_STORAGE_MTU": str(guest.storage_mtu),
        # Further paths, in order eth2, eth3, ...: their MACs and addresses, space-separated.
        "FQ_PATH_MACS": " ".join(path_mac(index, s) for s in range(2, 2 + len(guest.storage_paths))),
        "FQ_PATH_ADDRESSES": " ".join(guest.storage_paths),
        "FQ_HUGEPAGES_MB": str(guest.hugepages_mb),
    }
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items())


def ram_drives(guest: Guest) -> list[Drive]:
    """The guest's RAM disks (drive kind "ram"), in spec order: /dev/ram0, /dev/ram1, ..."""
    return [d for d in guest.drives if d.kind == "ram"]


def guest_config_tar(
    spec: VlabSpec, guest: Guest, index: int, host_key: Path, client_public_key: str, init_script: str
) -> bytes:
    """The tar the guest unpacks over ``/`` at boot: init, env, hostname, hosts, keys, initiator names."""
    nqn, host_id = host_nqn(spec, guest)
    hosts = "127.0.0.1\tlocalhost\n" + "".join(f"{g.storage_ip}\t{g.name}\n" for g in spec.guests)
    files: list[tuple[str, bytes, int]] = [
        ("sbin/fabricqa-init", init_script.encode(), 0o755),
        ("etc/fabricqa/guest.env", guest_env(spec, guest, index).encode(), 0o644),
        ("etc/hostname", f"{guest.name}\n".encode(), 0o644),
        ("etc/hosts", hosts.encode(), 0o644),
        ("etc/ssh/ssh_host_ed25519_key", host_key.read_bytes(), 0o600),
        ("etc/ssh/ssh_host_ed25519_key.pub", host_key.with_suffix(".pub").read_bytes(), 0o644),
        ("root/.ssh/authorized_keys", client_public_key.encode(), 0o600),
        ("etc/iscsi/initiatorname.iscsi", f"InitiatorName={initiator_name(spec, guest)}\n".encode(), 0o644),
        ("etc/nvme/hostnqn", f"{nqn}\n".encode(), 0o644),
        ("etc/nvme/hostid", f"{host_id}\n".encode(), 0o644),
    ]
    rams = ram_drives(guest)
    if rams:
        # brd makes rd_nr disks of one size: the largest asked for (/dev/ram0, /dev/ram1, ... in spec order).
        size_kb = max(d.size_mb for d in rams) * 1024
        files.append(
            ("etc/modprobe.d/fabricqa-ram.conf", f"options brd rd_nr={len(rams)} rd_size={size_kb}\n".encode(), 0o644)
        )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for directory in ("root/.ssh",):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o700
            tar.addfile(info)
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise VlabError("qemu start", f"ssh-keygen failed: {proc.stderr.strip()}")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # QEMU's hostfwd listens with SO_REUSEADDR, so a port whose last connections linger in TIME-WAIT (the
        # previous session's SSH) is free for it; check the same way, or a rerun fails for a minute.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def busy_ports(spec: VlabSpec) -> list[int]:
    """The guests' SSH ports on 127.0.0.1 that something already listens on."""
    return [g.ssh_port for g in spec.guests if not _port_free(g.ssh_port)]


def lab_forwarding(port: int, proc: Path = Path("/proc")) -> Path | None:
    """The run dir of the running virtual lab whose QEMU forwards ``port`` to a guest's SSH (read from its command
    line: ``hostfwd=tcp:127.0.0.1:PORT-:22`` and ``-pidfile RUN_DIR/GUEST/qemu.pid``), or None."""
    forward = f"hostfwd=tcp:127.0.0.1:{port}-:22".encode()
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended, or is not ours to read
            continue
        if b"-pidfile" in argv[:-1] and any(forward in word for word in argv):
            return Path(os.fsdecode(argv[argv.index(b"-pidfile") + 1])).parent.parent
    return None


def _qmp_quit(path: Path) -> None:
    """Ask QEMU to exit through its QMP socket; errors are ignored (the caller signals what is left)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(3)
        sock.connect(str(path))
        stream = sock.makefile("rwb")
        stream.readline()  # greeting
        for command in ("qmp_capabilities", "quit"):
            stream.write(json.dumps({"execute": command}).encode() + b"\n")
            stream.flush()
            stream.readline()


def _qmp_human(path: Path, command_line: str) -> str:
    """What QEMU's monitor prints for ``command_line`` (``info network``, say), asked through the QMP socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(3)
        sock.connect(str(path))
        stream = sock.makefile("rwb")
        stream.readline()  # greeting
        answer: dict[str, Any] = {}
        for command in (
            {"execute": "qmp_capabilities"},
            {"execute": "human-monitor-command", "arguments": {"command-line": command_line}},
        ):
            stream.write(json.dumps(command).encode() + b"\n")
            stream.flush()
            answer = {}
            while "return" not in answer and "error" not in answer:  # events may come first
                line = stream.readline()
                if not line:
                    raise OSError("QMP closed the connection")
                answer = json.loads(line)
        return str(answer.get("return", answer.get("error", "")))


def storage_links(info_network: str) -> dict[str, bool]:
    """Each storage netdev of ``info network``'s text and whether it is still connected to its switch.

    A ``stream`` netdev names its socket (``unix:/.../switch.sock``) while connected; QEMU 7.2 blanks that once the
    connection ends and never reconnects it (``reconnect`` came in 8.0), so the guest's link is dead for good.
    """
    links = {}
    for line in info_network.splitlines():
        name, _, rest = line.strip().removeprefix("\\").strip().partition(": ")
        if "type=stream" in rest or "type=vde" in rest:
            links[name] = "unix:" in rest or "sock=" in rest
    return links


def guest_network_report(sock_dir: Path, guest: str) -> str:
    """One line on ``guest``'s storage NICs as its QEMU sees them: each connected to its switch or not."""
    try:
        links = storage_links(_qmp_human(sock_dir / f"{guest}.qmp", "info network"))
    except (OSError, ValueError) as exc:
        return f"{guest}: QEMU's monitor does not answer ({exc})"
    if not links:
        return f"{guest}: QEMU lists no storage NIC"
    return f"{guest}: " + ", ".join(
        f"{name} {'connected to its switch' if up else 'DISCONNECTED from its switch (dead until the lab restarts)'}"
        for name, up in links.items()
    )


class VirtualLab:
    """A running lab: its spec, run dir, SSH key and pinned host keys. Use :meth:`start` or :meth:`attach`."""

    def __init__(self, spec: VlabSpec, run_dir: Path, image: Image | None, state: procs.LabState) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.image = image
        self.state = state
        self.ssh_key = self.run_dir / "ssh" / "id_ed25519"
        self.known_hosts = self.run_dir / "ssh" / "known_hosts"
        self.boot_seconds: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"VirtualLab({self.spec.name!r}, {self.run_dir})"

    @classmethod
    def start(
        cls,
        spec: VlabSpec,
        run_dir: Path,
        image: Image | None = None,
        *,
        owner_pid: int | None = None,
        log: Callable[[str], None] = print,
        timeout_s: float = DEFAULT_BOOT_TIMEOUT_S,
        switch: str = "stream",
    ) -> VirtualLab:
        """Boot every guest of ``spec`` in parallel and return once each one answers SSH as root.

        With ``owner_pid`` the lab dies with that process (a watchdog polls it every 2 s); without, it stays
        up until :meth:`stop`. ``switch`` picks the storage segment (see :func:`qemu_argv`). Raises :class:`VlabError` naming the failed step and the guest's console log;
        whatever was started is stopped again first.
        """
        run_dir = Path(run_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        for line in procs.cleanup_stale(run_dir):
            log(f"vlab: killed a stale process of an earlier run: {line}")
        if cls.attach(spec, run_dir) is not None or procs.read_state(run_dir) is not None:
            raise VlabError("qemu start", f"a lab is already running in {run_dir}; attach() or stop() it first")
        for tool in (QEMU, "ssh", "ssh-keygen", *(["vde_switch"] if switch == "vde" else [])):
            if shutil.which(tool) is None:
                raise VlabError(
                    "qemu start", f"`{tool}` not found; apt-get install qemu-system-x86 vde2 openssh-client"
                )
        busy = busy_ports(spec)
        if busy:
            other = lab_forwarding(busy[0])
            by = f" by the virtual lab running in {other}" if other is not None else ""
            raise VlabError("qemu start", f"SSH port(s) {busy} on 127.0.0.1 are in use{by}; pick others in the spec")
        if image is None:
            try:
                image = build_image(log=log)
            except Exception as exc:
                raise VlabError("image build", str(exc)) from exc

        owner = procs.ref("owner", owner_pid) if owner_pid is not None else None
        sock_dir = socket_dir(run_dir)
        state = procs.LabState(
            spec=json.loads(json.dumps(spec.to_dict())),
            owner=owner,
            processes=(),
            image_root=str(image.root),
            sock_dir=str(sock_dir),
        )
        lab = cls(spec, run_dir, image, state)
        try:
            lab._launch(sock_dir, switch, log)
            lab._wait_ready(timeout_s, log)
        except BaseException:
            lab.stop()
            raise
        return lab

    def _record(self, proc: procs.ProcessRef) -> None:
        self.state = procs.LabState(
            spec=self.state.spec,
            owner=self.state.owner,
            processes=(*self.state.processes, proc),
            image_root=self.state.image_root,
            sock_dir=self.state.sock_dir,
        )
        procs.write_state(self.run_dir, self.state)

    def _launch(self, sock_dir: Path, switch: str, log: Callable[[str], None]) -> None:
        assert self.image is not None
        image = self.image
        # The state file exists before the first process does, so a crash from here on leaves nothing unknown.
        procs.write_state(self.run_dir, self.state)
        if self.state.owner is not None:
            self._start_watchdog()
        _keygen(self.ssh_key, f"fabricqa-vlab-{self.spec.name}")
        client_public = self.ssh_key.with_suffix(".pub").read_text()
        known: list[str] = []
        for guest in self.spec.guests:
            gdir = self.run_dir / guest.name
            gdir.mkdir(exist_ok=True)
            key = gdir / "ssh_host_ed25519_key"
            _keygen(key, guest.name)
            known.append(known_hosts_line(guest.ssh_port, key.with_suffix(".pub").read_text()))
        self.known_hosts.write_text("\n".join(known) + "\n")

        if sock_dir.exists():
            shutil.rmtree(sock_dir)
        sock_dir.mkdir(mode=0o700, parents=True)
        for segment in range(1, self.spec.segments + 1):
            self._record(self._start_switch(sock_dir, switch, segment))

        init_script = INIT_SCRIPT.read_text()
        for index, guest in enumerate(self.spec.guests):
            gdir = self.run_dir / guest.name
            console = gdir / "console.log"
            console.unlink(missing_ok=True)
            (gdir / "config.tar").write_bytes(
                guest_config_tar(self.spec, guest, index, gdir / "ssh_host_ed25519_key", client_public, init_script)
            )
            for drive in (d for d in guest.drives if d.kind != "ram"):
                with (gdir / f"drive-{drive.id}.raw").open("wb") as handle:
                    handle.truncate(drive.size_mb * 1024 * 1024)
            argv = qemu_argv(guest, index, image, gdir, sock_dir, switch=switch)
            (gdir / "qemu.argv").write_text(shlex.join(argv) + "\n")
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
            if proc.returncode != 0:
                raise VlabError(
                    "qemu start", f"{guest.name}: qemu exited {proc.returncode}: {proc.stderr.strip()}", console
                )
            self._record(procs.ref(f"qemu {guest.name}", int((gdir / "qemu.pid").read_text())))
            paths = "".join(f", eth{k} {a}" for k, a in enumerate(guest.storage_paths, 2))
            log(f"vlab: {guest.name} started (ssh 127.0.0.1:{guest.ssh_port}, eth1 {guest.storage_address}{paths})")

    def _start_switch(self, sock_dir: Path, switch: str, segment: int = 1) -> procs.ProcessRef:
        """Storage segment ``segment``'s switch (1: eth1's, 2: eth2's, ...)."""
        suffix = "" if segment == 1 else str(segment)
        if switch == "vde":
            pidfile = sock_dir / f"switch{suffix}.pid"
            argv = ["vde_switch", "-s", str(switch_socket(sock_dir, segment, switch)), "-d", "-p", str(pidfile)]
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
            if proc.returncode != 0:
                raise VlabError("storage link", f"vde_switch exited {proc.returncode}: {proc.stderr.strip()}")
            return procs.ref(f"switch{suffix} vde", int(pidfile.read_text()))
        argv = [sys.executable, "-m", "pytest_fabricqa.vlab.switch", str(switch_socket(sock_dir, segment, switch))]
        with (self.run_dir / f"switch{suffix}.log").open("ab") as logfile:
            child = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logfile,
                start_new_session=True, env=_child_env(),
            )  # fmt: skip
        assert child.stdout is not None
        if child.stdout.readline().strip() != b"ready":
            child.kill()
            raise VlabError(
                "storage link", f"the storage switch did not start; see {self.run_dir / f'switch{suffix}.log'}"
            )
        child.stdout.close()
        return procs.ref(f"switch{suffix}", child.pid)

    def _start_watchdog(self) -> None:
        env = _child_env()
        with (self.run_dir / "watchdog.log").open("ab") as logfile:
            subprocess.Popen(
                [sys.executable, "-m", "pytest_fabricqa.vlab.watchdog", str(self.run_dir)],
                stdin=subprocess.DEVNULL,
                stdout=logfile,
                stderr=logfile,
                start_new_session=True,
                env=env,
            )

    def _wait_ready(self, timeout_s: float, log: Callable[[str], None]) -> None:
        """Poll all guests at once: console READY line first (cheap), then a real SSH login."""
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        pending = {g.name for g in self.spec.guests}
        announced: set[str] = set()
        qemu_of = {p.role.split(" ", 1)[1]: p for p in self.state.processes if p.role.startswith("qemu ")}
        while pending:
            for name in sorted(pending):
                console = self.console_log(name)
                if not procs.alive(qemu_of[name]):
                    raise VlabError("boot", f"{name}: qemu exited; last console lines:\n{_tail(console)}", console)
                text = console.read_text(errors="replace") if console.exists() else ""
                failed = [line for line in text.splitlines() if line.startswith("fabricqa-init:") and "FAILED" in line]
                if failed:
                    step = failed[0].split("step=", 1)[-1].split()[0]
                    raise VlabError(INIT_STEPS.get(step, step), f"{name}: {failed[0]}", console)
                if f"fabricqa-init: READY {name}" not in text:
                    continue
                if name not in announced:
                    announced.add(name)
                    log(f"vlab: {name} booted after {time.monotonic() - t0:.1f} s; trying SSH")
                result = self.ssh(name, ["true"], check=False, timeout=20)
                if result.ok:
                    pending.discard(name)
                    self.boot_seconds[name] = round(time.monotonic() - t0, 1)
                    log(f"vlab: {name} answers SSH after {self.boot_seconds[name]} s")
            if not pending:
                break
            if time.monotonic() > deadline:
                name = sorted(pending)[0]
                console = self.console_log(name)
                step = "SSH ready" if name in announced else "boot"
                raise VlabError(
                    step,
                    f"{name}: not ready after {timeout_s:.0f} s; last console lines:\n{_tail(console)}",
                    console,
                )
            time.sleep(0.5)

    @classmethod
    def attach(cls, spec: VlabSpec, run_dir: Path) -> VirtualLab | None:
        """The lab running in ``run_dir`` if it is the lab ``spec`` describes and all of it is alive.

        "The lab" is its guests by name (:func:`spec_differences`), not the order a lab file lists them in; the
        returned lab keeps the spec it was booted with, whose order its MAC addresses follow.
        """
        run_dir = Path(run_dir).resolve()
        state = procs.read_state(run_dir)
        running = _recorded_spec(state)
        if state is None or running is None or spec_differences(running, spec):
            return None
        qemus = [p for p in state.processes if p.role.startswith("qemu ")]
        if len(qemus) != len(spec.guests) or not all(procs.alive(p) for p in state.processes):
            return None
        return cls(running, run_dir, Image.load(Path(state.image_root)), state)

    @classmethod
    def in_the_way(cls, spec: VlabSpec, run_dir: Path) -> tuple[str, bool] | None:
        """Why the lab recorded in ``run_dir`` can neither be attached as ``spec`` nor be cleaned up by
        :meth:`start`, or None when nothing is in the way (no lab, the very lab, or one whose owner died).

        The answer is one phrase -- what differs (``vstor.memory_mb: running 1024, wanted 1536``) or which
        recorded processes are gone -- and whether the running lab is whole (so it can be attached as it is).
        """
        run_dir = Path(run_dir).resolve()
        state = procs.read_state(run_dir)
        if state is None or (state.owner is not None and not procs.alive(state.owner)):
            return None
        running = _recorded_spec(state)
        if running is None:
            return f"its state file {run_dir / procs.STATE_FILE} describes no lab this version can read", False
        gone = [p.role for p in state.processes if not procs.alive(p)]
        if gone:
            return f"some of its processes are gone ({', '.join(gone)})", False
        differences = spec_differences(running, spec)
        if differences:
            return f"it runs other guests ({'; '.join(differences)})", True
        return None

    def console_log(self, guest: str) -> Path:
        """The guest's serial console log (kernel messages and the init's ``fabricqa-init:`` steps)."""
        return self.run_dir / guest / "console.log"

    def ssh_argv(self, guest: str) -> list[str]:
        """``ssh`` options and destination that log in to ``guest`` as root, host key checked against the pin."""
        port = self.spec.guest(guest).ssh_port
        return [
            "ssh",
            "-F", "/dev/null",
            "-i", str(self.ssh_key),
            "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=10",
            "-o", "LogLevel=ERROR",
            "-p", str(port),
            "root@127.0.0.1",
        ]  # fmt: skip

    def ssh(
        self,
        guest: str,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = 120,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run ``argv`` on ``guest`` over the real ssh client (quoted once with shlex.join)."""
        args = tuple(str(a) for a in argv)
        full = [*self.ssh_argv(guest), "--", shlex.join(args)]
        try:
            proc = subprocess.run(full, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
            result = CommandResult(guest, args, proc.returncode, proc.stdout, proc.stderr)
        except subprocess.TimeoutExpired:
            result = CommandResult(guest, args, 124, "", f"timed out after {timeout} s")
        if check and not result.ok:
            raise CommandError(result)
        return result

    def qemu_processes(self) -> list[procs.ProcessRef]:
        """The recorded QEMU processes that are still alive."""
        return [p for p in self.state.processes if p.role.startswith("qemu ") and procs.alive(p)]

    def stop(self) -> None:
        """Quit every guest through QMP, signal what is left after a timeout, stop the switch. Idempotent."""
        sock_dir = Path(self.state.sock_dir) if self.state.sock_dir else socket_dir(self.run_dir)
        qemus = [p for p in self.state.processes if p.role.startswith("qemu ")]
        for proc in qemus:
            if procs.alive(proc):
                _qmp_quit(sock_dir / (proc.role.split(" ", 1)[1] + ".qmp"))
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and any(procs.alive(p) for p in qemus):
            time.sleep(0.1)
        procs.terminate(qemus)
        procs.terminate([p for p in self.state.processes if not p.role.startswith("qemu ")])
        (self.run_dir / procs.STATE_FILE).unlink(missing_ok=True)  # the watchdog exits when it sees this
        if sock_dir.exists():
            shutil.rmtree(sock_dir, ignore_errors=True)


def _child_env() -> dict[str, str]:
    """The environment for our helper processes (``python -m pytest_fabricqa.vlab...``): this package first."""
    package_parent = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no console output)"


def cleanup_stale(run_dir: Path) -> list[str]:
    """Kill QEMU/VDE processes of earlier labs in ``run_dir`` whose owner died; see :func:`procs.cleanup_stale`."""
    return procs.cleanup_stale(run_dir)


def _recorded_spec(state: procs.LabState | None) -> VlabSpec | None:
    """The spec a running lab was booted with, from its state file; None when there is none or it is unreadable."""
    if state is None:
        return None
    try:
        return spec_from_dict(state.spec, procs.STATE_FILE)
    except SpecError:
        return None
