"""pytest-fabricqa's pytest wiring: options, ini keys, markers and short hooks that delegate to plain modules.

Without ``--lab`` the plugin does nothing: its fixtures exist but nothing parametrizes, loads or connects.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
from collections.abc import Callable, Generator, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.lab.load import load_lab, resolve_lab_path
from pytest_fabricqa.lab.model import PROTOCOLS, LabError, LabModel, TargetModel, iter_protocol_names

if TYPE_CHECKING:
    from pytest_fabricqa.core.workloads import Workload
    from pytest_fabricqa.fabric.floor import Floor
    from pytest_fabricqa.fabric.kernlog import Account
    from pytest_fabricqa.fabric.provision import Fabric
    from pytest_fabricqa.measure.point import MeasurePlan
    from pytest_fabricqa.plugin.reporting import FabricqaReport, ReportPlugin
    from pytest_fabricqa.plugin.session import LabSession
    from pytest_fabricqa.safety.guard import WriteGuard
    from pytest_fabricqa.transport.base import Host

LAB_KEY = pytest.StashKey["LabModel | None"]()
PROTOCOLS_KEY = pytest.StashKey["list[str]"]()
PAIRS_KEY = pytest.StashKey["list[tuple[str, str]]"]()
SESSION_KEY = pytest.StashKey["LabSession"]()
ORACLE_SKIPPED_KEY = pytest.StashKey[int]()
LEFTOVERS_KEY = pytest.StashKey["list[str]"]()
FABRIC_USED_KEY = pytest.StashKey[bool]()
WORKLOADS_KEY = pytest.StashKey["list[Workload]"]()
MEASURE_KEY = pytest.StashKey["MeasurePlan"]()
KERNEL_KEY: pytest.StashKey[Account] = pytest.StashKey()
KERNEL_READ_KEY: pytest.StashKey[dict[str, float]] = pytest.StashKey()  # per host, the newest line an account read
# per host, its RDMA links' counters as the last account read them
KERNEL_COUNTERS_KEY: pytest.StashKey[dict[str, dict[str, dict[str, int]]]] = pytest.StashKey()
FLOOR_KEY: pytest.StashKey[Floor] = pytest.StashKey()
REPORT_PLUGIN = "fabricqa-report"  # the name the session's ReportPlugin is registered under


def _protocol_option(value: str) -> str:
    """argparse type for --protocol: every comma-separated name must be a known protocol."""
    for name in iter_protocol_names([value]):
        if name not in PROTOCOLS:
            raise argparse.ArgumentTypeError(f"unknown protocol {name!r}; choose from {', '.join(PROTOCOLS)}")
    return value


def _at_least_one(unit: str) -> Callable[[str], int]:
    """An argparse type for a whole number >= 1 of ``unit`` ("second" for durations, "" for a count)."""
    whole = f"a whole number of {unit}s" if unit else "a whole number"
    least = f"1 {unit}" if unit else "1"

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {whole}") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"{value!r}: give at least {least}")
        return number

    return parse


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register --lab, --protocol and the fabricqa ini keys."""
    group = parser.getgroup("fabricqa", "storage fabric qualification (pytest-fabricqa)")
    group.addoption(
        "--lab",
        metavar="NAME|PATH",
        help="lab to qualify: NAME (labs/NAME.yaml under the rootdir or fabricqa_labs_dir) or a YAML path. "
        "Without it the plugin is inert.",
    )
    group.addoption(
        "--protocol",
        action="append",
        default=[],
        type=_protocol_option,
        metavar="P[,P...]",
        help=f"protocol(s) to qualify, repeatable or comma-separated: {', '.join(PROTOCOLS)}. "
        "Default: every protocol the lab declares.",
    )
    group.addoption(
        "--target",
        action="append",
        default=[],
        metavar="NAME[,NAME...]",
        help="target(s) to qualify, by the lab's target names (a target's name defaults to its kind), repeatable or "
        "comma-separated. Default: every target the lab declares, each serving every selected protocol it serves.",
    )
    group.addoption(
        "--fio-runtime",
        type=_at_least_one("second"),
        metavar="SECONDS",
        help="run every fio workload for this long (quick runs); overrides the lab file and the workload",
    )
    group.addoption(
        "--fio-samples",
        type=_at_least_one(""),
        metavar="K",
        help="run every point K times and report the mean and the spread (RSD); overrides workloads.samples",
    )
    from pytest_fabricqa.plugin.reporting import addoption as reporting_addoption

    reporting_addoption(parser)
    parser.addini("fabricqa_labs_dir", "folder holding lab files (NAME.yaml); default: labs/ under the rootdir")
    parser.addini(
        "fabricqa_state_dir",
        "folder for the virtual lab's run state (pidfiles, keys, console logs); default: .fabricqa/ under rootdir",
    )


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register pytest-fabricqa's hooks (:mod:`pytest_fabricqa.plugin.hooks`)."""
    from pytest_fabricqa.plugin import hooks

    pluginmanager.add_hookspecs(hooks)


