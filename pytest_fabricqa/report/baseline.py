"""The regression gate: compare a run's figures with the last accepted run of the same lab and protocol.

A baseline is a results file (see :mod:`pytest_fabricqa.report.model`). Baselines live as numbered files in
a folder, like pytest-benchmark's storage; the newest one for the lab and protocol is used. A corrupt or
foreign file in that folder is reported and skipped, never fatal: one bad file must not stop qualification.
A baseline taken with another fio, kernel or firmware is still compared, but the difference is flagged.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.core.metrics import DEFAULT_TOLERANCES, HIGHER_IS_BETTER, METRICS
from pytest_fabricqa.report.formatting import format_figure
from pytest_fabricqa.report.model import (
    Case,
    Environment,
    RegressionInfo,
    ResultsFileError,
    Run,
    dumps,
    load_json,
    write_temp,
)

_NUMBERED = re.compile(r"^(\d{4,})_")


class BaselineWarning(UserWarning):
    """A baseline file was skipped (corrupt, foreign schema) or does not match the run it is used for."""


class ToleranceError(UserError, ValueError):
    """A tolerance override on the command line is malformed; the message says which item and why."""


# --- finding a baseline ---------------------------------------------------------------------------------


def scan_baselines(folder: Path | str) -> tuple[list[tuple[Path, Run]], list[str]]:
    """Load every ``*.json`` in ``folder``: the runs that loaded, and one message per file that did not."""
    loaded: list[tuple[Path, Run]] = []
    problems: list[str] = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            loaded.append((path, load_json(path)))
        except ResultsFileError as exc:
            problems.append(f"skipped baseline file {exc}")
    return loaded, problems


def find_baseline(path: Path | str, lab: str, protocol: str, target: str | None = None) -> Run | None:
    """The baseline run for ``lab`` and ``protocol``, or None when there is none.

    ``path`` is a results file, used as given (a warning if its lab differs; None if it lacks the
    protocol), or a folder, where the newest run (by start time) of the same lab holding the protocol is
    used. Skipped files are reported with :class:`BaselineWarning`. A results file named explicitly that
    cannot be read raises :class:`~pytest_fabricqa.report.model.ResultsFileError`: that is a user mistake.
    """
    found = find_baseline_file(path, lab, protocol, target)
    return None if found is None else found[1]


def _holds(run: Run, protocol: str, target: str | None) -> bool:
    """The run has results for ``protocol`` (served by ``target``, when given; an older file's cases belong to the
    target of the kind that served the protocol, :meth:`Run.case_target`)."""
    if protocol not in run.protocols:
        return False
    if target is None or (protocol, target) in run.pairs():
        return True
    # Cases a suite recorded without a target (its own, not the fabric's) tell no target apart: any will do.
    return not any(p == protocol for p, _ in run.pairs())


def find_baseline_file(path: Path | str, lab: str, protocol: str, target: str | None = None) -> tuple[Path, Run] | None:
    """Like :func:`find_baseline`, with the file the run was read from (the report names it). With ``target``
    (the lab's target name) the run must hold that target's results for ``protocol``."""
    source = Path(path)
    if not source.exists():
        return None
    if source.is_file():
        run = load_json(source)
        if protocol not in run.protocols:
            warnings.warn(
                f"baseline {source} has no {protocol} results (it holds {', '.join(run.protocols) or 'no protocol'})",
                BaselineWarning,
                stacklevel=3,
            )
            return None
        if not _holds(run, protocol, target):
            held = sorted({t for p, t in run.pairs() if p == protocol})
            warnings.warn(
                f"baseline {source} has no {protocol} results of target {target} "
                f"(it holds {', '.join(held) or 'no target'})",
                BaselineWarning,
                stacklevel=3,
            )
            return None
        if run.lab != lab:
            warnings.warn(
                f"baseline {source} is from lab {run.lab!r}, this run is lab {lab!r}; comparing anyway",
                BaselineWarning,
                stacklevel=3,
            )
        return source, run
    loaded, problems = scan_baselines(source)
    for message in problems:
        warnings.warn(message, BaselineWarning, stacklevel=3)
    matching = [(p, r) for p, r in loaded if r.lab == lab and _holds(r, protocol, target)]
    if not matching:
        return None
    # Newest by the run's own clock; the file name breaks ties so the choice is stable.
    return max(matching, key=lambda pr: (_aware(pr[1].started), pr[0].name))


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def baseline_case(baseline: Run, case: Case) -> Case | None:
    """The baseline's case for ``case``: same case id, or failing that the same protocol, target and fio job (a
    file from before targets had names: its cases are the target of the kind that served the protocol)."""
    for candidate in baseline.cases:
        if candidate.case_id == case.case_id and (
            case.target is None or baseline.case_target(candidate) == case.target
        ):
            return candidate
    if case.workload is None:
        return None
    w = case.workload
    for candidate in baseline.cases:
        cw = candidate.workload
        if (
            candidate.protocol == case.protocol
            and (case.target is None or baseline.case_target(candidate) == case.target)
            and cw is not None
            and (cw.rw, cw.bs, cw.numjobs, cw.iodepth, cw.size) == (w.rw, w.bs, w.numjobs, w.iodepth, w.size)
            and sorted(candidate.hosts) == sorted(case.hosts)
        ):
            return candidate
    return None


# --- comparing figures ----------------------------------------------------------------------------------


def parse_tolerances(text: str, base: Mapping[str, float] | None = None) -> dict[str, float]:
    """``"iops=10,lat_p99_us=20"`` (percent; a trailing ``%`` is allowed) merged over ``base``.

    ``base`` defaults to :data:`DEFAULT_TOLERANCES`; pass ``{}`` to start from nothing.
    Raises :class:`ToleranceError` naming the bad item.
    """
    tolerances = dict(DEFAULT_TOLERANCES if base is None else base)
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip().removesuffix("%").strip()
        if not sep or not name or not value:
            raise ToleranceError(f"tolerance {item!r} is not METRIC=PERCENT (e.g. iops=10,lat_p99_us=20)")
        if name not in METRICS:
            raise ToleranceError(f"tolerance {item!r}: unknown metric {name!r}; known: {', '.join(METRICS)}")
        try:
            percent = float(value)
        except ValueError:
            raise ToleranceError(f"tolerance {item!r}: {value!r} is not a number of percent") from None
        if not 0 <= percent < float("inf"):
            raise ToleranceError(f"tolerance {item!r}: the percentage must be 0 or more")
        tolerances[name] = percent
    return tolerances


def regression(metric: str, value: float, baseline: float, tolerance: float) -> str | None:
    """None when ``value`` is within ``tolerance`` percent of ``baseline`` in the bad direction, else why."""
    if baseline == 0:
        return None  # No percentage of zero; a zero baseline figure is a broken baseline, not a limit.
    # Decimal on the printed figures: a change of exactly the tolerance passes without float noise.
    change = (Decimal(repr(value)) - Decimal(repr(baseline))) / abs(Decimal(repr(baseline))) * 100
    worse = -change if metric in HIGHER_IS_BETTER else change
    if worse <= Decimal(repr(tolerance)):
        return None
    direction = "below" if change < 0 else "above"
    return (
        f"{metric} {format_figure(metric, value)} is {abs(change):.1f}% {direction} the baseline's "
        f"{format_figure(metric, baseline)} (tolerance {tolerance:g}%)"
    )


def regressions(
    case_figures: Mapping[str, float],
    baseline_case_figures: Mapping[str, float],
    tolerances: Mapping[str, float],
) -> list[str]:
    """One sentence per metric that moved beyond its tolerance in its bad direction.

    Higher is better for IOPS, MB/s, fabric efficiency and link utilisation; lower for latency and CPU.
    A metric missing from either side is not compared.
    """
    messages = []
    for metric, tolerance in tolerances.items():
        if metric in case_figures and metric in baseline_case_figures:
            message = regression(metric, case_figures[metric], baseline_case_figures[metric], tolerance)
            if message is not None:
                messages.append(message)
    return messages


def compare_case(case: Case, baseline: Run, tolerances: Mapping[str, float]) -> RegressionInfo | None:
    """The regression record for ``case`` against ``baseline``; None when the baseline lacks the case."""
    before = baseline_case(baseline, case)
    if before is None or not before.figures:
        return None
    return RegressionInfo(
        baseline_case_id=before.case_id,
        baseline_figures=dict(before.figures),
        tolerances=dict(tolerances),
        messages=tuple(regressions(case.figures, before.figures, tolerances)),
    )


def environment_mismatch(current_env: Environment, baseline_env: Environment) -> list[str]:
    """Sentences for every difference that can move the figures: fio, kernels, device model and firmware."""
    messages = []

    def differ(what: str, prefix: str, before: str | None, now: str | None) -> None:
        if before == now:
            return
        if before is None:
            messages.append(f"baseline does not record the {what}, this run {prefix}{now}")
        elif now is None:
            messages.append(f"baseline used {prefix}{before}, this run does not record the {what}")
        else:
            messages.append(f"baseline used {prefix}{before}, this run {prefix}{now}")

    def fio(version: str | None) -> str | None:
        # fio --version prints "fio-3.33"; accept a bare "3.33" too so both spellings compare equal.
        return None if version is None else version.removeprefix("fio-")

    differ("fio version", "fio-", fio(baseline_env.fio_version), fio(current_env.fio_version))
    for host in sorted(set(current_env.kernels) | set(baseline_env.kernels)):
        before, now = baseline_env.kernels.get(host), current_env.kernels.get(host)
        if before is None:
            messages.append(f"host {host} is not in the baseline (this run kernel {now})")
        elif now is None:
            messages.append(f"host {host} was in the baseline (kernel {before}) but not in this run")
        elif before != now:
            messages.append(f"host {host}: baseline used kernel {before}, this run kernel {now}")
    differ("device model", "", baseline_env.device_model, current_env.device_model)
    differ("device firmware", "firmware ", baseline_env.device_firmware, current_env.device_firmware)
    return messages


# --- saving -------------------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "x"


def save_baseline(run: Run, folder: Path | str) -> Path:
    """Store ``run`` as the newest baseline: ``0007_<lab>_<protocols>_<start time>.json``, written atomically.

    The number is one more than the highest in the folder. The file appears complete or not at all, and
    an existing file is never overwritten (a concurrent save takes the next number).
    """
    target_dir = Path(folder)
    target_dir.mkdir(parents=True, exist_ok=True)
    stamp = _aware(run.started).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    stem = f"{_slug(run.lab)}_{_slug('+'.join(run.protocols))}_{stamp}"
    tmp = write_temp(target_dir, dumps(run))
    try:
        numbers = [int(m.group(1)) for p in target_dir.iterdir() if (m := _NUMBERED.match(p.name))]
        number = max(numbers, default=0) + 1
        while True:
            target = target_dir / f"{number:04d}_{stem}.json"
            try:
                # link() refuses an existing name, unlike rename(): two savers cannot clobber each other.
                os.link(tmp, target)
            except FileExistsError:
                number += 1
                continue
            except OSError:
                # A filesystem without hard links: rename, after checking the name is free.
                if target.exists():
                    number += 1
                    continue
                os.replace(tmp, target)
            return target
    finally:
        tmp.unlink(missing_ok=True)
