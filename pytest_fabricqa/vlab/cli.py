"""``fabricqa-vlab``: build the guest image, bring a lab up or down, show its state.

    fabricqa-vlab build [--force]
    fabricqa-vlab up --lab vlab                  # the lab file's guests; `pytest --lab=vlab` then attaches
    fabricqa-vlab down --lab vlab
    fabricqa-vlab up --spec-json FILE --run-dir DIR
    fabricqa-vlab status --run-dir DIR
    fabricqa-vlab down --run-dir DIR

A lab brought ``up`` here has no owner process: it stays until ``down``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pytest_fabricqa.vlab import procs
from pytest_fabricqa.vlab.image import ImageBuildError, build_image, cache_root
from pytest_fabricqa.vlab.machine import VirtualLab, VlabError, guest_network_report, socket_dir
from pytest_fabricqa.vlab.spec import SpecError, load_spec_json, spec_from_dict
from pytest_fabricqa.vlab.vendor import VendorBuildError, VendorSourceError

DEFAULT_RUN_DIR = Path(".fabricqa") / "vlab"
CONSOLE_TAIL_LINES = 40


def _log(line: str) -> None:
    print(line, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fabricqa-vlab", description="Build, boot and stop the fabricqa virtual lab.")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build or refresh the cached guest image")
    build.add_argument("--force", action="store_true", help="rebuild even when the cache is current")
    build.add_argument("--cache-dir", type=Path, default=None, help=f"default: {cache_root()}")
    up = sub.add_parser("up", help="boot a lab and wait until every guest answers SSH")
    up.add_argument("--spec-json", type=Path, help="the lab spec (VlabSpec.to_dict() as JSON)")
    for command in (up, sub.add_parser("down", help="stop the lab"), sub.add_parser("status", help="lab state")):
        command.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help=f"default: {DEFAULT_RUN_DIR}")
        command.add_argument(
            "--lab", help="a lab file name (labs/NAME.yaml) or path: its guests, in the run dir pytest uses"
        )
    return parser


def _status(state: procs.LabState, run_dir: Path) -> int:
    """Each process running or gone; for each guest, its storage NICs as QEMU sees them (connected to the switch
    or not) when its QEMU runs, else the end of its console (a panic is printed there). 1 when anything is gone."""
    healthy = True
    for proc in state.processes:
        alive = procs.alive(proc)
        healthy &= alive
        print(f"{proc.role:24} pid {proc.pid:<8} {'running' if alive else 'gone'}")
    sock_dir = Path(state.sock_dir) if state.sock_dir else socket_dir(run_dir)
    for proc in state.processes:
        if not proc.role.startswith("qemu "):
            continue
        guest = proc.role.split(" ", 1)[1]
        if procs.alive(proc):
            line = guest_network_report(sock_dir, guest)
            healthy &= "DISCONNECTED" not in line and "does not answer" not in line
            print(line)
            continue
        console = run_dir / guest / "console.log"
        tail = console.read_text(errors="replace").splitlines()[-CONSOLE_TAIL_LINES:] if console.exists() else []
        print(f"{guest}: QEMU is gone; the last {len(tail)} lines of {console}:")
        for text in tail:
            print(f"  {text}")
    return 0 if healthy else 1


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failure, 2 usage)."""
    args = _parser().parse_args(argv)
    lab_spec = None
    if getattr(args, "lab", None):
        from pytest_fabricqa.lab.load import load_lab, resolve_lab_path
        from pytest_fabricqa.lab.model import LabError
        from pytest_fabricqa.vlab.lab import run_dir_for, spec_from_lab

        try:
            model = load_lab(resolve_lab_path(args.lab, Path.cwd()))
        except LabError as exc:
            print(f"fabricqa-vlab: {exc}", file=sys.stderr)
            return 2
        if model.vlab is None:
            print(f"fabricqa-vlab: lab {model.name!r} has no vlab section: it is not a virtual lab", file=sys.stderr)
            return 2
        lab_spec = spec_from_lab(model)
        args.run_dir = run_dir_for(Path(".fabricqa"), model)
    try:
        if args.command == "build":
            t0 = time.monotonic()
            image = build_image(args.cache_dir, log=_log, force=args.force)
            print(f"{image.root}  kernel {image.kernel_version}  ({time.monotonic() - t0:.1f} s)")
            return 0
        if args.command == "up":
            if lab_spec is None and args.spec_json is None:
                print("fabricqa-vlab: up needs --lab NAME or --spec-json FILE", file=sys.stderr)
                return 2
            spec = lab_spec or load_spec_json(args.spec_json)
            t0 = time.monotonic()
            lab = VirtualLab.start(spec, args.run_dir, log=_log)
            print(f"lab {spec.name} up in {time.monotonic() - t0:.1f} s; run dir {lab.run_dir}")
            for guest in spec.guests:
                print(f"  {guest.name}: ssh {' '.join(lab.ssh_argv(guest.name))}")
            return 0
        state = procs.read_state(args.run_dir.resolve())
        if state is None:
            print(f"no lab in {args.run_dir}")
            return 0 if args.command == "down" else 1
        spec = spec_from_dict(state.spec, str(args.run_dir / procs.STATE_FILE))
        if args.command == "status":
            return _status(state, args.run_dir.resolve())
        VirtualLab(spec, args.run_dir.resolve(), None, state).stop()
        print(f"lab {spec.name} stopped")
        return 0
    except (SpecError, ImageBuildError, VendorSourceError, VendorBuildError, VlabError) as exc:
        print(f"fabricqa-vlab: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
