"""Self-tests' shared helpers: importing this conftest puts tests/ on ``sys.path`` (pytest's default import
mode), so the unit and plugin tests import the one scripted host as ``from fakes import ScriptedHost``."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _hypothesis_stays_imported() -> None:
    """Imports hypothesis once for the session, where this machine has it.

    Its pytest plugin imports ``hypothesis`` in every run's terminal summary, and pytester puts ``sys.modules``
    back after each in-process run: without this, each such run imports hypothesis afresh (assert-rewritten, as
    an installed plugin's package, and never cached under PYTHONDONTWRITEBYTECODE), seconds a run. Imported
    here, after the session started, every in-process run finds it already loaded."""
    if "_hypothesis_pytestplugin" in sys.modules:
        with contextlib.suppress(ImportError):
            import hypothesis.internal.observability  # noqa: F401


@pytest.fixture(scope="session", autouse=True)
def _children_keep_their_bytecode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Lets the Python processes the tests start (pytester's subprocess runs, a fresh venv, helper scripts)
    cache their bytecode in the session's temporary folder, where the environment forbids bytecode files.

    Under PYTHONDONTWRITEBYTECODE=1 every child compiled this package and assert-rewrote every installed
    pytest plugin's package (all of hypothesis, here) from source, a second or more per child; with a cache
    prefix the first child does it and the rest read it back. Nothing is written beside the sources."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        yield
        return
    with pytest.MonkeyPatch.context() as env:
        env.delenv("PYTHONDONTWRITEBYTECODE")
        env.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.getbasetemp() / "pycache"))
        yield
