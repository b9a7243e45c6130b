"""Every error the package raises on purpose is a FabricQAError; the user's mistakes are the UserError branch."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest_fabricqa
from pytest_fabricqa.core.errors import FabricQAError, UserError

# What the user must fix in the input they gave (lab file, options, results files, Oracle settings).
USER_ERRORS = {
    "LabError",
    "LabInTheWay",
    "MatrixError",
    "OracleConfigError",
    "ResultsFileError",
    "SamplingError",
    "SavedConfigError",
    "SpecError",
    "ThresholdError",
    "ToleranceError",
    "VendorSourceError",
}


def _error_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(pytest_fabricqa.__path__, "pytest_fabricqa."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if not inspect.isclass(value) or value.__module__ != info.name or issubclass(value, Warning):
                continue
            if issubclass(value, BaseException):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_error_class_of_the_package_derives_from_the_base() -> None:
    classes = _error_classes()
    assert len(classes) >= 21, sorted(classes)  # the issue counted 21; new ones join the family
    strays = [name for name, cls in classes.items() if not issubclass(cls, FabricQAError)]
    assert strays == []


def test_the_user_error_branch_is_what_the_user_must_fix() -> None:
    users = {name.rsplit(".", 1)[1] for name, cls in _error_classes().items() if issubclass(cls, UserError)}
    assert users - {"UserError"} == USER_ERRORS


def test_value_errors_stay_value_errors() -> None:
    """Callers that catch ValueError (parsers, pydantic validators) still catch the errors they caught before."""
    classes = {name.rsplit(".", 1)[1]: cls for name, cls in _error_classes().items()}
    for name in ("FioOutputError", "SpecError", "ProcStatError", "ToleranceError", "SavedConfigError",
                 "ThresholdError", "MatrixError"):  # fmt: skip
        assert issubclass(classes[name], ValueError), name