@pytest.hookimpl(tryfirst=True)
def pytest_fabricqa_update_environment(lab: LabModel, lab_hosts: dict[str, Host], environment: dict[str, Any]) -> None:
    """Kernel releases of every host; the model and firmware of the target's first NVMe backing device."""
    from pytest_fabricqa.fabric.environment import environment_probe

    environment.update(environment_probe(lab, lab_hosts))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Load and validate the lab once; turn every lab mistake into a one-line usage error."""
    config.addinivalue_line("markers", "loads_target: the case puts load on the target (never run two at once)")
    config.addinivalue_line("markers", "roles(*roles): run the case only on lab hosts with one of these roles")
    config.addinivalue_line("markers", "fabric(*kinds): run the case only for protocols over these fabrics (tcp, rdma)")
    config.addinivalue_line("markers", "oracle_live: needs the live Oracle RAC the lab's database section names")
    config.addinivalue_line("markers", "fabricqa_phase(when): 'before' runs first, 'after' runs last")
    config.addinivalue_line(
        "markers",
        "fabricqa_last_in_pair: runs after every other case of its (protocol, target), e.g. one that tears "
        "the fabric down",
    )
    config.addinivalue_line(
        "markers",
        "fabricqa_late_in_pair: runs after the other cases of its (protocol, target) but before its last ones, "
        "e.g. one that breaks paths after the pair's figures are measured",
    )
    config.addinivalue_line(
        "markers",
        "fabricqa_integrity: an integrity case: runs only over the protocols its target's integrity_protocols names",
    )
    config.addinivalue_line(
        "markers",
        "fabricqa_failover: a failover case: runs only on the targets and protocols the lab's failover section names",
    )
    config.addinivalue_line(
        "markers",
        "fabricqa_kernel_expects(*patterns): storage kernel lines the case provokes on purpose (regular "
        "expressions), not counted as trouble; a failover case's lines are its fault's account",
    )
    config.addinivalue_line("markers", "vlab: needs the virtual lab (QEMU guests); slow")
    value = config.getoption("lab", None)
    if not value:
        config.stash[LAB_KEY] = None
        return
    try:
        _check_rootdir_not_taken_from_an_option(config)
        path = resolve_lab_path(value, config.rootpath, config.getini("fabricqa_labs_dir") or None)
        lab = load_lab(path)
        protocols = _selected_protocols(lab, config.getoption("protocol"), path)
        pairs = _selected_pairs(lab, protocols, config.getoption("target", None) or [], path)
        protocols = [p for p in protocols if any(p == q for q, _ in pairs)]
        workloads = _workloads(lab, path, config.getoption("fio_runtime"))
        measure = _measure(lab, path, config.getoption("fio_samples", None), workloads)
        if lab.vlab is not None and not hasattr(config, "workerinput") and not config.getoption("collectonly"):
            _check_virtual_lab(config, lab)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") != "loadgroup":
        raise pytest.UsageError(
            "cases that load the same target must never run at the same time: "
            "with -n, add --dist loadgroup (pytest-fabricqa groups them per target host)"
        )
    config.stash[LAB_KEY] = lab
    config.stash[PROTOCOLS_KEY] = protocols
    config.stash[PAIRS_KEY] = pairs
    if _wants_the_shipped_suites(config):
        suites = qualification_suites()
        if suites is not None:
            config.args[:] = [str(suites)]
    config.stash[WORKLOADS_KEY] = workloads
    config.stash[MEASURE_KEY] = measure
    if config.pluginmanager.hasplugin("xdist"):
        from pytest_fabricqa.plugin.groups import register as register_xdist_groups

        register_xdist_groups(config)
    from pytest_fabricqa.plugin.reporting import ReportPlugin

    config.pluginmanager.register(ReportPlugin(config, lab, protocols, pairs), REPORT_PLUGIN)
    if not hasattr(config, "workerinput") and not config.getoption("collectonly"):
        from pytest_fabricqa.plugin.progress import ProgressPlugin

        config.pluginmanager.register(ProgressPlugin(config, lab.name, _pair_of), "fabricqa-progress")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Under xdist the controller owns the virtual lab its workers booted: stop it when the run ends."""
    lab = config.stash.get(LAB_KEY, None)
    if lab is None or hasattr(config, "workerinput"):
        return
    if lab.vlab is None:
        if getattr(config.option, "numprocesses", None) and not config.option.collectonly:
            from pytest_fabricqa.plugin.session import release_lock, state_folder

            release_lock(lab, state_folder(config.rootpath, config.getini("fabricqa_state_dir") or None))
        return
    from pytest_fabricqa.plugin.session import state_folder
    from pytest_fabricqa.vlab.lab import stop_if_owner

    stop_if_owner(lab, state_folder(config.rootpath, config.getini("fabricqa_state_dir") or None), os.getpid())


