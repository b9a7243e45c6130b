"""Build and cache the virtual lab's guest image: a Debian bookworm kernel and a root file system in RAM.

The image is two files: Debian's own ``vmlinuz`` and an initramfs (newc cpio) holding a whole minbase
bootstrap with the storage tools and a pruned set of kernel modules. The guest unpacks it into RAM and runs
the stub ``/init`` below, which fetches everything guest-specific (the real init script, hostname, keys,
addresses) from QEMU's fw_cfg. One cached image therefore serves every guest of every lab, and editing the
boot script (``guest_init.sh``) never forces a rebuild.

Why an initramfs and not an ext4 disk: see ``docs`` in the engine's report (measured: the cpio boots as fast
as a snapshot ext4 disk, needs no root privileges to build, and writes in the guest stay in RAM).

The build runs ``mmdebstrap`` into a tarball (works as root or, via ``--mode=unshare``, as a user), then
converts the tarball into a cpio in Python so file owners and device nodes survive without root.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.vlab import vendor
from pytest_fabricqa.vlab.cache import build_into_place, locked

SUITE = "bookworm"

# What the guest needs and nothing else: the storage tools the suites drive over SSH, the kernel from Debian
# (so modules match it), and tiny-initramfs to satisfy linux-image's "initramfs tool" dependency cheaply
# (initramfs-tools would pull udev and spend half a minute building an initrd nobody boots). The packages the
# third-party targets need (Debian's tgt, SPDK's runtime libraries, python3 for its rpc.py) come from vendor.py.
PACKAGES: tuple[str, ...] = (
    "linux-image-amd64",
    "tiny-initramfs",
    "openssh-server",
    "fio",
    "nvme-cli",
    "open-iscsi",
    "rdma-core",
    "ibverbs-utils",
    "ibverbs-providers",
    "rdmacm-utils",
    "iproute2",
    "iputils-ping",
    "kmod",
    "procps",
    "util-linux",
    "lsscsi",
    "sg3-utils",
    "jq",
    "e2fsprogs",
    "lvm2",
    # dm-multipath for iSCSI and iSER over several paths (multipathd, with udev, which it needs to find paths).
    "multipath-tools",
    *vendor.GUEST_PACKAGES,
)

# Kernel modules kept in the image, with their dependencies (from modules.dep). Everything else under
# /lib/modules is dropped: the full set is ~400 MB, this is ~20 MB. kernel/crypto and arch/x86/crypto are
# kept whole because crypto is looked up by algorithm name (rdma_rxe needs crc32, ext4 crc32c, ...).
IMAGE_MODULES: tuple[str, ...] = (
    "virtio_pci",
    "virtio_net",
    "virtio_rng",
    "virtio_blk",
    "qemu_fw_cfg",
    "configfs",
    "null_blk",
    "brd",
    "loop",
    "sd_mod",
    "sg",
    "nvme",
    "nvme_core",
    "nvmet",
    "nvmet_tcp",
    "nvmet_rdma",
    "nvme_tcp",
    "nvme_rdma",
    "nvme_fabrics",
    "rdma_rxe",
    "rdma_cm",
    "rdma_ucm",
    "ib_uverbs",
    "ib_umad",
    "target_core_mod",
    "target_core_iblock",
    "target_core_file",
    "target_core_pscsi",
    "target_core_user",
    "tcm_loop",
    "iscsi_target_mod",
    "ib_isert",
    "iscsi_tcp",
    "ib_iser",
    "dm_mod",
    "dm_multipath",
    "dm_service_time",  # multipath's path selectors: service-time is its default, the others settable
    "dm_round_robin",
    "dm_queue_length",
    "scsi_dh_alua",  # the ALUA hardware handler multipath attaches to LIO's LUNs
    "ext4",
    "xfs",
    "bridge",
    "8021q",
    "af_packet",
    # tc's clsact qdisc with a matchall filter whose action drops: a storage path that loses every frame while its
    # link stays up (the failover suite's outage; faults.LinkDrop).
    "sch_ingress",
    "cls_matchall",
    "act_gact",
    # tc's netem qdisc: a storage path that is slower, not gone (every frame delayed), as a surviving path that
    # cannot carry the lost one's rate (tests/vlab/test_failover_verdict_vlab.py).
    "sch_netem",
)
KEEP_MODULE_DIRS: tuple[str, ...] = ("kernel/crypto/", "kernel/arch/x86/crypto/")

# Paths of the bootstrap left out of the cpio (prefixes, relative to "/", without the leading "./").
DROP_PREFIXES: tuple[str, ...] = (
    "boot/",
    "vmlinuz",
    "initrd.img",
    "var/cache/apt/",
    "var/lib/apt/lists/",
    "var/cache/debconf/",
    "usr/share/doc/",
    "usr/share/man/",
    "usr/share/info/",
    "usr/share/locale/",
    "usr/lib/udev/hwdb.bin",
    "etc/ssh/ssh_host_",  # host keys are made per run on the host and pinned before boot
)

# /init of the image: everything guest-specific, the real init included, comes through fw_cfg.
STUB_INIT = """#!/bin/sh
# fabricqa image stub: fetch this guest's init script and config from QEMU fw_cfg, then run it.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "fabricqa-init: step=stub ok" > /dev/console
modprobe qemu_fw_cfg
if ! tar -x -C / -f /sys/firmware/qemu_fw_cfg/by_name/opt/fabricqa/config.tar/raw; then
    echo "fabricqa-init: step=config FAILED: no fw_cfg opt/fabricqa/config.tar" > /dev/console
