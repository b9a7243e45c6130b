"""Factories for the results model's runs and cases, shared by the unit tests, the plugin tests and the sample
data generator (tests/data/report/make_sample_run.py): one place that knows what a recorded case looks like.

Every field of :class:`~pytest_fabricqa.report.model.Case` and :class:`~pytest_fabricqa.report.model.Run` can be
given as a keyword; the factories fill in the rest the way the suites do (node id, test id, workload from the
matrix's naming scheme). tests/conftest.py puts this folder on ``sys.path``: ``from factories import perf_case``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pytest_fabricqa.core.workloads import Workload, make_workload
from pytest_fabricqa.report.model import Case, Run

T0 = datetime(2024, 5, 1, 8, 0, tzinfo=UTC)
"""When a factory's run started unless told otherwise."""


def workload(name: str, **options: Any) -> Workload:
    """The workload named ``rw-bs-qdN-jN`` in the matrix's scheme (``randread-8k-qd32-j4``); ``options`` such
    as ``runtime`` and ``ramp_time`` go to :func:`~pytest_fabricqa.core.workloads.make_workload`."""
    rw, bs, qd, jobs = name.split("-")
    return make_workload(rw, bs, iodepth=int(qd.removeprefix("qd")), numjobs=int(jobs.removeprefix("j")), **options)


def perf_case(
    protocol: str = "nvme-tcp", load: Workload | str = "randread-8k-qd32-j4", *, verdict: str = "passed", **fields: Any
) -> Case:
    """A performance case of ``protocol`` running ``load`` (a workload or its name), with the node id and test
    id suites/test_performance.py gives it; ``fields`` sets any other :class:`Case` field."""
    run = workload(load) if isinstance(load, str) else load
    case_id = f"{protocol}-{run.name}"
    fields.setdefault("nodeid", f"suites/test_performance.py::test_fio[{case_id}]")
    fields.setdefault("case_id", case_id)
    return Case(suite="performance", verdict=verdict, protocol=protocol, workload=run, **fields)  # type: ignore[arg-type]


def make_run(*cases: Case, lab: str = "rac3", target_kind: str = "nvmet", started: datetime = T0, **fields: Any) -> Run:
    """A run of ``cases``; its protocols are the cases' own, in order, unless ``protocols`` is given."""
    fields.setdefault("protocols", tuple(dict.fromkeys(c.protocol for c in cases if c.protocol is not None)))
    fields.setdefault("finished", started)
    return Run(lab=lab, target_kind=target_kind, started=started, cases=cases, **fields)
