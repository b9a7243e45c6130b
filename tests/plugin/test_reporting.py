"""The report's pytest wiring: results.json, JUnit and HTML written; xdist; baseline gate; warnings (pytester).

The cases in the inner test file carry real figures: fio 3.33 output recorded on this machine
(``tests/data/fio``, see its README), parsed by the plugin's own fio parser. A settings file beside the
inner tests scales some figures between runs, to stage a regression against the first run.
"""

from __future__ import annotations

import html
import html.parser
import json
import platform
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest

# Imported here, before any in-process pytester run: pytester restores sys.modules after each run, and
# numpy (under matplotlib, under the report) refuses to be imported a second time in one process.
import pytest_fabricqa.report.html  # noqa: F401
from pytest_fabricqa.fio.figures import figures
from pytest_fabricqa.fio.parse import parse_client_server, parse_fio_output
from pytest_fabricqa.report.gather import (
    Gatherer,
    baseline_use,
    flat_properties,
    merge_environment,
    phase_verdict,
    suite_from_nodeid,
)
from pytest_fabricqa.report.model import Case, Environment, Run, load_json

ROOT = Path(__file__).resolve().parents[2]
LOCAL_LAB = ROOT / "tests" / "data" / "labs" / "local.yaml"
FIO_DATA = ROOT / "tests" / "data" / "fio"
RECORDINGS = ("randread-8k-grouped", "randrw-4k-jsonplus", "write-1m", "clientserver-randread-8k")

# Until plugin.py calls reporting.addoption()/registers ReportPlugin itself, this conftest does it; once
# plugin.py does, the option already exists and the conftest stays out of the way.
SHIM_CONFTEST = """
import pytest
from pytest_fabricqa import plugin as fabricqa_plugin
from pytest_fabricqa.plugin import reporting

SHIM = []

def pytest_addoption(parser):
    group = parser.getgroup("fabricqa")
    if not any("--report-dir" in opt.names() for opt in group.options):
        reporting.addoption(parser)
        SHIM.append(True)

@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if not SHIM:
        return
    fabricqa_plugin.pytest_configure(config)
    lab = config.stash.get(fabricqa_plugin.LAB_KEY, None)
    if lab is not None and not config.pluginmanager.has_plugin("fabricqa-report"):
        plugin = reporting.ReportPlugin(config, lab, config.stash[fabricqa_plugin.PROTOCOLS_KEY])
        config.pluginmanager.register(plugin, "fabricqa-report")
"""