fi
exec /sbin/fabricqa-init
"""

SSHD_CONFIG = """# fabricqa virtual lab: root logs in with the run's key only; host key made per run on the host.
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
MaxStartups 64:30:128
MaxSessions 64
"""

TOOL_PACKAGES = ("fio", "nvme-cli", "open-iscsi", "rdma-core", "iproute2", "openssh-server", "util-linux")


class ImageBuildError(FabricQAError):
    """The guest image could not be built; the message names the step and what to check."""


@dataclass(frozen=True)
class Image:
    """A built guest image in the cache: a kernel and its root file system as a cpio."""

    root: Path
    key: str
    kernel_version: str
    # (package, version) for the tools the suites drive, as recorded by dpkg at build time.
    tool_versions: tuple[tuple[str, str], ...] = ()

    @property
    def kernel(self) -> Path:
        """Debian's vmlinuz."""
        return self.root / "vmlinuz"

    @property
    def initrd(self) -> Path:
        """The root file system, a newc cpio the kernel unpacks into RAM."""
        return self.root / "rootfs.cpio"

    @classmethod
    def load(cls, root: Path) -> Image | None:
        """The image in ``root`` if it is complete (manifest, kernel and cpio present), else None."""
        try:
            manifest = json.loads((root / "manifest.json").read_text())
        except (OSError, ValueError):
            return None
        image = cls(
            root=root,
            key=str(manifest["key"]),
            kernel_version=str(manifest["kernel_version"]),
            tool_versions=tuple((str(k), str(v)) for k, v in manifest.get("tool_versions", {}).items()),
        )
        if not (image.kernel.is_file() and image.initrd.is_file()):
            return None
        return image


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/fabricqa/vlab``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fabricqa" / "vlab"


