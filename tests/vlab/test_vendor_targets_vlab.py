"""The guest image's third-party targets, on a booted guest: SPDK's nvmf_tgt and rpc.py, SCST's modules and
iscsi-scstd, Debian's tgt (pytest_fabricqa/vlab/vendor.py builds the first two into the image).

Runs on the three guests tests/vlab/conftest.py shares with the other modules here.
"""

from __future__ import annotations

import json

import pytest

from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.vlab import vendor

pytestmark = pytest.mark.vlab

SCST_MODULES = ("scst", "scst_vdisk", "iscsi_scst", "isert_scst")


def _sh(host: Host, script: str) -> str:
    return host.run(["sh", "-c", script]).stdout


def test_spdk_nvmf_tgt_runs_and_answers_its_rpc(vlab: tuple[LabModel, dict[str, Host], dict[str, str]]) -> None:
    _, hosts, _ = vlab
    vstor = hosts["vstor"]
    assert "SPDK v23.01.1" in vstor.run(["nvmf_tgt", "--version"]).stdout
    sock = "/tmp/fabricqa-vendor-test.sock"
    # No hugepages in the guest. 512 MiB as the README says: with 256 SPDK 23.01 fails to create its large iobuf
    # pool and then hangs instead of exiting (seen on vstor), hence also the KILL after a grace period.
    script = (
        f"nvmf_tgt -m 0x1 -s 512 -u --env-context='--no-huge --legacy-mem' -r {sock} >/tmp/nvmf_tgt.log 2>&1 &"
        f" pid=$!; for i in $(seq 60); do [ -S {sock} ] && break; sleep 1; done;"
        f" timeout 60 spdk_rpc.py -s {sock} spdk_get_version; rc=$?; kill $pid;"
        f" for i in $(seq 10); do kill -0 $pid 2>/dev/null || break; sleep 1; done; kill -9 $pid 2>/dev/null;"
        f" wait $pid; exit $rc"
    )
    result = vstor.run(["sh", "-c", script])
    assert json.loads(result.stdout)["version"] == "SPDK v23.01.1"
    assert _sh(vstor, f"test -x /{vendor.SPDK_PREFIX}/scripts/rpc.py && echo ok").strip() == "ok"


def test_scst_modules_load_on_the_guest_kernel(vlab: tuple[LabModel, dict[str, Host], dict[str, str]]) -> None:
    _, hosts, _ = vlab
    vstor = hosts["vstor"]
    try:
        vstor.run(["modprobe", "-a", *SCST_MODULES])
        loaded = {line.split()[0] for line in vstor.run(["cat", "/proc/modules"]).stdout.splitlines()}
        assert set(SCST_MODULES) <= loaded
        assert _sh(vstor, "test -d /sys/kernel/scst_tgt/targets/iscsi && echo ok").strip() == "ok"
        assert _sh(vstor, "for c in iscsi-scstd iscsi-scst-adm; do command -v $c; done").split() == [
            f"/{vendor.GUEST_BIN}/iscsi-scstd",
            f"/{vendor.GUEST_BIN}/iscsi-scst-adm",
        ]
    finally:
        vstor.run(["modprobe", "-r", "-a", "isert_scst", "iscsi_scst", "scst_vdisk", "scst"], check=False)


def test_debian_tgt_is_there_with_iser(vlab: tuple[LabModel, dict[str, Host], dict[str, str]]) -> None:
    _, hosts, _ = vlab
    vstor = hosts["vstor"]
    assert _sh(vstor, "for c in tgtd tgtadm; do command -v $c; done").split() == ["/usr/sbin/tgtd", "/usr/sbin/tgtadm"]
    # Debian's tgtd carries the iSER driver (linked to libibverbs and librdmacm).
    needed = _sh(vstor, "ldd /usr/sbin/tgtd")
    assert "libibverbs.so.1" in needed and "librdmacm.so.1" in needed