# What a performance suite does with the fixture (the contract the real suites follow).
PERF_TESTS = f"""
import json
import platform
from dataclasses import replace
from pathlib import Path

import pytest

# Imported here, before any in-process pytester run: pytester restores sys.modules after each run, and
# numpy (under matplotlib, under the report) refuses to be imported a second time in one process.
import pytest_fabricqa.report.html  # noqa: F401
from pytest_fabricqa.fio.figures import figures
from pytest_fabricqa.fio.parse import parse_client_server, parse_fio_output
from pytest_fabricqa.report.model import Case
from pytest_fabricqa.core.workloads import Workload

FIO = Path({str(FIO_DATA)!r})
SETTINGS = json.loads((Path(__file__).parent / "settings.json").read_text())
WORKLOADS = {{
    "randread-8k-grouped": Workload("randread-8k-j2-qd16", "randread", "8k", numjobs=2, iodepth=16, runtime=3),
    "randrw-4k-jsonplus": Workload("randrw-4k-j1-qd32", "randrw", "4k", numjobs=1, iodepth=32, runtime=3, writes=True),
    "write-1m": Workload("write-1m-j1-qd4", "write", "1m", numjobs=1, iodepth=4, runtime=3, writes=True),
    "clientserver-randread-8k": Workload(
        "randread-8k-j2-qd16-2hosts", "randread", "8k", numjobs=2, iodepth=16, runtime=3
    ),
}}


def scaled(values, factor):
    # factor < 1: fewer IOPS and MB/s, longer latency (a slower fabric)
    out = {{}}
    for name, value in values.items():
        if name in ("iops", "mbps"):
            value = value * factor
        elif name.startswith("lat_"):
            value = value / factor
        out[name] = value
    return out


@pytest.mark.loads_target
@pytest.mark.parametrize("recording", list(WORKLOADS))
def test_fio(protocol, recording, fabricqa_report, request):
    raw = (FIO / f"{{recording}}.out").read_text()
    if recording.startswith("clientserver"):
        result = parse_client_server(raw)
        version, total = result.fio_version, figures(result.total)
        hosts = {{h.host: figures(h) for h in result.hosts}}
    else:
        result = parse_fio_output(raw)
        version, total = result.fio_version, figures(result)
        hosts = {{"localhost": dict(total)}}
    factor = SETTINGS["factor"].get(recording, 1.0)
    total = scaled(total, factor)
    hosts = {{h: scaled(f, factor) for h, f in hosts.items()}}
    case_id = f"{{protocol}}-{{recording}}"
    fabricqa_report.raw_path(case_id).write_text(raw)
    case = Case(
        nodeid=request.node.nodeid, case_id=case_id, suite="performance", verdict="passed", protocol=protocol,
        workload=WORKLOADS[recording], figures=total, hosts=hosts, thresholds={{"min_iops": 1000.0}},
        violations=tuple(f"iops {{total['iops']:.0f}} below 1000" for _ in [0] if total["iops"] < 1000),
        extras={{"environment": {{"fio_version": version, "kernels": {{"localhost": SETTINGS["kernel"]}},
                                 "device_model": "Linux ramdisk", "device_firmware": SETTINGS["firmware"]}}}},
    )
    info = fabricqa_report.regressions(case)
    case = fabricqa_report.record(replace(case, regression=info), request)
    problems = list(case.violations) + (list(info.messages) if info else [])
    assert not problems, "\\n".join(problems)
"""


def expected_figures(recording: str) -> dict[str, float]:
    """The figures the plugin's fio parser gives for one recording (computed here, independently)."""
    raw = (FIO_DATA / f"{recording}.out").read_text()
    if recording.startswith("clientserver"):
        return figures(parse_client_server(raw).total)
    return figures(parse_fio_output(raw))


def _setup(
    pytester: pytest.Pytester,
    *,
    factor: dict[str, float] | None = None,
    firmware: str = "1.0",
    kernel: str = "6.1.0-28-amd64",
) -> None:
    pytester.makeconftest(SHIM_CONFTEST)
    pytester.makepyfile(test_performance_local=PERF_TESTS)
    settings(pytester, factor=factor, firmware=firmware, kernel=kernel)


def settings(
    pytester: pytest.Pytester,
    *,
    factor: dict[str, float] | None = None,
    firmware: str = "1.0",
    kernel: str = "6.1.0-28-amd64",
) -> None:
    (pytester.path / "settings.json").write_text(
        json.dumps({"factor": factor or {}, "firmware": firmware, "kernel": kernel})
    )


def _run(pytester: pytest.Pytester, *args: str, subprocess: bool = False) -> pytest.RunResult:
    argv = ["-p", "no:cacheprovider", f"--lab={LOCAL_LAB}", *args]
    if subprocess:
        return pytester.runpytest_subprocess(*argv)
    return pytester.runpytest(*argv)


def _junit_properties(path: Path) -> dict[str, dict[str, str]]:
    tree = ET.parse(path)
    out = {}
    for case in tree.iter("testcase"):
        out[case.get("name", "")] = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    return out


