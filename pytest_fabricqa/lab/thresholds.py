"""Pass/fail limits for a case's fio figures, looked up per protocol and workload.

A lab file's threshold table maps protocol -> workload -> limits::

    thresholds:
      "*":                          # every protocol
        "*": {max_p999_us: 20000}   # every workload
        "rand*-8k-*": {max_p99_us: 2000}
        randread-8k-qd128-j4: {min_iops: 3000}
      nvme-rdma:
        "*": {max_lat_mean_us: 1000}
        randread-8k-qd128-j4: {min_iops: 100000, max_p99_us: null}   # null lifts an inherited limit

Keys on either level are exact names, fnmatch patterns (``rand*``, ``nvme-*``) or ``"*"``. Every entry
that matches contributes, limit by limit; where two set the same limit, the more specific one wins:

1. the protocol level first: an exact protocol beats a protocol pattern, which beats ``"*"``;
2. then the workload level, the same way: exact name, then pattern, then ``"*"``;
3. between two patterns of the same kind, the one with more literal (non-wildcard) characters wins;
   if that ties too, the one written later in the table wins.

So in the example, nvme-rdma randread-8k-qd128-j4 gets min_iops 100000 and max_lat_mean_us 1000 (from its
protocol), max_p999_us 20000 (from ``"*"``/``"*"``) and no p99 limit (lifted by its own ``null``).

A workload key that matches no workload of the selected sets (:func:`unmatched`) stops the lab from loading:
a typo would otherwise gate nothing and say nothing.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.core.metrics import THRESHOLD_KEYS

_WILDCARDS = re.compile(r"[*?\[\]]")


class ThresholdError(UserError, ValueError):
    """A threshold table is invalid; the message names the key (``thresholds.nvme-tcp.*.min_iops``)."""


class Thresholds(BaseModel):
    """The limits of one case; None means "no limit". Latency limits are in µs, throughput in MB/s.

    The one schema for limits: the lab file's ``thresholds`` entries are validated by it at load time, and a
    case's merged limits are one of it. Its fields are the vocabulary's threshold keys
    (:data:`pytest_fabricqa.core.metrics.THRESHOLD_KEYS`; a test keeps the two equal). In a lab file an explicit
    ``null`` lifts a limit an entry of lower precedence set; :meth:`given` keeps it apart from a key left out.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_iops: float | None = None
    min_mbps: float | None = None
    max_lat_mean_us: float | None = None
    max_p99_us: float | None = None
    max_p999_us: float | None = None
    max_rsd_pct: float | None = None
    min_scaling_efficiency: float | None = None
    max_stall_s: float | None = None
    max_first_io_s: float | None = None
    max_recovery_s: float | None = None
    max_failback_s: float | None = None
    max_io_errors: float | None = None
    max_verify_errors: float | None = None
    max_path_imbalance_pct: float | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _positive_number(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"expected a number, not {value!r}")
        metric = THRESHOLD_KEYS.get(info.field_name or "")
        if metric is not None and metric.zero_limit:
            if value < 0:
                raise ValueError(f"a limit on a count must be zero or more, not {value!r}")
        elif value <= 0:
            raise ValueError(f"a limit must be above zero, not {value!r}")
        return float(value)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], *, where: str = "thresholds") -> Thresholds:
        """Validate a mapping such as ``{min_iops: 3000, max_p99_us: 500}`` (unknown keys are errors)."""
        if not isinstance(mapping, Mapping):
            raise ThresholdError(f"{where}: expected a mapping of limits such as {{min_iops: 3000}}")
        try:
            return cls.model_validate(dict(mapping))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            key = ".".join(str(part) for part in first["loc"])
            if first["type"] == "extra_forbidden":
                names = ", ".join(cls.model_fields)
                raise ThresholdError(f"{where}.{key}: unknown limit; the limits are {names}") from None
            raise ThresholdError(f"{where}.{key}: {first['msg'].removeprefix('Value error, ')}") from None

    def given(self) -> dict[str, float | None]:
        """The limits the entry spelled out, ``None`` for an explicit ``null`` (which lifts an inherited one)."""
        return {key: getattr(self, key) for key in self.model_fields_set}

    def limits(self) -> dict[str, float]:
        """The limits that apply, by threshold key (what a case records)."""
        return {key: value for key in type(self).model_fields if (value := getattr(self, key)) is not None}

    @property
    def empty(self) -> bool:
        """True when no limit is set."""
        return not self.limits()


def _number(value: float, decimals: int) -> str:
    """``2,310`` / ``1,234.5``; whole numbers lose the ``.0`` so limits read as they were written."""
    text = f"{value:,.{decimals}f}"
    return text[:-2] if decimals == 1 and text.endswith(".0") else text