def _wants_the_shipped_suites(config: pytest.Config) -> bool:
    """``pytest --lab=NAME`` in a folder of lab files means "qualify this lab": no test path on the command line,
    no ``testpaths`` in an ini file, and no test files or conftest.py at the top of the folder (a folder with a
    suite of the user's own is collected as pytest always does)."""
    if config.args_source != pytest.Config.ArgsSource.INVOCATION_DIR:
        return False
    folder = config.invocation_params.dir
    patterns = ["conftest.py", *config.getini("python_files")]
    return not any(next(folder.glob(pattern), None) for pattern in patterns)


def qualification_suites() -> Path | None:
    """The qualification suites: ``pytest_fabricqa/suites`` in an installed wheel, ``suites/`` beside the package
    in a source checkout (the same folder, see setup.py); None when neither is there."""
    package = Path(__file__).resolve().parent.parent  # pytest_fabricqa/, above this plugin package
    for folder in (package / "suites", package.parent / "suites"):
        if (folder / "__init__.py").is_file() and (folder / "test_prerequisites.py").is_file():
            return folder
    return None


def _check_virtual_lab(config: pytest.Config, lab: LabModel) -> None:
    """Before any case: another virtual lab running where this one would boot is a usage error, not a traceback
    half-way through the session."""
    from pytest_fabricqa.plugin.session import state_folder
    from pytest_fabricqa.vlab.lab import check_attachable

    check_attachable(lab, state_folder(config.rootpath, config.getini("fabricqa_state_dir") or None))


def _selected_protocols(lab: LabModel, values: list[str], path: Path) -> list[str]:
    names = list(iter_protocol_names(values)) or list(lab.protocols)
    for name in names:
        if name not in lab.protocols:
            raise LabError(
                f"--protocol={name}: lab {lab.name!r} ({path}) does not declare it; "
                f"it declares: {', '.join(lab.protocols)}"
            )
    return names


def _selected_pairs(lab: LabModel, protocols: list[str], values: list[str], path: Path) -> list[tuple[str, str]]:
    """(protocol, target name) for every selected protocol and every selected target serving it, protocol first."""
    names = list(iter_protocol_names(values))
    for name in names:
        if name not in {t.name for t in lab.targets}:
            known = ", ".join(f"{t.name} ({', '.join(t.protocols)})" for t in lab.targets)
            raise LabError(f"--target={name}: lab {lab.name!r} ({path}) has no such target; its targets: {known}")
    pairs = [(p, t.name) for p in protocols for t in lab.targets_for(p) if not names or t.name in names]
    if not pairs:
        raise LabError(
            f"--target={','.join(names)} serves none of the selected protocols ({', '.join(protocols)}); "
            "pick a target serving one of them or drop --protocol"
        )
    return pairs


def _workloads(lab: LabModel, path: Path, runtime: int | None) -> list[Workload]:
    from pytest_fabricqa.core.workloads import load_matrix
    from pytest_fabricqa.lab.thresholds import validate_table

    try:
        validate_table(lab.thresholds_table())
        return load_matrix(lab.workloads or None, runtime_override=runtime)
    except UserError as exc:  # the lab file's thresholds or workloads: name the file
        raise LabError(f"{path}: {exc}") from None


def _measure(lab: LabModel, path: Path, samples: int | None, workloads: list[Workload]) -> MeasurePlan:
    from pytest_fabricqa.measure.point import measure_plan

    try:
        plan = measure_plan(lab.workloads or None, samples_override=samples, max_stall_s=lab.watch.max_point_stall_s)
    except UserError as exc:
        raise LabError(f"{path}: {exc}") from None
    from pytest_fabricqa.core.workloads import selected_names

    _known_workloads(path, "workloads.scaling", plan.scaling, [w.name for w in workloads], "this run selects")
    # A target's own list may name a point that workloads.only leaves out (that target then runs none of it), but
    # not one the lab's sets do not have at all: that is a typo.
    matrix = selected_names(lab.workloads or None)
    for index, target in enumerate(lab.targets):
        _known_workloads(path, f"targets[{index}].workloads", target.workloads or (), matrix, "the lab's sets hold")
    return plan


