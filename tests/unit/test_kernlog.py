"""A failed case's kernel messages: the storage lines of a recorded ``dmesg --time-format iso`` (tests/data/kernlog,
see its README) since the case began, and what a host that cannot be read says."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest
from fakes import ScriptedHost

from pytest_fabricqa.fabric import kernlog

DMESG = (Path(__file__).parent.parent / "data" / "kernlog" / "vnode1-dmesg-iso.txt").read_text()


def unix(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_only_storage_lines_since_the_case_began_are_kept_newest_last() -> None:
    lines = kernlog.storage_lines(DMESG, unix("2026-12-02T23:32:01+00:00"), most=1000)
    assert lines[0] == "23:32:01.317 nvme nvme0: starting error recovery"
    assert lines[-1] == "23:32:14.728 nvme nvme2: failed to connect socket: -111"
    assert not [line for line in lines if "Removing ctrl" in line]  # 23:30:10: before the case (and its slack)


def test_the_boot_keeps_its_storage_lines_and_drops_the_rest() -> None:
    lines = kernlog.storage_lines(DMESG, unix("2026-12-02T23:25:00+00:00"), most=1000)
    assert "23:25:17.289 iscsi: registered transport (tcp)" in lines
    assert not [line for line in lines if "renamed from" in line or "speed is unknown" in line]


def test_the_newest_lines_are_kept_and_a_few_seconds_before_the_start_count() -> None:
    lines = kernlog.storage_lines(DMESG, unix("2026-12-02T23:32:04+00:00"), most=3)
    assert [line[:12] for line in lines] == ["23:32:14.630", "23:32:14.630", "23:32:14.728"]
    early = kernlog.storage_lines(DMESG, unix("2026-12-02T23:32:05+00:00") + kernlog.SLACK_S, most=1000)
    assert early[0].startswith("23:32:05.")


def test_each_host_is_a_section_and_one_that_cannot_be_read_says_why() -> None:
    read = ScriptedHost("vnode1", lambda argv: DMESG)
    denied = "dmesg: read kernel buffer failed: Operation not permitted"
    refused = ScriptedHost("vnode2", lambda argv: (1, "", denied))
    quiet = ScriptedHost("vstor", lambda argv: "")
    found = kernlog.sections({"vnode1": read, "vnode2": refused, "vstor": quiet}, unix("2026-12-02T23:32:14+00:00"))
    assert [title for title, _ in found] == [
        "kernel log vnode1 (storage lines since the case began)",
        "kernel log vnode2",
    ]
    assert found[0][1].endswith("23:32:14.728 nvme nvme2: failed to connect socket: -111")
    assert found[1][1] == (
        "not read: dmesg could not be read (dmesg: read kernel buffer failed: Operation not permitted); "
        "it needs root or kernel.dmesg_restrict=0"
    )


def test_the_case_start_is_moved_onto_the_hosts_clock_read_with_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    # The host's clock reads 23:32:14 while the runner's reads 100 s later: the case that began on the runner at
    # 23:33:54 began at 23:32:14 on the host, and that is what its lines are stamped with.
    host_now = unix("2026-12-02T23:32:14+00:00")
    monkeypatch.setattr(kernlog.time, "time", lambda: host_now + 100)
    host = ScriptedHost("vnode1", lambda argv: f"{host_now:.9f}\n{DMESG}")
    lines = kernlog.read_storage_lines(host, host_now + 100, most=None)
    assert lines and all(line >= "23:32:13" for line in lines)
    assert lines[-1] == "23:32:14.728 nvme nvme2: failed to connect socket: -111"


def test_a_dmesg_that_failed_behind_the_pipe_is_said_so() -> None:
    host = ScriptedHost(
        "vnode1", lambda argv: (0, "1764718334.1\ndmesg failed: exit 1\n", "dmesg: read kernel buffer failed")
    )
    with pytest.raises(RuntimeError, match=r"dmesg could not be read \(dmesg: read kernel buffer failed\)"):
        kernlog.read_storage_lines(host, 0.0)


def test_trouble_is_an_error_recovery_or_a_reconnect_not_a_connect_or_a_disconnect() -> None:
    lines = kernlog.storage_lines(DMESG, unix("2026-12-02T23:25:00+00:00"), most=None)
    found = kernlog.Account({"vnode1": lines}).trouble()
    bad = found["vnode1"]
    assert "23:32:01.317 nvme nvme0: starting error recovery" in bad
    assert any("failed to connect socket: -111" in line for line in bad)
    assert any("Reconnecting in" in line for line in bad) and any("failfast expired" in line for line in bad)
    fine = [line for line in lines if line not in bad]
    assert any("new ctrl: NQN" in line for line in fine) and any("Removing ctrl" in line for line in fine)
    assert any("Successfully reconnected" in line for line in bad)  # a reconnect is trouble, even a good one
    assert any("registered transport (tcp)" in line for line in fine)


def test_a_host_whose_trouble_the_lab_allows_or_that_logged_none_is_not_a_problem() -> None:
    found = kernlog.Account(
        {"vnode1": ["23:32:01.317 nvme nvme0: starting error recovery"], "vnode2": ["23:30:10.1 nvme nvme1: new ctrl"]},
        {"vstor": "dmesg could not be read"},
    )
    (problem,) = kernlog.trouble_problems(found)
    assert problem == (
        "vnode1: the kernel logged storage trouble during the case, which injected no fault: "
        "'23:32:01.317 nvme nvme0: starting error recovery'; a line the lab knows to be harmless is allowed by a "
        "pattern in watch.kernel_allow"
    )
    assert kernlog.trouble_problems(found, [re.compile("error recovery")]) == []
    assert found.to_dict()["vstor"] == ["not read: dmesg could not be read"]


def test_lines_before_the_end_of_a_faults_aftermath_are_shown_but_not_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    host_now = unix("2026-12-02T23:32:15+00:00")
    monkeypatch.setattr(kernlog.time, "time", lambda: host_now)
    host = ScriptedHost("vnode1", lambda argv: f"{host_now:.6f}\n{DMESG}")
    began = unix("2026-12-02T23:32:00+00:00")
    found = kernlog.account({"vnode1": host}, began, judged_from_s=unix("2026-12-02T23:32:14+00:00"))
    lines = found.lines["vnode1"]
    assert lines[0].startswith("23:31:59.") or lines[0].startswith("23:32:0")
    judged = found.trouble()["vnode1"]
    assert judged and all(line >= "23:32:14" for line in judged)  # 23:32:01's error recovery: the aftermath
    assert len(judged) < len([line for line in lines if kernlog.TROUBLE.search(line)])
    assert found.to_dict()["vnode1"][-1] == lines[-1]  # shown all the same
    assert (
        kernlog.account({"vnode1": host}, began).trouble()["vnode1"][0]
        == "23:32:01.317 nvme nvme0: starting error recovery"
    )


def test_an_alua_disks_own_transition_timeout_note_is_no_trouble() -> None:
    note = "23:40:01.100 sd 2:0:0:0: alua: transition timeout set to 60 seconds"
    assert kernlog.TROUBLE.search(note) and kernlog.Account({"vnode1": [note]}).trouble() == {}


UNBIND = (Path(__file__).parent.parent / "data" / "kernlog" / "vnode1-iscsi-unbind-warning.lines").read_text()


def test_the_workqueue_lints_warning_at_an_iscsi_logout_is_no_trouble_nor_is_its_call_trace() -> None:
    """CI of 4627b63 failed an SCST teardown case on this warning (the kernel's once-per-boot workqueue lint, as
    scsi_transport_iscsi unbinds a session): a clean logout's bookkeeping, no I/O touched."""
    lines = UNBIND.splitlines()
    assert sum(1 for line in lines if kernlog.TROUBLE.search(line)) == 2  # the warning and its "Call Trace:"
    assert kernlog.Account({"vnode1": lines}).trouble() == {}


