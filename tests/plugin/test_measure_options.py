"""--fio-samples and the lab file's measuring keys: bad input is one line and exit 4; scaling cases are collected."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LOCAL_LAB = ROOT / "tests" / "data" / "labs" / "local.yaml"
SUITE = ROOT / "suites" / "test_performance.py"


def _lab(pytester: pytest.Pytester, **workloads: object) -> Path:
    data = yaml.safe_load(LOCAL_LAB.read_text())
    data.setdefault("workloads", {}).update(workloads)
    path = pytester.path / "lab.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("workloads", "args", "message"),
    [
        ({}, ["--fio-samples=0"], "*argument --fio-samples: '0': give at least 1*"),
        ({"samples": 0}, [], "ERROR: *lab.yaml*workloads.samples: expected a whole number >= 1, not 0*"),
        ({"steady_state": {"rounds": 5}}, [], "ERROR: *workloads.steady_state.rounds: unknown key; allowed: ss, *"),
        ({"timeseries": "yes"}, [], "ERROR: *workloads.timeseries: expected true, false or {interval_ms: 1000}*"),
        (
            {"sets": ["oracle-8k"], "scaling": ["randread-8k-qd12-j4"]},
            [],
            "ERROR: *workloads.scaling[[]0[]]: 'randread-8k-qd12-j4' is not one of the workloads this run selects; "
            "did you mean randread-8k-qd128-j4*",
        ),
    ],
    ids=["samples-option", "samples-key", "steady-state-key", "timeseries-value", "scaling-name"],
)
def test_bad_measuring_input_is_one_line_exit_4(
    pytester: pytest.Pytester, workloads: dict[str, object], args: list[str], message: str
) -> None:
    lab = _lab(pytester, **workloads)
    result = pytester.runpytest_subprocess(f"--lab={lab}", "--co", str(SUITE), *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_scaling_cases_are_collected_per_protocol_and_named_workload(pytester: pytest.Pytester) -> None:
    lab = _lab(pytester, sets=["oracle-8k"], samples=3, scaling=["randread-8k-qd128-j4"])
    result = pytester.runpytest_subprocess(f"--lab={lab}", "--co", "-q", str(SUITE), "--fio-samples=2")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*::test_scaling[[]nvme-tcp-nvmet-randread-8k-qd128-j4[]]"])
    assert "test_scaling[nvme-tcp-nvmet-randwrite" not in result.stdout.str()