def _known_workloads(path: Path, key: str, given: Sequence[str], names: list[str], which: str) -> None:
    """Every name in ``given`` (the lab key ``key``) is one of ``names``, or one line says which is not."""
    for index, name in enumerate(given):
        if name not in names:
            import difflib

            close = difflib.get_close_matches(name, names, n=3) or names[:3]
            raise LabError(
                f"{path}: {key}[{index}]: {name!r} is not one of the workloads {which}; "
                f"did you mean {', '.join(close) or 'none (no workload is selected)'}?"
            )


def _log(config: pytest.Config, line: str) -> None:
    """One line on the terminal, also from inside a fixture (where output capture would swallow it)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    capture = config.pluginmanager.get_plugin("capturemanager")
    progress = config.pluginmanager.get_plugin("fabricqa-progress")  # its live line goes under this one
    with (
        capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext(),
        progress.paused() if progress is not None else contextlib.nullcontext(),
    ):
        reporter.write_line(line)


def _lab(config: pytest.Config) -> LabModel | None:
    return config.stash.get(LAB_KEY, None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``protocol`` by the selected protocols and ``lab_host`` by the lab's hosts (ids are names)."""
    lab = _lab(metafunc.config)
    if lab is None:
        return
    fabric_mark = metafunc.definition.get_closest_marker("fabric")

    def by_fabric(protocol: str) -> bool:
        from pytest_fabricqa.core.protocols import protocol as protocol_spec

        return fabric_mark is None or protocol_spec(protocol).fabric in fabric_mark.args

    if "target_name" in metafunc.fixturenames:
        # A case that depends on the target runs once per (protocol, target), the target always in its id: ids do
        # not change when a lab gains a second target, and the id says which target the figures came from.
        pairs = [(p, t) for p, t in metafunc.config.stash[PAIRS_KEY] if by_fabric(p)]
        metafunc.parametrize(("protocol", "target_name"), pairs, ids=[f"{p}-{t}" for p, t in pairs], scope="session")
    elif "protocol" in metafunc.fixturenames:
        protocols = [p for p in metafunc.config.stash[PROTOCOLS_KEY] if by_fabric(p)]
        metafunc.parametrize("protocol", protocols, ids=protocols, scope="session")
    if "workload" in metafunc.fixturenames:
        workloads = metafunc.config.stash[WORKLOADS_KEY]
        metafunc.parametrize("workload", workloads, ids=[w.name for w in workloads])
    if "scaling_workload" in metafunc.fixturenames:
        # workloads.scaling: these run again from 1..N initiators (seed 003).
        wanted = metafunc.config.stash[MEASURE_KEY].scaling
        scaling = [w for w in metafunc.config.stash[WORKLOADS_KEY] if w.name in wanted]
        metafunc.parametrize("scaling_workload", scaling, ids=[w.name for w in scaling])
    if "lab_host_name" in metafunc.fixturenames:
        roles_mark = metafunc.definition.get_closest_marker("roles")
        roles = set(roles_mark.args) if roles_mark else None
        names = [n for n, h in lab.hosts.items() if roles is None or roles & set(h.roles)]
        metafunc.parametrize("lab_host_name", names, ids=names, scope="session")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Generator[None, None, None]:
    """Put every case that loads a target into one xdist group per target host (run with --dist loadgroup); once
    every other plugin reordered, run each (protocol, target)'s cases together."""
    lab = _lab(config)
    if lab is None:
        return (yield)
    from pytest_fabricqa.plugin.groups import load_group

    if lab.database is None:
        oracle = [i for i in items if i.get_closest_marker("oracle_live") is not None]
        if oracle:
            config.hook.pytest_deselected(items=oracle)
            items[:] = [i for i in items if i not in oracle]
            config.stash[ORACLE_SKIPPED_KEY] = len(oracle)
    phase = {"before": 0, "after": 2}
    items.sort(key=lambda i: phase.get(_phase_of(i), 1))  # stable: file order kept within a phase

    # A case restricted by @pytest.mark.fabric to protocols not selected in this run is not applicable here.
    inapplicable = [i for i in items if "protocol" in getattr(i, "fixturenames", ()) and not _protocol_of(i)]
    # A target whose lab entry narrows its workloads (targets[].workloads) runs only those points.
    inapplicable += [i for i in items if i not in inapplicable and not _target_runs_workload(lab, i)]
    if inapplicable:
        config.hook.pytest_deselected(items=inapplicable)
        items[:] = [i for i in items if i not in inapplicable]
    for item in items:
        if item.get_closest_marker("loads_target") is None:
            continue
        item.add_marker(pytest.mark.xdist_group(name=load_group(lab, _protocol_of(item), _target_of(item))))
    yield
    # After pytest's own reordering by session parameters: every (protocol, target)'s cases in one run, so its
    # fabric is provisioned once and torn down before the next pair of the same target host is provisioned.
    from pytest_fabricqa.plugin.groups import runs_together

    items[:] = runs_together(
        items,
        phase=lambda i: phase.get(_phase_of(i), 1),
        key=_pair_of,
        last=_late_rank,
    )


