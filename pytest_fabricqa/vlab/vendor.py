"""Build and cache the third-party storage targets the guest image carries beside Debian's: SPDK and SCST.

Debian 12 packages neither SPDK's NVMe-oF target nor SCST, so the image builder compiles them from unmodified
upstream source archives (``vendor`` folder, below) and caches each build by the hash of its inputs under
``~/.cache/fabricqa/vendor/``:

- **SPDK** (``nvmf_tgt`` and SPDK's own ``scripts/rpc.py`` with its ``python/spdk`` package), linked against
  Debian's DPDK 22.11 (``libdpdk-dev``) with the RDMA transport, for a generic x86-64 with SSE4.2 (Debian's DPDK
  baseline, ``-march=corei7``; the guest CPU is TCG's ``-cpu max``, not the build machine's). Its inputs: the
  three archives' sums, the configure flags, the DPDK version and this recipe's code.
- **SCST** (modules ``scst``, ``scst_vdisk``, ``iscsi-scst``, ``isert-scst`` and ``iscsi-scstd``), built against
  Debian's headers of exactly the guest's kernel, which the image builder learns from its bootstrap. Its inputs:
  the archive's sum, the kernel release and package version, and this recipe's code.

The archives are looked for in ``$FABRICQA_VENDOR_DIR``, else in ``<repo>/../shared/vendor``; each must match
the sha256 in :data:`SOURCES`. Nothing from them is copied into the project.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_fabricqa.core.errors import FabricQAError, UserError
from pytest_fabricqa.vlab.cache import build_into_place, locked

VENDOR_DIR_ENV = "FABRICQA_VENDOR_DIR"


@dataclass(frozen=True)
class Source:
    """One upstream source archive: its file name, its sha256 and where the same archive comes from."""

    file: str
    sha256: str
    upstream: str


SPDK = Source(
    "spdk-23.01.1.tar.gz",
    "92b3b1da90b2fe64aa5c9c0b9ee7bbda5ee5d87656b4d4a2f1b06b1332f4ce33",
    "SPDK 23.01.1: `git archive` of tag v23.01.1 of github.com/spdk/spdk (no submodules)",
)
ISAL = Source(
    "isa-l-2df39cf.tar.gz",
    "860832cea5a735fb958493faa260ef718095c48e6bb5ec5063a78a79d9c6bb2c",
    "ISA-L: `git archive` of commit 2df39cf5f1b9ccaa2973f6ef273857e4dc46f0cf of github.com/intel/isa-l "
    "(SPDK 23.01.1's submodule)",
)
ISAL_CRYPTO = Source(
    "isa-l-crypto-08297dc.tar.gz",
    "083fde24049d58dd8e6dedffeed26c0156914edc98fbbc6dd36793ab20b04dc1",
    "ISA-L crypto: `git archive` of commit 08297dc3e76d65e1bad83a9c9f9e49059cf806b5 of "
    "github.com/intel/isa-l_crypto (SPDK 23.01.1's submodule)",
)
SCST = Source(
    "scst-3.10.tar.gz",
    "582f301fbc41d86a51859a4722473f3fa7d034e0e5b8ac5310858aca898883ba",
    "SCST 3.10: `git archive` of tag v3.10 of github.com/SCST-project/scst",
)
SOURCES: tuple[Source, ...] = (SPDK, ISAL, ISAL_CRYPTO, SCST)

# SPDK: only what nvmf_tgt needs. `--with-dpdk=/usr` links Debian's DPDK statically (the guest needs no DPDK
# package); pkg-config mode would switch SPDK to shared libraries. corei7 is Debian's DPDK baseline: its headers
# use SSSE3/SSE4.2 intrinsics, so plain x86-64 does not compile; `native` would bake in the build host's CPU.
SPDK_CONFIGURE: tuple[str, ...] = (
    "--with-dpdk=/usr",
    "--with-rdma",
    "--target-arch=corei7",
    "--disable-tests",
    "--disable-unit-tests",
    "--disable-examples",
    "--without-vhost",
    "--without-virtio",
    "--without-fio",
    "--without-xnvme",
    "--without-crypto",
    "--without-usdt",
    "--without-fuse",
    "--without-nvme-cuse",
)
# SPDK's build steps, in order: (folder, make goals). The top level first makes the build folders and
# include/spdk/config.h (from the make variables, so the overrides below reach it); then only what nvmf_tgt links.
# The first target of isalbuild/isalcryptobuild is a symlink, hence `all` everywhere.
SPDK_MAKE_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (".", ("build_dir", "include/spdk/config.h")),
    ("isalbuild", ("all",)),
    ("isalcryptobuild", ("all",)),
    ("lib", ("all",)),
    ("module", ("all",)),
    ("app/nvmf_tgt", ("all",)),
)

# SPDK 23.01's lib/env_dpdk/pci_dpdk.c refuses DPDK 22.11.N for N > 1 ("DPDK LTS version 22.11.N not
# supported") in case a later LTS release changed DPDK's private PCI ABI; Debian 12 ships 22.11.11. LTS releases
# keep their public ABI, SPDK's later releases relaxed the check, and the private PCI structures matter only to
# SPDK's PCI drivers: the guest's nvmf_tgt drives no PCI device (-u, AIO bdevs, TCP and RDMA transports).
# Rather than edit SPDK's code, the link wraps rte_version(): a 22.11.N above .1 is reported as "DPDK 22.11.1"
# followed by the true version, so SPDK's sscanf() accepts it and its start-up line still names the DPDK linked.
DPDK_VERSION_SHIM = r"""/* fabricqa: see pytest_fabricqa/vlab/vendor.py, DPDK_VERSION_SHIM. */
#include <stdio.h>
const char *__real_rte_version(void);
const char *__wrap_rte_version(void)
{
	static char version[96];
	unsigned int year, month, minor;
	const char *real = __real_rte_version();

	if (sscanf(real, "DPDK %u.%u.%u", &year, &month, &minor) != 3 || year != 22 || month != 11 || minor <= 1)
		return real;
	snprintf(version, sizeof(version), "DPDK 22.11.1 (linked: %s)", real);
	return version;
}
"""
DPDK_VERSION_LDFLAGS = "-Wl,--wrap=rte_version"

# SCST: what is built and what goes into the image (paths relative to the unpacked archive).
SCST_MAKE_DIRS: tuple[str, ...] = ("scst", "iscsi-scst")
SCST_MODULES: tuple[str, ...] = (
    "scst/src/scst.ko",
    "scst/src/dev_handlers/scst_vdisk.ko",
    "iscsi-scst/kernel/iscsi-scst.ko",
    "iscsi-scst/kernel/isert-scst/isert-scst.ko",
)
SCST_PROGRAMS: tuple[str, ...] = ("iscsi-scst/usr/iscsi-scstd", "iscsi-scst/usr/iscsi-scst-adm")

# Where the builds land in the guest.
SPDK_PREFIX = "opt/spdk"  # bin/nvmf_tgt, scripts/rpc.py, python/spdk (rpc.py finds its package at ../python)
GUEST_BIN = "usr/local/sbin"

# Debian packages the guest gains with these builds: Debian's own tgt (tgtd and tgtadm; its tgtd carries iSER,
# linked to libibverbs and librdmacm), python3 for SPDK's rpc.py, and nvmf_tgt's shared libraries (checked
# against its NEEDED entries at build time, see missing_runtime_packages()).
GUEST_PACKAGES: tuple[str, ...] = (
    "tgt",
    "python3",
    "libaio1",
    "libnuma1",
    "libibverbs1",
    "librdmacm1",
    "libssl3",
    "libuuid1",
    "libbsd0",
)


class VendorSourceError(UserError):
    """A source archive is missing or is not the expected file; the message says where to put the right one."""


class VendorBuildError(FabricQAError):
    """A vendor build step failed; the message names the step, the command and the end of its output."""


def repo_root() -> Path:
    """The project's checkout (this file is ``<repo>/pytest_fabricqa/vlab/vendor.py``)."""
    return Path(__file__).resolve().parents[2]


