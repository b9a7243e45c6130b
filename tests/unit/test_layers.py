"""The package's shape holds: the layers in ``.importlinter`` are kept, they break on an upward import, there is no
import cycle, the top holds only packages and the entry points, and the flat layout's paths still import (warning)."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import grimp
import pytest

from pytest_fabricqa.core import moved

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "pytest_fabricqa"
LINT = shutil.which("lint-imports")


def lint(where: Path) -> subprocess.CompletedProcess[str]:
    assert LINT is not None, "lint-imports is not installed: pip install -e '.[dev]'"
    return subprocess.run(
        [LINT, "--config", str(where / ".importlinter"), "--no-cache"],
        cwd=where,
        env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layers_hold() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("core/errors.py", "from pytest_fabricqa.plugin import groups", "Layers"),
        ("lab/model.py", "from pytest_fabricqa.failover import figures", "Layers"),
        ("initiators/connect.py", "from pytest_fabricqa.targets import nvmet", "Targets and initiators never"),
        ("fabric/provision.py", "from pytest_fabricqa.failover import outage", "Layers"),
        ("measure/cpu.py", "import pytest", "pytest only on the pytest side"),
        ("report/html.py", "from pytest_fabricqa.transport import base", "The report reads results, never hosts"),
    ],
    ids=["core-imports-the-plugin", "lab-imports-failover", "initiators-import-targets", "fabric-imports-failover",
         "pytest-outside-its-package", "report-imports-a-host"],
)  # fmt: skip
def test_an_import_against_the_contracts_breaks_them(tmp_path: Path, module: str, line: str, contract: str) -> None:
    """The contracts can fail: one import added against them, on a copy of the package, is named."""
    shutil.copytree(PACKAGE, tmp_path / "pytest_fabricqa", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    target = tmp_path / "pytest_fabricqa" / module
    target.write_text(target.read_text() + f"\n{line}  # added by the test\n")
    result = lint(tmp_path)
    assert result.returncode != 0, result.stdout
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout, result.stdout
    dotted = "pytest_fabricqa." + module.removesuffix(".py").replace("/", ".")
    assert dotted in result.stdout, result.stdout


def test_no_import_cycle() -> None:
    """Every import edge of the package, lazy ones included, and not one strongly connected pair of modules."""
    graph = grimp.build_graph("pytest_fabricqa")
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    cycles = [
        (a, b) for a, targets in edges.items() for b in targets if graph.find_shortest_chain(importer=b, imported=a)
    ]
    assert cycles == []


def test_the_top_holds_packages_and_the_entry_points() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert modules == ["__init__.py", "api.py"]
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert "plugin" in packages and len(packages) >= 10


def test_every_package_says_what_it_is_for() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        doc = importlib.import_module(f"pytest_fabricqa.{init.parent.name}").__doc__
        assert doc and doc.strip(), f"{init} has no docstring"


@pytest.mark.parametrize("old", sorted(moved.MOVED))
def test_an_old_module_path_still_imports_and_warns(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=r"moved to pytest_fabricqa\.") as caught:
        module = importlib.import_module(old)
    assert caught[0].filename == __file__  # the warning points at the importing line, not at importlib
    homes = [importlib.import_module(n) for n in moved.MOVED[old]]
    for name in module.__all__:
        assert any(getattr(home, name, None) is getattr(module, name) for home in homes)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize("package", sorted(moved.PACKAGE_HOMES))
def test_an_old_name_on_a_package_is_forwarded_with_a_warning(package: str) -> None:
    home = importlib.import_module(moved.PACKAGE_HOMES[package])
    name = next(n for n in sorted(vars(home)) if not n.startswith("_") and getattr(home, n).__class__ is not type(sys))
    pkg = importlib.import_module(package)
    with pytest.warns(DeprecationWarning, match=f"{package}.{name} moved to {home.__name__}.{name}"):
        assert getattr(pkg, name) is getattr(home, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.import_module(home.__name__)  # the new path: no warning


def test_the_readme_example_of_an_old_release_still_imports() -> None:
    """The user-suite example as the README showed it before the packages (fio, verdict, workloads, integrity,
    reservations, measure), run as a user's file would: it imports, warning only on the moved paths."""
    code = (
        "from pytest_fabricqa.fio import figures, run_fio\n"
        "from pytest_fabricqa.verdict import performance_case, WriteGuard\n"
        "from pytest_fabricqa.workloads import Workload\n"
        "from pytest_fabricqa.integrity import shared_devices, write_and_verify, cross_verify\n"
        "from pytest_fabricqa.fio.verify import run_verify, parse_mismatches\n"
        "from pytest_fabricqa.reservations import fencing, unsupported\n"
        "from pytest_fabricqa.measure import run_point\n"
        "from pytest_fabricqa.errors import FabricQAError\n"
        "from pytest_fabricqa import api\n"
        "assert api.performance_case is performance_case and api.run_point is run_point\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    warned = {int(line.split(":")[1]) for line in result.stderr.splitlines() if "DeprecationWarning" in line}
    assert warned == {2, 3, 4, 6, 7, 8}, result.stderr  # fio, fio.verify and api did not move: no warning
