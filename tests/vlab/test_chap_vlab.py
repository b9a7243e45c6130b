"""Issue 31, iSCSI CHAP on the virtual lab: LIO, SCST and tgt provisioned with CHAP, one-way and mutual, its secrets
read from a file and from an environment variable; every connectivity case passes over iSCSI on each, a wrong and a
missing secret are each refused, and neither secret appears in any artifact of the run.

The connectivity suite runs as a user runs it (pytest against the session's lab, iscsi on the three targets) with
one change to labs/vlab.yaml: each SCSI target's ``iscsi.chap``. The artifacts searched for the secrets: the terminal output, results.json,
JUnit, fabricqa's report.html and every state file the plugin keeps on the lab's hosts (/run/fabricqa).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vlab_support import ROOT, STATE, lab_data

from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host

pytestmark = pytest.mark.vlab

KINDS = ("lio", "scst", "tgt")
STATE_FILES = 'for f in /run/fabricqa/*; do [ -f "$f" ] && cat "$f"; done; true'


@pytest.mark.parametrize("mutual", [False, True], ids=["one-way", "mutual"])
def test_chap_connects_refuses_a_wrong_or_missing_secret_and_shows_no_secret_on_lio_scst_and_tgt(
    vlab: tuple[LabModel, dict[str, Host], dict[str, str]], tmp_path: Path, mutual: bool
) -> None:
    _, hosts, _ = vlab
    initiator_secret, target_secret = secrets.token_hex(8), secrets.token_hex(8)
    secret_file = tmp_path / "chap-initiator"
    secret_file.write_text(initiator_secret + "\n")
    secret_file.chmod(0o600)
    chap: dict[str, object] = {"initiator": {"user": "vnodes", "secret": {"file": str(secret_file)}}}
    if mutual:
        chap["target"] = {"user": "vstor", "secret": {"env": "FABRICQA_TEST_CHAP_TARGET"}}
    data = lab_data()
    for target in data["targets"]:
        if target["kind"] in KINDS:
            target["iscsi"]["chap"] = chap
    lab_file = tmp_path / "vlab.yaml"
    lab_file.write_text(yaml.safe_dump(data))
    report = tmp_path / "report"
    argv = [
        sys.executable, "-m", "pytest", f"--lab={lab_file}", "--protocol=iscsi",
        "-p", "no:cacheprovider", "-o", f"fabricqa_state_dir={STATE}", f"--report-dir={report}", "-v",
        str(ROOT / "suites" / "test_connectivity.py"),
    ]  # fmt: skip
    env = {**os.environ, "FABRICQA_TEST_CHAP_TARGET": target_secret}
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]

    results = json.loads((report / "results.json").read_text())
    verdicts = {c["case_id"]: c["verdict"] for c in results["cases"]}
    for kind in KINDS:
        for secret in ("wrong", "missing"):
            case = f"test_a_login_with_a_wrong_or_missing_chap_secret_is_refused[iscsi-{kind}-{secret}]"
            assert verdicts.get(case) == "passed", verdicts
    assert set(verdicts.values()) == {"passed"}, verdicts

    shown = [proc.stdout, proc.stderr, *(p.read_text() for p in report.rglob("*") if p.is_file())]
    shown += [h.run(["sh", "-c", STATE_FILES]).stdout for h in hosts.values()]
    for secret in (initiator_secret, target_secret):
        assert not [text[:200] for text in shown if secret in text], "a CHAP secret is in an artifact of the run"