def vendor_dir(environ: dict[str, str] | None = None) -> tuple[Path, str]:
    """The folder holding the archives and how it was chosen (for error messages)."""
    env = os.environ if environ is None else environ
    if env.get(VENDOR_DIR_ENV):
        return Path(env[VENDOR_DIR_ENV]), f"${VENDOR_DIR_ENV}"
    return repo_root().parent / "shared" / "vendor", f"the default <repo>/../shared/vendor; ${VENDOR_DIR_ENV} unset"


def source_path(source: Source, environ: dict[str, str] | None = None, *, verify: bool = True) -> Path:
    """The archive's path after checking it exists and (``verify``) has the expected sha256.

    Raises :class:`VendorSourceError` with one line: the file, where it was looked for, and how to fix it.
    """
    folder, how = vendor_dir(environ)
    path = folder / source.file
    if not path.is_file():
        raise VendorSourceError(
            f"vlab image: {source.file} not found in {folder} ({how}); set {VENDOR_DIR_ENV} to a folder "
            f"holding it ({source.upstream}, sha256 {source.sha256})"
        )
    if verify:
        actual = file_sha256(path)
        if actual != source.sha256:
            raise VendorSourceError(
                f"vlab image: {path} has sha256 {actual}, expected {source.sha256}; put the unmodified archive "
                f"there ({source.upstream})"
            )
    return path