def test_another_warning_and_its_trace_stay_trouble_even_after_an_excused_one() -> None:
    lines = UNBIND.splitlines()
    other = [
        "16:46:10.001 WARNING: CPU: 1 PID: 77 at drivers/nvme/host/core.c:512 nvme_change_ctrl_state+0x1/0x2",
        "16:46:10.004 Call Trace:",
    ]
    assert kernlog.Account({"vnode1": lines + other}).trouble() == {"vnode1": other}
    hung = ["16:46:20.000 INFO: task kworker/0:1:9 blocked for more than 120 seconds.", "16:46:20.010 Call Trace:"]
    assert kernlog.Account({"vnode1": lines + hung}).trouble() == {"vnode1": hung}


def test_lines_an_earlier_case_read_are_never_the_next_cases_however_near_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The full run of 52bec91: the fence case's expected conflict, logged ~1 s before the next case began, was in
    # that case's window (the slack and the clock's offset) and failed it. The fence case's own account read it;
    # the next one starts after the newest line that account saw. A line after it is judged as before.
    text = (Path(__file__).parent.parent / "data" / "kernlog" / "vnode1-fence-conflict-iso.txt").read_text()
    host_now = unix("2026-12-05T21:50:58+00:00")
    monkeypatch.setattr(kernlog.time, "time", lambda: host_now)
    fence_ends = ScriptedHost("vnode1", lambda argv: f"{host_now:.6f}\n" + "\n".join(text.splitlines()[:4]) + "\n")
    fence = kernlog.account({"vnode1": fence_ends}, unix("2026-12-05T21:50:40+00:00"))
    assert fence.read_to == {"vnode1": unix("2026-12-05T21:50:57.638034+00:00")}
    host_now = unix("2026-12-05T21:51:04+00:00")
    later = ScriptedHost("vnode1", lambda argv: f"{host_now:.6f}\n{text}")
    began = unix("2026-12-05T21:50:58.5+00:00")
    without = kernlog.account({"vnode1": later}, began)
    assert "critical nexus error" in " ".join(without.trouble()["vnode1"])  # what failed the case
    found = kernlog.account({"vnode1": later}, began, after=fence.read_to)
    assert found.trouble()["vnode1"] == [
        "21:51:03.114 sd 0:0:0:1: [sda] tag#7 FAILED Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=30s"
    ]


