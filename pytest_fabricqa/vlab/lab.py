"""The bridge from a lab file to the virtual lab: a VlabSpec from ``labs/vlab.yaml``, booted or attached once.

Under pytest-xdist every worker calls :func:`ensure_running`; a file lock makes the first one boot the lab and
the others attach to it. The lab is owned by the controlling process (the xdist controller, or pytest itself
without xdist): a watchdog stops it if that process dies, and :func:`stop_if_owner` stops it at the end.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.lab.load import load_lab, resolve_lab_path
from pytest_fabricqa.lab.model import LabError, LabModel
from pytest_fabricqa.vlab.machine import VirtualLab, busy_ports, lab_forwarding
from pytest_fabricqa.vlab.procs import alive, read_state
from pytest_fabricqa.vlab.spec import Drive, Guest, SpecError, VlabSpec


class LabInTheWay(UserError):
    """Another virtual lab runs in the run dir this lab file needs; the message says what differs and how to
    stop it or attach to it."""


def spec_from_lab(lab: LabModel) -> VlabSpec:
    """The guests of a virtual lab, from the lab file's ``hosts`` and ``vlab`` sections."""
    assert lab.vlab is not None
    guests = []
    for name, settings in lab.vlab.items():
        host = lab.hosts[name]
        if not host.storage or host.port is None:
            raise SpecError(f"vlab guest {name!r} needs hosts.{name}.port and hosts.{name}.storage")
        wanted = [f"eth{k}" for k in range(1, len(host.storage) + 1)]
        if [p.interface for p in host.storage] != wanted:
            raise SpecError(
                f"hosts.{name}.storage: a virtual-lab guest's storage interfaces are {', '.join(wanted)} in that "
                f"order, one per segment; the lab names {', '.join(p.interface for p in host.storage)}"
            )
        first, *more = (f"{p.address}/{lab.network.prefix_len}" for p in host.storage)
        guests.append(
            Guest(
                name=name,
                ssh_port=host.port,
                storage_address=first,
                storage_paths=tuple(more),
                storage_mtu=lab.network.mtu,
                memory_mb=settings.memory_mb,
                cpus=settings.cpus,
                hugepages_mb=settings.hugepages_mb,
                drives=tuple(Drive(id=d, size_mb=drv.size_mb, kind=drv.kind) for d, drv in settings.drives.items()),
            )
        )
    return VlabSpec(name=lab.name, guests=tuple(guests))


def run_dir_for(state_dir: Path, lab: LabModel) -> Path:
    """Where a lab's pidfiles, keys, disks and console logs live."""
    return state_dir / "vlab" / lab.name


@contextmanager
def _lock(run_dir: Path) -> Iterator[None]:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{run_dir.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_running(
    lab: LabModel, state_dir: Path, owner_pid: int, log: Callable[[str], None] = print
) -> tuple[VirtualLab, bool]:
    """Attach to the lab if it is up with this spec, else boot it owned by ``owner_pid``; (lab, booted here)."""
    spec = spec_from_lab(lab)
    run_dir = run_dir_for(state_dir, lab)
    with _lock(run_dir):
        running = VirtualLab.attach(spec, run_dir)
        if running is not None:
            return running, False
        check_attachable(lab, state_dir)
        started = VirtualLab.start(spec, run_dir, owner_pid=owner_pid, log=log)
        # One line per boot: says who booted the lab (and proves xdist workers share one boot).
        with open(run_dir / "boots.log", "a") as handle:
            handle.write(f"booted by pid {os.getpid()} for owner {owner_pid}\n")
        return started, True


def check_attachable(lab: LabModel, state_dir: Path) -> None:
    """Raise :class:`LabInTheWay` when another lab runs in the run dir ``lab`` needs; pass when there is none,
    when it is this very lab (its guests in any order), or when it is what a dead run left (boot cleans it up).
    """
    run_dir = run_dir_for(state_dir, lab)
    spec = spec_from_lab(lab)
    found = VirtualLab.in_the_way(spec, run_dir)
    if found is None:
        if not _recorded_up(run_dir):  # a lab up in the run dir is this very lab: the ports are its own
            _check_ports(lab, spec, run_dir)
        return
    why, whole = found
    attach = ", or run with the lab file it was started from to attach to it" if whole else ""
    raise LabInTheWay(
        f"lab {lab.name!r}: the virtual lab running in {run_dir} is not this lab file's: {why}; "
        f"stop it with `{down_command(lab.name, run_dir)}` and run again{attach}"
    )


def _recorded_up(run_dir: Path) -> bool:
    """True when ``run_dir`` records a lab whose processes (and owner, if any) are all alive."""
    state = read_state(run_dir)
    if state is None or (state.owner is not None and not alive(state.owner)):
        return False
    return all(alive(p) for p in state.processes)


def _check_ports(lab: LabModel, spec: VlabSpec, run_dir: Path) -> None:
    """Raise :class:`LabInTheWay` when the SSH ports ``lab`` needs are held by anything but its own run dir's lab:
    most often the same lab started from another folder (its run state lives under that folder's .fabricqa/)."""
    busy = busy_ports(spec)
    if not busy:
        return
    other = lab_forwarding(busy[0])
    if other is not None and other.resolve() == Path(run_dir).resolve():
        return  # this very lab, up (or what a dead run left, which its boot cleans up)
    if other is None:
        raise LabInTheWay(
            f"lab {lab.name!r}: SSH port(s) {busy} on 127.0.0.1 are in use by a process other than a virtual lab; "
            "stop it, or give the lab file's hosts other ports"
        )
    raise LabInTheWay(
        f"lab {lab.name!r}: SSH port(s) {busy} on 127.0.0.1 are in use by the virtual lab running in {other}, "
        f"not in {run_dir} where this run keeps its lab; attach to it with -o fabricqa_state_dir="
        f"{other.parent.parent}, or stop it with `fabricqa-vlab down --run-dir {other}` and run again"
    )


def down_command(name: str, run_dir: Path) -> str:
    """The command that stops the lab in ``run_dir``: ``--lab NAME`` where that finds this run dir from the
    current folder (the CLI's default), else ``--run-dir``."""
    cwd = Path.cwd()
    try:
        model = load_lab(resolve_lab_path(name, cwd))
    except LabError:
        model = None
    if model is not None and run_dir_for(cwd / ".fabricqa", model).resolve() == Path(run_dir).resolve():
        return f"fabricqa-vlab down --lab {name}"
    return f"fabricqa-vlab down --run-dir {run_dir}"


def stop_if_owner(lab: LabModel, state_dir: Path, owner_pid: int) -> bool:
    """Stop the lab if ``owner_pid`` booted it (not a lab started by ``fabricqa-vlab up``); True if stopped."""
    run_dir = run_dir_for(state_dir, lab)
    state = read_state(run_dir)
    if state is None or state.owner is None or state.owner.pid != owner_pid:
        return False
    running = VirtualLab.attach(spec_from_lab(lab), run_dir)
    if running is not None:
        running.stop()
        return True
    return False