def file_sha256(path: Path) -> str:
    """The file's sha256, hex."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def vendor_cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/fabricqa/vendor``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fabricqa" / "vendor"


def _key(blob: object) -> str:
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def _recipe(*steps: Callable[..., object]) -> list[str]:
    """The code of a build's recipe and of every helper it calls: a change to any of them is a new build."""
    return [inspect.getsource(step) for step in steps]


def spdk_cache_key(dpdk_version: str, sources: Sequence[Source] = (SPDK, ISAL, ISAL_CRYPTO)) -> str:
    """The SPDK build's key: archive sums, configure flags, the DPDK it links, where the build lays its files in the
    guest, and the code of the recipe and its helpers."""
    return _key(
        {
            "sources": [s.sha256 for s in sources],
            "configure": list(SPDK_CONFIGURE),
            "make": [list(step) for step in SPDK_MAKE_STEPS],
            "shim": DPDK_VERSION_SHIM,
            "ldflags": DPDK_VERSION_LDFLAGS,
            "dpdk": dpdk_version,
            "layout": [SPDK_PREFIX, GUEST_BIN],
            "recipe": _recipe(
                _build_spdk, unpack, _run, _multiarch, elf_needed, library_packages, missing_runtime_packages
            ),
        }
    )


def scst_cache_key(kernel_release: str, kernel_package_version: str, source: Source = SCST) -> str:
    """The SCST build's key: the archive's sum, the guest kernel (release and Debian version), where the build lays
    its files in the guest, and the code of the recipe and its helpers."""
    return _key(
        {
            "source": source.sha256,
            "kernel": kernel_release,
            "kernel_package": kernel_package_version,
            "make": list(SCST_MAKE_DIRS),
            "modules": list(SCST_MODULES),
            "programs": list(SCST_PROGRAMS),
            "layout": [GUEST_BIN],
            "recipe": _recipe(_build_scst, _headers_tree, kernel_header_packages, unpack, _run, module_info),
        }
    )


def inputs_key() -> str:
    """What the image's own key takes from the vendor builds: every input known before the bootstrap.

    The guest kernel (and so the SCST build's kernel) floats with the Debian mirror exactly as the image's
    other packages do; everything else that decides the builds is here.
    """
    return _key(
        {
            "sources": [s.sha256 for s in SOURCES],
            "spdk": spdk_cache_key("*"),
            "scst": scst_cache_key("*", "*"),
            "guest_packages": list(GUEST_PACKAGES),
            "layout": [SPDK_PREFIX, GUEST_BIN],
        }
    )


