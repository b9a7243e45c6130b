"""fabricqa-vlab's --lab option: the lab file's guests, or one clear line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_fabricqa.vlab.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_unknown_lab_is_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["up", "--lab", "nope"]) == 2
    assert capsys.readouterr().err.strip().startswith("fabricqa-vlab: --lab=nope: unknown lab name (known labs:")


def test_a_real_lab_is_not_a_virtual_one(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["status", "--lab", "rac3"]) == 2
    assert "lab 'rac3' has no vlab section: it is not a virtual lab" in capsys.readouterr().err


def test_status_of_a_lab_that_is_not_up(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "vlab.yaml").write_text((ROOT / "labs" / "vlab.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    assert main(["status", "--lab", "vlab"]) == 1
    assert "no lab in .fabricqa/vlab/vlab" in capsys.readouterr().out