def test_run_leaves_results_json_junit_and_html(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    result = _run(pytester)
    result.assert_outcomes(passed=4)
    report_dir = pytester.path / "fabricqa-report"
    run = load_json(report_dir / "results.json")
    assert run.lab == "local" and run.protocols == ("nvme-tcp",) and run.target_kind == "nvmet"
    assert [c.verdict for c in run.cases] == ["passed"] * 4
    by_id = {c.case_id: c for c in run.cases}
    for recording in RECORDINGS:
        case = by_id[f"nvme-tcp-{recording}"]
        assert case.figures == pytest.approx(expected_figures(recording))
        assert (report_dir / "raw" / f"nvme-tcp-{recording}.json").read_text() == (
            FIO_DATA / f"{recording}.out"
        ).read_text()
        assert "environment" not in case.extras  # merged into the run's environment instead
    assert sorted(by_id["nvme-tcp-clientserver-randread-8k"].hosts) == ["127.0.0.1:8766", "127.0.0.1:8767"]
    env = run.environment
    assert env.fio_version == "fio-3.33" and env.kernels == {"localhost": "6.1.0-28-amd64"}
    assert (env.device_model, env.device_firmware) == ("Linux ramdisk", "1.0")
    assert env.plugin_version and env.python_version and env.pytest_version == pytest.__version__
    assert env.git_commit is None  # pytester's folder is not a git checkout

    props = _junit_properties(report_dir / "junit.xml")
    assert len(props) == 4
    write = props["test_fio[nvme-tcp-write-1m]"]
    assert float(write["iops"]) == pytest.approx(expected_figures("write-1m")["iops"], abs=0.001)
    assert write["fabricqa_case_id"] == "nvme-tcp-write-1m" and "lat_p99_us" in write
    assert "127.0.0.1:8766.iops" in props["test_fio[nvme-tcp-clientserver-randread-8k]"]
    assert not list(report_dir.glob(".*"))  # no temporary or partial files left behind

    html = (report_dir / "report.html").read_text()
    assert "<script" not in html and "local" in html and "PASS" in html and "Random read/write" in html
    result.stdout.fnmatch_lines(
        [
            f"*generated xml file: {report_dir / 'junit.xml'}*",
            "*fabricqa qualification: PASS*",
            "fabricqa: lab local: PASS (nvme-tcp PASS)",
            "*nvme-tcp*write 1m j1 qd4*2,065*PASSED",
            "fabricqa: PASS: 4 passed of 4 cases",
            f"fabricqa: wrote results {report_dir / 'results.json'}",
            f"fabricqa: wrote JUnit XML {report_dir / 'junit.xml'}",
        ]
    )


def test_user_junitxml_and_report_dir_are_honoured(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    result = _run(pytester, "--junitxml=mine.xml", "--report-dir=out")
    result.assert_outcomes(passed=4)
    assert (pytester.path / "out" / "results.json").is_file()
    assert not (pytester.path / "out" / "junit.xml").exists()
    props = _junit_properties(pytester.path / "mine.xml")
    assert all("iops" in p for p in props.values())


def test_xdist_gathers_cases_from_workers(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    result = _run(pytester, "-n", "2", "--dist", "loadgroup", subprocess=True)
    result.assert_outcomes(passed=4)
    report_dir = pytester.path / "fabricqa-report"
    run = load_json(report_dir / "results.json")
    assert sorted(c.case_id for c in run.cases) == sorted(f"nvme-tcp-{r}" for r in RECORDINGS)
    assert all(c.figures and c.verdict == "passed" for c in run.cases)
    assert run.environment.fio_version == "fio-3.33"
    props = _junit_properties(report_dir / "junit.xml")
    assert len(props) == 4 and all("iops" in p for p in props.values())
    assert (report_dir / "report.html").is_file()
    assert len(list((report_dir / "raw").glob("*.json"))) == 4
    result.stdout.fnmatch_lines(["fabricqa: PASS: 4 passed of 4 cases"])


@pytest.mark.parametrize("xdist", [[], ["-n", "2", "--dist", "loadgroup"]], ids=["alone", "xdist"])
def test_the_plugin_runs_warning_free(pytester: pytest.Pytester, xdist: list[str]) -> None:
    """On the installed pytest and pytest-xdist, a run that uses the report fixture raises no warning from the
    plugin and none of pytest's removal warnings (pytest 9.2 warned about the fixture as a plugin method)."""
    _setup(pytester)
    pytester.makeini(
        """
        [pytest]
        filterwarnings =
            error::Warning:pytest_fabricqa.*
            error::pytest.PytestRemovedIn10Warning
        """
    )
    result = _run(pytester, *xdist, subprocess=True)
    result.assert_outcomes(passed=4)
    output = result.stdout.str() + result.stderr.str()
    assert "warnings summary" not in output and "PytestRemovedIn" not in output


def test_second_run_against_the_first_passes_and_saves_only_passing_runs(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    _run(pytester, "--save-baseline=baselines").assert_outcomes(passed=4)
    saved = sorted((pytester.path / "baselines").glob("*.json"))
    assert [p.name.split("_")[0] for p in saved] == ["0001"]
    assert saved[0].name.startswith("0001_local_nvme-tcp_")

    result = _run(pytester, "--baseline=baselines", "--save-baseline=baselines")
    result.assert_outcomes(passed=4)
    run = load_json(pytester.path / "fabricqa-report" / "results.json")
    assert run.baseline is not None and run.baseline.path == str(saved[0])
    assert run.baseline.environment_mismatch == ()
    assert all(c.regression is not None and c.regression.messages == () for c in run.cases)
    result.stdout.fnmatch_lines([f"baseline: {saved[0]} (lab local, *): 0 cases beyond tolerance"])
    assert len(list((pytester.path / "baselines").glob("*.json"))) == 2

    settings(pytester, factor={"write-1m": 0.5})
    result = _run(pytester, "--baseline=baselines", "--save-baseline=baselines")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["fabricqa: run not saved as a baseline in *: its verdict is FAIL"])
    assert len(list((pytester.path / "baselines").glob("*.json"))) == 2


def test_regression_fails_that_case_with_the_figures(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    _run(pytester, "--report-dir=first").assert_outcomes(passed=4)
    settings(pytester, factor={"write-1m": 0.8})
    result = _run(pytester, "--baseline=first/results.json")
    result.assert_outcomes(passed=3, failed=1)
    before = expected_figures("write-1m")
    # 0.8 x the IOPS is 20.0% below; latency / 0.8 is 25.0% above (both beyond 10% and 20%).
    iops_message = (
        f"iops {before['iops'] * 0.8:,.0f} is 20.0% below the baseline's {before['iops']:,.0f} (tolerance 10%)"
    )
    result.stdout.fnmatch_lines([f"*AssertionError: {iops_message}*"])
    run = load_json(pytester.path / "fabricqa-report" / "results.json")
    verdicts = {c.case_id: c.verdict for c in run.cases}
    assert verdicts.pop("nvme-tcp-write-1m") == "failed"
    assert set(verdicts.values()) == {"passed"}
    failed = next(c for c in run.cases if c.verdict == "failed")
    assert failed.regression is not None
    assert failed.regression.baseline_figures["iops"] == pytest.approx(before["iops"])
    assert iops_message in failed.regression.messages
    assert any(m.startswith("lat_p99_us ") and "25.0% above" in m for m in failed.regression.messages)
    result.stdout.fnmatch_lines(
        [
            "fabricqa: lab local: FAIL (nvme-tcp FAIL)",
            "*write 1m j1 qd4*FAILED  [[]regression[]]",
            f"      - {iops_message}",
            "*1 case beyond tolerance",
        ]
    )
    html = (pytester.path / "fabricqa-report" / "report.html").read_text()
    assert "20.0% below the baseline" in html


def test_tolerances_lab_file_then_command_line(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    _run(pytester, "--report-dir=first").assert_outcomes(passed=4)
    lab = pytester.path / "lab.yaml"
    lab.write_text(LOCAL_LAB.read_text() + "tolerances: {iops: 30, mbps: 30, lat_p99_us: 40, lat_mean_us: 40}\n")
    settings(pytester, factor={"write-1m": 0.8})
    argv = ["-p", "no:cacheprovider", f"--lab={lab}", "--baseline=first/results.json"]
    pytester.runpytest(*argv).assert_outcomes(passed=4)  # the lab file allows 30%
    result = pytester.runpytest(*argv, "--tolerance", "iops=15")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*20.0% below the baseline's * (tolerance 15%)*"])
    run = load_json(pytester.path / "fabricqa-report" / "results.json")
    assert run.baseline is not None and run.baseline.tolerances["iops"] == 15 and run.baseline.tolerances["mbps"] == 30


def test_corrupt_and_foreign_files_in_the_baseline_folder_warn(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    _run(pytester, "--save-baseline=baselines").assert_outcomes(passed=4)
    folder = pytester.path / "baselines"
    (folder / "0000_truncated.json").write_text('{"schema": "fabricqa-results/1", "lab": "loc')
    (folder / "0002_benchmark.json").write_text(json.dumps({"machine_info": {}, "benchmarks": []}))
    result = _run(pytester, "--baseline=baselines")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*BaselineWarning: skipped baseline file *0000_truncated.json: not JSON*",
            "*BaselineWarning: skipped baseline file *0002_benchmark.json: not a pytest-fabricqa results file*",
            "baseline note: skipped baseline file *0000_truncated.json*",
        ]
    )
    run = load_json(pytester.path / "fabricqa-report" / "results.json")
    assert run.baseline is not None and run.baseline.path.endswith(".json") and "0001_" in run.baseline.path
    assert len(run.extras["baseline_notes"]) == 2
    assert "0002_benchmark.json" in (pytester.path / "fabricqa-report" / "report.html").read_text()


def test_environment_mismatch_is_flagged(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    _run(pytester, "--report-dir=first").assert_outcomes(passed=4)
    settings(pytester, firmware="2.1", kernel="6.12.9-amd64")
    result = _run(pytester, "--baseline=first/results.json")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "  environment differs from the baseline: host localhost: baseline used kernel 6.1.0-28-amd64, "
            "this run kernel 6.12.9-amd64",
            "  environment differs from the baseline: baseline used firmware 1.0, this run firmware 2.1",
        ]
    )
    run = load_json(pytester.path / "fabricqa-report" / "results.json")
    assert run.baseline is not None and len(run.baseline.environment_mismatch) == 2
    html = (pytester.path / "fabricqa-report" / "report.html").read_text()
    assert "Environment differs from the baseline" in html and "this run firmware 2.1" in html


def test_outcomes_decide_verdicts_and_unrecorded_suite_tests_are_cases(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SHIM_CONFTEST)
    pytester.makepyfile(
        test_prerequisites_local="""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("nvmet module not loaded")

        def test_ok(protocol):
            pass

        def test_setup_error(protocol, broken):
            pass

        def test_skipped(protocol):
            pytest.skip("no RDMA device on this host")
        """,
        test_performance_local="""
        from pytest_fabricqa.report.model import Case

        def test_recorded_then_broke(protocol, fabricqa_report, request):
            case = Case(nodeid=request.node.nodeid, case_id="nvme-tcp-seq", suite="performance",
                        verdict="passed", protocol=protocol, figures={"iops": 1234.0})
            fabricqa_report.record(case, request)
            raise OSError("fio exited with 1")
        """,
        test_unrelated="""
        def test_other():
            pass
        """,
    )
    result = _run(pytester)
    result.assert_outcomes(passed=2, failed=1, skipped=1, errors=1)
    run = load_json(pytester.path / "fabricqa-report" / "results.json")
    cases = {c.case_id: c for c in run.cases}
    assert sorted(cases) == [
        "nvme-tcp-seq",
        "test_ok[nvme-tcp]",
        "test_setup_error[nvme-tcp]",
        "test_skipped[nvme-tcp]",
    ]
    assert cases["test_ok[nvme-tcp]"].suite == "prerequisite" and cases["test_ok[nvme-tcp]"].protocol == "nvme-tcp"
    assert cases["test_setup_error[nvme-tcp]"].verdict == "error"
    assert cases["test_setup_error[nvme-tcp]"].violations == ("setup: RuntimeError: nvmet module not loaded",)
    assert cases["test_skipped[nvme-tcp]"].verdict == "skipped"
    assert cases["test_skipped[nvme-tcp]"].extras["skip_reason"] == "no RDMA device on this host"
    broke = cases["nvme-tcp-seq"]
    assert (broke.verdict, broke.violations, broke.figures) == (
        "failed",
        ("OSError: fio exited with 1",),
        {"iops": 1234},
    )
    assert run.extras["tests_not_in_report"] == ["test_unrelated.py::test_other"]
    result.stdout.fnmatch_lines(["fabricqa: FAIL: 1 failed, 1 error, 1 passed, 1 skipped of 4 cases"])


def test_pytest_html_carries_figures_fio_json_chart_and_lab(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    _run(pytester, "--report-dir=first").assert_outcomes(passed=4)
    settings(pytester, factor={"write-1m": 0.8})
    result = _run(pytester, "--baseline=first", "--html=page.html", "--self-contained-html")
    result.assert_outcomes(passed=3, failed=1)
    page = html.unescape((pytester.path / "page.html").read_text())
    assert "Qualification of lab local (nvme-tcp)" in page
    assert "class='fabricqa-case'" in page and "<svg" in page  # figures table and chart, inline
    # The extra shows the test's outcome (the suite recorded "passed" before the regression failed it).
    assert "nvme-tcp-write-1m</b> \\u00b7 failed" in page
    assert "iops 1,652 is 20.0% below the baseline" in page
    assert "fio JSON" in page  # the fio output as a JSON extra
    assert 'data-column-type="iops"' in page
    assert "nvmet" in page and "Lab hosts" in page  # pytest-metadata's environment table names the lab


def test_collect_only_writes_nothing(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    result = _run(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*4 tests collected*"])
    assert not (pytester.path / "fabricqa-report").exists()


def test_usage_errors(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    result = _run(pytester, "--tolerance=iops=lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tolerance 'iops=lots': 'lots' is not a number of percent*"])
    result = _run(pytester, "--baseline=nowhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--baseline=nowhere: no such results file or folder*"])
    (pytester.path / "bad.json").write_text("[]")
    result = _run(pytester, "--baseline=bad.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--baseline=bad.json: *bad.json: not a pytest-fabricqa results file*"])


# --- the pure gathering rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phases", "verdict"),
    [
        ([("setup", "passed"), ("call", "passed"), ("teardown", "passed")], "passed"),
        ([("setup", "passed"), ("call", "failed"), ("teardown", "passed")], "failed"),
        ([("setup", "failed"), ("teardown", "passed")], "error"),
        ([("setup", "skipped"), ("teardown", "passed")], "skipped"),
        ([("setup", "passed"), ("call", "skipped"), ("teardown", "passed")], "skipped"),
        ([("setup", "passed"), ("call", "passed"), ("teardown", "failed")], "error"),
        ([("setup", "passed"), ("call", "failed"), ("teardown", "failed")], "failed"),
    ],
)
def test_phase_verdicts(phases: list[tuple[str, str]], verdict: str) -> None:
    current = None
    for when, outcome in phases:
        current = phase_verdict(when, outcome, current)
    assert current == verdict


def test_suite_from_nodeid() -> None:
    assert suite_from_nodeid("suites/test_prerequisites.py::test_x[a]") == "prerequisite"
    assert suite_from_nodeid("suites/test_connectivity.py::test_x") == "connectivity"
    assert suite_from_nodeid("suites/test_performance.py::test_fio[nvme-tcp-x]") == "performance"
    assert suite_from_nodeid("suites/test_oracle.py::test_calibrate_io") == "oracle"
    assert suite_from_nodeid("suites/test_integrity.py::test_concurrent_regions[iscsi-8k]") == "integrity"
    assert suite_from_nodeid("tests/test_misc.py::test_x") is None


def test_gatherer_keeps_a_recorded_case_and_takes_the_outcome() -> None:
    gatherer = Gatherer()
    case = Case(nodeid="s/test_performance.py::t", case_id="c", suite="performance", verdict="passed", protocol="iser")
    from pytest_fabricqa.report.model import case_to_dict

    gatherer.add("s/test_performance.py::t", "setup", "passed")
    gatherer.add("s/test_performance.py::t", "call", "failed", case=case_to_dict(case), reason="AssertionError: x")
    gatherer.add("s/test_performance.py::t", "teardown", "passed")
    gatherer.add("s/test_performance.py::u", "call", "passed", case={"nodeid": 3})
    recorded, unreadable = gatherer.cases()
    assert (recorded.case_id, recorded.verdict, recorded.violations) == ("c", "failed", ("AssertionError: x",))
    # A case the suite recorded wrongly is reported as a problem; its test still shows, from its outcome.
    assert (unreadable.case_id, unreadable.verdict, unreadable.suite) == ("u", "passed", "performance")
    assert gatherer.problems and "case recorded by s/test_performance.py::u" in gatherer.problems[0]


def test_environment_merge_and_conflicts() -> None:
    def case(env: dict[str, object]) -> Case:
        return Case(nodeid="n", case_id="c", suite="performance", verdict="passed", extras={"environment": env})

    merged = merge_environment(
        [
            case({"fio_version": "fio-3.33", "kernels": {"a": "6.1"}, "device_model": "QEMU NVMe Ctrl"}),
            case({"fio_version": "fio-3.33", "kernels": {"b": "6.1", "a": "6.2"}, "device_firmware": "1.0"}),
        ],
        Environment(plugin_version="0.1.0"),
    )
    assert merged.fio_version == "fio-3.33" and merged.plugin_version == "0.1.0"
    assert merged.kernels == {"a": "6.1 / 6.2", "b": "6.1"}  # two kernels on one host in one run: both shown
    assert (merged.device_model, merged.device_firmware) == ("QEMU NVMe Ctrl", "1.0")


def test_baseline_use_names_each_file_when_protocols_come_from_several() -> None:
    def run(protocols: tuple[str, ...], fio: str, hour: int) -> Run:
        when = datetime(2026, 11, 30, hour, tzinfo=UTC)
        return Run("rac3", protocols, "nvmet", when, when, Environment(fio_version=fio))

    one = run(("nvme-tcp", "iser"), "fio-3.33", 1)
    use = baseline_use({"nvme-tcp": ("b/1.json", one), "iser": ("b/1.json", one)}, Environment("fio-3.33"), {})
    assert use is not None and use.path == "b/1.json" and use.environment_mismatch == ()
    other = run(("iser",), "fio-3.35", 2)
    use = baseline_use({"nvme-tcp": ("b/1.json", one), "iser": ("b/2.json", other)}, Environment("fio-3.33"), {})
    assert use is not None and use.path == "nvme-tcp: b/1.json; iser: b/2.json"
    assert use.environment_mismatch == ("2.json: baseline used fio-3.35, this run fio-3.33",)
    assert use.started == other.started


def test_flat_properties_for_junit() -> None:
    case = Case(
        nodeid="n",
        case_id="nvme-tcp-x",
        suite="performance",
        verdict="passed",
        protocol="nvme-tcp",
        figures={"iops": 1234.56789},
        hosts={"el72h1 (rac)": {"iops": 1.0}},
    )
    assert flat_properties(case) == [
        ("fabricqa_case_id", "nvme-tcp-x"),
        ("protocol", "nvme-tcp"),
        ("iops", 1234.568),
        ("el72h1_rac_.iops", 1.0),
    ]


# The example of README's "Writing your own suite", on a recorded fio run instead of a live one.
USER_SUITE = f"""
from pathlib import Path

import pytest

from pytest_fabricqa.fio.figures import figures
from pytest_fabricqa.fio.parse import parse_fio_output
from pytest_fabricqa.measure.verdict import performance_case
from pytest_fabricqa.core.workloads import Workload

RANDREAD = Workload("randread-8k-j2-qd16", "randread", "8k", numjobs=2, iodepth=16, runtime=3)


@pytest.mark.loads_target
def test_my_array(lab, protocol, lab_environment, fabricqa_report, request):
    # On a lab: result = run_fio(lab_hosts[device.initiator], RANDREAD, [device.path]) for a device of `fabric`
    result = parse_fio_output((Path({str(FIO_DATA)!r}) / "randread-8k-grouped.out").read_text())
    case = performance_case(
        request.node.nodeid, lab, protocol, RANDREAD, figures(result),
        extras={{"environment": {{**lab_environment, "fio_version": result.fio_version}}}},
    )
    problems = fabricqa_report.gate(case, request)
    assert not problems, "\\n".join(problems)
"""


@pytest.mark.parametrize(("min_iops", "verdict"), [(1000, "passed"), (10**9, "failed")])
def test_a_user_suite_gets_a_gated_reported_case(pytester: pytest.Pytester, min_iops: int, verdict: str) -> None:
    lab = pytester.path / "mylab.yaml"
    lab.write_text(LOCAL_LAB.read_text() + f"thresholds:\n  '*':\n    randread-8k-*: {{min_iops: {min_iops}}}\n")
    pytester.makepyfile(test_my_array=USER_SUITE)
    result = pytester.runpytest_subprocess(f"--lab={lab}", "-p", "no:cacheprovider")
    result.assert_outcomes(**{verdict: 1})
    (case,) = load_json(pytester.path / "fabricqa-report" / "results.json").cases
    assert case.case_id == "nvme-tcp-randread-8k-j2-qd16" and case.verdict == verdict
    assert case.figures["iops"] == pytest.approx(expected_figures("randread-8k-grouped")["iops"])
    assert case.thresholds == {"min_iops": min_iops}
    assert run_kernels(pytester) == {"localhost": platform.release()}
    if verdict == "failed":
        assert case.violations and "randread-8k-j2-qd16: " in case.violations[0]
        result.stdout.fnmatch_lines(["*randread-8k-j2-qd16: * IOPS is below the minimum of 1,000,000,000 IOPS*"])


def run_kernels(pytester: pytest.Pytester) -> dict[str, str]:
    return load_json(pytester.path / "fabricqa-report" / "results.json").environment.kernels


class _FigureRows(html.parser.HTMLParser):
    """The performance tables' case rows of a report: ``data-case`` -> the row's cell texts (issue 33, item 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self._case: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self._case = dict(attrs).get("data-case") or None
            if self._case:
                self.rows[self._case] = []
        elif tag == "td" and self._case:
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._case and self._cell is not None:
            self.rows[self._case].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._case = None


def test_the_terminal_the_html_report_and_junit_show_the_same_figures_for_each_case(pytester: pytest.Pytester) -> None:
    """One run, four places: results.json's figures, the terminal summary's row, the HTML table's row of the case
    and its JUnit properties agree on IOPS, MB/s and p99 for every performance case (the same rounding in the two
    human views; JUnit to 3 decimals)."""
    from pytest_fabricqa.report.formatting import format_figure
    from pytest_fabricqa.report.terminal import workload_label

    _setup(pytester)
    result = _run(pytester)
    result.assert_outcomes(passed=4)
    report_dir = pytester.path / "fabricqa-report"
    run = load_json(report_dir / "results.json")
    terminal = result.stdout.lines
    parser = _FigureRows()
    parser.feed((report_dir / "report.html").read_text())
    junit = {props["fabricqa_case_id"]: props for props in _junit_properties(report_dir / "junit.xml").values()}
    perf = [c for c in run.cases if c.suite == "performance" and c.workload is not None]
    assert perf
    metrics = ("iops", "mbps", "lat_p99_us")
    assert any("lat_p99_us" not in c.figures for c in perf)  # a figure the run lacks: a dash in each view
    for case in perf:
        shown = {m: format_figure(m, case.figures[m]) for m in metrics if m in case.figures}
        # protocol, target, the workload, then the figures: a label is a prefix of another ("... qd16 2 hosts")
        row_re = re.compile(rf"^  \S+\s+\S+\s+{re.escape(workload_label(case))}\s{{2,}}")
        row = next(line.split() for line in terminal if row_re.match(line))
        assert row[-4:-1] == [shown.get(m, "-") for m in metrics], (case.case_id, row)
        cells = parser.rows[case.case_id]
        at = [cells.index(shown[m]) for m in metrics if m in shown]
        assert at == sorted(at), (case.case_id, cells)
        if "lat_p99_us" not in shown:
            assert cells[at[-1] + 1 :].count("–") >= 1
        for metric in shown:
            assert float(junit[case.case_id][metric]) == pytest.approx(round(case.figures[metric], 3), abs=0.0005)
