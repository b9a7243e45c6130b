"""iSCSI CHAP in lab files (issue 31): secrets named, never written inline, read only from a file its owner alone
can read or from an environment variable; each mistake one load-time line. The secrets reach the target and the
node records through stdin, never a command line (so never a failed command's message either)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes import ScriptedHost
from labfiles import vlab_kernel_text

from pytest_fabricqa.initiators import iscsi
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabError, SecretRef
from pytest_fabricqa.targets import remote

VLAB = vlab_kernel_text()
LIO_ISCSI = "      luns: [ram0, nvme0]\n"


def _lab(tmp_path: Path, chap: str) -> Path:
    assert VLAB.count(LIO_ISCSI) == 1
    text = VLAB.replace(LIO_ISCSI, LIO_ISCSI + f"      chap: {chap}\n")
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return path


def _secret(tmp_path: Path, mode: int = 0o600, text: str = "s3cret-s3cret-1\n") -> Path:
    path = tmp_path / "secret"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_lab_with_chap_from_a_private_file_and_an_environment_variable_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FQA_TARGET_SECRET", "t4rget-secret-2")
    secret = _secret(tmp_path)
    lab = load_lab(_lab(tmp_path, f"{{initiator: {{user: nodes, secret: {{file: {secret}}}}}, "
                                   "target: {user: vstor, secret: {env: FQA_TARGET_SECRET}}}"))  # fmt: skip
    chap = lab.target_for("iscsi", "lio").iscsi.chap  # type: ignore[union-attr]
    assert chap is not None and chap.mutual
    assert chap.initiator.secret.reveal() == "s3cret-s3cret-1" and chap.target.secret.reveal() == "t4rget-secret-2"  # type: ignore[union-attr]
    assert "s3cret" not in repr(lab) and "t4rget" not in repr(lab)  # the model holds places, never values


@pytest.mark.parametrize(
    "chap, expected",
    [
        ("{initiator: {user: nodes, secret: s3cret-s3cret-1}}", r"a secret is never written in the lab file; give"),
        ("{initiator: {user: nodes, secret: {env: FQA_UNSET_SECRET}}}", r"environment variable FQA_UNSET_SECRET is not set"),
        ("{initiator: {user: nodes, secret: {file: /nonexistent/secret}}}", r"secret file /nonexistent/secret cannot be read"),
        ("{initiator: {user: nodes, secret: {file: /x, env: Y}}}", r"give exactly one of file: PATH or env: NAME"),
    ],
    ids=["inline", "unset-env", "no-file", "both"],
)  # fmt: skip
def test_each_secret_mistake_is_one_load_time_line(tmp_path: Path, chap: str, expected: str) -> None:
    with pytest.raises(LabError) as caught:
        load_lab(_lab(tmp_path, chap))
    message = str(caught.value)
    assert "\n" not in message and re.search(expected, message), message
    assert "s3cret-s3cret-1" not in message


def test_a_secret_file_others_can_read_is_refused_naming_the_fix(tmp_path: Path) -> None:
    secret = _secret(tmp_path, 0o644)
    with pytest.raises(LabError, match=rf"secret file {secret} is readable by others \(mode 644\); chmod 600"):
        load_lab(_lab(tmp_path, f"{{initiator: {{user: nodes, secret: {{file: {secret}}}}}}}"))
    assert SecretRef(file=str(_secret(tmp_path, 0o600))).problem() is None


def test_chap_loads_on_scst_and_tgt_too(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "labs" / "vlab.yaml").read_text()
    flow = "luns: [ram0, nvme0]}"
    secret = _secret(tmp_path)
    chap = f", chap: {{initiator: {{user: nodes, secret: {{file: {secret}}}}}}}"
    for kind in ("scst", "tgt"):
        at = text.index(flow, text.index(f"  - kind: {kind}"))
        text = text[:at] + flow[:-1] + chap + "}" + text[at + len(flow) :]
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    lab = load_lab(path)
    assert [t.kind for t in lab.targets if t.iscsi is not None and t.iscsi.chap is not None] == ["scst", "tgt"]


def test_secrets_go_to_the_node_record_and_configfs_through_stdin_only() -> None:
    host = ScriptedHost("vnode1")
    seen: list[tuple[tuple[str, ...], str | None]] = []
    host.answer = lambda argv: ""  # type: ignore[method-assign]
    original = host.run

    def run(argv, *, check=True, timeout=None, stdin=None):  # type: ignore[no-untyped-def]
        seen.append((tuple(argv), stdin))
        return original(argv, check=check, timeout=timeout, stdin=stdin)

    host.run = run  # type: ignore[method-assign]
    settings = iscsi.chap_settings("nodes", "s3cret-s3cret-1", ("vstor", "t4rget-secret-2"))
    iscsi.set_node_settings(host, "iqn.2026-11.io.fabricqa:vstor", "10.10.10.19:3260", "fqa-vlab_tcp", settings)
    remote.write_secret(host, "/sys/kernel/config/target/iscsi/x/tpgt_1/acls/y/auth/password", "s3cret-s3cret-1")
    assert [name for (argv, _) in seen[:-1] for name in argv[-1:]] == [
        "node.session.auth.authmethod", "node.session.auth.username", "node.session.auth.password",
        "node.session.auth.username_in", "node.session.auth.password_in",
    ]  # fmt: skip
    assert [stdin for _, stdin in seen[:-1]] == [
        "CHAP\n",
        "nodes\n",
        "s3cret-s3cret-1\n",
        "vstor\n",
        "t4rget-secret-2\n",
    ]
    assert seen[-1][1] == "s3cret-s3cret-1"
    assert not [argv for argv, _ in seen if any("s3cret" in a or "t4rget" in a for a in argv)]


def test_scsts_secret_command_goes_through_stdin_and_a_failure_names_the_label_only(tmp_path: Path) -> None:
    from pytest_fabricqa.targets import scst
    from pytest_fabricqa.transport.base import CommandError
    from pytest_fabricqa.transport.local import LocalHost

    host = LocalHost("vstor")
    mgmt_file = tmp_path / "mgmt"
    label = "add_target_attribute iqn.2026-11.io.fabricqa:vstor IncomingUser nodes <secret>"
    scst.mgmt(host, str(mgmt_file), label, secret="s3cret-s3cret-1")
    assert mgmt_file.read_text() == label.replace("<secret>", "s3cret-s3cret-1")  # one write, the whole command
    with pytest.raises(CommandError) as caught:
        scst.mgmt(host, str(tmp_path / "no" / "such" / "mgmt"), label, secret="s3cret-s3cret-1")
    assert "s3cret" not in str(caught.value) and "s3cret" not in " ".join(caught.value.result.argv)


def test_tgts_account_password_goes_on_stdin() -> None:
    from pytest_fabricqa.targets import tgt
    from pytest_fabricqa.transport.local import LocalHost

    # tgtadm stood in for by printf: what it was called with, one argument a line.
    argv = ["sh", "-c", tgt.ACCOUNT_NEW, "sh", "printf", "%s\\n", "--mode", "account", "--op", "new", "--user", "u"]
    result = LocalHost("vstor").run(argv, stdin="s3cret-s3cret-1\n")
    assert result.stdout.splitlines()[-2:] == ["--password", "s3cret-s3cret-1"]
    assert "s3cret" not in " ".join(argv)
