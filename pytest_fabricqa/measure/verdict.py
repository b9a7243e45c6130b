"""A performance case for the report, from its figures and the lab's limits, every threshold it breaks listed
(the ``fabricqa_report`` fixture's ``gate`` then adds the baseline comparison). No pytest here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytest_fabricqa.core.workloads import Workload, case_id
from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.lab.thresholds import thresholds_for, violations
from pytest_fabricqa.report.model import Case


def performance_case(
    nodeid: str,
    lab: LabModel,
    protocol: str,
    workload: Workload,
    figures: Mapping[str, float],
    *,
    target: str | None = None,
    problems: Iterable[str] | None = None,
    **fields: Any,
) -> Case:
    """The report's case for ``workload`` over ``protocol`` served by ``target`` (the lab's target name): its figures, the lab's limits for it, and as
    violations ``problems`` when the suite checked the limits itself (with a spread, say), else every limit the
    figures break. ``fields`` are the other :class:`~pytest_fabricqa.report.model.Case` fields (``hosts``,
    ``extras``, ``randseeds``, ...). The verdict is "passed" until the test's outcome says otherwise.
    """
    limits = thresholds_for(lab.thresholds_table(), protocol, workload.name)
    found = violations(figures, limits, label=workload.name) if problems is None else list(problems)
    return Case(
        nodeid=nodeid,
        case_id=case_id(protocol, workload, target),
        suite="performance",
        verdict="passed",
        protocol=protocol,
        target=target,
        workload=workload,
        figures=dict(figures),
        thresholds=limits.limits(),
        violations=tuple(found),
        **fields,
    )
