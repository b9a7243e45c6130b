"""The flat layout's import paths (before the domain packages), kept working for one release with a warning.

``pytest_fabricqa.verdict``, ``pytest_fabricqa.workloads`` and the other flat modules moved into packages. A
suite written against an old path still imports: an old module is an alias whose names are looked up in the new
homes, and an old name read from a package that took the module's place (``pytest_fabricqa.lab.LabModel``) is
forwarded to the module that has it now. Either way a :class:`DeprecationWarning` names the new path. Nothing in the plugin
uses these paths; ``tests/unit/test_layers.py`` proves every one still works.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

PACKAGE = "pytest_fabricqa"

MOVED: dict[str, tuple[str, ...]] = {
    f"{PACKAGE}.{old}": tuple(f"{PACKAGE}.{n}" for n in new)
    for old, new in {
        "errors": ("core.errors",),
        "protocols": ("core.protocols",),
        "metrics": ("core.metrics",),
        "workloads": ("core.workloads",),
        "scaling": ("core.scaling",),
        "lab_rules": ("lab.rules",),
        "thresholds": ("lab.thresholds",),
        "oracle.settings": ("lab.database",),
        "lablock": ("fabric.lock",),
        "fanout": ("transport.fanout",),
        "testinfra_backend": ("transport.testinfra",),
        "provision": ("fabric.provision",),
        "prereq": ("fabric.prereq",),
        "queues": ("fabric.queues",),
        "kernlog": ("fabric.kernlog",),
        "spread": ("measure.spread",),
        "cpu": ("measure.cpu",),
        "verdict": ("measure.verdict", "safety.guard", "fabric.environment"),
        "safety_batch": ("safety.batch",),
        "reservations": ("integrity.reservations", "initiators.reservations"),
        "outage": ("failover.outage",),
        "parity": ("failover.parity",),
        "hooks": ("plugin.hooks",),
        "session": ("plugin.session",),
        "reporting": ("plugin.reporting",),
        "grouping": ("plugin.groups",),
        "xdist_groups": ("plugin.groups",),
        "vlab_lab": ("vlab.lab",),
    }.items()
}
"""Old module -> the modules its names live in now, looked up in this order."""

PACKAGE_HOMES: dict[str, str] = {
    f"{PACKAGE}.{old}": f"{PACKAGE}.{new}"
    for old, new in {
        "lab": "lab.model",
        "faults": "faults.inject",
        "measure": "measure.point",
        "safety": "safety.signatures",
        "integrity": "integrity.checks",
        "failover": "failover.figures",
    }.items()
}
"""A flat module whose name a package took -> the module that has its names now."""


def _warn(message: str) -> None:
    """Warn at the importing line: skip this module's frames and the import machinery's (``warnings`` itself skips
    importlib's bootstrap frames when it counts ``stacklevel``; ``importlib.import_module``'s it does not)."""
    level, frame = 2, sys._getframe(1)
    while (back := frame.f_back) is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<frozen importlib._bootstrap"):
            if name != __file__ and name != importlib.__file__:
                break
            level += 1
        frame = back
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def _lookup(where: str, homes: Sequence[types.ModuleType], name: str) -> Any:
    for home in homes:
        if hasattr(home, name):
            return getattr(home, name)
    raise AttributeError(f"module {where!r} has no attribute {name!r}")


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module's name and makes it an alias of its new homes."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        new = MOVED[module.__name__]
        _warn(f"{module.__name__} moved to {' and '.join(new)}; import it from there (the old path goes next release)")
        homes = [importlib.import_module(n) for n in new]
        module.__getattr__ = lambda name: _lookup(module.__name__, homes, name)  # type: ignore[method-assign]
        module.__all__ = sorted(  # type: ignore[attr-defined]
            {n for home in homes for n in getattr(home, "__all__", [k for k in vars(home) if not k.startswith("_")])}
        )


def forward(package: str) -> Callable[[str], Any]:
    """A package's ``__getattr__`` that hands out the names of the flat module the package replaced, warning."""

    def __getattr__(name: str) -> Any:
        if name.startswith("_") or importlib.util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        home = PACKAGE_HOMES[package]
        value = _lookup(package, [importlib.import_module(home)], name)
        _warn(f"{package}.{name} moved to {home}.{name}; import it from there (the old path goes next release)")
        return value

    return __getattr__


def install() -> None:
    """Make the old module paths importable (once per interpreter)."""
    if not any(isinstance(finder, _Aliases) for finder in sys.meta_path):
        sys.meta_path.append(_Aliases())
