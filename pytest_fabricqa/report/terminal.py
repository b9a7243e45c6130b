"""The lines the plugin prints at the end of a run: verdicts first, then one line per protocol x target x workload."""

from __future__ import annotations

from pytest_fabricqa.report.formatting import format_figure, workload_sort_key
from pytest_fabricqa.report.model import Case, Run

_VERDICT_WORDS = {"passed": "PASSED", "failed": "FAILED", "skipped": "SKIPPED", "error": "ERROR"}


def workload_label(case: Case) -> str:
    """``randread 8k j4 qd128`` (plus ``size 2g``, ``2 hosts`` or ``fabric vs local`` when they apply); the case
    id otherwise."""
    w = case.workload
    if w is None:
        return case.case_id
    parts = [w.rw, w.bs, f"j{w.numjobs}"]
    if w.iodepth is not None:
        parts.append(f"qd{w.iodepth}")
    if w.size:
        parts.append(f"size {w.size}")
    if "fabric_efficiency" in case.figures:
        parts.append("fabric vs local")
    elif len(case.hosts) > 1:
        parts.append(f"{len(case.hosts)} hosts")
    return " ".join(parts)


def _figure(case: Case, metric: str, unit: str = "") -> str:
    if metric not in case.figures:
        return "-"
    return format_figure(metric, case.figures[metric]) + unit


def summary_lines(run: Run) -> list[str]:
    """The end-of-run summary, without colour or terminal width assumptions (the plugin adds markup).

    Verdict per protocol and overall; one line per performance case naming its protocol and target, with IOPS,
    MB/s, p99 and the verdict (grouped by protocol, then target), each failure's reasons indented below it; non-performance cases only when they did not
    pass; then the baseline and its environment mismatches, which are flagged, never silent.
    """
    per_protocol = ", ".join(f"{p} {run.verdict(p)}" for p in run.protocols)
    lines = [f"fabricqa: lab {run.lab}: {run.verdict()}" + (f" ({per_protocol})" if per_protocol else "")]

    rows: list[tuple[Case, list[str]]] = []
    for protocol in run.protocols:
        perf = [c for c in run.cases_for(protocol, "performance") if c.workload is not None]
        # Grouped by target within the protocol (a lab whose host serves a protocol from several targets runs the
        # same workload once per target: the target column is what tells those rows apart).
        targets = list(dict.fromkeys(run.case_target(c) or "-" for c in perf))
        perf.sort(key=lambda c: (targets.index(run.case_target(c) or "-"), workload_sort_key(c.workload)))  # type: ignore[arg-type]
        for case in perf:
            rows.append(
                (
                    case,
                    [
                        protocol,
                        run.case_target(case) or "-",
                        workload_label(case),
                        _figure(case, "iops"),
                        _figure(case, "mbps"),
                        _figure(case, "lat_p99_us"),
                        _VERDICT_WORDS[case.verdict],
                    ],
                )
            )
    if rows:
        header = ["protocol", "target", "workload", "IOPS", "MB/s", "p99 us", "verdict"]
        widths = [max(len(r[i]) for r in [header] + [cells for _, cells in rows]) for i in range(len(header))]
        right = {3, 4, 5}

        def fmt(cells: list[str]) -> str:
            return "  ".join(
                c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)
            ).rstrip()

        lines.append("  " + fmt(header))
        for case, cells in rows:
            flag = ""
            if case.regression is not None and case.regression.messages:
                flag = "  [regression]"
            lines.append("  " + fmt(cells) + flag)
            lines.extend(_reasons(case))

    others = [c for c in run.cases if c.suite != "performance" and c.verdict in ("failed", "error")]
    for case in others:
        target = run.case_target(case)
        scope = f"{case.protocol} {target}" if case.protocol and target else case.protocol or "lab"
        lines.append(f"  {scope} {case.suite} {case.case_id}: {_VERDICT_WORDS[case.verdict]}")
        lines.extend(_reasons(case))

    if run.baseline is not None:
        b = run.baseline
        regressed = sum(1 for c in run.cases if c.regression is not None and c.regression.messages)
        lines.append(
            f"baseline: {b.path} (lab {b.lab}, {b.started:%Y-%m-%d %H:%M}): "
            f"{regressed} case{'s' if regressed != 1 else ''} beyond tolerance"
        )
        for message in b.environment_mismatch:
            lines.append(f"  environment differs from the baseline: {message}")
    notes = run.extras.get("baseline_notes")
    if isinstance(notes, list):
        lines.extend(f"baseline note: {note}" for note in notes if isinstance(note, str))
    counts = {v: sum(1 for c in run.cases if c.verdict == v) for v in ("failed", "error", "passed", "skipped")}
    told = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    lines.append(f"fabricqa: {run.verdict()}: {told or 'nothing'} of {len(run.cases)} cases")
    return lines


def _reasons(case: Case) -> list[str]:
    if case.verdict not in ("failed", "error"):
        return []
    reasons = list(case.violations)
    if case.regression is not None:
        reasons += [m for m in case.regression.messages if m not in reasons]
    reasons += [f"{c.name}: {c.detail}" if c.detail else c.name for c in case.checks if c.verdict != "passed"]
    return [f"      - {r}" for r in reasons] or ["      - (no reason recorded)"]