PATH_OPTIONS = ("--lab", "--report-dir", "--baseline", "--save-baseline")
"""The plugin's options that take a path: written with a space, pytest may read the path as a test path."""


def _check_rootdir_not_taken_from_an_option(config: pytest.Config) -> None:
    """Refuse a run whose rootdir pytest took from one of :data:`PATH_OPTIONS`' values.

    pytest picks the rootdir before it loads plugins, so in ``--report-dir /tmp/out`` it reads ``/tmp/out`` (once the
    folder exists) as a test path, and with no ini file above it the rootdir becomes that folder: the lab's
    ``labs/``, the ini file's settings and the virtual lab's state are then looked for there. Seen as "unknown lab
    name (no lab files in /tmp/out/labs)" on the second run of the same command.
    """
    if config.inipath is not None or config.rootpath == config.invocation_params.dir:
        return  # an ini file set the rootdir, or it is where the command ran: the option changed nothing
    args = list(config.invocation_params.args)
    for option, value in itertools.pairwise(args):
        if option not in PATH_OPTIONS:
            continue
        given = Path(config.invocation_params.dir, value).resolve()
        if config.rootpath in (given, given.parent):
            raise UserError(
                f"{option} {value}: pytest read {value} as a test path before the plugin was loaded and made "
                f"{config.rootpath} its rootdir (no ini file there), so the lab files, the ini settings and the "
                f"suites are looked for in the wrong place; write {option}={value}"
            )


