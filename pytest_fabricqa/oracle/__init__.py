"""Oracle RAC checks: ASM disk group health rules, and adapters that read them (SQL, asmcmd).

Submodules import python-oracledb lazily, so importing this package never needs a database driver.
"""

from __future__ import annotations

from pytest_fabricqa.lab.database import (
    AsmcmdSettings,
    CalibrateSettings,
    CalibrateThresholds,
    ConnectSettings,
    OracleSettings,
)
from pytest_fabricqa.oracle.health import HealthVerdict, Problem, Severity, check_asm_health

__all__ = [
    "AsmcmdSettings",
    "CalibrateSettings",
    "CalibrateThresholds",
    "ConnectSettings",
    "HealthVerdict",
    "OracleSettings",
    "Problem",
    "Severity",
    "check_asm_health",
]
