"""The suites ship with the plugin: `pytest --lab=FILE` in a user's own folder collects them; the repository's
own `pytest --lab=vlab` still collects suites/ once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE_CASES = [
    "test_prerequisites.py::test_rdma_link[[]nvme-rdma-el72h1[]]",
    "test_connectivity.py::test_every_initiator_is_connected[[]nvme-rdma-nvmet[]]",
    "test_performance.py::test_fio[[]nvme-rdma-nvmet-randread-8k-qd128-j4[]]",
]


def _user_folder(path: Path) -> Path:
    """An empty folder holding only the user's lab file (seed 000's lab)."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "labs" / "rac3.yaml", path / "mylab.yaml")
    return path


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}


def test_a_lab_file_in_an_empty_folder_collects_the_shipped_suites(pytester: pytest.Pytester) -> None:
    _user_folder(pytester.path)
    result = pytester.runpytest_subprocess("--lab=mylab.yaml", "--protocol=nvme-rdma", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines_random(SUITE_CASES)
    # A folder with a suite of the user's own is collected as pytest always does, with or without a path.
    pytester.makepyfile(test_mine="def test_mine(lab):\n    pass\n")
    for args in ([], ["test_mine.py"]):
        result = pytester.runpytest_subprocess("--lab=mylab.yaml", *args, "--collect-only", "-q")
        result.stdout.fnmatch_lines(["test_mine.py::test_mine", "1 test collected*"])


def test_the_repository_collects_suites_once() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--lab=vlab", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert ids and all(i.startswith("suites/") for i in ids)
    assert len(ids) == len(set(ids))


def test_the_wheel_carries_the_suites_and_runs_them_without_a_clone(tmp_path: Path) -> None:
    """Built as a user gets it (a wheel), installed into a fresh venv, run from a folder holding only a lab file."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("pytest_fabricqa", "suites"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = _clean_env()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        env=env,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("pytest_fabricqa-*.whl")
    venv = tmp_path / "venv"
    # The venv sees this machine's packages (pytest, pydantic, ...) but gets the plugin only from the wheel.
    # Without a pip of its own (ensurepip took most of this test's time): this pip installs into it via --python.
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True, env=env
    )
    python = venv / "bin" / "python"
    install = ["install", "-q", "--no-deps", "--ignore-installed", str(wheel)]
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), *install],
        check=True,
        env=env,
        capture_output=True,
    )
    user = _user_folder(tmp_path / "user")
    argv = ["--lab=mylab.yaml", "--protocol=nvme-rdma", "--collect-only", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        [str(python), "-m", "pytest", *argv, "-p", "no:benchmark"],
        cwd=user,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pytest.LineMatcher(proc.stdout.splitlines()).fnmatch_lines_random(SUITE_CASES)
    where = subprocess.run(
        [str(python), "-c", "import pytest_fabricqa.plugin as p; print(p.qualification_suites())"],
        cwd=user,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(venv)) and where.endswith("site-packages/pytest_fabricqa/suites")
    assert sorted(p.name for p in user.iterdir()) == ["mylab.yaml"]  # nothing written to the user's folder
