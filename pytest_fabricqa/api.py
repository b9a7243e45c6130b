"""What a qualification suite of one's own imports (README "Writing your own suite"): one stable place.

The packages behind these names may move; these names stay. Everything here is plain Python: a suite calls it from
its test functions with the plugin's fixtures (``pytest --lab=NAME --fixtures`` lists those).
"""

from __future__ import annotations

from pytest_fabricqa.core.errors import FabricQAError, UserError
from pytest_fabricqa.core.workloads import Workload, case_id
from pytest_fabricqa.fabric.provision import Fabric, FabricDevice
from pytest_fabricqa.fio import FioServer, figures, run_fio, run_fio_clients, start_offsets
from pytest_fabricqa.fio.verify import Region, parse_mismatches, run_verify
from pytest_fabricqa.integrity.checks import (
    concurrent_verify,
    corruption_detected,
    cross_verify,
    integrity_case,
    shared_devices,
    write_and_verify,
)
from pytest_fabricqa.integrity.reservations import fencing, unsupported
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.lab.thresholds import Thresholds, thresholds_for, violations
from pytest_fabricqa.measure.point import MeasurePlan, Point, point_problems, run_point
from pytest_fabricqa.measure.verdict import performance_case
from pytest_fabricqa.report.model import Case
from pytest_fabricqa.safety.guard import WriteGuard
from pytest_fabricqa.transport.base import CommandError, CommandResult, Host

__all__ = [
    "Case",
    "CommandError",
    "CommandResult",
    "Fabric",
    "FabricDevice",
    "FabricQAError",
    "FioServer",
    "Host",
    "LabModel",
    "MeasurePlan",
    "Point",
    "Region",
    "TargetModel",
    "Thresholds",
    "UserError",
    "Workload",
    "WriteGuard",
    "case_id",
    "concurrent_verify",
    "corruption_detected",
    "cross_verify",
    "fencing",
    "figures",
    "integrity_case",
    "parse_mismatches",
    "performance_case",
    "point_problems",
    "run_fio",
    "run_fio_clients",
    "run_point",
    "run_verify",
    "shared_devices",
    "start_offsets",
    "thresholds_for",
    "unsupported",
    "violations",
    "write_and_verify",
]
