"""The virtual lab's third-party builds (SPDK, SCST): cache keys, where the archives are found, and the checks
that guard the build (a wrong or missing archive, a module for another kernel, a library the guest lacks)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.vlab import image as image_mod
from pytest_fabricqa.vlab import vendor
from pytest_fabricqa.vlab.cli import main as vlab_cli

SHARED_SUMS = vendor.repo_root().parent / "shared" / "vendor" / "SHA256SUMS"


def test_spdk_key_changes_with_each_input() -> None:
    base = vendor.spdk_cache_key("22.11.11")
    assert base == vendor.spdk_cache_key("22.11.11")
    assert vendor.spdk_cache_key("22.11.7") != base
    other_isal = replace(vendor.ISAL, sha256="0" * 64)
    assert vendor.spdk_cache_key("22.11.11", (vendor.SPDK, other_isal, vendor.ISAL_CRYPTO)) != base


def test_spdk_key_changes_with_the_configure_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    base = vendor.spdk_cache_key("22.11.11")
    monkeypatch.setattr(vendor, "SPDK_CONFIGURE", (*vendor.SPDK_CONFIGURE, "--enable-debug"))
    assert vendor.spdk_cache_key("22.11.11") != base


def test_scst_key_changes_with_the_kernel_and_the_archive() -> None:
    base = vendor.scst_cache_key("6.1.0-57-amd64", "6.1.192-3")
    assert base == vendor.scst_cache_key("6.1.0-57-amd64", "6.1.192-3")
    assert vendor.scst_cache_key("6.1.0-58-amd64", "6.1.192-3") != base
    assert vendor.scst_cache_key("6.1.0-57-amd64", "6.1.192-4") != base
    assert vendor.scst_cache_key("6.1.0-57-amd64", "6.1.192-3", replace(vendor.SCST, sha256="1" * 64)) != base


def _helper_of_another_shape(*args: object) -> None:
    """Stands in for a build helper whose code changed."""


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SPDK_PREFIX", "opt/spdk-elsewhere"),
        ("GUEST_BIN", "usr/sbin"),
        ("unpack", _helper_of_another_shape),
        ("_run", _helper_of_another_shape),
        ("elf_needed", _helper_of_another_shape),
    ],
)
def test_spdk_key_changes_with_the_layout_and_the_helpers_code(
    monkeypatch: pytest.MonkeyPatch, name: str, value: object
) -> None:
    """Where the build lays its files in the guest and the helpers the recipe calls shape the build as much as the
    recipe does: before, a new SPDK_PREFIX or unpack() reused the old build (issue 28, item 7)."""
    base = vendor.spdk_cache_key("22.11.11")
    monkeypatch.setattr(vendor, name, value)
    assert vendor.spdk_cache_key("22.11.11") != base


@pytest.mark.parametrize(
    ("name", "value"),
    [("GUEST_BIN", "usr/sbin"), ("_headers_tree", _helper_of_another_shape), ("module_info", _helper_of_another_shape)],
)
def test_scst_key_changes_with_the_layout_and_the_helpers_code(
    monkeypatch: pytest.MonkeyPatch, name: str, value: object
) -> None:
    base = vendor.scst_cache_key("6.1.0-57-amd64", "6.1.192-3")
    monkeypatch.setattr(vendor, name, value)
    assert vendor.scst_cache_key("6.1.0-57-amd64", "6.1.192-3") != base


def test_image_key_takes_the_vendor_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert image_mod.cache_key() == image_mod.cache_key(vendor_key=vendor.inputs_key())
    assert image_mod.cache_key(vendor_key="a") != image_mod.cache_key(vendor_key="b")
    before = vendor.inputs_key()
    monkeypatch.setattr(vendor, "SOURCES", (*vendor.SOURCES[:-1], replace(vendor.SCST, sha256="2" * 64)))
    changed_source = vendor.inputs_key()
    monkeypatch.setattr(vendor, "SPDK_CONFIGURE", ("--enable-debug",))
    assert len({before, changed_source, vendor.inputs_key()}) == 3


def test_image_installs_the_vendor_guest_packages() -> None:
    assert set(vendor.GUEST_PACKAGES) <= set(image_mod.PACKAGES)
    assert "tgt" in image_mod.PACKAGES


def test_a_missing_archive_is_one_line_naming_file_folder_and_fix(tmp_path: Path) -> None:
    with pytest.raises(vendor.VendorSourceError) as excinfo:
        vendor.source_path(vendor.SPDK, {vendor.VENDOR_DIR_ENV: str(tmp_path)})
    message = str(excinfo.value)
    assert isinstance(excinfo.value, UserError)
    assert "\n" not in message
    assert message.startswith(f"vlab image: spdk-23.01.1.tar.gz not found in {tmp_path} ($FABRICQA_VENDOR_DIR)")
    assert "set FABRICQA_VENDOR_DIR to a folder holding it" in message
    assert "tag v23.01.1 of github.com/spdk/spdk" in message and vendor.SPDK.sha256 in message


def test_without_the_variable_the_default_folder_is_named(tmp_path: Path) -> None:
    folder, how = vendor.vendor_dir({})
    assert folder == vendor.repo_root().parent / "shared" / "vendor"
    assert "<repo>/../shared/vendor" in how and "FABRICQA_VENDOR_DIR unset" in how


def test_an_archive_with_another_sum_is_refused(tmp_path: Path) -> None:
    (tmp_path / vendor.SCST.file).write_bytes(b"not scst")
    with pytest.raises(vendor.VendorSourceError, match=r"has sha256 [0-9a-f]{64}, expected 582f301f") as excinfo:
        vendor.source_path(vendor.SCST, {vendor.VENDOR_DIR_ENV: str(tmp_path)})
    assert "\n" not in str(excinfo.value)


def test_the_shared_sums_are_the_ones_in_the_code() -> None:
    if not SHARED_SUMS.is_file():
        pytest.skip(f"no {SHARED_SUMS} beside this checkout")
    shared = {name: digest for digest, name in (line.split() for line in SHARED_SUMS.read_text().splitlines())}
    assert shared == {s.file: s.sha256 for s in vendor.SOURCES}


def test_image_build_stops_before_the_bootstrap_when_an_archive_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(vendor.VENDOR_DIR_ENV, str(tmp_path / "nothing-here"))
    ran: list[object] = []
    monkeypatch.setattr(image_mod.subprocess, "run", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(image_mod.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    with pytest.raises(vendor.VendorSourceError, match=r"not found in .*nothing-here"):
        image_mod.build_image(cache_dir=tmp_path / "cache", log=lambda line: None)
    assert ran == []


def test_cli_build_prints_the_missing_archive_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(vendor.VENDOR_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(image_mod.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    assert vlab_cli(["build", "--cache-dir", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"fabricqa-vlab: vlab image: spdk-23.01.1.tar.gz not found in {tmp_path}")


def _tarball(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            top = name.split("/", 1)[0]
            if top not in tar.getnames():
                info = tarfile.TarInfo(top)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpack_drops_the_top_folder_whatever_its_name(tmp_path: Path) -> None:
    # The shared isa-l archive's folder is `isa-l/`; GitHub's own archives say `isa-l-2df39cf.../`.
    archive = _tarball(tmp_path / "a.tar.gz", {"isa-l-2df39cf5f1b9/Makefile.unx": b"x", "isa-l-2df39cf5f1b9/a/b": b"y"})
    vendor.unpack(archive, tmp_path / "out")
    assert (tmp_path / "out" / "Makefile.unx").read_bytes() == b"x"
    assert (tmp_path / "out" / "a" / "b").read_bytes() == b"y"


def test_vermagic_check_fires_for_a_module_of_another_kernel() -> None:
    kernel = "6.1.0-57-amd64 SMP preempt mod_unload modversions "
    assert vendor.vermagic_mismatches({"scst.ko": kernel}, kernel) == []
    wrong = vendor.vermagic_mismatches({"scst.ko": kernel, "iscsi-scst.ko": "6.18.44 SMP mod_unload "}, kernel)
    assert wrong == [f"iscsi-scst.ko has vermagic '6.18.44 SMP mod_unload ', the guest kernel's modules {kernel!r}"]


def test_runtime_check_fires_for_a_library_the_guest_lacks() -> None:
    owners = {"libaio.so.1": "libaio1", "libc.so.6": "libc6", "libfoo.so.2": "libfoo2", "libbar.so": ""}
    assert vendor.missing_runtime_packages(owners, vendor.GUEST_PACKAGES) == [
        "needs libbar.so (Debian package unknown: not from a Debian package)",
        "needs libfoo.so.2 (Debian package libfoo2)",
    ]
    assert vendor.missing_runtime_packages({"libaio.so.1": "libaio1"}, vendor.GUEST_PACKAGES) == []


def test_library_packages_asks_dpkg() -> None:
    if subprocess.run(["dpkg", "-S", "*/libc.so.6"], capture_output=True, check=False).returncode != 0:
        pytest.skip("not a Debian host")
    assert vendor.library_packages(["libc.so.6"]) == {"libc.so.6": "libc6"}


def test_kernel_header_packages_for_a_debian_release() -> None:
    assert vendor.kernel_header_packages("6.1.0-57-amd64") == (
        "linux-headers-6.1.0-57-amd64",
        "linux-headers-6.1.0-57-common",
        "linux-kbuild-6.1",
    )