@dataclass(frozen=True)
class VendorBuild:
    """A finished build in the cache: ``tree/`` is laid out as in the guest; ``manifest`` says what it is."""

    root: Path
    manifest: dict[str, object]

    @property
    def tree(self) -> Path:
        """The files to add to the guest's root, laid out as in the guest."""
        return self.root / "tree"

    def strings(self, key: str) -> list[str]:
        """A list of strings from the manifest (empty when absent)."""
        value = self.manifest.get(key, [])
        return [str(v) for v in value] if isinstance(value, list) else []

    @classmethod
    def load(cls, root: Path) -> VendorBuild | None:
        """The build in ``root`` if complete (manifest and tree present), else None."""
        try:
            manifest = json.loads((root / "manifest.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(root, manifest) if (root / "tree").is_dir() else None


def build_spdk(cache_dir: Path | None = None, log: Callable[[str], None] = print) -> VendorBuild:
    """SPDK's nvmf_tgt and rpc.py, from the cache or built now (a few minutes on two cores)."""
    for source in (SPDK, ISAL, ISAL_CRYPTO):
        source_path(source)
    dpdk = dpdk_version()
    return _cached(
        cache_dir, f"spdk-{spdk_cache_key(dpdk)}", log, lambda work, log_file: _build_spdk(work, log_file, dpdk, log)
    )


def build_scst(
    kernel_release: str,
    kernel_package_version: str,
    cache_dir: Path | None = None,
    log: Callable[[str], None] = print,
) -> VendorBuild:
    """SCST's modules for exactly ``kernel_release`` and iscsi-scstd, from the cache or built now."""
    source_path(SCST)
    key = scst_cache_key(kernel_release, kernel_package_version)
    return _cached(
        cache_dir,
        f"scst-{key}",
        log,
        lambda work, log_file: _build_scst(work, log_file, kernel_release, kernel_package_version, log),
    )


def _cached(
    cache_dir: Path | None,
    name: str,
    log: Callable[[str], None],
    build: Callable[[Path, Path], dict[str, object]],
) -> VendorBuild:
    """The build ``name`` from the cache, or ``build(work, log_file)`` into a temporary folder renamed into place.

    The build's log stays beside the cache (``<name>.log``) whether it succeeded or not.
    """
    root = cache_dir if cache_dir is not None else vendor_cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    with locked(root / f"{name}.lock"):
        found = VendorBuild.load(final)
        if found is not None:
            log(f"vlab vendor: cached {final}")
            return found
        log_file = root / f"{name}.log"

        def build_here(work: Path) -> None:
            t0 = time.monotonic()
            log_file.write_text("")
            manifest = build(work, log_file)
            manifest["build_s"] = round(time.monotonic() - t0, 1)
            manifest["built_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            shutil.rmtree(work / "src", ignore_errors=True)
            shutil.rmtree(work / "headers", ignore_errors=True)
            (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")

        build_into_place(final, build_here)
    built = VendorBuild.load(final)
    if built is None:
        raise VendorBuildError(f"vlab vendor: {final} is incomplete after the build")
    log(f"vlab vendor: built {final} in {built.manifest.get('build_s')} s")
    return built


def _run(
    step: str, argv: Sequence[str], cwd: Path, log_file: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one build command niced (the build host is shared), its output appended to ``log_file``."""
    full = ["nice", "-n", "10", *argv]
    proc = subprocess.run(full, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    with log_file.open("a") as handle:
        handle.write(f"$ {' '.join(argv)}  (in {cwd})\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr + proc.stdout).strip().splitlines()[-12:])
        raise VendorBuildError(
            f"vlab vendor: {step}: `{' '.join(argv)}` exited {proc.returncode} in {cwd} (log {log_file}):\n{tail}"
        )
    return proc


def unpack(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into ``dest``, dropping its single top-level folder (whatever it is named)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members if m.name not in (".", "./")}
        strip = len(tops) == 1 and any(m.isdir() and m.name.rstrip("/") in tops for m in members)
        for member in members:
            if strip:
                parts = member.name.split("/", 1)
                if len(parts) < 2 or not parts[1]:
                    continue
                member.name = parts[1]
            if hasattr(tarfile, "tar_filter"):  # Python >= 3.11.4 (and Debian's 3.11.2 with PEP 706 backported)
                tar.extract(member, dest, filter="tar")
            else:  # pragma: no cover - older Pythons; names are checked as the filter would
                if member.name.startswith("/") or ".." in member.name.split("/"):
                    raise VendorBuildError(f"vlab vendor: {archive} has an unsafe member {member.name!r}")
                tar.extract(member, dest)


def dpdk_version() -> str:
    """The version of Debian's DPDK on the build host (``pkg-config --modversion libdpdk``)."""
    if shutil.which("pkg-config") is None:
        raise VendorBuildError(
            "vlab vendor: `pkg-config` not found; run scripts/install.sh (or apt-get install pkg-config)"
        )
    proc = subprocess.run(["pkg-config", "--modversion", "libdpdk"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise VendorBuildError(
            "vlab vendor: Debian's DPDK is not installed on the build host; run scripts/install.sh "
            "(or apt-get install libdpdk-dev)"
        )
    return proc.stdout.strip()


def _multiarch() -> str:
    proc = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True, check=False)
    return proc.stdout.strip() or "x86_64-linux-gnu"


def _build_spdk(work: Path, log_file: Path, dpdk: str, log: Callable[[str], None]) -> dict[str, object]:
    src, jobs = work / "src", str(os.cpu_count() or 1)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    unpack(source_path(SPDK, verify=False), src)
    unpack(source_path(ISAL, verify=False), src / "isa-l")
    unpack(source_path(ISAL_CRYPTO, verify=False), src / "isa-l-crypto")
    # Debian splits DPDK's headers: generic ones in /usr/include/dpdk, rte_config.h and rte_build_config.h in
    # /usr/include/<multiarch>/dpdk. SPDK's configure finds the first; env_dpdk reads the second.
    dpdk_arch_inc = f"/usr/include/{_multiarch()}/dpdk"
    env = {**os.environ, "CFLAGS": "-I/usr/include/dpdk"}
    log(f"vlab vendor: SPDK {SPDK.file} against Debian's DPDK {dpdk}: configure ...")
    _run("SPDK configure", ["./configure", *SPDK_CONFIGURE], src, log_file, env)
    # Debian's libdpdk.pc lists IPSec_MB, which nvmf_tgt does not need (and whose library the guest lacks).
    overrides = ["CONFIG_IPSEC_MB=n", f"CONFIG_DPDK_INC_DIR={dpdk_arch_inc}"]
    (work / "dpdk_version_shim.c").write_text(DPDK_VERSION_SHIM)
    _run(
        "SPDK DPDK version shim",
        ["gcc", "-O2", "-c", "dpdk_version_shim.c", "-o", "dpdk_version_shim.o"],
        work,
        log_file,
    )
    timings["configure_s"] = round(time.monotonic() - t0, 1)
    for step, goals in SPDK_MAKE_STEPS:
        t0 = time.monotonic()
        log(f"vlab vendor: SPDK make -C {step} {' '.join(goals)} ...")
        step_env = os.environ.copy()
        if step.startswith("app/"):
            step_env["LDFLAGS"] = f"{DPDK_VERSION_LDFLAGS} {work / 'dpdk_version_shim.o'}"
        argv = ["make", f"-j{jobs}", *overrides, "-C", step, *goals]
        _run(f"SPDK make -C {step}", argv, src, log_file, step_env)
        timings[f"make_{step.strip('.').replace('/', '_') or 'top'}_s"] = round(time.monotonic() - t0, 1)

    tree = work / "tree"
    prefix = tree / SPDK_PREFIX
    (prefix / "bin").mkdir(parents=True)
    built = src / "build" / "bin" / "nvmf_tgt"
    _run("strip nvmf_tgt", ["strip", "-o", str(prefix / "bin" / "nvmf_tgt"), str(built)], work, log_file)
    (prefix / "scripts").mkdir()
    shutil.copy2(src / "scripts" / "rpc.py", prefix / "scripts" / "rpc.py")
    shutil.copytree(
        src / "python" / "spdk",
        prefix / "python" / "spdk",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "sma", "spdkcli"),
    )
    bin_dir = tree / GUEST_BIN
    bin_dir.mkdir(parents=True)
    # Symlinks in PATH: nvmf_tgt directly; rpc.py through a wrapper, since it finds its package relative to
    # its own path and a symlink would point it at the wrong folder.
    (bin_dir / "nvmf_tgt").symlink_to(f"/{SPDK_PREFIX}/bin/nvmf_tgt")
    wrapper = bin_dir / "spdk_rpc.py"
    wrapper.write_text(f'#!/bin/sh\nexec python3 /{SPDK_PREFIX}/scripts/rpc.py "$@"\n')
    wrapper.chmod(0o755)
    needed = elf_needed(prefix / "bin" / "nvmf_tgt")
    missing = missing_runtime_packages(library_packages(needed), GUEST_PACKAGES)
    if missing:
        raise VendorBuildError(f"vlab vendor: nvmf_tgt {'; '.join(missing)}: add it to GUEST_PACKAGES in vendor.py")
    return {
        "name": "spdk",
        "source": SPDK.file,
        "dpdk": dpdk,
        "configure": list(SPDK_CONFIGURE),
        "needed": needed,
        "nvmf_tgt_bytes": (prefix / "bin" / "nvmf_tgt").stat().st_size,
        "nvmf_tgt_unstripped_bytes": built.stat().st_size,
        "timings": timings,
    }


def elf_needed(binary: Path) -> list[str]:
    """The shared libraries an ELF binary names (its NEEDED entries, from ``readelf -d``)."""
    proc = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=False)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", proc.stdout)


# Libraries every Debian system has (Essential or pulled by the minbase bootstrap itself).
BASE_LIBRARY_PACKAGES: tuple[str, ...] = ("libc6", "libgcc-s1", "libstdc++6")


def library_packages(sonames: Sequence[str]) -> dict[str, str]:
    """The Debian package on the build host that ships each shared library (``dpkg -S``), by soname."""
    owners: dict[str, str] = {}
    for soname in sonames:
        proc = subprocess.run(["dpkg", "-S", f"*/{soname}"], capture_output=True, text=True, check=False)
        packages = sorted({line.split(":", 1)[0] for line in proc.stdout.splitlines() if ":" in line})
        owners[soname] = packages[0] if packages else ""
    return owners


def missing_runtime_packages(owners: dict[str, str], declared: Sequence[str]) -> list[str]:
    """Sentences naming each library whose package the guest would lack (or that no package ships)."""
    have = {*declared, *BASE_LIBRARY_PACKAGES}
    return [
        f"needs {soname} (Debian package {package or 'unknown: not from a Debian package'})"
        for soname, package in sorted(owners.items())
        if package not in have
    ]


def kernel_header_packages(kernel_release: str) -> tuple[str, ...]:
    """Debian's packages that make a module build tree for ``kernel_release`` (``6.1.0-57-amd64``)."""
    flavourless = kernel_release.rsplit("-", 1)[0]
    major_minor = ".".join(kernel_release.split(".")[:2])
    return (f"linux-headers-{kernel_release}", f"linux-headers-{flavourless}-common", f"linux-kbuild-{major_minor}")


def _headers_tree(work: Path, kernel_release: str, version: str, log_file: Path) -> Path:
    """Debian's headers for the guest kernel, unpacked privately; returns the KDIR for kbuild."""
    debs, root = work / "debs", work / "headers"
    debs.mkdir()
    wanted = [f"{p}={version}" for p in kernel_header_packages(kernel_release)]
    try:
        _run("download the guest kernel's headers", ["apt-get", "download", "-q", *wanted], debs, log_file)
    except VendorBuildError as exc:
        raise VendorBuildError(
            f"vlab vendor: cannot download {' '.join(wanted)} (the guest kernel's headers); "
            f"run `apt-get update` on the build host and retry\n{exc}"
        ) from exc
    for deb in sorted(debs.glob("*.deb")):
        _run("unpack the kernel headers", ["dpkg-deb", "-x", str(deb), str(root)], work, log_file)
    kdir = root / "usr" / "src" / f"linux-headers-{kernel_release}"
    # Debian's flavour Makefile includes the -common tree by its absolute /usr/src path; point it at our copy.
    makefile = kdir / "Makefile"
    makefile.write_text(re.sub(r"^include /usr/src/", f"include {root}/usr/src/", makefile.read_text(), flags=re.M))
    shutil.rmtree(debs)
    return kdir


def module_info(module: Path, field: str) -> str:
    """One field of a kernel module's modinfo (``vermagic``, ``depends``)."""
    proc = subprocess.run(["modinfo", "-F", field, str(module)], capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def _build_scst(
    work: Path, log_file: Path, kernel_release: str, kernel_package_version: str, log: Callable[[str], None]
) -> dict[str, object]:
    src, jobs = work / "src", str(os.cpu_count() or 1)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    log(f"vlab vendor: SCST {SCST.file} for kernel {kernel_release} ({kernel_package_version}): headers ...")
    kdir = _headers_tree(work, kernel_release, kernel_package_version, log_file)
    unpack(source_path(SCST, verify=False), src)
    _run("SCST make 2release", ["make", "2release"], src, log_file)
    timings["prepare_s"] = round(time.monotonic() - t0, 1)
    for step in SCST_MAKE_DIRS:
        t0 = time.monotonic()
        log(f"vlab vendor: SCST make -C {step} ...")
        argv = ["make", f"-j{jobs}", "-C", step, "all", f"KDIR={kdir}", f"KVER={kernel_release}"]
        _run(f"SCST make -C {step}", argv, src, log_file)
        timings[f"make_{step}_s"] = round(time.monotonic() - t0, 1)

    tree = work / "tree"
    extra = tree / "lib" / "modules" / kernel_release / "extra"
    extra.mkdir(parents=True)
    depends: set[str] = set()
    vermagic: dict[str, str] = {}
    for rel in SCST_MODULES:
        target = extra / Path(rel).name
        _run("strip the SCST modules", ["strip", "--strip-debug", "-o", str(target), rel], src, log_file)
        vermagic[target.name] = module_info(target, "vermagic")
        depends.update(d for d in module_info(target, "depends").split(",") if d)
    built_names = {Path(rel).stem.replace("-", "_") for rel in SCST_MODULES}
    bin_dir = tree / GUEST_BIN
    bin_dir.mkdir(parents=True)
    for rel in SCST_PROGRAMS:
        _run("strip the SCST programs", ["strip", "-o", str(bin_dir / Path(rel).name), rel], src, log_file)
    return {
        "name": "scst",
        "source": SCST.file,
        "kernel_release": kernel_release,
        "kernel_package_version": kernel_package_version,
        "vermagic": vermagic,
        # Modules of the Debian kernel the SCST modules need in the image.
        "kernel_module_depends": sorted(d for d in depends if d.replace("-", "_") not in built_names),
        "timings": timings,
    }


def vermagic_mismatches(built: dict[str, str], kernel_vermagic: str) -> list[str]:
    """Sentences naming each built module whose vermagic differs from the guest kernel's own modules'."""
    return [
        f"{name} has vermagic {magic!r}, the guest kernel's modules {kernel_vermagic!r}"
        for name, magic in sorted(built.items())
        if magic != kernel_vermagic
    ]
