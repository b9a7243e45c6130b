"""Oracle RAC checks: ASM disk group health rules, and adapters that read them (SQL, asmcmd).

Submodules import python-oracledb lazily, so importing this package never needs a database driver.
"""

from __future__ import annotations

from pytest_fabricqa.oracle.health import HealthVerdict, Problem, Severity, check_asm_health
from pytest_fabricqa.oracle.settings import (
    AsmcmdSettings,
    CalibrateSettings,
    CalibrateThresholds,
    ConnectSettings,
    OracleSettings,
)

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