def violations(
    figures: Mapping[str, float], thresholds: Thresholds, *, label: str = "", gate: str = "figure"
) -> list[str]:
    """Every limit ``figures`` break, each as one sentence with the figure, the limit and the unit:
    ``randread-8k: 2,310 IOPS is below the minimum of 3,000 IOPS``. A limit whose figure is absent
    (not measured) is a violation too: a case cannot pass a check nobody could make. Only the limits of
    metrics checked by ``gate`` (:attr:`Metric.gate`) are looked at."""
    prefix = f"{label}: " if label else ""
    found: list[str] = []
    for key, metric in THRESHOLD_KEYS.items():
        limit = getattr(thresholds, key)
        if limit is None or metric.gate != gate:
            continue  # other gates' limits are checked by their own runs (see Metric.gate)
        figure, kind, what, unit, decimals = metric.name, metric.bound, metric.phrase, metric.unit, metric.decimals
        bound = "minimum" if kind == "min" else "maximum"
        value = figures.get(figure)
        if value is None or math.isnan(value):
            found.append(
                f"{prefix}{what or unit + ' '}was not measured, so the {bound} of "
                f"{_number(limit, decimals)} {unit} could not be checked"
            )
            continue
        if kind == "min" and value < limit:
            found.append(
                f"{prefix}{what}{_number(value, decimals)} {unit} is below the minimum of "
                f"{_number(limit, decimals)} {unit}"
            )
        elif kind == "max" and value > limit:
            found.append(
                f"{prefix}{what}{_number(value, decimals)} {unit} is above the maximum of "
                f"{_number(limit, decimals)} {unit}"
            )
    return found


def _rank(key: str) -> tuple[int, int]:
    """How specific a table key is: (2 exact / 1 pattern / 0 "*", number of literal characters)."""
    if key == "*":
        return 0, 0
    if _WILDCARDS.search(key):
        return 1, len(_WILDCARDS.sub("", key))
    return 2, len(key)


def validate_table(table: Mapping[str, Any], *, where: str = "thresholds") -> None:
    """Check every entry of a threshold table, so mistakes surface when the lab file loads."""
    for protocol, workloads in _levels(table, where):
        for workload, limits in _levels(workloads, f"{where}.{protocol}"):
            Thresholds.from_mapping(limits, where=f"{where}.{protocol}.{workload}")


def unmatched(pattern: str, names: Sequence[str]) -> str | None:
    """None when the workload key ``pattern`` matches one of ``names``; otherwise why it gates nothing and the
    names it could mean (a limit that silently applies to no case is a qualification nobody made)."""
    if pattern == "*" or any(fnmatchcase(name, pattern) for name in names):
        return None
    close = difflib.get_close_matches(pattern.replace("*", ""), names, n=3, cutoff=0.5)
    if close:
        hint = f"did you mean {', '.join(close)}?"
    else:
        hint = f"workload names look like {names[0]}" if names else "no workload is selected"
    return f"matches no workload of the selected sets; {hint}"


def _levels(mapping: Any, where: str) -> list[tuple[str, Any]]:
    if not isinstance(mapping, Mapping):
        raise ThresholdError(f"{where}: expected a mapping keyed by name, pattern or '*'")
    return [(str(key), value) for key, value in mapping.items()]


def thresholds_for(
    table: Mapping[str, Any] | None, protocol: str, workload_name: str, *, where: str = "thresholds"
) -> Thresholds:
    """The limits for one case: every matching entry, merged limit by limit in order of specificity
    (see the module docstring for the precedence). No table, or no match, means no limits."""
    if not table:
        return Thresholds()
    matches: list[tuple[tuple[int, int, int, int, int], Mapping[str, Any], str]] = []
    order = 0
    for protocol_key, workloads in _levels(table, where):
        if not fnmatchcase(protocol, protocol_key):
            continue
        for workload_key, limits in _levels(workloads, f"{where}.{protocol_key}"):
            if not fnmatchcase(workload_name, workload_key):
                continue
            entry_where = f"{where}.{protocol_key}.{workload_key}"
            Thresholds.from_mapping(limits, where=entry_where)  # validate before merging
            p_kind, p_literal = _rank(protocol_key)
            w_kind, w_literal = _rank(workload_key)
            matches.append(((p_kind, p_literal, w_kind, w_literal, order), limits, entry_where))
            order += 1
    merged: dict[str, Any] = {}
    for _, limits, _ in sorted(matches, key=lambda match: match[0]):
        merged.update(limits)
    return Thresholds.from_mapping(merged, where=where)


def fabric_efficiency(fabric_iops: float, local_iops: float) -> float:
    """The fabric's IOPS as a fraction of the same workload on the local device (1.0 = no loss).

    Seed 000's finding "NVMe-oF reached local-device speed" is an efficiency near 1.0.
    """
    if local_iops <= 0:
        raise ValueError(f"the local device's IOPS must be above zero, not {local_iops!r}")
    return fabric_iops / local_iops


def link_utilisation(mbps: float, link_speed_gbps: float) -> float:
    """Throughput (decimal MB/s) as a fraction of the link's line rate (Gb/s converted to MB/s: x 1000 / 8).

    Seed 000's 4.2 GB/s over 40 GbE (5,000 MB/s line rate) is 0.84: the link, not the storage, was the limit.
    """
    if link_speed_gbps <= 0:
        raise ValueError(f"the link speed must be above zero Gb/s, not {link_speed_gbps!r}")
    return mbps / (link_speed_gbps * 1000.0 / 8.0)