def cache_key(
    packages: Iterable[str] = PACKAGES,
    suite: str = SUITE,
    modules: Iterable[str] = IMAGE_MODULES,
    build_script: str | None = None,
    vendor_key: str | None = None,
) -> str:
    """A hash of everything the image is made from: packages, suite, kept modules, this builder's text and the
    inputs of the SPDK and SCST builds it carries (:func:`vendor.inputs_key`)."""
    if build_script is None:
        build_script = Path(__file__).read_text()
    if vendor_key is None:
        vendor_key = vendor.inputs_key()
    blob = json.dumps(
        {
            "packages": sorted(packages),
            "suite": suite,
            "modules": sorted(modules),
            "script": build_script,
            "vendor": vendor_key,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def debian_sources(
    paths: Iterable[Path] | None = None,
    suite: str = SUITE,
) -> str:
    """The host's own Debian apt sources for ``suite`` as deb822 text (no other hosts are ever used).

    Reads ``/etc/apt/sources.list`` and ``/etc/apt/sources.list.d/*.list|*.sources``, keeps the entries
    whose suite is ``suite`` or ``suite-*`` (bookworm, bookworm-updates, bookworm-security).
    """
    if paths is None:
        apt = Path("/etc/apt")
        paths = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]
    stanzas: list[str] = []

    def wanted(s: str) -> bool:
        return s == suite or s.startswith(suite + "-")

    for path in paths:
        if not path.is_file():
            continue
        text = path.read_text()
        if path.name.endswith(".sources"):
            for block in re.split(r"\n\s*\n", text):
                fields = _deb822_fields(block)
                suites = [s for s in fields.get("suites", "").split() if wanted(s)]
                if fields.get("enabled", "yes").lower() == "no" or not suites:
                    continue
                if "deb" not in fields.get("types", "").split():
                    continue
                lines = [
                    "Types: deb",
                    f"URIs: {fields['uris']}",
                    f"Suites: {' '.join(suites)}",
                    f"Components: {fields.get('components', 'main')}",
                ]
                if "signed-by" in fields:
                    lines.append(f"Signed-By: {fields['signed-by']}")
                stanzas.append("\n".join(lines))
        elif path.name == "sources.list" or path.name.endswith(".list"):
            for line in text.splitlines():
                words = line.split("#", 1)[0].split()
                if len(words) < 3 or words[0] != "deb":
                    continue
                options = ""
                if words[1].startswith("["):
                    end = next(i for i, w in enumerate(words) if w.endswith("]"))
                    options = " ".join(words[1 : end + 1])
                    words = [words[0], *words[end + 1 :]]
                if len(words) < 3 or not wanted(words[2]):
                    continue
                signed = re.search(r"signed-by=([^\s\]]+)", options)
                lines = [
                    "Types: deb",
                    f"URIs: {words[1]}",
                    f"Suites: {words[2]}",
                    f"Components: {' '.join(words[3:]) or 'main'}",
                ]
                if signed:
                    lines.append(f"Signed-By: {signed.group(1)}")
                stanzas.append("\n".join(lines))
    return "\n\n".join(stanzas) + ("\n" if stanzas else "")


def _deb822_fields(block: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    last = ""
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace() and last:
            fields[last] += " " + line.strip()
            continue
        name, _, value = line.partition(":")
        last = name.strip().lower()
        fields[last] = value.strip()
    return fields


def build_image(
    cache_dir: Path | None = None,
    log: Callable[[str], None] = print,
    *,
    force: bool = False,
) -> Image:
    """The cached guest image, built first if its inputs changed (or ``force``).

    The image lives in ``cache_dir/<key>/`` (default :func:`cache_root`); it is built in a temporary folder
    beside it and renamed into place, so a crash never leaves a half image. Concurrent callers (xdist
    workers) serialize on a lock file and the later ones find the finished image.
    """
    root = cache_dir if cache_dir is not None else cache_root()
    key = cache_key()
    final = root / key
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f"{key}.lock"):
        if not force:
            image = Image.load(final)
            if image is not None:
                log(f"vlab image: cached {final} (kernel {image.kernel_version})")
                return image
        image = build_into_place(final, lambda work: _build_into(work, key, log))
        loaded = Image.load(final)
        if loaded is None:
            raise ImageBuildError(f"image build: {final} is incomplete after the build")
        log(f"vlab image: built {final} (kernel {image.kernel_version})")
        return loaded


def _build_into(work: Path, key: str, log: Callable[[str], None]) -> Image:
    timings: dict[str, float] = {}
    for tool in ("mmdebstrap", "depmod"):
        if shutil.which(tool) is None:
            raise ImageBuildError(f"image build: `{tool}` not found; install it (apt-get install mmdebstrap kmod)")
    for source in vendor.SOURCES:  # a missing archive fails now, not after minutes of bootstrap
        vendor.source_path(source)
    sources = debian_sources()
    if not sources:
        raise ImageBuildError(f"image build: no Debian {SUITE} entry in /etc/apt/sources.list*")
    (work / "debian.sources").write_text(sources)
    tarball = work / "bootstrap.tar"

    # SPDK needs nothing from the bootstrap: build it (or find it cached) while mmdebstrap downloads.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        spdk_started = time.monotonic()
        spdk_job = pool.submit(vendor.build_spdk, log=log)
        _bootstrap(work, tarball, timings, log)
        spdk = spdk_job.result()
        timings["spdk_s"] = round(time.monotonic() - spdk_started, 1)

    with tarfile.open(tarball) as tar:
        members = tar.getmembers()
        kernel_version = _kernel_version(members)
        tool_versions = _tool_versions(tar)
        # SCST for exactly the kernel the bootstrap picked (cached by it).
        t0 = time.monotonic()
        kernel_package = tool_versions.get(f"linux-image-{kernel_version}", "")
        if not kernel_package:
            raise ImageBuildError(f"image build: dpkg in the bootstrap lists no linux-image-{kernel_version}")
        scst = vendor.build_scst(kernel_version, kernel_package, log=log)
        timings["scst_s"] = round(time.monotonic() - t0, 1)

        t0 = time.monotonic()
        mod_prefix = _modules_prefix(members, kernel_version)
        modules_dir = work / "modules"
        extra_depends = scst.strings("kernel_module_depends")
        kept = _extract_modules(
            tar, members, mod_prefix, kernel_version, modules_dir, extra_depends, scst.tree / "lib" / "modules"
        )
        kernel_member = tar.getmember(f"./boot/vmlinuz-{kernel_version}")
        with tar.extractfile(kernel_member) as src, (work / "vmlinuz").open("wb") as dst:  # type: ignore[union-attr]
            shutil.copyfileobj(src, dst)
        log(f"vlab image: kernel {kernel_version}, {kept} modules kept; writing the cpio ...")
        with (work / "rootfs.cpio").open("wb") as out:
            _write_cpio(out, tar, members, mod_prefix, modules_dir, (spdk.tree, scst.tree))
    timings["cpio_s"] = round(time.monotonic() - t0, 1)
    tarball.unlink()
    shutil.rmtree(modules_dir)

    manifest = {
        "key": key,
        "suite": SUITE,
        "kernel_version": kernel_version,
        "packages": list(PACKAGES),
        "tool_versions": tool_versions,
        "vendor": {build.manifest["name"]: {"cache": str(build.root), **build.manifest} for build in (spdk, scst)},
        "timings": timings,
        "initrd_bytes": (work / "rootfs.cpio").stat().st_size,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"vlab image: timings {timings}")
    return Image(work, key, kernel_version, tuple(tool_versions.items()))


def _bootstrap(work: Path, tarball: Path, timings: dict[str, float], log: Callable[[str], None]) -> None:
    """mmdebstrap the guest's root file system into ``tarball``."""
    t0 = time.monotonic()
    log(f"vlab image: mmdebstrap {SUITE} minbase with {len(PACKAGES)} packages ...")
    argv = [
        "mmdebstrap",
        "--variant=minbase",
        "--format=tar",
        '--aptopt=Apt::Install-Recommends "false"',
        *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("man", "doc", "info", "locale")),
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(tarball),
        str(work / "debian.sources"),
    ]
    if os.geteuid() != 0:
        argv.insert(1, "--mode=unshare")
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    (work / "mmdebstrap.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
        raise ImageBuildError(f"image build: mmdebstrap exited {proc.returncode}:\n{tail}")
    timings["bootstrap_s"] = round(time.monotonic() - t0, 1)


def _kernel_version(members: list[tarfile.TarInfo]) -> str:
    versions = sorted(m.name.rsplit("vmlinuz-", 1)[1] for m in members if m.name.startswith("./boot/vmlinuz-"))
    if not versions:
        raise ImageBuildError("image build: the bootstrap has no /boot/vmlinuz-*; is linux-image-amd64 listed?")
    return versions[-1]


def _modules_prefix(members: list[tarfile.TarInfo], version: str) -> str:
    for prefix in (f"./usr/lib/modules/{version}/", f"./lib/modules/{version}/"):
        if any(m.name.startswith(prefix) for m in members):
            return prefix
    raise ImageBuildError(f"image build: no /lib/modules/{version} in the bootstrap")


def module_closure(modules_dep: str, wanted: Iterable[str], keep_dirs: Iterable[str] = ()) -> set[str]:
    """Relative paths (``kernel/...ko``) of the ``wanted`` modules, their dependencies and ``keep_dirs``.

    ``modules_dep`` is the text of modules.dep; module names match with ``-`` and ``_`` interchangeable.
    Names that are not modules (built into the kernel) are ignored.
    """
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in modules_dep.splitlines():
        path, _, rest = line.partition(":")
        if not path:
            continue
        deps[path] = rest.split()
        by_name[_module_name(path)] = path
    keep: set[str] = {p for p in deps if any(p.startswith(d) for d in keep_dirs)}
    todo = [by_name[n.replace("-", "_")] for n in wanted if n.replace("-", "_") in by_name]
    while todo:
        path = todo.pop()
        if path in keep:
            continue
        keep.add(path)
        todo.extend(deps.get(path, []))
    # Crypto modules kept whole may themselves depend on library modules elsewhere.
    todo = [d for p in list(keep) for d in deps.get(p, []) if d not in keep]
    while todo:
        path = todo.pop()
        if path not in keep:
            keep.add(path)
            todo.extend(deps.get(path, []))
    return keep


def _module_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    return re.sub(r"\.ko(\.\w+)?$", "", base).replace("-", "_")


def _extract_modules(
    tar: tarfile.TarFile,
    members: list[tarfile.TarInfo],
    prefix: str,
    version: str,
    dest: Path,
    extra_depends: Iterable[str] = (),
    extra_modules: Path | None = None,
) -> int:
    """Extract the kept modules and the metadata files under dest/lib/modules/VERSION; regenerate the index.

    ``extra_modules`` (a ``lib/modules`` folder of out-of-tree modules, SCST's) is merged in after checking its
    modules were built for this very kernel; ``extra_depends`` are the kernel's modules they need.
    """
    dep_member = tar.getmember(prefix + "modules.dep")
    with tar.extractfile(dep_member) as handle:  # type: ignore[union-attr]
        keep = module_closure(handle.read().decode(), (*IMAGE_MODULES, *extra_depends), KEEP_MODULE_DIRS)
    target = dest / "lib" / "modules" / version
    for member in members:
        if not member.name.startswith(prefix) or not member.isfile():
            continue
        rel = member.name[len(prefix) :]
        if rel.startswith("kernel/") and rel not in keep:
            continue
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with tar.extractfile(member) as src, path.open("wb") as dst:  # type: ignore[union-attr]
            shutil.copyfileobj(src, dst)
    if extra_modules is not None:
        reference = next(iter(sorted(target.glob("kernel/**/*.ko*"))))
        kernel_vermagic = vendor.module_info(reference, "vermagic")
        built = {p.name: vendor.module_info(p, "vermagic") for p in sorted((extra_modules / version).rglob("*.ko"))}
        wrong = vendor.vermagic_mismatches(built, kernel_vermagic)
        if wrong or not built:
            found = "; ".join(wrong) or f"no modules in {extra_modules / version}"
            raise ImageBuildError(f"image build: out-of-tree modules do not fit kernel {version}: {found}")
        shutil.copytree(extra_modules / version, target, dirs_exist_ok=True)
    proc = subprocess.run(["depmod", "-b", str(dest), version], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageBuildError(f"image build: depmod exited {proc.returncode}: {proc.stderr.strip()}")
    return len(keep)


def _tool_versions(tar: tarfile.TarFile) -> dict[str, str]:
    with tar.extractfile("./var/lib/dpkg/status") as handle:  # type: ignore[union-attr]
        status = handle.read().decode()
    versions: dict[str, str] = {}
    for block in status.split("\n\n"):
        fields = _deb822_fields(block)
        if fields.get("package") in TOOL_PACKAGES or fields.get("package", "").startswith("linux-image-"):
            versions[fields["package"]] = fields.get("version", "")
    return dict(sorted(versions.items()))


class _CpioWriter:
    """A newc ("070701") cpio writer: what the kernel's initramfs unpacker reads."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.ino = 1

    def add(
        self,
        name: str,
        mode: int,
        data: bytes | BinaryIO = b"",
        *,
        size: int | None = None,
        uid: int = 0,
        gid: int = 0,
        mtime: int = 0,
        rdev: tuple[int, int] = (0, 0),
    ) -> None:
        if size is None:
            size = len(data) if isinstance(data, bytes) else 0
        encoded = name.encode() + b"\0"
        fields = (
            self.ino, mode, uid, gid, 1, mtime, size, 0, 0, rdev[0], rdev[1], len(encoded), 0
        )  # fmt: skip
        self.ino += 1
        header = b"070701" + b"".join(b"%08X" % f for f in fields)
        self.out.write(header + encoded)
        self._pad(len(header) + len(encoded))
        if isinstance(data, bytes):
            self.out.write(data)
        else:
            shutil.copyfileobj(data, self.out)
        self._pad(size)

    def _pad(self, n: int) -> None:
        if n % 4:
            self.out.write(b"\0" * (4 - n % 4))

    def close(self) -> None:
        self.add("TRAILER!!!", 0)


def _write_cpio(
    out: BinaryIO,
    tar: tarfile.TarFile,
    members: list[tarfile.TarInfo],
    mod_prefix: str,
    modules_dir: Path,
    trees: Iterable[Path] = (),
) -> None:
    import stat

    cpio = _CpioWriter(out)
    drop = (mod_prefix[2:], *DROP_PREFIXES)
    for member in members:
        name = member.name.removeprefix("./").rstrip("/")
        if not name or name.startswith(drop) or (member.isdir() and (name + "/") in drop):
            continue
        common = {"uid": member.uid, "gid": member.gid, "mtime": int(member.mtime)}
        perm = member.mode & 0o7777
        if member.isdir():
            cpio.add(name, stat.S_IFDIR | perm, **common)  # type: ignore[arg-type]
        elif member.issym():
            cpio.add(name, stat.S_IFLNK | 0o777, member.linkname.encode(), **common)  # type: ignore[arg-type]
        elif member.isfile() or member.islnk():
            # Hard links become copies: two in the whole bootstrap, simpler than newc link bookkeeping.
            target = tar.getmember(member.linkname) if member.islnk() else member
            with tar.extractfile(target) as src:  # type: ignore[union-attr]
                cpio.add(name, stat.S_IFREG | perm, src, size=target.size, **common)  # type: ignore[arg-type]
        elif member.ischr() or member.isblk():
            kind = stat.S_IFCHR if member.ischr() else stat.S_IFBLK
            cpio.add(name, kind | perm, rdev=(member.devmajor, member.devminor), **common)  # type: ignore[arg-type]
    # Pruned modules, owned by root, under the bootstrap's own module path.
    base = modules_dir / "lib" / "modules"
    for path in sorted(base.rglob("*")):
        name = mod_prefix[2:].split("/modules/")[0] + "/modules/" + str(path.relative_to(base))
        if path.is_dir():
            cpio.add(name, stat.S_IFDIR | 0o755)
        else:
            with path.open("rb") as src:
                cpio.add(name, stat.S_IFREG | 0o644, src, size=path.stat().st_size)
    # The third-party builds, laid out as in the guest (their modules came in through modules_dir).
    for tree in trees:
        _add_tree(cpio, tree, skip=("lib",))  # /lib is the bootstrap's symlink to usr/lib: never a folder
    cpio.add("init", stat.S_IFREG | 0o755, STUB_INIT.encode())
    cpio.add("etc/ssh/sshd_config.d/fabricqa.conf", stat.S_IFREG | 0o644, SSHD_CONFIG.encode())
    cpio.close()


def _add_tree(cpio: _CpioWriter, tree: Path, skip: tuple[str, ...] = ()) -> None:
    """Add a folder laid out as in the guest (folders before their contents, root-owned, modes kept), except
    the top-level paths in ``skip`` and everything under them."""
    import stat

    for path in sorted(tree.rglob("*")):
        name = str(path.relative_to(tree))
        if name.split("/", 1)[0] in skip:
            continue
        info = path.lstat()
        if path.is_symlink():
            cpio.add(name, stat.S_IFLNK | 0o777, os.readlink(path).encode())
        elif path.is_dir():
            cpio.add(name, stat.S_IFDIR | 0o755)
        else:
            with path.open("rb") as src:
                cpio.add(name, stat.S_IFREG | (info.st_mode & 0o7777), src, size=info.st_size)