def _floor(config: pytest.Config) -> Floor:
    """The session's :class:`~pytest_fabricqa.fabric.floor.Floor`: shared by the xdist workers through the folder
    their controller named (:mod:`pytest_fabricqa.plugin.groups`), this process's own otherwise."""
    floor = config.stash.get(FLOOR_KEY, None)
    if floor is None:
        from pytest_fabricqa.fabric.floor import Floor
        from pytest_fabricqa.plugin.groups import WORKERINPUT_KEY

        folder = (getattr(config, "workerinput", None) or {}).get(WORKERINPUT_KEY)
        config.stash[FLOOR_KEY] = floor = Floor(Path(folder) if folder else None)
    return floor


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A case that puts load on the target is watched by the kernel (:mod:`pytest_fabricqa.fabric.kernlog`): when
    it ends, each lab host's storage lines since it began are read and kept with the case; a case that injected no
    fault (not a failover case) and passed fails when they show storage trouble the lab does not allow
    (``watch.kernel_allow``, the case's ``fabricqa_kernel_expects``). Lines within ``watch.fault_settle_s`` of the
    last failover case's end are that fault's aftermath: kept, not judged. Under xdist a failover case holds the
    floor alone and every other such case shares it (:mod:`pytest_fabricqa.fabric.floor`): a fault on the shared
    initiators is never under another worker's case."""
    watched = (
        SESSION_KEY in item.config.stash
        and item.get_closest_marker("loads_target") is not None
        and "lab_session" in getattr(item, "fixturenames", ())
    )
    if not watched:
        return (yield)
    import re
    import time

    from pytest_fabricqa.fabric import kernlog
    from pytest_fabricqa.plugin.reporting import amend_case

    lab = item.config.stash[LAB_KEY]
    hosts = item.config.stash[SESSION_KEY].hosts
    faulted = item.get_closest_marker("fabricqa_failover") is not None
    floor = _floor(item.config)
    with floor.held(alone=faulted):
        began = time.time()
        ended = floor.last_fault_end()
        settled = None if ended is None or lab is None else ended + lab.watch.fault_settle_s
        read_to = item.config.stash.setdefault(KERNEL_READ_KEY, {})
        counters = item.config.stash.setdefault(KERNEL_COUNTERS_KEY, {})
        read = partial(kernlog.account, hosts, began, judged_from_s=settled, after=read_to, counters_before=counters)
        try:
            outcome = yield
        except pytest.skip.Exception:
            raise
        except BaseException:
            item.stash[KERNEL_KEY] = found = read()
            read_to.update(found.read_to)
            counters.update(found.counters)
            amend_case(item, extras={"kernel_log": found.to_dict()})
            raise
        finally:
            if faulted:
                floor.fault_ended(time.time())
        item.stash[KERNEL_KEY] = found = read()
        read_to.update(found.read_to)
        counters.update(found.counters)
    problems: list[str] = []
    if not faulted:
        expected = [re.compile(p, re.IGNORECASE) for m in item.iter_markers("fabricqa_kernel_expects") for p in m.args]
        problems = kernlog.trouble_problems(found, [*(lab.watch.allowed if lab else ()), *expected])
    amend_case(item, extras={"kernel_log": found.to_dict()}, violations=problems)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    return outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A user mistake met while running a case (``UserError``: a lab that cannot be attached, missing
    credentials) is reported as its one line, not a traceback; the session then exits as a usage error. Any other
    failure of a case that uses the lab carries each host's storage kernel messages since it began
    (:mod:`pytest_fabricqa.fabric.kernlog`), shown with the failure and in the HTML report; a failed case on a
    target app the plugin started (SPDK's nvmf_tgt) also carries that app's newest log lines, a section of the
    failure's report (shown with it and by pytest-html), not of the case's extras."""
    report = yield
    excinfo = call.excinfo
    if excinfo is not None and isinstance(excinfo.value, UserError) and _lab(item.config) is not None:
        report.longrepr = str(excinfo.value)
        report.fabricqa_user_error = True  # type: ignore[attr-defined]
    elif (
        report.failed
        and call.when in ("setup", "call")
        and SESSION_KEY in item.config.stash
        and "lab_session" in getattr(item, "fixturenames", ())
    ):
        from pytest_fabricqa.fabric import kernlog

        hosts = item.config.stash[SESSION_KEY].hosts
        found = item.stash.get(KERNEL_KEY, None) if call.when == "call" else None
        if found is None:
            found = kernlog.account(hosts, call.start)
        report.sections.extend(kernlog.sections_of(found, list(hosts)))
        # A userspace target the plugin started (SPDK) logs what the kernels cannot see: its own app log.
        reader = getattr(getattr(item, "funcargs", {}).get("fabric"), "target_log", None)
        if call.when == "call" and reader is not None and (app_log := reader()) is not None:
            report.sections.append(app_log)
    return report


def _late_rank(item: pytest.Item) -> int:
    """Where a case goes in its pair's stretch: 0 in file order, 1 late (``fabricqa_late_in_pair``), 2 last."""
    if item.get_closest_marker("fabricqa_last_in_pair") is not None:
        return 2
    return 1 if item.get_closest_marker("fabricqa_late_in_pair") is not None else 0


def _phase_of(item: pytest.Item) -> str:
    mark = item.get_closest_marker("fabricqa_phase")
    return str(mark.args[0]) if mark else ""


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session loudly if objects the plugin created are still on the lab at the end."""
    if session.exitstatus == pytest.ExitCode.TESTS_FAILED and _user_error_reported(session.config):
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    left = session.config.stash.get(LEFTOVERS_KEY, [])
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("!", "fabricqa: objects left on the lab", red=True, bold=True)
            for line in left:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _user_error_reported(config: pytest.Config) -> bool:
    """True when a case failed on a user mistake (the terminal reporter holds every report, xdist's too)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {})
    return any(getattr(r, "fabricqa_user_error", False) for key in ("error", "failed") for r in stats.get(key, ()))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Say plainly when the Oracle checks were not exercised."""
    lab = _lab(config)
    if lab is not None and lab.database is None and config.stash.get(ORACLE_SKIPPED_KEY, 0):
        terminalreporter.write_line(
            f"fabricqa: Oracle checks were not exercised (lab {lab.name!r} declares no database)"
        )


def _protocol_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("protocol") if callspec else None
    return value if isinstance(value, str) else None


def _pair_of(item: pytest.Item) -> tuple[str, str] | None:
    protocol, target = _protocol_of(item), _target_of(item)
    return (protocol, target) if protocol is not None and target is not None else None


def _target_runs_workload(lab: LabModel, item: pytest.Item) -> bool:
    """False for a case of a workload its target's ``workloads`` list leaves out, of an integrity block size
    its ``integrity_block_sizes`` leaves out, of an integrity case over a protocol its ``integrity_protocols``
    leaves out, or of a failover outage on a target ``failover.targets`` leaves out."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return True
    target = next((t for t in lab.targets if t.name == callspec.params.get("target_name")), None)
    if target is None:
        return True
    workload = callspec.params.get("workload", callspec.params.get("scaling_workload"))
    if workload is not None and target.workloads is not None and workload.name not in target.workloads:
        return False
    if item.get_closest_marker("fabricqa_failover") is not None or callspec.params.get("outage") is not None:
        return lab.failover.runs_on(target, callspec.params.get("protocol"))
    if (
        item.get_closest_marker("fabricqa_integrity") is not None
        and target.integrity_protocols is not None
        and callspec.params.get("protocol") not in target.integrity_protocols
    ):
        return False
    bs = callspec.params.get("bs")
    if bs is not None and target.integrity_block_sizes is not None:
        from pytest_fabricqa.integrity.checks import BLOCK_SIZES

        return any(BLOCK_SIZES[label] == bs for label in target.integrity_block_sizes)
    return True


def _target_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("target_name") if callspec else None
    return value if isinstance(value, str) else None


# -- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def lab(pytestconfig: pytest.Config) -> LabModel:
    """The validated lab model from ``--lab`` (hosts, network, targets, thresholds)."""
    model = _lab(pytestconfig)
    if model is None:
        raise pytest.UsageError("this test needs a lab: run pytest with --lab=NAME (e.g. --lab=vlab)")
    return model


@pytest.fixture(scope="session")
def fabricqa_report(lab: LabModel, pytestconfig: pytest.Config) -> FabricqaReport:
    """The qualification report: record each case's figures, gate them against the baseline.

    - ``record(case, request) -> Case``: attach a ``pytest_fabricqa.report.model.Case`` to this test
      (pass the test's ``request``); fills ``case.regression`` when left None; the test's outcome
      decides the verdict in the report; figures become JUnit properties.
    - ``gate(case, request) -> list[str]``: record the case and return its threshold violations and its
      regressions against the baseline; ``assert not problems, "\\n".join(problems)``.
    - ``regressions(case) -> RegressionInfo | None``: compare with the baseline for the case's
      protocol (tolerances: defaults < lab file ``tolerances`` < --tolerance); fail the test with
      ``info.messages`` when there are any.
    - ``raw_dir`` / ``raw_path(case_id)``: ``<report-dir>/raw/<case id>.json`` for fio's JSON output.
    - ``tolerances``, ``baseline_path(protocol)``: what is applied, for messages.

    Suites put ``extras["environment"] = {"fio_version", "kernels": {host: release}, "device_model",
    "device_firmware"}`` in a case; the run's environment merges them.
    """
    plugin: ReportPlugin | None = pytestconfig.pluginmanager.get_plugin(REPORT_PLUGIN)
    assert plugin is not None, "pytest_configure registers the report plugin whenever there is a lab"
    return plugin.api


@pytest.fixture(scope="session")
def lab_session(lab: LabModel, pytestconfig: pytest.Config) -> Iterator[LabSession]:
    """The session's connections to the lab's hosts (opened on first use, closed at the end)."""
    from pytest_fabricqa.fabric.lock import LabInUse
    from pytest_fabricqa.plugin.session import LabSession

    try:
        session = LabSession.open(
            lab,
            pytestconfig.rootpath,
            pytestconfig.getini("fabricqa_state_dir") or None,
            log=lambda line: _log(pytestconfig, line),
            worker=hasattr(pytestconfig, "workerinput"),
        )
    except LabInUse as exc:
        pytest.exit(f"fabricqa: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    pytestconfig.stash[SESSION_KEY] = session
    try:
        yield session
    finally:
        try:
            if pytestconfig.stash.get(FABRIC_USED_KEY, False):
                from pytest_fabricqa.fabric.provision import leftovers

                pytestconfig.stash[LEFTOVERS_KEY] = leftovers(lab, session.hosts)
        finally:
            session.close()


@pytest.fixture(scope="session")
def lab_hosts(lab_session: LabSession) -> dict[str, Host]:
    """Every lab host by name, as a transport (``host.run(argv)``)."""
    return lab_session.hosts


@pytest.fixture(scope="session")
def initiators(lab: LabModel, lab_hosts: dict[str, Host]) -> list[Host]:
    """The hosts with the initiator role (both RAC nodes in rac3), in lab-file order."""
    return [lab_hosts[name] for name in lab.hosts_with("initiator")]


@pytest.fixture(scope="session")
def lab_target(lab: LabModel, protocol: str, target_name: str) -> TargetModel:
    """The lab's target under test (``targets[]`` of the lab file): a case using it runs once per protocol and
    target serving it, with ``protocol-target`` in its id (``--target`` narrows)."""
    return lab.target_for(protocol, target_name)


@pytest.fixture(scope="session")
def target_host(lab_target: TargetModel, lab_hosts: dict[str, Host]) -> Host | None:
    """The host running the target under test (None for an external target)."""
    return lab_hosts[lab_target.host] if lab_target.host else None


@pytest.fixture(scope="session")
def lab_host(lab_hosts: dict[str, Host], lab_host_name: str) -> Host:
    """One lab host per case: the case is parametrized over the lab's hosts (narrow with @pytest.mark.roles)."""
    return lab_hosts[lab_host_name]


@pytest.fixture(scope="session")
def infra(lab_host: Host) -> Any:
    """A testinfra host object for ``lab_host``, over the same connection and host-key policy."""
    from pytest_fabricqa.transport.testinfra import infra_host

    return infra_host(lab_host)


@pytest.fixture
def fabric(fabricqa_session_fabric: Fabric) -> Fabric:
    """The target under test provisioned and exported for ``protocol``, every initiator connected; torn down after
    the pair's last case. A case that tore it down (``fabric.teardown()``) leaves it so; the next case of the pair
    that asks for it gets it connected again, and none has to when that case ran last (``fabricqa_last_in_pair``).
    So does a fabric whose initiators failed to disconnect or connect again in a case (``reconnect_initiators``).
    """
    from pytest_fabricqa.core.undo import ProvisionError

    if not fabricqa_session_fabric.connected:
        try:
            fabricqa_session_fabric.reconnect()
        except ProvisionError as exc:
            pytest.fail(str(exc), pytrace=False)
    return fabricqa_session_fabric


@pytest.fixture(scope="session")
def fabricqa_session_fabric(
    lab: LabModel, lab_hosts: dict[str, Host], protocol: str, target_name: str, pytestconfig: pytest.Config
) -> Iterator[Fabric]:
    """The session's fabric of one (protocol, target), behind ``fabric``: provisioned once, torn down at the end.

    One fabric at a time: pytest finishes one (protocol, target)'s fixture before the next one starts, and the
    plugin orders the cases so that each pair's cases run together (two targets of one host never overlap).
    """
    from pytest_fabricqa.core.undo import ProvisionError
    from pytest_fabricqa.fabric.provision import connect_fabric

    pytestconfig.stash[FABRIC_USED_KEY] = True
    try:
        connected = connect_fabric(lab, protocol, lab_hosts, target=target_name)
    except ProvisionError as exc:
        pytest.fail(str(exc), pytrace=False)
    for line in connected.stale_removed:
        _log(pytestconfig, f"fabricqa: stale clean-up: {line}")
    try:
        yield connected
    finally:
        connected.teardown()


@pytest.fixture(scope="session")
def measure_plan(lab: LabModel, pytestconfig: pytest.Config) -> MeasurePlan:
    """How each workload is measured, from the lab file and --fio-samples: samples per point, time series,
    steady state, the spread limit (``pytest_fabricqa.measure.point.MeasurePlan``; pass it to ``run_point``)."""
    return pytestconfig.stash[MEASURE_KEY]


@pytest.fixture(scope="session")
def lab_workloads(lab: LabModel, pytestconfig: pytest.Config) -> list[Workload]:
    """Every workload selected for this run, in order (what ``workload`` parametrizes over)."""
    selected: list[Workload] = pytestconfig.stash[WORKLOADS_KEY]
    return list(selected)


@pytest.fixture(scope="session")
def lab_environment(lab: LabModel, lab_hosts: dict[str, Host], pytestconfig: pytest.Config) -> dict[str, Any]:
    """What the figures depend on besides the fabric, once per session: put it in each performance case as
    ``extras["environment"]`` (with the case's ``fio_version``). Filled by every ``pytest_fabricqa_update_environment``
    implementation: the plugin's (kernels, NVMe device model and firmware), then yours."""
    environment: dict[str, Any] = {}
    pytestconfig.hook.pytest_fabricqa_update_environment(lab=lab, lab_hosts=lab_hosts, environment=environment)
    return environment


@pytest.fixture(scope="session")
def write_guard(lab: LabModel, lab_hosts: dict[str, Host]) -> WriteGuard:
    """The data-safety guard for write workloads: call ``write_guard.before_writes(protocol, fabric.devices)``
    before writing; it refuses (raises ``DeviceRefused``) a device holding an ASM header, a filesystem, LVM or a
    partition table unless the lab allows it, and probes each device once per session."""
    from pytest_fabricqa.safety.guard import WriteGuard

    return WriteGuard(lab, lab_hosts)


@pytest.fixture(scope="session")
def fio_servers(lab: LabModel, lab_hosts: dict[str, Host]) -> Iterator[list[Any]]:
    """``fio --server`` on every initiator's storage address, for cases that load from all initiators at once: one
    per session and xdist worker, on its own port and pid file (:mod:`pytest_fabricqa.fio.server`)."""
    from pytest_fabricqa.fio import server as fio_server

    owner = fio_server.owner_name(lab.name, os.environ.get("PYTEST_XDIST_WORKER", "main"))
    servers = []
    try:
        for name in lab.hosts_with("initiator"):
            storage = lab.hosts[name].storage_link
            address = str(storage.address) if storage else (lab.hosts[name].address or name)
            try:
                servers.append(fio_server.start(lab_hosts[name], name, address, owner))
            except fio_server.FioServerError as exc:
                pytest.fail(str(exc), pytrace=False)
        yield servers
    finally:
        for server in servers:
            fio_server.stop(lab_hosts[server.name], owner)
