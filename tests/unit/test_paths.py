"""The path settings an initiator shows while connected (native multipath, ctrl_loss_tmo, recovery_tmo, nop-outs):
the script on the virtual lab's recorded values (tests/data/paths/README.md), its parser, the check that fails
on a value the lab does not expect, the report's case and the lab's ``multipath`` section."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from fakes import ScriptedHost
from labfiles import VLAB_FILE

from pytest_fabricqa.initiators.paths import (
    PATHS_SCRIPT,
    Connection,
    Controller,
    PathSettings,
    parse_path_settings,
    path_settings_case,
    path_settings_problems,
    read_everywhere,
    read_path_settings,
)
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import LabError, MultipathSettings

DATA = Path(__file__).parents[1] / "data" / "paths"
RAM_NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
NVME_NQN = "nqn.2026-11.io.fabricqa:vlab-nvme0"
NQNS = (RAM_NQN, NVME_NQN)
IQN = "iqn.2026-11.io.fabricqa:vstor"
VLAB = load_lab(VLAB_FILE).multipath
NOTHING = MultipathSettings()

# The sysfs files as the virtual lab showed them (tests/data/paths/README.md): what the recorded files were made from.
RECORDED_SYSFS = {
    "nvme-tcp-nvmet.vnode1": {
        "module/nvme_core/parameters/multipath": "Y",
        **{
            f"class/nvme/{controller}/{attribute}": value
            for controller, nqn in (("nvme0", RAM_NQN), ("nvme1", NVME_NQN))
            for attribute, value in (
                ("subsysnqn", nqn),
                ("ctrl_loss_tmo", "600"),
                ("reconnect_delay", "10"),
                ("fast_io_fail_tmo", "off"),
                ("state", "live"),
            )
        },
        "class/nvme-subsystem/nvme-subsys0/subsysnqn": RAM_NQN,
        "class/nvme-subsystem/nvme-subsys0/iopolicy": "numa",
        "class/nvme-subsystem/nvme-subsys1/subsysnqn": NVME_NQN,
        "class/nvme-subsystem/nvme-subsys1/iopolicy": "numa",
    },
    "iscsi-lio.vnode1": {
        "module/nvme_core/parameters/multipath": "Y",
        "class/iscsi_session/session3/targetname": IQN,
        "class/iscsi_session/session3/recovery_tmo": "120",
        "class/iscsi_session/session3/state": "LOGGED_IN",
        "class/iscsi_connection/connection3:0/recv_tmo": "5",
        "class/iscsi_connection/connection3:0/ping_tmo": "5",
    },
}
ARGUMENTS = {"nvme-tcp-nvmet.vnode1": NQNS, "iscsi-lio.vnode1": (IQN,)}


def _recorded(name: str) -> PathSettings:
    return parse_path_settings((DATA / f"{name}.txt").read_text())


def _sysfs(root: Path, files: dict[str, str]) -> Path:
    for relative, value in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(value + "\n")
    return root


# -- the script and its parser ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", [s for s in ("dash", "bash") if shutil.which(s)])
@pytest.mark.parametrize("name", list(RECORDED_SYSFS))
def test_the_script_prints_the_recorded_data_from_the_recorded_sysfs_values(
    tmp_path: Path, name: str, shell: str
) -> None:
    """Debian's sh is dash, RHEL's and Oracle Linux's bash: both print the same."""
    root = _sysfs(tmp_path, RECORDED_SYSFS[name])
    # Another subsystem's controller and another target's session on the same host are left out.
    _sysfs(root, {"class/nvme/nvme2/subsysnqn": "nqn.2014-08.org.example:other", "class/nvme/nvme2/ctrl_loss_tmo": "1",
                  "class/iscsi_session/session9/targetname": "iqn.2001-05.com.example:other"})  # fmt: skip
    out = subprocess.run([shell, "-c", PATHS_SCRIPT, "sh", str(root), *ARGUMENTS[name]], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout == (DATA / f"{name}.txt").read_text()
    assert out.stderr == ""


def test_an_old_kernel_without_a_file_reads_as_not_shown(tmp_path: Path) -> None:
    files = dict(RECORDED_SYSFS["nvme-tcp-nvmet.vnode1"])
    del files["class/nvme/nvme0/fast_io_fail_tmo"]  # before Linux 5.10
    del files["module/nvme_core/parameters/multipath"]
    out = subprocess.run(["sh", "-c", PATHS_SCRIPT, "sh", str(_sysfs(tmp_path, files)), *NQNS], capture_output=True,
                         text=True, check=True)  # fmt: skip
    read = parse_path_settings(out.stdout)
    assert read.native_multipath == ""
    assert read.controllers[0].values["fast_io_fail_tmo"] == ""
    assert path_settings_problems({"vnode1": read}, NQNS, "nvme", VLAB) == [
        "vnode1: native NVMe multipath (/sys/module/nvme_core/parameters/multipath) is not shown, expected on (Y) "
        "(multipath.nvme.native)",
        f"vnode1: controller nvme0 of {RAM_NQN}: fast_io_fail_tmo is not shown, expected off "
        "(multipath.nvme.fast_io_fail_tmo_s)",
    ]


def test_the_parser_reads_nvmes_controllers_and_subsystems() -> None:
    read = _recorded("nvme-tcp-nvmet.vnode1")
    assert read.native_multipath == "Y"
    assert [(s.name, s.nqn, s.values) for s in read.subsystems] == [
        ("nvme-subsys0", RAM_NQN, {"iopolicy": "numa"}),
        ("nvme-subsys1", NVME_NQN, {"iopolicy": "numa"}),
    ]
    assert read.controllers[1] == Controller(
        "nvme1", NVME_NQN, {"ctrl_loss_tmo": "600", "reconnect_delay": "10", "fast_io_fail_tmo": "off"}
    )
    assert read.sessions == ()


def test_the_parser_puts_each_connection_with_its_session() -> None:
    read = _recorded("iscsi-lio.vnode1")
    assert read.controllers == () and read.subsystems == ()
    (session,) = read.sessions
    assert (session.name, session.iqn, session.values) == ("session3", IQN, {"recovery_tmo": "120"})
    assert session.connections == (Connection("connection3:0", {"recv_tmo": "5", "ping_tmo": "5"}),)


def test_the_script_reads_a_host_in_one_command() -> None:
    recorded = (DATA / "nvme-tcp-nvmet.vnode1.txt").read_text()
    host = ScriptedHost("vnode1", lambda argv: recorded)
    read = read_path_settings(host, NQNS)  # type: ignore[arg-type]
    assert host.commands == [("sh", "-c", PATHS_SCRIPT, "sh", "/sys", *NQNS)]
    assert read == _recorded("nvme-tcp-nvmet.vnode1")


def test_a_host_that_cannot_be_read_is_a_problem_and_the_others_are_still_read() -> None:
    recorded = (DATA / "iscsi-lio.vnode1.txt").read_text()
    good = ScriptedHost("vnode1", lambda argv: recorded)
    bad = ScriptedHost("vnode2", lambda argv: (255, "", "ssh: connect to host vnode2 port 22: Connection refused"))
    read, problems = read_everywhere([good, bad], (IQN,))  # type: ignore[list-item]
    assert list(read) == ["vnode1"]
    assert len(problems) == 1 and problems[0].startswith("vnode2: its path settings could not be read: ")


# -- the check ----------------------------------------------------------------------------------------------------


def test_the_recorded_settings_are_what_the_virtual_lab_expects() -> None:
    nvme = {"vnode1": _recorded("nvme-tcp-nvmet.vnode1")}
    iscsi = {"vnode1": _recorded("iscsi-lio.vnode1")}
    assert path_settings_problems(nvme, NQNS, "nvme", VLAB) == []
    assert path_settings_problems(iscsi, (IQN,), "scsi", VLAB) == []
    # nothing set in the lab: nothing to check, the case passes
    assert path_settings_problems(nvme, NQNS, "nvme", NOTHING) == []
    assert path_settings_problems({"vnode1": PathSettings()}, (IQN,), "scsi", NOTHING) == []


def test_the_captured_two_path_settings_are_read_per_controller_and_pass() -> None:
    """Captured with PATHS_SCRIPT itself on vnode1 while nvmet served both segments (see the data README)."""
    read = _recorded("nvme-tcp-nvmet-two-paths.vnode1")
    assert [c.name for c in read.controllers] == ["nvme0", "nvme1", "nvme2", "nvme3"]
    assert path_settings_problems({"vnode1": read}, NQNS, "nvme", VLAB) == []
    slower = _controller(read, 3, reconnect_delay="2")
    (problem,) = path_settings_problems({"vnode1": slower}, NQNS, "nvme", VLAB)
    assert problem.startswith("vnode1: ") and "nvme3" in problem and "reconnect_delay" in problem


def _controller(read: PathSettings, index: int, **values: str) -> PathSettings:
    controllers = list(read.controllers)
    controllers[index] = replace(controllers[index], values={**controllers[index].values, **values})
    return replace(read, controllers=tuple(controllers))


def test_native_multipath_off_when_the_lab_expects_it_on_fails() -> None:
    read = replace(_recorded("nvme-tcp-nvmet.vnode1"), native_multipath="N")
    assert path_settings_problems({"vnode2": read}, NQNS, "nvme", VLAB) == [
        "vnode2: native NVMe multipath (/sys/module/nvme_core/parameters/multipath) is off (N), expected on (Y) "
        "(multipath.nvme.native)"
    ]


def test_a_controller_whose_ctrl_loss_tmo_differs_fails_and_names_it() -> None:
    read = _controller(_recorded("nvme-tcp-nvmet.vnode1"), 1, ctrl_loss_tmo="1800")
    assert path_settings_problems({"vnode1": read}, NQNS, "nvme", VLAB) == [
        f"vnode1: controller nvme1 of {NVME_NQN}: ctrl_loss_tmo is 1800 s, expected 600 s "
        "(multipath.nvme.ctrl_loss_tmo_s)"
    ]


def test_off_and_a_number_differ_both_ways() -> None:
    read = _controller(_recorded("nvme-tcp-nvmet.vnode1"), 0, fast_io_fail_tmo="5", ctrl_loss_tmo="off")
    expected = VLAB.model_copy(update={"nvme": VLAB.nvme.model_copy(update={"ctrl_loss_tmo_s": 600})})
    assert path_settings_problems({"vnode1": read}, NQNS, "nvme", expected) == [
        f"vnode1: controller nvme0 of {RAM_NQN}: ctrl_loss_tmo is off, expected 600 s (multipath.nvme.ctrl_loss_tmo_s)",
        f"vnode1: controller nvme0 of {RAM_NQN}: fast_io_fail_tmo is 5 s, expected off "
        "(multipath.nvme.fast_io_fail_tmo_s)",
    ]


def test_a_subsystems_iopolicy_is_checked_once_per_subsystem() -> None:
    read = _recorded("nvme-tcp-nvmet.vnode1")
    subsystems = (read.subsystems[0], replace(read.subsystems[1], values={"iopolicy": "round-robin"}))
    assert path_settings_problems({"vnode1": replace(read, subsystems=subsystems)}, NQNS, "nvme", VLAB) == [
        f"vnode1: nvme-subsys1 ({NVME_NQN}): iopolicy is round-robin, expected numa (multipath.nvme.iopolicy)"
    ]


def test_a_controller_of_another_subsystem_is_ignored() -> None:
    read = _recorded("nvme-tcp-nvmet.vnode1")
    other = Controller("nvme7", "nqn.2014-08.org.example:other", {"ctrl_loss_tmo": "off", "reconnect_delay": "2",
                                                                  "fast_io_fail_tmo": "0"})  # fmt: skip
    read = replace(read, controllers=(*read.controllers, other))
    assert path_settings_problems({"vnode1": read}, NQNS, "nvme", VLAB) == []
    # ... and a fabric of that subsystem alone does see it
    assert len(path_settings_problems({"vnode1": read}, ("nqn.2014-08.org.example:other",), "nvme", VLAB)) == 4


def test_a_session_whose_recovery_tmo_differs_fails_and_names_it() -> None:
    read = _recorded("iscsi-lio.vnode1")
    session = read.sessions[0]
    connection = replace(session.connections[0], values={"recv_tmo": "10", "ping_tmo": "5"})
    read = replace(read, sessions=(replace(session, values={"recovery_tmo": "5"}, connections=(connection,)),))
    assert path_settings_problems({"vnode1": read}, (IQN,), "scsi", VLAB) == [
        f"vnode1: session3 of {IQN}: recovery_tmo (replacement_timeout) is 5 s, expected 120 s "
        "(multipath.iscsi.recovery_tmo_s)",
        f"vnode1: connection3:0 of session3 ({IQN}): recv_tmo (noop_out_interval) is 10 s, expected 5 s "
        "(multipath.iscsi.recv_tmo_s)",
    ]


def test_sessions_of_a_target_on_several_paths_are_held_to_what_dm_multipath_sets() -> None:
    """multipathd wrote recovery_tmo 5 (its fast_io_fail_tmo) on the sessions of LIO's two paths (vnode1,
    2026-12-02): right there, wrong for a one-path target, and the message names the section it came from."""
    read = _recorded("iscsi-lio.vnode1")
    session = read.sessions[0]
    multipathed = replace(read, sessions=(replace(session, values={"recovery_tmo": "5"}),))
    assert path_settings_problems({"vnode1": multipathed}, (IQN,), "scsi", VLAB, paths=2) == []
    assert path_settings_problems({"vnode1": multipathed}, (IQN,), "scsi", VLAB, paths=1) != []
    assert path_settings_problems({"vnode1": read}, (IQN,), "scsi", VLAB, paths=2) == [
        f"vnode1: session3 of {IQN}: recovery_tmo (replacement_timeout) is 120 s, expected 5 s "
        "(multipath.iscsi_dm.recovery_tmo_s)"
    ]


def test_nothing_of_the_fabric_to_read_fails_only_when_something_is_expected() -> None:
    nvme = {"vnode1": _recorded("nvme-tcp-nvmet.vnode1")}
    assert path_settings_problems(nvme, (IQN,), "scsi", VLAB) == [
        f"vnode1: no iSCSI session to {IQN} is logged in: its settings cannot be read"
    ]
    assert path_settings_problems(nvme, (IQN,), "scsi", NOTHING) == []


# -- the report's case --------------------------------------------------------------------------------------------


def test_the_case_records_every_value_read_even_unchecked_ones() -> None:
    found = {"vnode1": _recorded("nvme-tcp-nvmet.vnode1"), "vnode2": replace(_recorded("nvme-tcp-nvmet.vnode1"),
                                                                              native_multipath="N")}  # fmt: skip
    problems = path_settings_problems(found, NQNS, "nvme", VLAB)
    case = path_settings_case("suites/test_connectivity.py::t[nvme-tcp]", "nvme-tcp-nvmet-path-settings", "nvme-tcp",
                              "nvmet", "nvme", found, problems, VLAB)  # fmt: skip
    assert case.suite == "connectivity" and case.violations == tuple(problems)
    assert [(c.name, c.verdict) for c in case.checks] == [
        ("vnode1 path settings", "passed"), ("vnode2 path settings", "failed"),
    ]  # fmt: skip
    assert case.checks[0].detail == (
        f"vnode1: native multipath Y; nvme-subsys0 ({RAM_NQN}) iopolicy numa; nvme-subsys1 ({NVME_NQN}) iopolicy "
        f"numa; nvme0 ({RAM_NQN}) ctrl_loss_tmo 600, reconnect_delay 10, fast_io_fail_tmo off; nvme1 ({NVME_NQN}) "
        "ctrl_loss_tmo 600, reconnect_delay 10, fast_io_fail_tmo off"
    )
    recorded = case.extras["path_settings"]
    assert recorded["read"]["vnode2"]["nvme_core.multipath"] == "N"
    assert recorded["read"]["vnode1"]["controllers"]["nvme0"]["fast_io_fail_tmo"] == "off"
    assert recorded["expected"]["nvme"]["fast_io_fail_tmo_s"] == "off"
    # a lab that sets nothing: the values are recorded all the same
    case = path_settings_case("n", "c", "iscsi", "lio", "scsi", {"vnode1": _recorded("iscsi-lio.vnode1")}, [], NOTHING)
    assert case.extras["path_settings"]["expected"] == {"iscsi": {}}
    assert case.extras["path_settings"]["read"]["vnode1"]["sessions"]["session3"] == {
        "targetname": IQN, "recovery_tmo": "120", "connections": {"connection3:0": {"recv_tmo": "5", "ping_tmo": "5"}},
    }  # fmt: skip
    assert case.checks[0].detail == f"vnode1: session3 ({IQN}) recovery_tmo 120; connection3:0 recv_tmo 5, ping_tmo 5"


# -- the lab's multipath section ----------------------------------------------------------------------------------

VLAB_LINE = (
    "  nvme: {native: true, iopolicy: numa, ctrl_loss_tmo_s: 600, reconnect_delay_s: 10, fast_io_fail_tmo_s: off}"
)


def _lab_with(tmp_path: Path, nvme: str | None = None, iscsi: str | None = None) -> Path:
    text = VLAB_FILE.read_text()
    assert VLAB_LINE in text
    if nvme is not None:
        text = text.replace(VLAB_LINE, f"  nvme: {nvme}")
    if iscsi is not None:
        text = text.replace("  iscsi: {recovery_tmo_s: 120,", f"  iscsi: {iscsi}\n  #")
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return path


def test_the_virtual_labs_section_loads_with_off_unquoted() -> None:
    assert VLAB.nvme.fast_io_fail_tmo_s == "off"  # YAML read false: the kernel's off was meant
    assert (VLAB.nvme.native, VLAB.nvme.iopolicy, VLAB.nvme.ctrl_loss_tmo_s) == (True, "numa", 600)
    assert (VLAB.iscsi.recovery_tmo_s, VLAB.iscsi.recv_tmo_s, VLAB.iscsi.ping_tmo_s) == (120, 5, 5)


@pytest.mark.parametrize(
    ("nvme", "iscsi", "message"),
    [
        ("{ctrl_loss_tmo_s: -1}", None, "multipath.nvme.ctrl_loss_tmo_s: -1 is not whole seconds from 0 to 86400, or "
         "off (the kernel shows -1 as off)"),
        ("{fast_io_fail_tmo_s: on}", None, "multipath.nvme.fast_io_fail_tmo_s: true (YAML's reading of yes/no/on/off) "
         "is not whole seconds from 0 to 3600, or off"),
        ("{fast_io_fail_tmo_s: never}", None, "multipath.nvme.fast_io_fail_tmo_s: 'never' is not whole seconds from 0 "
         "to 3600, or off"),
        ("{iopolicy: rr}", None, "multipath.nvme.iopolicy: 'rr' is not allowed; allowed: 'numa', 'round-robin' or "
         "'queue-depth'"),
        ("{reconnect_delay_s: 0}", None, "multipath.nvme.reconnect_delay_s: Input should be greater than or equal to 1 "
         "(got 0)"),
        ("{ctrl_loss_tmo_s: 605, reconnect_delay_s: 10}", None, "multipath.nvme: ctrl_loss_tmo_s 605 is never shown "
         "with reconnect_delay_s 10: the kernel keeps 61 reconnects and shows 610; expect 610"),
        (None, "{recovery_tmo_s: off}", "multipath.iscsi.recovery_tmo_s: false (YAML's reading of yes/no/on/off) is not "
         "whole seconds from 0 to 3600"),
        (None, "{replacement_timeout_s: 120}", "multipath.iscsi.replacement_timeout_s: unknown key"),
        (None, "{no_path_retry: queue}", "multipath.iscsi.no_path_retry: unknown key"),
    ],
)  # fmt: skip
def test_a_bad_value_is_one_line_naming_the_key(tmp_path: Path, nvme: str | None, iscsi: str | None,
                                                message: str) -> None:  # fmt: skip
    with pytest.raises(LabError) as info:
        load_lab(_lab_with(tmp_path, nvme, iscsi))
    text = str(info.value)
    assert "\n" not in text
    assert re.match(rf"{re.escape(str(tmp_path / 'lab.yaml'))}:\d+: ", text), text
    assert text.split(": ", 1)[1].startswith(message), text


def test_string_numbers_load_as_numbers(tmp_path: Path) -> None:
    lab = load_lab(_lab_with(tmp_path, "{ctrl_loss_tmo_s: '1800', fast_io_fail_tmo_s: 'off'}", "{ping_tmo_s: '15'}"))
    assert (lab.multipath.nvme.ctrl_loss_tmo_s, lab.multipath.nvme.fast_io_fail_tmo_s) == (1800, "off")
    assert lab.multipath.iscsi.ping_tmo_s == 15


def test_the_commands_exit_code_is_zero_even_with_nothing_to_read(tmp_path: Path) -> None:
    out = subprocess.run(["sh", "-c", PATHS_SCRIPT, "sh", str(tmp_path), IQN], capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr) == (0, "module\tnvme_core\tmultipath=\n", "")