def test_a_disconnects_failed_buffered_read_is_expected_and_nothing_else_is() -> None:
    """The reconnect case expects :data:`kernlog.DISCONNECT_READS` (vnode1's lines of the full run of 46e990c);
    a lost write, a direct I/O's error or a path failing stays trouble."""
    expected = [re.compile(kernlog.DISCONNECT_READS, re.IGNORECASE)]
    seen = [
        "16:09:09.1 block nvme0n1: no available path - failing I/O",
        "16:09:09.1 Buffer I/O error on dev nvme0n1, logical block 1024, async page read",
    ]
    assert kernlog.trouble_problems(kernlog.Account({"vnode1": seen}, {}), expected) == []
    for other in (
        "16:09:09.1 Buffer I/O error on dev nvme0n1, logical block 1024, lost async page write",
        "16:09:09.1 I/O error, dev nvme0n1, sector 2048 op 0x1:(WRITE) flags 0x8800 phys_seg 1 prio class 2",
        "16:09:09.1 device-mapper: multipath: 253:0: Failing path 8:16.",
    ):
        (problem,) = kernlog.trouble_problems(kernlog.Account({"vnode1": [*seen, other]}, {}), expected)
        assert other in problem, problem


RDMA = (Path(__file__).parent.parent / "data" / "kernlog" / "vstor-rdma-statistic.txt").read_text()


