"""The integrity suite from suites/, run by pytester with real fio on this machine: two "initiators" and the
"target" are this machine (local transport), the shared disk is a regular file, and a conftest stands in for the
fabric (no NVMe-oF or iSCSI here). Every write, verify, the corruption on the "backing device" and its detection
are real; the reservation case on nvmet is the skip naming the kind."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from labfiles import local_lab

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "test_integrity.py"

pytestmark = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio on this machine")

LAB = local_lab("localint", "nqn.2026-11.io.fabricqa:localint", "{path: DISK, writable: true, corruptible: true}")

CONFTEST = """
import pytest

from pytest_fabricqa.initiators.connect import FabricDevice

DISK = "@DISK@"


class FakeFabric:
    def __init__(self, lab, protocol):
        self.lab = lab
        self.protocol = protocol
        self.reconnects = 0
        self.target = lab.target_for(protocol).name  # what a fabric of several targets per protocol names
        self.devices = [
            FabricDevice(name, DISK, "ram0", "nqn.2026-11.io.fabricqa:localint", 1, 160 << 20, 512, True, False)
            for name in lab.hosts_with("initiator")
        ]

    def reconnect_initiators(self):
        self.reconnects += 1


class Guard:
    calls = []

    def before_writes(self, protocol, devices, *target):
        self.calls.append(protocol)


@pytest.fixture(scope="session")
def fabric(lab, protocol):
    return FakeFabric(lab, protocol)


@pytest.fixture(scope="session")
def write_guard():
    return Guard()
"""


def test_the_suite_writes_verifies_and_catches_a_changed_block_for_real(pytester: pytest.Pytester) -> None:
    disk = pytester.path / "disk.img"
    with open(disk, "wb") as fh:
        fh.truncate(160 << 20)
    (pytester.path / "lab.yaml").write_text(LAB.replace("DISK", str(disk)))
    pytester.makeconftest(CONFTEST.replace("@DISK@", str(disk)))
    (pytester.path / "test_integrity.py").write_text(SUITE.read_text())  # beside the conftest that stands in
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess(
        "--lab=lab.yaml", "test_integrity.py", "-p", "no:cacheprovider", "-rA", f"--report-dir={report}",
        "-k", "8k or reconnect or corruption or reservations",
    )  # fmt: skip
    result.assert_outcomes(passed=5, skipped=1)
    result.stdout.fnmatch_lines(["*nvme-tcp: persistent reservations are not supported by nvmet: Linux nvmet*"])
    run = json.loads((report / "results.json").read_text())
    cases = {c["case_id"]: c for c in run["cases"]}
    same = next(c for i, c in cases.items() if "same-host-8k" in i)
    assert same["suite"] == "integrity" and same["verdict"] == "passed"
    assert same["integrity"]["bytes_written"] == 4 << 20 and same["integrity"]["bytes_verified"] == 8 << 20
    cross = next(c for i, c in cases.items() if "cross-host-8k" in i)
    # each region: while writing, and on the other; then overwritten by the other, and read again by both ways
    assert cross["integrity"]["bytes_verified"] == 2 * 4 * (4 << 20)
    caught = next(c for i, c in cases.items() if "corruption-detected" in i)
    assert caught["verdict"] == "passed" and caught["integrity"]["expected_mismatches"] == 1
    (mismatch,) = caught["integrity"]["mismatches"]
    assert mismatch["device"] == str(disk) and mismatch["offset"] == (128 << 20) + 5 * 8192
    # The block's second half zeroed: fio compares the whole block to its generation's pattern and names the first
    # byte that differs -- in the first 12-byte unit of that half, whose offset bytes are mostly zero already.
    assert mismatch["what"] == "pattern: verify failed", mismatch
    byte = int(re.fullmatch(r"0x[0-9a-f]+ at byte (\d+) of the block", mismatch["expected"])[1])  # type: ignore[index]
    assert 4096 <= byte < 4096 + 12, mismatch
    skipped = next(c for i, c in cases.items() if "reservations" in i)
    assert skipped["verdict"] == "skipped" and "not supported by nvmet" in skipped["extras"]["skip_reason"]
    junit = (report / "junit.xml").read_text()
    assert 'name="integrity.expected_mismatches" value="1"' in junit
    assert "changed block(s) detected as expected" in (report / "report.html").read_text()


def test_the_suite_checks_every_writable_device_not_only_the_first(pytester: pytest.Pytester) -> None:
    # Issue 30, item 4: two namespaces marked writable, two "disks": each check writes and reads both.
    disks = [pytester.path / "disk.img", pytester.path / "disk2.img"]
    for disk in disks:
        with open(disk, "wb") as fh:
            fh.truncate(160 << 20)
    lab = LAB.replace("DISK", str(disks[0])).replace(
        "namespaces: [ram0]", "namespaces: [ram0, ram1]"
    ).replace("    nvme:\n", f"      ram1: {{path: {disks[1]}, writable: true}}\n    nvme:\n")  # fmt: skip
    (pytester.path / "lab.yaml").write_text(lab)
    second = (
        '            FabricDevice(name, "@DISK2@", "ram1", "nqn.2026-11.io.fabricqa:localint", 2, 160 << 20, 512, True,'
        ' False)\n            for name in lab.hosts_with("initiator")\n        ]\n'
    )
    conftest = CONFTEST.replace("@DISK@", str(disks[0])).replace(
        '            for name in lab.hosts_with("initiator")\n        ]\n',
        '            for name in lab.hosts_with("initiator")\n        ] + [\n'
        + second.replace("@DISK2@", str(disks[1])),
    )
    pytester.makeconftest(conftest)
    (pytester.path / "test_integrity.py").write_text(SUITE.read_text())
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess(
        "--lab=lab.yaml",
        "test_integrity.py",
        "-p",
        "no:cacheprovider",
        f"--report-dir={report}",
        "-k",
        "test_write_and_verify and 8k",
    )
    result.assert_outcomes(passed=1)
    (case,) = json.loads((report / "results.json").read_text())["cases"]
    assert case["integrity"]["bytes_written"] == 2 * (4 << 20), case["integrity"]
    for disk in disks:
        with open(disk, "rb") as fh:
            fh.seek(128 << 20)
            assert fh.read(4) != b"\0\0\0\0", f"{disk} was not written"
