"""Every path down under I/O (issue 13, faults d and e): the path timeouts set for a case and set back (also from
a killed run's record at the next start), the verdicts of both outages -- each shown failing when it should --,
and the figures read from fio's real output.

The timeouts host is a scripted host with state (its sysfs values in a dict, its /run/fabricqa files); the write
script also runs for real, on files in a temporary folder. fio's output is real: ``tests/data/fio/failover``
(recorded on this machine) and ``tests/data/failover`` (recorded on the virtual lab, see its README).
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fakes import Answer, ScriptedHost, answer_files

from pytest_fabricqa.core.cases import ALUA, ANA, BRIEF, FLAPPING, LONG, ONE_PATH, PORT, RELOGIN, RESET, RESTART
from pytest_fabricqa.core.undo import UndoStack
from pytest_fabricqa.failover import flapping, outage
from pytest_fabricqa.failover.figures import FailoverFigures, fault_stall, measure
from pytest_fabricqa.faults import inject as faults
from pytest_fabricqa.faults import stale
from pytest_fabricqa.faults.inject import Fault
from pytest_fabricqa.fio.stalls import HostSeries, Stall, stalls
from pytest_fabricqa.lab.load import load_lab
from pytest_fabricqa.lab.model import FailoverSettings, LabModel
from pytest_fabricqa.lab.thresholds import Thresholds

LABS = Path(__file__).parents[2] / "labs"
DATA = Path(__file__).parents[1] / "data"
RECORDS = "/run/fabricqa/fqa-vlab-faults.json"
NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
DEAD = {"controller": "a-controller-that-was-killed", "pid": 4242, "started": 1}
CLOCK = "1764445200.250000000"


def lab() -> LabModel:
    return load_lab(LABS / "vlab.yaml")


def sysfs_from(listing: str) -> dict[str, str]:
    """The sysfs files a recorded :data:`faults.TIMEOUTS_READ` listing stands for (path -> value)."""
    files: dict[str, str] = {}
    for name, entry in faults.parse_timeouts(listing).items():
        base = f"{faults.NVME_CLASS if entry['kind'] == 'nvme' else faults.ISCSI_CLASS}/{name}"
        files[f"{base}/{'subsysnqn' if entry['kind'] == 'nvme' else 'targetname'}"] = entry["subsystem"]
        for key, value in entry.items():
            if key.startswith("io_timeout:"):
                files[f"{base}/{key.split(':', 1)[1]}/queue/io_timeout"] = value
            elif key not in ("kind", "subsystem"):
                files[f"{base}/{key}"] = value
    return files


class TimeoutsHost(ScriptedHost):
    """An initiator whose controllers' and sessions' timeouts are sysfs files in a dict, shown as
    :data:`faults.TIMEOUTS_READ` shows them; ``events`` has the records as they were at each write."""

    def __init__(self, listing: str, name: str = "vnode1") -> None:
        super().__init__(name)
        self.files: dict[str, str] = {}
        self.sysfs = sysfs_from(listing)
        self.events: list[dict[str, Any]] = []

    def records(self) -> dict[str, Any]:
        text = self.files.get(RECORDS)
        return json.loads(text)["faults"] if text else {}

    def listing(self) -> str:
        lines = []
        names = sorted({p.split("/")[4] for p in self.sysfs})
        for name in names:
            base = f"{faults.NVME_CLASS}/{name}"
            if f"{base}/subsysnqn" in self.sysfs:
                attrs = " ".join(
                    f"{a}={self.sysfs[f'{base}/{a}']}"
                    for a in ("transport", "state", "fast_io_fail_tmo", "reconnect_delay", "ctrl_loss_tmo", "kato")
                )
                disks = " ".join(
                    f"io_timeout:{p.split('/')[5]}={v}"
                    for p, v in sorted(self.sysfs.items())
                    if p.startswith(base + "/") and p.endswith("/queue/io_timeout")
                )
                lines.append(f"nvme {name} {self.sysfs[base + '/subsysnqn']} {attrs} {disks}".rstrip())
            base = f"{faults.ISCSI_CLASS}/{name}"
            if f"{base}/targetname" in self.sysfs:
                lines.append(
                    f"iscsi {name} {self.sysfs[base + '/targetname']} recovery_tmo={self.sysfs[base + '/recovery_tmo']}"
                )
        return "\n".join(lines) + "\n"

    def answer(self, argv: tuple[str, ...]) -> Answer:
        script = argv[2] if argv[:2] == ("sh", "-c") else ""
        stored = answer_files(self.files, argv)
        if stored is not None:
            return stored
        if script == faults.TIMEOUTS_READ:
            return self.listing()
        if script == faults.TIMEOUTS_WRITE:
            self.events.append(self.records())
            words = list(argv[5:])  # after the script, $0 and the wait
            while len(words) >= 4:
                path, value, guard, wanted = words[:4]
                del words[:4]
                if path in self.sysfs and self.sysfs.get(guard) == wanted:
                    self.sysfs[path] = {"-1": "off"}.get(value, value)
            return CLOCK + "\n"
        return None


NVME_LISTING = (DATA / "failover" / "timeouts-nvme-tcp.txt").read_text()
ISCSI_LISTING = (DATA / "failover" / "timeouts-iscsi.txt").read_text()


def nvme_change(host: TimeoutsHost) -> faults.PathTimeouts:
    return faults.PathTimeouts(
        host, "fqa-vlab", (NQN,), nvme={"io_timeout_s": 3, "fast_io_fail_tmo_s": 2, "reconnect_delay_s": 1}
    )


def test_the_recorded_listings_parse_into_controllers_and_sessions() -> None:
    nvme = faults.parse_timeouts(NVME_LISTING)
    ours = {k: v for k, v in nvme.items() if v["subsystem"] == NQN}
    assert ours and all(v["kind"] == "nvme" and any(k.startswith("io_timeout:") for k in v) for v in ours.values())
    sessions = faults.parse_timeouts(ISCSI_LISTING)
    assert sessions and all(v["kind"] == "iscsi" and v["recovery_tmo"].isdigit() for v in sessions.values())


def test_the_old_values_are_recorded_before_the_first_write_and_written_back_after() -> None:
    host = TimeoutsHost(NVME_LISTING)
    before = dict(host.sysfs)
    undo = UndoStack()
    nvme_change(host).inject(undo)
    assert list(host.events[0]) == ["path-timeouts"]  # the record was there when the values changed
    ctrl = next(k for k, v in faults.parse_timeouts(NVME_LISTING).items() if v["subsystem"] == NQN)
    assert host.sysfs[f"/sys/class/nvme/{ctrl}/fast_io_fail_tmo"] == "2"
    assert host.sysfs[f"/sys/class/nvme/{ctrl}/reconnect_delay"] == "1"
    assert {v for p, v in host.sysfs.items() if p.startswith(f"/sys/class/nvme/{ctrl}/") and "io_timeout" in p} == {
        "3000"
    }
    assert undo.unwind() == []
    assert host.sysfs == before and host.records() == {}


def test_only_the_fabrics_controllers_are_touched() -> None:
    host = TimeoutsHost(NVME_LISTING)
    others = {p: v for p, v in host.sysfs.items() if NQN not in host.sysfs.get(p.rsplit("/", 1)[0] + "/subsysnqn", NQN)}
    nvme_change(host).inject(UndoStack())
    assert {p: host.sysfs[p] for p in others} == others


def test_a_host_without_a_controller_of_the_fabric_is_refused_before_anything_is_written() -> None:
    host = TimeoutsHost(NVME_LISTING)
    change = faults.PathTimeouts(host, "fqa-vlab", ("nqn.2026-11.io.fabricqa:not-connected",), nvme={"io_timeout_s": 3})
    undo = UndoStack()
    with pytest.raises(faults.FaultRefused, match="no NVMe-oF controller or iSCSI session"):
        change.inject(undo)
    assert host.events == [] and host.records() == {} and len(undo) == 0


def test_iscsi_recovery_tmo_is_set_and_set_back() -> None:
    host = TimeoutsHost(ISCSI_LISTING)
    iqn = next(iter(faults.parse_timeouts(ISCSI_LISTING).values()))["subsystem"]
    before = dict(host.sysfs)
    undo = UndoStack()
    faults.PathTimeouts(host, "fqa-vlab", (iqn,), iscsi={"recovery_tmo_s": 2}).inject(undo)
    assert {v for p, v in host.sysfs.items() if p.endswith("/recovery_tmo")} == {"2"}
    undo.unwind()
    assert host.sysfs == before


def test_a_killed_runs_timeouts_are_set_back_at_the_next_start_from_the_record() -> None:
    host = TimeoutsHost(NVME_LISTING)
    before = dict(host.sysfs)
    nvme_change(host).inject(UndoStack())  # ... and the run is SIGKILLed: its undo never runs
    records = host.records()
    records["path-timeouts"]["owner"] = DEAD
    host.files[RECORDS] = json.dumps({"kind": "faults", "faults": records})
    assert host.sysfs != before
    lines = stale.restore_stale(lab(), {"vnode1": host})
    assert host.sysfs == before and host.records() == {}
    assert len(lines) == 1 and "path timeouts set" in lines[0] and "pid 4242" in lines[0]


def test_a_controller_number_reused_since_is_not_touched_by_the_restore() -> None:
    host = TimeoutsHost(NVME_LISTING)
    nvme_change(host).inject(UndoStack())
    ctrl = next(k for k, v in faults.parse_timeouts(NVME_LISTING).items() if v["subsystem"] == NQN)
    host.sysfs[f"/sys/class/nvme/{ctrl}/subsysnqn"] = "nqn.2026-11.io.fabricqa:someone-elses"
    changed = dict(host.sysfs)
    records = host.records()
    records["path-timeouts"]["owner"] = DEAD
    host.files[RECORDS] = json.dumps({"kind": "faults", "faults": records})
    stale.restore_stale(lab(), {"vnode1": host})
    assert host.sysfs == changed


def test_the_write_script_writes_only_where_the_guard_still_holds(tmp_path: Path) -> None:
    ours, reused = tmp_path / "nvme1", tmp_path / "nvme2"
    for ctrl, nqn in ((ours, NQN), (reused, "nqn.other")):
        ctrl.mkdir()
        (ctrl / "subsysnqn").write_text(nqn + "\n")
        (ctrl / "fast_io_fail_tmo").write_text("off\n")
    argv = []
    for ctrl in (ours, reused):
        argv += [str(ctrl / "fast_io_fail_tmo"), "2", str(ctrl / "subsysnqn"), NQN]
    argv += [str(tmp_path / "gone" / "fast_io_fail_tmo"), "2", str(tmp_path / "gone" / "subsysnqn"), NQN]
    done = subprocess.run(
        ["sh", "-c", faults.TIMEOUTS_WRITE, "sh", "0", *argv], capture_output=True, text=True, check=True
    )
    assert float(done.stdout.strip())
    assert (ours / "fast_io_fail_tmo").read_text() == "2"
    assert (reused / "fast_io_fail_tmo").read_text() == "off\n"


def session(tmp_path: Path) -> tuple[Path, list[str]]:
    """A session folder whose recovery_tmo refuses writes (a folder stands in for the file that says EBUSY)."""
    base = tmp_path / "session9"
    (base / "recovery_tmo").mkdir(parents=True)
    (base / "targetname").write_text("iqn.2026-11.io.fabricqa:lio\n")
    return base, [str(base / "recovery_tmo"), "120", str(base / "targetname"), "iqn.2026-11.io.fabricqa:lio"]


def test_a_refused_write_is_tried_again_until_it_takes(tmp_path: Path) -> None:
    # After a long outage an iSCSI session refuses its recovery_tmo until iscsid has logged in again: CI's
    # iser-lio long case left the value at 5 s once ("printf: I/O error") when the restore was tried only once.
    base, argv = session(tmp_path)
    script = faults.TIMEOUTS_WRITE
    writer = subprocess.Popen(["sh", "-c", script, "sh", "30", *argv], stdout=subprocess.PIPE, text=True)
    time.sleep(1.5)  # refused at least once; then the session is back
    (base / "recovery_tmo").rmdir()
    (base / "recovery_tmo").write_text("5\n")
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0 and float(out.strip())
    assert (base / "recovery_tmo").read_text() == "120"


def test_a_write_still_refused_when_the_wait_is_over_fails_the_script(tmp_path: Path) -> None:
    _, argv = session(tmp_path)
    done = subprocess.run(["sh", "-c", faults.TIMEOUTS_WRITE, "sh", "1", *argv], capture_output=True, text=True)
    assert done.returncode != 0 and done.stderr.strip()


def test_the_restore_waits_for_a_refused_session_and_the_set_does_not() -> None:
    host = TimeoutsHost(ISCSI_LISTING)
    iqn = next(iter(faults.parse_timeouts(ISCSI_LISTING).values()))["subsystem"]
    faults.PathTimeouts(host, "fqa-vlab", (iqn,), iscsi={"recovery_tmo_s": 2}).inject(undo := UndoStack())
    undo.unwind()
    waits = [argv[4] for argv in host.commands if argv[2:3] == (faults.TIMEOUTS_WRITE,)]
    assert waits == ["0", str(faults.RESTORE_WAIT_S)]


def test_off_is_written_back_as_minus_one() -> None:
    host = TimeoutsHost(NVME_LISTING)
    ctrl = next(k for k, v in faults.parse_timeouts(NVME_LISTING).items() if v["subsystem"] == NQN)
    host.sysfs[f"/sys/class/nvme/{ctrl}/fast_io_fail_tmo"] = "off"
    change = nvme_change(host)
    change.inject(UndoStack())
    restore = {f: v for f, v, _, _ in change.params["restore"]}
    assert restore[f"/sys/class/nvme/{ctrl}/fast_io_fail_tmo"] == "-1"


# -- the verdicts -------------------------------------------------------------------------------------------------


def figures(
    host: str, *, stall_s: float, io_errors: int = 0, verify_errors: int = 0, first_io: bool = True
) -> FailoverFigures:
    fault = Fault("every storage link down 2 s", 10_000, 12_000)
    return FailoverFigures(
        host,
        fault,
        Stall(10_000, 10_000 + round(stall_s * 1000)) if stall_s else None,
        stall_s + 0.1 if first_io else None,
        stall_s + 0.5 if first_io else None,
        900.0,
        io_errors,
        verify_errors,
    )


def result(name: str, *hosts: FailoverFigures) -> outage.OutageResult:
    return outage.OutageResult(name, 2.0 if name in (BRIEF, RESTART) else 16.0, {f.host: f for f in hosts})


LIMITS = Thresholds(max_stall_s=10)


def test_a_brief_outage_without_errors_and_a_short_stall_passes() -> None:
    done = result(BRIEF, figures("vnode1", stall_s=2.4), figures("vnode2", stall_s=2.6))
    assert outage.outage_problems(done, LIMITS, ["vnode1", "vnode2"]) == []


# The target restart takes every path away for the brief time and is judged as the brief outage.
@pytest.mark.parametrize("name", [BRIEF, RESTART])
def test_a_brief_outage_with_an_io_error_fails_naming_the_host_the_fault_and_the_count(name: str) -> None:
    done = result(name, figures("vnode1", stall_s=2.4), figures("vnode2", stall_s=2.6, io_errors=3))
    (problem,) = outage.outage_problems(done, LIMITS, ["vnode1", "vnode2"])
    assert problem.startswith("vnode2, fault every storage link down 2 s: ")
    assert "3 I/O errors is above the maximum of 0 I/O errors" in problem


def test_a_brief_outage_with_a_verify_error_fails_even_when_the_lab_allows_errors() -> None:
    done = result(BRIEF, figures("vnode1", stall_s=2.4, verify_errors=1))
    problems = outage.outage_problems(done, Thresholds(max_verify_errors=5, max_io_errors=5), ["vnode1"])
    assert len(problems) == 1 and "1 verify errors is above the maximum of 0" in problems[0]


def test_a_brief_outage_whose_stall_breaks_the_limit_fails() -> None:
    done = result(BRIEF, figures("vnode1", stall_s=12.5))
    (problem,) = outage.outage_problems(done, LIMITS, ["vnode1"])
    assert "the fault's stall 12.5 s is above the maximum of 10 s" in problem


@pytest.mark.parametrize("name", [BRIEF, RESTART])
@pytest.mark.parametrize("stall_s", [0.0, 0.9])
def test_a_brief_outage_whose_fault_stopped_no_io_fails_as_a_fault_that_did_not_happen(
    stall_s: float, name: str
) -> None:
    done = result(name, figures("vnode1", stall_s=2.4), figures("vnode2", stall_s=stall_s))
    (problem,) = outage.outage_problems(done, LIMITS, ["vnode1", "vnode2"])
    assert problem == (
        f"vnode2, fault every storage link down 2 s: I/O stopped for {stall_s:g} s only, though every path was down "
        "for 2 s: the fault did not take the paths away, so the case measured no outage"
    )


@pytest.mark.parametrize(("name", "back"), [(BRIEF, "the links came back"), (RESTART, "the target came back")])
def test_a_brief_outage_after_which_io_never_resumed_fails(name: str, back: str) -> None:
    done = result(name, figures("vnode1", stall_s=5.0, first_io=False))
    problems = outage.outage_problems(done, LIMITS, ["vnode1"])
    assert any(f"I/O did not resume after {back}" in p for p in problems)


def test_a_long_outage_with_errors_on_every_host_passes_whatever_the_stall() -> None:
    done = result(LONG, figures("vnode1", stall_s=18, io_errors=40), figures("vnode2", stall_s=19, io_errors=7))
    assert outage.outage_problems(done, Thresholds(max_stall_s=10, max_io_errors=0), ["vnode1", "vnode2"]) == []


def test_a_long_outage_in_which_a_host_saw_no_error_fails() -> None:
    done = result(LONG, figures("vnode1", stall_s=18, io_errors=40), figures("vnode2", stall_s=18))
    (problem,) = outage.outage_problems(done, LIMITS, ["vnode1", "vnode2"])
    assert problem.startswith("vnode2, fault every storage link down 2 s: no I/O error was seen")


def queued(*hosts: FailoverFigures) -> outage.OutageResult:
    done = result(LONG, *hosts)
    done.queued = True
    return done


def test_a_queued_long_outage_without_errors_that_resumed_passes_whatever_the_stall() -> None:
    # Queue-forever (issue 29, item 5): the I/O waits out the whole outage, so the stall is the outage's length;
    # the lab's stall, first-I/O and recovery limits are for faults the fabric should ride through.
    done = queued(figures("vnode1", stall_s=16.5), figures("vnode2", stall_s=17.2))
    limits = Thresholds(max_stall_s=10, max_first_io_s=10, max_recovery_s=12)
    assert outage.outage_problems(done, limits, ["vnode1", "vnode2"]) == []


def test_a_queued_long_outage_with_an_io_error_fails_naming_what_failed_it() -> None:
    done = queued(figures("vnode1", stall_s=16.5), figures("vnode2", stall_s=13.0, io_errors=12))
    (problem,) = outage.outage_problems(done, Thresholds(max_io_errors=100), ["vnode1", "vnode2"])
    assert problem.startswith(
        "vnode2, fault every storage link down 2 s: 12 I/O error(s) although the lab's hosts queue with no path left"
    )


def test_a_queued_long_outage_after_which_io_never_resumed_fails() -> None:
    done = queued(figures("vnode1", stall_s=16.5, first_io=False))
    problems = outage.outage_problems(done, LIMITS, ["vnode1"])
    assert any("I/O did not resume after the links came back" in p for p in problems), problems


def test_a_queued_long_outage_whose_fault_stopped_no_io_fails_as_a_fault_that_did_not_happen() -> None:
    (problem,) = outage.outage_problems(queued(figures("vnode1", stall_s=1.0)), LIMITS, ["vnode1"])
    assert "I/O stopped for 1 s only, though every path was down for 16 s" in problem


def test_a_queued_long_outage_with_a_verify_error_fails() -> None:
    (problem,) = outage.outage_problems(
        queued(figures("vnode1", stall_s=16.5, verify_errors=2)), Thresholds(max_verify_errors=5), ["vnode1"]
    )
    assert "2 verify errors is above the maximum of 0" in problem


def test_a_controller_that_would_fail_io_with_no_path_left_is_named_for_a_queued_long_outage() -> None:
    # As the virtual lab's vnode1 reads them (tests/data/failover/timeouts-nvme-tcp.txt's format): the connect's
    # fast_io_fail_tmo off and ctrl_loss_tmo 600 s; another fabric's controller is not this case's.
    read = faults.parse_timeouts(
        "nvme nvme0 nqn.2026-11.io.fabricqa:vlab-ram0 transport=tcp state=live fast_io_fail_tmo=off "
        "reconnect_delay=1 ctrl_loss_tmo=600 kato=60 io_timeout:nvme0c0n1=5000\n"
        "nvme nvme1 nqn.2026-11.io.fabricqa:vlab-ram0 transport=tcp state=live fast_io_fail_tmo=off "
        "reconnect_delay=1 ctrl_loss_tmo=off kato=60 io_timeout:nvme1c1n1=5000\n"
        "nvme nvme2 nqn.2026-11.io.other:theirs transport=tcp state=live fast_io_fail_tmo=8 "
        "reconnect_delay=1 ctrl_loss_tmo=60 kato=60 io_timeout:nvme2c2n1=5000\n"
    )
    assert outage.queue_gaps("vnode1", read, ["nqn.2026-11.io.fabricqa:vlab-ram0"]) == [
        "vnode1: nvme0 has ctrl_loss_tmo 600 s in force, so it fails I/O with no path left instead of queueing as "
        "the lab's failover.long_outage: queue says (set failover.nvme.ctrl_loss_tmo_s: -1)"
    ]
    read["nvme0"]["ctrl_loss_tmo"] = "off"
    assert outage.queue_gaps("vnode1", read, ["nqn.2026-11.io.fabricqa:vlab-ram0"]) == []


@pytest.mark.parametrize("key", ["fast_io_fail_tmo_s", "ctrl_loss_tmo_s"])
def test_a_queued_long_outage_with_a_timeout_that_fails_io_is_refused_in_the_lab_file(key: str) -> None:
    with pytest.raises(ValueError, match=rf"long_outage queue waits for a path for ever, but nvme.{key} is 8"):
        FailoverSettings(long_outage="queue", nvme={key: 8})
    assert FailoverSettings(long_outage="queue", nvme={key: -1}).nvme.model_dump()[key] == -1


def test_a_host_without_figures_fails_the_case() -> None:
    done = result(BRIEF, figures("vnode1", stall_s=2))
    assert outage.outage_problems(done, LIMITS, ["vnode1", "vnode2"]) == [
        "vnode2: no failover figures (fio's IOPS log could not be read)"
    ]


# -- figures from fio's real output -----------------------------------------------------------------------------


def test_fio_writes_and_verifies_its_own_region_and_logs_iops_on_the_unix_clock() -> None:
    region = outage.Region(128 << 20, 1 << 20, 4096)
    argv = outage.fio_argv("vnode2", "/dev/nvme1n1", region, 9)
    for option in (
        "--offset=134217728", "--size=1048576", "--verify=crc32c", "--continue_on_error=all",
        "--write_iops_log=vnode2", "--log_avg_msec=100", "--log_unix_epoch=1", "--runtime=9", "--time_based=1",
    ):  # fmt: skip
        assert option in argv


def test_fios_end_marker_is_never_seen_before_it_holds_the_time(tmp_path: Path) -> None:
    """The collector waits for "end" to exist and reads it at once. Run for real with a ``date`` that takes 0.5 s
    to answer: written straight into "end", the file existed empty for that half second (CI read it so once)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    slow_date = bin_dir / "date"
    slow_date.write_text(f'#!/bin/sh\nsleep 0.5\nexec {shutil.which("date")} "$@"\n')
    slow_date.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    started = subprocess.run(
        ["sh", "-c", outage.FIO_START, "sh", str(tmp_path), "sh", "-c", "exit 3"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    folder = Path(started.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 20
    while not (folder / "end").exists():
        assert time.monotonic() < deadline, "fio's wrapper never wrote its end marker"
        time.sleep(0.005)
    assert (folder / "end").read_text().strip().isdigit()
    collected = subprocess.run(
        ["sh", "-c", outage.FIO_COLLECT, "sh", str(folder), "5"], capture_output=True, text=True, check=True
    )
    _, files = outage.split_logs(collected.stdout)
    assert int(files["rc"]) == 3
    assert 0 < int(files["start"]) <= int(files["end"])
    assert not [name for name in files if name.startswith(".")]


@pytest.mark.parametrize(("device", "counted"), [("nvme1n1", "nvme1c3n1"), ("sdc", "sdc")])
def test_the_fault_waits_for_io_to_flow_and_gives_up_when_none_completes(
    tmp_path: Path, device: str, counted: str
) -> None:
    """The wait script, run for real on stat files laid out as /sys/class/block/DEV/stat (6.1's 17 fields): an NVMe
    multipath head's path (nvme1c3n1; the head's own counters stay zero on 6.1), or a device without paths itself."""
    for name in ("nvme1n1", "nvme1c3n1", "nvme1c3n11", "sdc"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stat").write_text(stat_line(100, 200))
    link = tmp_path / f"{device}-link"
    link.symlink_to(tmp_path / device)

    def wait(seconds: int) -> subprocess.Popen[str]:
        argv = ["sh", "-c", outage.IO_FLOWING, "sh", str(link), str(seconds), str(tmp_path)]
        return subprocess.Popen(argv, text=True)

    idle = wait(2)
    (tmp_path / "nvme1c3n11" / "stat").write_text(stat_line(100, 300))  # another namespace's path: not ours
    (tmp_path / "nvme1n1" / "stat").write_text(stat_line(100, 300))  # a head's own: not counted beside its paths
    assert idle.wait(timeout=60) == 1, "a device that completes nothing must not let the fault fire"
    flowing = wait(30)
    writes = 200
    while flowing.poll() is None and writes < 300:  # a write completes every 0.3 s, whenever the script looked first
        writes += 1
        (tmp_path / counted / "stat").write_text(stat_line(100, writes))
        time.sleep(0.3)
    assert flowing.wait(timeout=60) == 0


def test_failed_requests_are_not_io_flowing_again(tmp_path: Path) -> None:
    """CI of b3ad4ac, reproduced on the lab: LIO's target restart outlasted the iSCSI sessions' 5 s recovery
    timeout, the disks under vnode1's dm-multipath map failed their queued commands (their ``stat`` counting each as
    completed), the wait for I/O to flow again ended at once and fio was ended before multipathd reinstated the
    paths: "I/O did not resume". The wait script, run for real: a map's disks' failed commands and multipathd's TUR
    checks (``iodone_cnt`` up, no error), and an NVMe path's failed-over requests (its controller resetting), are no
    I/O flowing; the map completing a request, or a live NVMe path one, is."""
    block = tmp_path / "block"
    scsi = tmp_path / "devices" / "session21" / "target0:0:0" / "0:0:0:0"
    scsi.mkdir(parents=True)
    (scsi / "iodone_cnt").write_text("0x100\n")
    (scsi / "ioerr_cnt").write_text("0x2\n")
    (scsi / "state").write_text("running\n")
    (block / "dm-1" / "slaves" / "sda").mkdir(parents=True)
    (block / "dm-1" / "stat").write_text(stat_line(100, 200))
    (block / "sda").mkdir()
    (block / "sda" / "device").symlink_to(scsi)
    (block / "sda" / "stat").write_text(stat_line(100, 200))
    nvme = tmp_path / "nvme"
    (nvme / "nvme1c0n1" / "device").mkdir(parents=True)
    (nvme / "nvme1c0n1" / "stat").write_text(stat_line(100, 200))
    (nvme / "nvme1c0n1" / "device" / "state").write_text("live\n")
    (nvme / "nvme1n1").mkdir()

    def wait(device: Path, folder: Path, seconds: int) -> subprocess.Popen[str]:
        return subprocess.Popen(["sh", "-c", outage.IO_FLOWING, "sh", str(device), str(seconds), str(folder)])

    failing = wait(block / "dm-1", block, 3)
    time.sleep(0.5)  # the session's recovery timeout: the disk fails its commands, dm-multipath queues them
    (block / "sda" / "stat").write_text(stat_line(104, 203))
    (scsi / "iodone_cnt").write_text("0x107\n")
    (scsi / "ioerr_cnt").write_text("0x9\n")
    time.sleep(0.5)  # the session back: multipathd's checker sends a TUR, which succeeds
    (scsi / "iodone_cnt").write_text("0x108\n")
    assert failing.wait(timeout=60) == 1, "failed commands and path checks are not I/O flowing again"
    flowing = wait(block / "dm-1", block, 30)
    time.sleep(0.5)
    (block / "dm-1" / "stat").write_text(stat_line(101, 200))  # the path reinstated: the map completes a read
    assert flowing.wait(timeout=60) == 0

    failing = wait(nvme / "nvme1n1", nvme, 3)
    time.sleep(0.5)  # the controller resets: its requests end without error on the path and fail over to the head
    (nvme / "nvme1c0n1" / "device" / "state").write_text("resetting\n")
    (nvme / "nvme1c0n1" / "stat").write_text(stat_line(112, 200))
    time.sleep(0.5)
    (nvme / "nvme1c0n1" / "device" / "state").write_text("connecting\n")
    time.sleep(0.5)
    (nvme / "nvme1c0n1" / "device" / "state").write_text("live\n")  # back, but nothing completed on it yet
    assert failing.wait(timeout=60) == 1, "requests failed over as the controller reset are not I/O flowing again"
    flowing = wait(nvme / "nvme1n1", nvme, 30)
    time.sleep(0.5)
    (nvme / "nvme1c0n1" / "stat").write_text(stat_line(113, 200))
    assert flowing.wait(timeout=60) == 0


def stat_line(reads: int, writes: int) -> str:
    return f"     {reads} 0 800 10 {writes} 0 1608 20 0 30 30 0 0 0 0 0 0\n"


def recorded_run(name: str) -> outage.HostRun:
    folder = DATA / "failover" / name
    logs = {p.name: p.read_text() for p in folder.iterdir() if p.name not in ("fio.json", "fault")}
    start, end = (int(logs[k]) for k in ("start", "end"))
    return outage.HostRun("vnode1", (folder / "fio.json").read_text(), logs, start, end, int(logs["rc"]))


def recorded_fault(name: str) -> Fault:
    start, end = (DATA / "failover" / name / "fault").read_text().split()
    return Fault("every storage link down", int(start), int(end))


# -- the lab section ----------------------------------------------------------------------------------------------


def test_the_virtual_lab_runs_the_failover_suite_on_its_kernel_targets_over_every_protocol_by_dropping() -> None:
    model = lab()
    assert [t.name for t in model.targets if model.failover.runs_on(t)] == ["nvmet", "lio"]
    assert [p for p in model.protocols if model.failover.runs_on(model.targets[0], p)] == list(model.protocols)
    assert model.failover.outage_by == "drop", "Soft-RoCE does not survive a link down and up (labs/vlab.yaml)"
    assert model.failover.brief_down_s < model.failover.long_down_s


def test_a_failover_target_that_is_neither_a_target_nor_a_kind_is_refused_at_load() -> None:
    data = lab().model_dump(exclude_defaults=True)
    data["failover"] = {"targets": ["nvmett"]}
    with pytest.raises(
        ValueError, match=r"failover\.targets: 'nvmett' is neither a target of the lab nor a target kind"
    ):
        LabModel.model_validate(data)


def test_a_brief_outage_that_is_not_shorter_than_the_long_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"brief_down_s \(20\) must be shorter than long_down_s \(16\)"):
        FailoverSettings(brief_down_s=20, long_down_s=16)


def test_the_brief_outage_recorded_on_the_lab_resumed_without_an_error() -> None:
    """nvme-tcp on nvmet, vnode1: the links down 2 s (3.3 s from the down to the up command's return), fio's
    I/O stalled 2.9 s, then resumed; no error."""
    fault = recorded_fault("nvme-tcp-brief-vnode1")
    figures, problems, series = outage._figures(recorded_run("nvme-tcp-brief-vnode1"), fault)
    assert problems == [] and figures is not None and series is not None
    assert 2.0 <= figures.stall_s <= 4.0 and figures.first_io_s is not None
    assert (figures.io_errors, figures.verify_errors) == (0, 0)
    done = outage.OutageResult(BRIEF, 2.0, {"vnode1": figures})
    assert outage.outage_problems(done, Thresholds(max_stall_s=10), ["vnode1"]) == []
    (problem,) = outage.outage_problems(done, Thresholds(max_stall_s=1), ["vnode1"])  # an impossible limit fires
    assert "the fault's stall 2.9 s is above the maximum of 1 s" in problem
    # The report's chart: windows without a line drawn as zero IOPS (on the emulated guest fio left 0.2-0.7 s
    # without a completion now and then); the longest such stretch is the stall, and it overlaps the fault.
    points = outage.throughput_points(series, fault)
    start, end = points["fault_s"]
    at = list(zip(points["t_s"], points["iops"], strict=True))
    gaps = [(a[0], b[0]) for a, b in itertools.pairwise(at) if a[1] == 0 and b[1] == 0]
    first, last = max(gaps, key=lambda g: g[1] - g[0])
    assert 0 < start < end and first < end and last > start
    assert last - first == pytest.approx(figures.stall_s - 0.1, abs=0.15)  # less the half windows at each side
    assert points["t_s"] == sorted(points["t_s"]) and max(points["iops"]) > 0


def test_the_long_outage_recorded_on_the_lab_saw_io_errors_and_fio_ended_at_them() -> None:
    """The same, the links down 16 s: with fast_io_fail_tmo 2 s and the path disk's io_timeout 3 s the host failed
    I/O 5 s after the down (667 errors counted); fio 3.33 then ended its job with error 5 (EIO) although
    ``continue_on_error=all``, so no I/O after the fault is in the run (the suite's read and verify after it is the
    proof the fabric came back)."""
    run = recorded_run("nvme-tcp-long-vnode1")
    figures, problems, _ = outage._figures(run, recorded_fault("nvme-tcp-long-vnode1"))
    assert problems == [] and figures is not None
    assert figures.io_errors == 667 and figures.verify_errors == 0 and figures.first_io_s is None
    done = outage.OutageResult(LONG, 16.0, {"vnode1": figures})
    assert outage.outage_problems(done, Thresholds(max_stall_s=1, max_io_errors=0), ["vnode1"]) == []
    no_errors = outage.OutageResult(LONG, 16.0, {"vnode1": replace(figures, io_errors=0)})
    (problem,) = outage.outage_problems(no_errors, Thresholds(), ["vnode1"])
    assert "no I/O error was seen" in problem


def test_a_port_taken_away_with_io_moving_at_once_is_no_stall_though_fio_had_jitter_gaps_later() -> None:
    """nvme-tcp on nvmet, vnode1: its active port unlinked on vstor for 30 s while fio wrote and verified. The I/O
    moved at once (no interval without a completion at the fault); fio's log had a 100 ms window without a
    completion now and then (at 16.7, 29.5 and 31.5 s into the fault), as it had before it. The first of them was
    once taken for the fault's stall: I/O "moved" only 16.9 s in, and in CI (the gap 31.5 s in, after the 30 s)
    the case said the I/O had not moved until the path came back."""
    fault = recorded_fault("nvme-tcp-port-down-vnode1")
    figures, problems, series = outage._figures(recorded_run("nvme-tcp-port-down-vnode1"), fault)
    assert problems == [] and figures is not None and series is not None
    gaps_during = [s for s in stalls(series) if fault.start_ms + 3000 < s.start_ms < fault.end_ms]
    assert len(gaps_during) >= 2  # the jitter is in the recording
    assert fault_stall(series, fault) is None
    assert figures.first_io_s is not None and figures.first_io_s < 0.5
    done = outage.OutageResult(PORT, 30.0, {"vnode1": figures})
    assert outage.outage_problems(done, Thresholds(max_stall_s=15), ["vnode1"]) == []
    # Had the I/O waited, a stall from the fault on would be the fault's, however long the jitter before it.
    waited = Fault("held", fault.start_ms, fault.end_ms)
    held = HostSeries(
        series.host, series.interval_ms,
        tuple(i for i in series.intervals if not fault.start_ms < i.end_ms <= fault.start_ms + 12000),
        series.start_ms, series.end_ms,
    )  # fmt: skip
    stall = fault_stall(held, waited)
    assert stall is not None and 11.5 <= stall.seconds <= 12.1
    assert measure(held, waited).first_io_s == pytest.approx(12.1, abs=0.15)


# -- every path of a host -----------------------------------------------------------------------------------------


def test_every_storage_port_of_a_host_gets_its_own_outage() -> None:
    links = outage._link_faults(lab(), TimeoutsHost(NVME_LISTING, "vnode1"), "fqa-vlab")
    assert [(type(link).__name__, link.interface) for link in links] == [("LinkDrop", "eth1"), ("LinkDrop", "eth2")]


class _Link:
    def __init__(self, when: float | None) -> None:
        self.when = when
        self.restored = False

    def restore(self) -> float:
        self.restored = True
        if self.when is None:
            raise faults.FaultError("vnode1", "cannot restore 'eth1'", "by hand")
        return self.when


def test_every_path_is_restored_even_when_one_fails_and_the_outage_ends_with_the_first_back() -> None:
    assert outage._restore_all([_Link(12.5), _Link(12.0)]) == 12.0  # type: ignore[list-item]
    failing, other = _Link(None), _Link(13.0)
    with pytest.raises(faults.FaultError):
        outage._restore_all([failing, other])  # type: ignore[list-item]
    assert failing.restored and other.restored


# -- one path down (fault a) --------------------------------------------------------------------------------------


def test_the_active_path_is_the_one_that_completes_io_read_for_real_on_stat_files(tmp_path: Path) -> None:
    """ACTIVE_PATH run for real on a /sys/class/block layout: the head nvme1n1 and its paths nvme1c0n1 (over eth1)
    and nvme1c1n1 (over eth2); only the second completes I/O during the sample."""
    for path, traddr in (("nvme1c0n1", "10.10.10.19"), ("nvme1c1n1", "10.10.20.19")):
        (tmp_path / path / "device").mkdir(parents=True)
        (tmp_path / path / "stat").write_text(stat_line(100, 200))
        (tmp_path / path / "device" / "address").write_text(f"traddr={traddr},trsvcid=4420,src_addr=x\n")
    (tmp_path / "nvme1n1").mkdir()
    argv = ["sh", "-c", outage.ACTIVE_PATH, "sh", str(tmp_path / "nvme1n1"), "2", str(tmp_path)]
    sampling = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    (tmp_path / "nvme1c1n1" / "stat").write_text(stat_line(100, 260))
    out, _ = sampling.communicate(timeout=60)
    assert outage.parse_active_path(out) == ("nvme1c1n1", "10.10.20.19")
    assert outage.parse_active_path("nvme1c0n1\t0\ttraddr=10.10.10.19 \n") is None  # nothing moved: no answer


def test_the_active_path_of_a_dm_multipath_map_is_the_disk_whose_session_completes_io(tmp_path: Path) -> None:
    """ACTIVE_PATH run for real on a sysfs layout as vnode1 showed it (2026-12-02): the map dm-0 holds sda (session
    4, to 10.10.10.19) and sdb (session 5, to 10.10.20.19); only sda completes I/O during the sample."""
    block, connections = tmp_path / "block", tmp_path / "iscsi_connection"
    for disk, session, address in (("sda", 4, "10.10.10.19"), ("sdb", 5, "10.10.20.19")):
        (block / "dm-0" / "slaves" / disk).mkdir(parents=True)
        scsi = tmp_path / "devices" / "platform" / "host0" / f"session{session}" / "target0:0:0" / "0:0:0:0"
        scsi.mkdir(parents=True)
        (block / disk).mkdir()
        (block / disk / "device").symlink_to(scsi)
        (block / disk / "stat").write_text(stat_line(100, 200))
        (connections / f"connection{session}:0").mkdir(parents=True)
        (connections / f"connection{session}:0" / "persistent_address").write_text(f"{address}\n")
        (connections / f"connection{session}:0" / "persistent_port").write_text("3260\n")
    (tmp_path / "mapper").mkdir()
    (tmp_path / "mapper" / "36001405").symlink_to(block / "dm-0")
    argv = ["sh", "-c", outage.ACTIVE_PATH, "sh", str(tmp_path / "mapper" / "36001405"), "2", str(block)]
    sampling = subprocess.Popen([*argv, str(connections)], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    (block / "sda" / "stat").write_text(stat_line(130, 200))
    out, _ = sampling.communicate(timeout=60)
    assert outage.parse_active_path(out) == ("sda", "10.10.10.19")


def test_a_path_counts_only_what_it_completed_without_error(tmp_path: Path) -> None:
    """The full run of 2e6fa7a failed a one-path iSER case on 3 "completions" of the downed path: the commands its
    iSCSI session failed at its recovery timeout, which the kernel counts in the disk's ``stat``. ACTIVE_PATH run for
    real: a SCSI disk counts ``iodone_cnt - ioerr_cnt`` (sysfs's hex), so failed commands are not I/O it completed;
    an NVMe path whose controller is not ``live`` at the sample's end counts nothing (its failed-over requests end
    without error on it)."""
    block, connections = tmp_path / "block", tmp_path / "iscsi_connection"
    for disk, session, address in (("sda", 4, "10.10.10.19"), ("sdb", 5, "10.10.20.19")):
        (block / "dm-0" / "slaves" / disk).mkdir(parents=True)
        scsi = tmp_path / "devices" / f"session{session}" / "target0:0:0" / f"0:0:0:{session}"
        scsi.mkdir(parents=True)
        (scsi / "iodone_cnt").write_text("0x100\n")
        (scsi / "ioerr_cnt").write_text("0x2\n")
        (scsi / "state").write_text("running\n")
        (block / disk).mkdir()
        (block / disk / "device").symlink_to(scsi)
        (block / disk / "stat").write_text(stat_line(100, 200))
        (connections / f"connection{session}:0").mkdir(parents=True)
        (connections / f"connection{session}:0" / "persistent_address").write_text(f"{address}\n")
        (connections / f"connection{session}:0" / "persistent_port").write_text("3260\n")
    argv = ["sh", "-c", outage.ACTIVE_PATH, "sh", str(block / "dm-0"), "2", str(block), str(connections)]
    sampling = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    (block / "sda" / "stat").write_text(stat_line(103, 200))  # three failed at the recovery timeout
    (tmp_path / "devices" / "session4" / "target0:0:0" / "0:0:0:4" / "iodone_cnt").write_text("0x103\n")
    (tmp_path / "devices" / "session4" / "target0:0:0" / "0:0:0:4" / "ioerr_cnt").write_text("0x5\n")
    (block / "sdb" / "stat").write_text(stat_line(150, 200))
    (tmp_path / "devices" / "session5" / "target0:0:0" / "0:0:0:5" / "iodone_cnt").write_text("0x132\n")
    out, _ = sampling.communicate(timeout=60)
    assert outage.parse_path_counts(out) == {"10.10.10.19": 0, "10.10.20.19": 50}

    nvme = tmp_path / "nvme"
    for path, traddr in (("nvme1c0n1", "10.10.10.19"), ("nvme1c1n1", "10.10.20.19")):
        (nvme / path / "device").mkdir(parents=True)
        (nvme / path / "stat").write_text(stat_line(100, 200))
        (nvme / path / "device" / "address").write_text(f"traddr={traddr},trsvcid=4420\n")
        (nvme / path / "device" / "state").write_text("live\n")
    (nvme / "nvme1n1").mkdir()
    argv = ["sh", "-c", outage.ACTIVE_PATH, "sh", str(nvme / "nvme1n1"), "2", str(nvme)]
    sampling = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    (nvme / "nvme1c0n1" / "stat").write_text(stat_line(112, 200))  # failed over as its controller reset
    (nvme / "nvme1c0n1" / "device" / "state").write_text("connecting\n")
    (nvme / "nvme1c1n1" / "stat").write_text(stat_line(140, 200))
    out, _ = sampling.communicate(timeout=60)
    assert outage.parse_path_counts(out) == {"10.10.10.19": 0, "10.10.20.19": 40}


FAKE_CAT = r"""#!/bin/sh
# A SCSI disk's ioerr_cnt and iodone_cnt as the kernel would answer them while a burst of failed commands lands: the
# counters read before the burst until $BURST_AFTER counter reads were made, after it from then on; else the real cat.
case $1 in
  *_cnt)
    n=$(/bin/cat "$SEQ/reads"); echo $((n + 1)) > "$SEQ/reads"
    if [ "$n" -lt "$BURST_AFTER" ]; then w=before; else w=after; fi
    /bin/cat "$SEQ/$w-$(basename "$1")" ;;
  *) exec /bin/cat "$@" ;;
esac
"""


def test_failed_commands_between_the_two_counters_reads_are_no_completions(tmp_path: Path) -> None:
    """The race behind the full run of 24f59b3's failed failback test: a lost session's queued commands fail at
    once (iodone_cnt and ioerr_cnt both +3) while a sample reads the two counters. Read one after the other
    (iodone_cnt, then ioerr_cnt) with the burst between, the sample's start was 3 short and the sample counted the
    burst as 3 completions; read as a pair that no error came between (ioerr_cnt the same before and after
    iodone_cnt), the burst is none. The counters answer as the kernel would around a burst after the first read."""
    block, connections, seq = tmp_path / "block", tmp_path / "iscsi_connection", tmp_path / "seq"
    (block / "dm-0" / "slaves" / "sda").mkdir(parents=True)
    scsi = tmp_path / "devices" / "session4" / "target0:0:0" / "0:0:0:4"
    scsi.mkdir(parents=True)
    for name in ("iodone_cnt", "ioerr_cnt"):
        (scsi / name).write_text("0x0\n")
    (block / "sda").mkdir()
    (block / "sda" / "device").symlink_to(scsi)
    (block / "sda" / "stat").write_text(stat_line(100, 200))
    (connections / "connection4:0").mkdir(parents=True)
    (connections / "connection4:0" / "persistent_address").write_text("10.10.10.19\n")
    (connections / "connection4:0" / "persistent_port").write_text("3260\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cat").write_text(FAKE_CAT)
    (bin_dir / "cat").chmod(0o755)
    seq.mkdir()
    (seq / "reads").write_text("0\n")
    for when, done, failed in (("before", "0x100", "0x2"), ("after", "0x103", "0x5")):
        (seq / f"{when}-iodone_cnt").write_text(done + "\n")
        (seq / f"{when}-ioerr_cnt").write_text(failed + "\n")
    argv = ["sh", "-c", outage.ACTIVE_PATH, "sh", str(block / "dm-0"), "0", str(block), str(connections)]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SEQ": str(seq), "BURST_AFTER": "1"}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    assert outage.parse_path_counts(out) == {"10.10.10.19": 0}, out
    assert int((seq / "reads").read_text()) >= 6  # the pair read again once the burst came between


def test_the_one_path_outage_takes_down_the_port_of_the_active_path() -> None:
    class Host(ScriptedHost):
        def answer(self, argv: tuple[str, ...]) -> Answer:
            return "nvme1c0n1\t3\ttraddr=10.10.10.19,trsvcid=4420 \nnvme1c1n1\t57\ttraddr=10.10.20.19,trsvcid=4420 \n"

    assert outage.active_interface(lab(), Host("vnode2"), "/dev/nvme1n1") == "eth2"
    idle = ScriptedHost("vnode2", lambda argv: "nvme1c0n1\t0\ttraddr=10.10.10.19 \n")
    with pytest.raises(faults.FaultError, match=r"^vnode2: no path of /dev/nvme1n1 completed I/O in 1 s"):
        outage.active_interface(lab(), idle, "/dev/nvme1n1")


def one_path(host: str, *, first_io_s: float | None, io_errors: int = 0) -> FailoverFigures:
    fault = Fault("the active path's link (eth1) down 15 s", 10_000, 25_000)
    stall = Stall(10_000, 10_000 + round((first_io_s or 15) * 1000))
    return FailoverFigures(host, fault, stall, first_io_s, first_io_s, 900.0, io_errors, 0)


@pytest.mark.parametrize("kind", [ONE_PATH, ANA])
def test_a_one_path_outage_passes_when_io_moved_to_another_path_while_it_was_down(kind: str) -> None:
    moved = outage.OutageResult(kind, 15.0, {"vnode1": one_path("vnode1", first_io_s=6.2)})
    assert outage.outage_problems(moved, LIMITS, ["vnode1"]) == []


def faulted(kind: str, late_ios: int | None) -> outage.OutageResult:
    result = outage.OutageResult(kind, 15.0, {"vnode1": one_path("vnode1", first_io_s=6.2)})
    result.faulted, result.late_ios = {"vnode1": "10.10.10.19"}, {"vnode1": late_ios}
    return result


def test_a_count_that_reads_below_zero_is_no_completion() -> None:
    """vnode2's first sample of the ALUA fault in the full run of 24f59b3: the disk over 10.10.10.19 read
    ``iodone_cnt - ioerr_cnt`` one lower at the end (a refused command ended between the two counters' reads)."""
    out = "sda\t-1\ttraddr=10.10.10.19,trsvcid=3260\nsdc\t382\ttraddr=10.10.20.19,trsvcid=3260\n"
    assert outage.parse_path_counts(out) == {"10.10.10.19": 0, "10.10.20.19": 382}


# ALUA's too: its refused commands are errors (ioerr_cnt), so the count leaves them out (full run of 24f59b3).
@pytest.mark.parametrize("kind", [ONE_PATH, ANA, PORT, ALUA])
def test_a_fault_whose_path_still_completes_io_at_its_end_fails_the_case(kind: str) -> None:
    """A fault that changed nothing looks like a perfect failover (no stall, no error, I/O all along): the path it
    should have taken away completing I/O near the fault's end is what gives it away; I/O that could not be
    counted fails too, and a quiet path passes."""
    assert outage.outage_problems(faulted(kind, 0), LIMITS, ["vnode1"]) == []
    problems = outage.outage_problems(faulted(kind, 37), LIMITS, ["vnode1"])
    assert problems == [
        "vnode1, fault the active path's link (eth1) down 15 s: the path to 10.10.10.19 still completed 37 I/Os in "
        "the fault's last 2 s: the fault did not take the path away, so the case measured no failover"
    ]
    unread = outage.outage_problems(faulted(kind, None), LIMITS, ["vnode1"])
    assert unread == [
        "vnode1, fault the active path's link (eth1) down 15 s: the I/O of the path to 10.10.10.19 could not be "
        "counted during the fault"
    ]


@pytest.mark.parametrize("kind", [ANA, PORT])
def test_a_target_fault_on_a_port_that_carried_none_of_a_hosts_io_fails_for_that_host(kind: str) -> None:
    """A target-side fault's port is the one carrying the first host's I/O; a host whose I/O ran on another path
    loses nothing to it, and its quiet late count proves nothing (issue 29)."""
    result = faulted(kind, 0)
    result.figures["vnode2"] = replace(one_path("vnode1", first_io_s=6.2), host="vnode2")
    result.faulted["vnode2"], result.late_ios["vnode2"] = "10.10.10.19", 0
    result.before_ios, result.before_faulted = {"vnode1": 96, "vnode2": 101}, {"vnode1": 96, "vnode2": 0}
    assert outage.outage_problems(result, LIMITS, ["vnode1", "vnode2"]) == [
        "vnode2, fault the active path's link (eth1) down 15 s: the path to 10.10.10.19 completed none of vnode2's "
        "I/O in a 2 s sample before the fault (the other paths 101): the fault took nothing from vnode2, so the "
        "case measured no failover there"
    ]
    result.before_faulted["vnode2"] = 48  # both hosts' I/O on that port: judged as before
    assert outage.outage_problems(result, LIMITS, ["vnode1", "vnode2"]) == []


def test_the_late_count_is_the_faulted_addresses_paths_from_a_recorded_sample() -> None:
    """ACTIVE_PATH's lines as vnode1 printed them for its dm-multipath map during the ALUA fault (the disk over
    10.10.10.19 unavailable: tests/data/paths/lio-alua-unavailable.vnode1.txt), and an NVMe head's."""
    out = "sda\t0\ttraddr=10.10.10.19,trsvcid=3260\nsdc\t500\ttraddr=10.10.20.19,trsvcid=3260\n"
    assert outage.parse_path_counts(out) == {"10.10.10.19": 0, "10.10.20.19": 500}
    nvme = "nvme1c0n1\t3\ttraddr=10.10.10.19,trsvcid=4420 \nnvme1c1n1\t57\ttraddr=10.10.20.19,trsvcid=4420 \n"
    assert outage.parse_path_counts(nvme) == {"10.10.10.19": 3, "10.10.20.19": 57}
    assert outage.parse_path_counts("") == {}


def test_the_ana_outage_needs_the_fault_on_the_target() -> None:
    with pytest.raises(ValueError, match="needs target_fault"):
        outage.path_outage(
            lab(), [], {}, {}, name_prefix="fqa-vlab", subsystems=(), family="nvme", outage=ANA, undo=UndoStack()
        )


def test_the_target_restart_needs_the_fault_that_restarts_the_target() -> None:
    with pytest.raises(ValueError, match="needs target_restart"):
        outage.path_outage(
            lab(), [], {}, {}, name_prefix="fqa-vlab", subsystems=(), family="nvme", outage=RESTART, undo=UndoStack()
        )


@pytest.mark.parametrize(
    ("first_io_s", "io_errors", "said"),
    [
        (None, 0, "I/O did not move to a remaining path while the path was down for 15 s: none completed at all"),
        (15.4, 0, "none completed until the path came back (15.4 s)"),
        (6.2, 3, "3 I/O error"),
    ],
)
@pytest.mark.parametrize("kind", [ONE_PATH, ANA])
def test_a_one_path_outage_fails_when_io_waited_for_the_path_or_saw_errors(
    first_io_s: float | None, io_errors: int, said: str, kind: str
) -> None:
    waited = outage.OutageResult(kind, 15.0, {"vnode1": one_path("vnode1", first_io_s=first_io_s, io_errors=io_errors)})
    problems = outage.outage_problems(waited, Thresholds(), ["vnode1"])
    assert any(said in p and p.startswith("vnode1") for p in problems), problems


def test_the_long_outage_ends_once_fio_has_ended_on_every_host() -> None:
    asked: dict[str, int] = {"vnode1": 0, "vnode2": 0}

    def ends_after(name: str, polls: int) -> ScriptedHost:
        def script(argv: tuple[str, ...]) -> Answer:
            assert argv[2] == outage.FIO_ENDED and argv[4] == f"/tmp/{name}"
            asked[name] += 1
            return "" if asked[name] >= polls else (1, "", "")

        return ScriptedHost(name, script)

    hosts = [ends_after("vnode1", 1), ends_after("vnode2", 2)]
    folders = {"vnode1": "/tmp/vnode1", "vnode2": "/tmp/vnode2"}
    held = outage._hold_until_fio_ends(hosts, folders, 30)
    assert held >= 1.5 and asked == {"vnode1": 2, "vnode2": 2}  # the second poll found both ended, and it stopped
    never = [ScriptedHost("vnode1", lambda argv: (1, "", ""))]
    assert outage._hold_until_fio_ends(never, folders, 1.5) >= 1.5  # at most long_down_s, then the paths come back


def samples(*counts: tuple[int, int], pause_s: float = 0.0, seconds: float = outage.LATE_SAMPLE_S) -> ScriptedHost:
    """vnode1 answering each ACTIVE_PATH sample of ``seconds`` with the next (faulted path's, other path's) counts,
    the last one again once they run out (lines as an NVMe head's, recorded on the lab)."""
    given = iter(counts)
    last: list[tuple[int, int]] = []

    def script(argv: tuple[str, ...]) -> Answer:
        assert argv[2] == outage.ACTIVE_PATH and argv[5] == str(seconds)
        time.sleep(pause_s)
        faulted, other = next(given, last[0] if last else (0, 0))
        last[:] = [(faulted, other)]
        return f"nvme1c0n1\t{faulted}\ttraddr=10.10.10.19,trsvcid=4420 \nnvme1c1n1\t{other}\ttraddr=10.10.20.19 \n"

    return ScriptedHost("vnode1", script)


DEVICES, FAULTED = {"vnode1": "/dev/nvme1n1"}, {"vnode1": "10.10.10.19"}


def test_a_fault_ends_once_the_io_is_back_to_its_rate_on_the_remaining_path_twice_in_a_row() -> None:
    """Before the fault every path completed 200 in a sample; the stall (nothing anywhere), a first sample short of
    60% on the other path, then two at 125 and 190: the hold ends there, not after its 60 s."""
    host = samples((0, 0), (0, 100), (0, 185), (0, 12), (0, 125), (0, 190))
    late, held, trail = outage._hold_counting([host], DEVICES, FAULTED, 60, {"vnode1": 200})
    assert late == {"vnode1": 0} and held < 30
    assert len(host.commands) == 6  # the dip to 12 started the count again
    assert trail == {"vnode1": [(0, 0), (0, 100), (0, 185), (0, 12), (0, 125), (0, 190)]}


@pytest.mark.parametrize(
    ("counts", "before"),
    [
        pytest.param((5, 195), {"vnode1": 200}, id="the faulted path still completes I/O"),
        pytest.param((0, 110), {"vnode1": 200}, id="the other path below 60% of the rate"),
        pytest.param((0, 195), None, id="no rate before the fault (the ALUA fault)"),
        pytest.param((0, 195), {"vnode1": None}, id="the rate before the fault unread"),
    ],
)
def test_a_fault_that_does_not_settle_is_held_the_whole_time_and_reports_its_last_sample(
    counts: tuple[int, int], before: dict[str, Any] | None
) -> None:
    host = samples(counts, pause_s=0.1)
    began = time.monotonic()
    late, held, _ = outage._hold_counting([host], DEVICES, FAULTED, 5, before)
    assert late == {"vnode1": counts[0]} and held >= 5 and time.monotonic() - began >= 5
    assert len(host.commands) >= 5  # sampled from the start, the last one within LATE_SAMPLE_S + LATE_MARGIN_S


def test_every_host_must_have_settled_before_the_fault_ends() -> None:
    moved, stuck = samples((0, 200)), samples((0, 0), pause_s=0.1)
    stuck.name = "vnode2"
    late, held, _ = outage._hold_counting(
        [moved, stuck], {**DEVICES, "vnode2": "/dev/nvme1n1"}, {**FAULTED, "vnode2": "10.10.10.19"}, 5,
        {"vnode1": 200, "vnode2": 200},
    )  # fmt: skip
    assert late == {"vnode1": 0, "vnode2": 0} and held >= 5


class KernelLossHost(TimeoutsHost):
    """TimeoutsHost whose ctrl_loss_tmo behaves as Linux 6.1's (drivers/nvme/host/core.c, read in the upstream
    source): the kernel keeps max_reconnects; ``ctrl_loss_tmo`` shows max_reconnects x reconnect_delay ("off" for
    -1), a write of it sets max_reconnects = DIV_ROUND_UP(value, reconnect_delay) (-1 for a negative value), and a
    write of reconnect_delay leaves max_reconnects as it was."""

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[:3] != ("sh", "-c", faults.TIMEOUTS_WRITE):
            return super().answer(argv)
        self.events.append(self.records())
        words = list(argv[5:])
        while len(words) >= 4:  # in order, as the script writes them
            path, value, guard, wanted = words[:4]
            del words[:4]
            if path not in self.sysfs or self.sysfs.get(guard) != wanted:
                continue
            base = path.rsplit("/", 1)[0]
            if path.endswith("/ctrl_loss_tmo"):
                delay = int(self.sysfs[f"{base}/reconnect_delay"])
                self.sysfs[f"{base}/max_reconnects"] = "-1" if int(value) < 0 else str(-(-int(value) // delay))
            else:
                self.sysfs[path] = {"-1": "off"}.get(value, value)
            self._show()
        return CLOCK + "\n"

    def _show(self) -> None:
        for key in [k for k in self.sysfs if k.endswith("/max_reconnects")]:
            base = key.rsplit("/", 1)[0]
            count = int(self.sysfs[key])
            shown = "off" if count < 0 else str(count * int(self.sysfs[f"{base}/reconnect_delay"]))
            self.sysfs[f"{base}/ctrl_loss_tmo"] = shown

    def loss(self) -> dict[str, str]:
        self._show()
        return {k: v for k, v in self.sysfs.items() if k.endswith("/ctrl_loss_tmo")}


def _kernel_host() -> KernelLossHost:
    host = KernelLossHost(NVME_LISTING)
    for key in [k for k in host.sysfs if k.endswith("/ctrl_loss_tmo")]:
        base = key.rsplit("/", 1)[0]
        shown, delay = host.sysfs[key], int(host.sysfs[f"{base}/reconnect_delay"])
        host.sysfs[f"{base}/max_reconnects"] = "-1" if shown == "off" else str(int(shown) // delay)
    return host


def test_a_new_reconnect_delay_keeps_the_controllers_loss_time_the_kernel_would_have_cut() -> None:
    host = _kernel_host()
    ours = [k for k in host.loss() if host.sysfs[k.rsplit("/", 1)[0] + "/subsysnqn"] == NQN]
    before = host.loss()
    assert {before[k] for k in ours} == {"600"}  # the recorded connect's default, 60 reconnects 10 s apart
    undo = UndoStack()
    nvme_change(host).inject(undo)  # reconnect_delay 1, no ctrl_loss_tmo given
    # Without the rewrite the kernel would show 60 (60 reconnects, 1 s apart): the controller's loss time is kept.
    assert {host.loss()[k] for k in ours} == {"600"}
    assert {host.sysfs[k.replace("ctrl_loss_tmo", "reconnect_delay")] for k in ours} == {"1"}
    assert undo.unwind() == []
    assert host.loss() == before and {host.sysfs[k.replace("ctrl_loss_tmo", "max_reconnects")] for k in ours} == {"60"}


@pytest.mark.parametrize(("loss", "shown"), [(30, "30"), (-1, "off")])
def test_the_labs_ctrl_loss_tmo_is_written_after_reconnect_delay_and_set_back(loss: int, shown: str) -> None:
    host = _kernel_host()
    before = host.loss()
    undo = UndoStack()
    faults.PathTimeouts(host, "fqa-vlab", (NQN,), nvme={"reconnect_delay_s": 1, "ctrl_loss_tmo_s": loss}).inject(undo)
    ours = [k for k in host.loss() if host.sysfs[k.rsplit("/", 1)[0] + "/subsysnqn"] == NQN]
    assert {host.loss()[k] for k in ours} == {shown}
    assert undo.unwind() == [] and host.loss() == before


# -- the lab's own fault I/O, reach and settled share (issue 29, item 6) ----------------------------------------


def test_fault_io_is_capped_at_the_labs_rate_or_not_at_all() -> None:
    region = outage.Region(128 << 20, 1 << 20, 4096)
    assert "--rate_iops=50" in outage.fio_argv("vnode2", "/dev/nvme1n1", region, 9)
    assert "--rate_iops=400" in outage.fio_argv("vnode2", "/dev/nvme1n1", region, 9, rate_iops=400)
    uncapped = outage.fio_argv("vnode2", "/dev/nvme1n1", region, 9, rate_iops=None)
    assert not [a for a in uncapped if a.startswith("--rate_iops")]
    assert FailoverSettings.model_validate({"rate_iops": None}).rate_iops is None
    with pytest.raises(ValueError, match="settled_share"):
        FailoverSettings.model_validate({"settled_share": 0})


def test_a_gap_that_begins_beyond_the_labs_reach_is_not_the_faults_stall() -> None:
    """The recorded port-down run with I/O removed from 2 s to 12 s after the fault: within the default 3 s reach
    that gap is the fault's stall; a lab that sets 1 s (its commands answer at once) reads no stall of the fault."""
    fault = recorded_fault("nvme-tcp-port-down-vnode1")
    _, _, series = outage._figures(recorded_run("nvme-tcp-port-down-vnode1"), fault)
    assert series is not None
    late = HostSeries(
        series.host, series.interval_ms,
        tuple(i for i in series.intervals if not fault.start_ms + 2000 < i.end_ms <= fault.start_ms + 12000),
        series.start_ms, series.end_ms,
    )  # fmt: skip
    stall = fault_stall(late, fault)
    assert stall is not None and 9.5 <= stall.seconds <= 10.2
    assert fault_stall(late, fault, reach_ms=1000) is None
    assert measure(late, fault, reach_ms=1000).stall_s == 0


@pytest.mark.parametrize(("share", "settles"), [(0.6, True), (0.8, False)])
def test_the_labs_settled_share_decides_when_the_moved_io_is_back_to_its_rate(share: float, settles: bool) -> None:
    host = samples((0, 130), pause_s=0.1)
    _, held, _ = outage._hold_counting([host], DEVICES, FAULTED, 5, {"vnode1": 200}, share)
    assert (held < 5) is settles


# -- failback (issue 29, item 3) ------------------------------------------------------------------------------------


def failback_samples(*faulted: int) -> ScriptedHost:
    """vnode1 answering each 1 s failback sample with the next count of the faulted path (10.10.10.19), none once
    they run out, the other path at 50."""
    return samples(*((n, 50) for n in faulted), (0, 50), seconds=outage.FAILBACK_SAMPLE_S)


def test_a_path_that_shared_the_io_is_watched_until_it_carries_io_again() -> None:
    host = failback_samples(0, 1, 7)  # 1: the path checker's command, not I/O
    took, seen = outage.watch_failback(host, "/dev/nvme1n1", "10.10.10.19", due=True, wait_s=30)
    assert took is not None and len(host.commands) == 3
    assert seen.startswith("the path at 10.10.10.19 carried I/O again ") and "(7 I/Os in a 1 s sample)" in seen


def test_a_path_that_shared_the_io_and_never_carries_it_again_is_named_within_the_wait() -> None:
    host = failback_samples()
    took, seen = outage.watch_failback(host, "/dev/nvme1n1", "10.10.10.19", due=True, wait_s=0.01)
    assert took is None and len(host.commands) >= 1
    assert seen == (
        "the path at 10.10.10.19, which shared the I/O with another path before the fault, carried none within "
        "0.01 s of the fault being undone (failover.failback_wait_s)"
    )


def test_a_path_that_carried_the_io_alone_is_sampled_once_and_not_waited_for() -> None:
    host = failback_samples(0, 9)
    took, seen = outage.watch_failback(host, "/dev/nvme1n1", "10.10.10.19", due=False, wait_s=30)
    assert took is None and len(host.commands) == 1
    assert seen.endswith("the multipath policy kept the I/O on the path it moved to")


# -- controller reset (issue 29, item 4) ------------------------------------------------------------------------------


def test_the_controller_of_an_nvme_path_device_is_named_and_a_scsi_disk_is_refused() -> None:
    assert faults.controller_of("nvme1c2n1") == "nvme2"
    with pytest.raises(ValueError, match="sdb is no NVMe multipath path device"):
        faults.controller_of("sdb")


def test_a_controller_reset_is_timed_on_the_host_and_a_failed_one_is_an_error_naming_the_controller() -> None:
    done = ScriptedHost("vnode1", lambda argv: "started 100.25\n\n101.5\n")
    assert faults.reset_controller(done, "nvme2") == (100.25, 101.5)
    assert done.commands[0][4:] == ("nvme", "reset", "/dev/nvme2")
    failed = ScriptedHost(
        "vnode1",
        lambda argv: (1, "started 100.25\n\n101.5\n", "Resetting nvme2 failed: Network dropped connection on reset\n"),
    )
    with pytest.raises(faults.FaultError, match=r"nvme reset /dev/nvme2 failed \(exit 1: Resetting nvme2 failed"):
        faults.reset_controller(failed, "nvme2")


@pytest.mark.parametrize(
    ("fault", "after"), [(RESET, "the controller reset"), (RELOGIN, "the session's logout and login")]
)
def test_a_controller_reset_or_session_relogin_allows_no_error_and_fails_when_io_did_not_go_on(
    fault: str, after: str
) -> None:
    passed = outage.OutageResult(fault, 0.4, {"vnode1": one_path("vnode1", first_io_s=0.6)})
    assert outage.outage_problems(passed, Thresholds(max_io_errors=5), ["vnode1"]) == []
    errors = outage.OutageResult(fault, 0.4, {"vnode1": one_path("vnode1", first_io_s=0.6, io_errors=2)})
    (problem,) = outage.outage_problems(errors, Thresholds(max_io_errors=5), ["vnode1"])
    assert "2 I/O errors is above the maximum of 0 I/O errors" in problem
    stuck = outage.OutageResult(fault, 0.4, {"vnode1": one_path("vnode1", first_io_s=None)})
    assert outage.outage_problems(stuck, Thresholds(), ["vnode1"]) == [
        f"vnode1, fault the active path's link (eth1) down 15 s: I/O did not go on after {after} (no I/O completed "
        "after it)"
    ]


def test_a_session_relogin_that_left_the_same_session_or_none_fails_as_a_fault_that_changed_nothing() -> None:
    fault = "vnode1 iSCSI session to 10.10.10.19 logged out and in"
    assert outage.unrenewed({"vnode1": (fault, 3)}) == []
    assert outage.unrenewed({"vnode1": (fault, None), "vnode2": (fault, 4)}) == [
        f"vnode1: {fault}, but the session after it is the one before or none: the fault changed nothing, so the "
        "case measured nothing"
    ]
    (unread,) = outage.unrenewed({"vnode2": (fault, OSError("ssh: connection reset"))})
    assert unread.startswith("vnode2: ") and "the session after it is unknown" in unread


def test_the_fault_records_lock_is_taken_on_a_host_where_nothing_made_its_folder_yet(tmp_path: Path) -> None:
    # A fresh virtual lab (2026-12-06): /run/fabricqa did not exist on vnode1, `mkdir` of the lock failed for 20 s
    # and the first failover case read the lock as held by another session.
    from pytest_fabricqa.transport.local import LocalHost

    records = tmp_path / "run" / "fabricqa" / "fqa-vlab-faults.json"
    with faults.records_locked(LocalHost("vnode1"), str(records)):
        assert (records.parent / "faults.lock").is_dir()
    assert not (records.parent / "faults.lock").exists()


# -- path flapping (issue 29, item 4) ---------------------------------------------------------------------------


def flap_cycle(
    number: int, *, first_io_s: float | None = 5.5, late: int = 0, failback: bool = True
) -> outage.OutageResult:
    """One cycle of three on vnode1 as the flapping case leaves it: the active path's link down 8 s."""
    fault = Fault(f"cycle {number} of 3: the active path's link down", 10_000 * number, 10_000 * number + 8_000)
    stall = Stall(fault.start_ms, fault.start_ms + round((first_io_s or 8) * 1000))
    figures = FailoverFigures("vnode1", fault, stall, first_io_s, first_io_s, 900.0, 0, 0)
    figures = replace(
        figures, failback_s=1.6 if failback else None, failback="seen" if failback else "none", failback_due=True
    )
    cycle = outage.OutageResult(ONE_PATH, 8.0, {"vnode1": figures})
    cycle.faulted, cycle.late_ios = {"vnode1": "10.10.10.19"}, {"vnode1": late}
    cycle.before_ios, cycle.before_faulted = {"vnode1": 100}, {"vnode1": 50}
    return cycle


def flapped(*cycles: outage.OutageResult, io_errors: int = 0) -> outage.OutageResult:
    result = outage.OutageResult(FLAPPING, 8.0, cycles=list(cycles))
    worst = max((c.figures["vnode1"] for c in cycles), key=lambda f: f.stall_s)
    result.figures["vnode1"] = replace(worst, io_errors=io_errors)
    return result


def test_three_clean_failovers_with_their_failbacks_pass() -> None:
    assert flapping.flapping_problems(flapped(*(flap_cycle(n) for n in (1, 2, 3))), LIMITS, ["vnode1"]) == []


def test_a_flapping_cycle_that_did_not_move_the_io_or_fail_back_fails_naming_the_cycle() -> None:
    result = flapped(flap_cycle(1), flap_cycle(2, first_io_s=None, late=12), flap_cycle(3, failback=False))
    problems = flapping.flapping_problems(result, LIMITS, ["vnode1"])
    assert [p.split(":")[0] for p in problems] == [
        "vnode1, fault cycle 2 of 3",  # no I/O while the path was down
        "vnode1, fault cycle 2 of 3",  # the path still completed I/O at the fault's end
        "vnode1, fault cycle 3 of 3",  # no failback
    ], problems
    assert "I/O did not move to a remaining path" in problems[0] and "still completed 12 I/Os" in problems[1]
    assert "no failback" in problems[2]


def test_errors_over_the_flapping_run_fail_it_once() -> None:
    problems = flapping.flapping_problems(flapped(flap_cycle(1), flap_cycle(2), io_errors=4), LIMITS, ["vnode1"])
    assert problems == [
        "vnode1: 4 I/O error(s) and 0 verify error(s) over the 2 failovers: losing one path while others remain must "
        "cost none"
    ]