def test_rdma_counters_are_read_per_link_and_only_retransmits_and_errors_that_rose_are_said() -> None:
    before = kernlog.rdma_counters(RDMA)
    assert before["rxe0/1"]["sent_pkts"] == 415052 and before["rxe1/1"]["rdma_sends"] == 0
    assert kernlog.rdma_rises(before, None) == []  # nothing but traffic since boot
    later = RDMA.replace("sent_pkts 415052", "sent_pkts 500000", 1).replace(
        "duplicate_request 0 out_of_seq_request 0", "duplicate_request 12 out_of_seq_request 3", 1
    )
    now = kernlog.rdma_counters(later.replace("completer_retry_err 0", "completer_retry_err 2", 1))
    assert kernlog.rdma_rises(now, before) == [
        "RDMA rxe0/1 counters that rose since the previous case's reading: "
        "duplicate_request +12, out_of_seq_request +3, completer_retry_err +2"
    ]
    assert kernlog.rdma_rises(now, now) == []
    assert kernlog.rdma_rises(now, None)[0].startswith("RDMA rxe0/1 counters that rose since the host booted: ")
    assert kernlog.rdma_counters("rdma: command not found\nlink\n") == {}


def test_an_account_shows_the_rdma_rises_after_the_lines_and_never_judges_them() -> None:
    since = unix("2026-12-02T23:32:14+00:00")
    worse = RDMA.replace("retry_exceeded_err 0", "retry_exceeded_err 1", 1)
    host = ScriptedHost("vstor", lambda argv: f"{DMESG}\n{kernlog.RDMA_MARK}\n{worse}")
    found = kernlog.account({"vstor": host}, since, counters_before={"vstor": kernlog.rdma_counters(RDMA)})
    assert found.counters["vstor"]["rxe0/1"]["retry_exceeded_err"] == 1
    shown = found.to_dict()["vstor"]
    assert shown[-1] == "RDMA rxe0/1 counters that rose since the previous case's reading: retry_exceeded_err +1"
    assert shown[-2] == "23:32:14.728 nvme nvme2: failed to connect socket: -111"
    assert all("RDMA" not in line for lines in found.trouble().values() for line in lines)
    text = kernlog.sections_of(found, ["vstor"])[0][1]
    assert text.endswith("retry_exceeded_err +1")
    # A host with no new lines but a rise still says it.
    quiet = kernlog.account(
        {"vstor": ScriptedHost("vstor", lambda argv: f"\n{kernlog.RDMA_MARK}\n{worse}")},
        since,
        counters_before={"vstor": kernlog.rdma_counters(RDMA)},
    )
    assert quiet.to_dict() == {"vstor": [shown[-1]]}


def test_a_long_story_shows_its_beginning_and_its_end() -> None:
    lines = [f"18:04:{i:02d}.000 nvme nvme0: I/O {i} QID 1 timeout" for i in range(50)]
    found = kernlog.Account(lines={"vnode2": ["18:03:40.000 clocksource: Long readout interval", *lines]})
    shown = found.shown("vnode2")
    assert len(shown) == kernlog.MOST_LINES + 1
    assert shown[0] == "18:03:40.000 clocksource: Long readout interval"
    assert shown[kernlog.FIRST_LINES] == "... 21 lines not shown ..."
    assert shown[-1] == lines[-1] and shown[-20] == lines[-20]
    short = kernlog.Account(lines={"vnode2": lines[:30]})
    assert short.shown("vnode2") == lines[:30]


def test_a_starved_guests_clocksource_note_is_shown_and_is_no_trouble() -> None:
    # The shape of the line Linux 6.1's clocksource watchdog (kernel/time/clocksource.c) logs when reading the clocks
    # took too long, the guest's vCPU not running meanwhile: cs_nsec as vnode1 logged it in the gate of b410f9f
    # before an nvme-rdma I/O was lost (scripts/vlab-ci.sh); the rest of that line was not kept, wd_nsec is made up.
    note = "clocksource: Long readout interval, skipping watchdog check: cs_nsec: 2828862444 wd_nsec: 2828862170"
    dmesg = f"2026-12-02T23:32:20,000001+00:00 {note}\n"
    lines = kernlog.storage_lines(dmesg, unix("2026-12-02T23:32:14+00:00"))
    assert lines == [f"23:32:20.000 {note}"]
    assert kernlog.Account(lines={"vnode1": lines}).trouble() == {}
