"""Self-tests' shared helpers: importing this conftest puts tests/ on ``sys.path`` (pytest's default import
mode), so the unit and plugin tests import the one scripted host as ``from fakes import ScriptedHost``."""

from __future__ import annotations

import contextlib
import sys

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
