"""A failed case's kernel messages: the storage lines of a recorded ``dmesg --time-format iso`` (tests/data/kernlog,
see its README) since the case began, and what a host that cannot be read says."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

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
