"""The fio workload matrix: what users run by hand in the seed reports, as named sets of workloads.

Sets (see :data:`SETS`):

- ``oracle-8k`` (seed 000, NVMe-oF vs iSER for Oracle RAC): 8 KiB random read and write, numjobs 4,
  iodepth 128.
- ``allflash-4k`` (seed 002, iSCSI vs NVMe/TCP on Optane): 4 KiB random read and write over numjobs 1, 2, 4
  x iodepth 1, 8, 32, 128, 256 (iSCSI peaked at 1 job x QD 32, NVMe/TCP at 2 jobs x QD 256).
- ``allflash-1m`` (seed 002): 1 MiB sequential read and write, one job, iodepth 1, 4, 16, 64 (iSCSI read
  peaked at QD 4).
- ``softroce-8k`` (seed 001, iSCSI over TCP vs Soft-RoCE): 8 KiB sequential and random read and write over
  numjobs 1, 2, 4, 6, 8 on a 2 GiB region; ``softroce-8k-512m``: the same four at numjobs 4 on 512 MiB.
  The seed gives no queue depth, so these run at fio's default, 1.

A workload's name says what it is (``randread-8k-qd128-j4``) and is unique across the matrix; the test id
of a case is ``<protocol>-<workload name>`` (:func:`case_id`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, replace
from typing import Any

from pytest_fabricqa.core.errors import UserError

READ_ONLY_RW = frozenset({"read", "randread"})
WRITING_RW = frozenset(
    {"write", "randwrite", "rw", "readwrite", "randrw", "trim", "randtrim", "trimwrite", "randtrimwrite"}
)

DEFAULT_RUNTIME = 60  # seconds; seed 000 ran every fio test for 60 s
DEFAULT_RAMP_TIME = 5  # seconds of warm-up fio leaves out of the figures

# Options the workload's own fields or the command builder set; "extra" options may not override them
# (ioengine and direct are fixed: the plugin measures the fabric with libaio and O_DIRECT, as the seeds do).
RESERVED_OPTIONS = frozenset(
    {
        "name", "filename", "readonly", "output", "output-format", "client", "server",
        "ioengine", "direct", "time_based", "runtime", "ramp_time", "rw", "readwrite", "bs", "blocksize",
        "numjobs", "iodepth", "size", "offset", "group_reporting",
        "randseed",  # one per host, set by the command builder so no two initiators share an offset stream
    }
)  # fmt: skip

_OPTION_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class MatrixError(UserError, ValueError):
    """A workload or a lab file's workload overrides are invalid; the message names the key."""


@dataclass(frozen=True)
class Workload:
    """One fio workload: what to run on every device of a case, and what a results file says was run.

    The only workload class: the matrix builds it, the fio command builder runs it, the results model records
    it (:meth:`to_dict` / :meth:`from_dict`). After ``name``, ``rw`` and ``bs`` every field is a keyword, so no
    caller can mix up runtime and size by position.

    ``writes`` must be True exactly when ``rw`` writes: a workload that overwrites the device says so
    explicitly (seed 000's raw-device write tests destroyed an ASM disk group). Read workloads run with
    fio's ``--readonly`` guard. ``extra`` holds further fio options as (name, value) pairs; an empty value
    is a flag option such as ``norandommap``. ``iodepth`` and ``runtime`` are None only in results transcribed
    from a report that does not state them (seed 001); such a workload can be reported, not run.
    """

    name: str
    rw: str
    bs: str
    _: KW_ONLY
    numjobs: int = 1
    iodepth: int | None = 1
    runtime: int | None = DEFAULT_RUNTIME
    ramp_time: int = DEFAULT_RAMP_TIME
    size: str | None = None
    offset: str | None = None
    writes: bool = False
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        where = f"workload {self.name!r}"
        if not _NAME.match(self.name):
            raise MatrixError(f"{where}: a name uses letters, digits, '.', '_' and '-' only")
        if self.rw not in READ_ONLY_RW | WRITING_RW:
            known = ", ".join(sorted(READ_ONLY_RW | WRITING_RW))
            raise MatrixError(f"{where}: rw={self.rw!r} is not an fio I/O pattern ({known})")
        if self.rw in WRITING_RW and not self.writes:
            raise MatrixError(
                f"{where}: rw={self.rw} overwrites the device; set writes: true to confirm that is intended"
            )
        if self.rw in READ_ONLY_RW and self.writes:
            raise MatrixError(f"{where}: rw={self.rw} only reads; writes: true does not apply")
        for key, value, least in (
            ("numjobs", self.numjobs, 1),
            ("iodepth", self.iodepth, 1),
            ("runtime", self.runtime, 1),
            ("ramp_time", self.ramp_time, 0),
        ):
            if value is None and key in ("iodepth", "runtime"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise MatrixError(f"{where}: {key} must be a whole number >= {least}, not {value!r}")
        for key, text in (("bs", self.bs), ("size", self.size), ("offset", self.offset)):
            if text is not None and (not text or any(c.isspace() for c in text)):
                raise MatrixError(f"{where}: {key}={text!r} must be one fio size word such as 8k or 2g")
        for option, option_value in self.extra:
            _check_extra_option(where, option, option_value)

    @property
    def outstanding(self) -> int | None:
        """I/Os in flight at once across all jobs (numjobs x iodepth), the x-axis of the sweep charts."""
        return None if self.iodepth is None else self.numjobs * self.iodepth

    @property
    def options(self) -> dict[str, str]:
        """The workload's fio options (without device, engine and output options), in fio's spelling."""
        if self.runtime is None or self.iodepth is None:
            raise MatrixError(f"workload {self.name!r}: a transcribed result without runtime or iodepth cannot run")
        options = {
            "rw": self.rw,
            "bs": self.bs,
            "numjobs": str(self.numjobs),
            "iodepth": str(self.iodepth),
            "runtime": str(self.runtime),
            "ramp_time": str(self.ramp_time),
        }
        if self.size is not None:
            options["size"] = self.size
        if self.offset is not None:
            options["offset"] = self.offset
        options.update(self.extra)
        return options

    def with_runtime(self, runtime: int, ramp_time: int | None = None) -> Workload:
        """The same workload for a different duration."""
        return replace(self, runtime=runtime, ramp_time=self.ramp_time if ramp_time is None else ramp_time)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form under a case's ``workload`` in results.json (``runtime_s``: the key since schema 1).

        ``writes`` is not written (``rw`` says it); ``ramp_time_s``, ``offset`` and ``options`` only when they
        differ from fio's ramp default, no offset and no options, so files of schema 1 read and rewrite
        byte for byte."""
        out: dict[str, Any] = {
            "name": self.name,
            "rw": self.rw,
            "bs": self.bs,
            "numjobs": self.numjobs,
            "iodepth": self.iodepth,
            "runtime_s": self.runtime,
            "size": self.size,
        }
        if self.ramp_time != DEFAULT_RAMP_TIME:
            out["ramp_time_s"] = self.ramp_time
        if self.offset is not None:
            out["offset"] = self.offset
        if self.extra:
            out["options"] = dict(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "workload") -> Workload:
        """Read :meth:`to_dict`'s form (a missing ``ramp_time_s``, ``offset`` or ``options`` is the default;
        ``writes`` follows ``rw``). ``ValueError`` names the first bad key."""
        for key in ("name", "rw", "bs"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"{where}.{key}: expected a string, found {data.get(key)!r}")
        for key in ("numjobs", "iodepth", "runtime_s", "ramp_time_s"):
            value = data.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{where}.{key}: expected an integer, found {value!r}")
        if data.get("numjobs") is None:
            raise ValueError(f"{where}: missing key 'numjobs'")
        for key in ("size", "offset"):
            if data.get(key) is not None and not isinstance(data.get(key), str):
                raise ValueError(f"{where}.{key}: expected a string, found {data.get(key)!r}")
        options = data.get("options") or {}
        if not isinstance(options, Mapping) or not all(isinstance(v, str) for v in options.values()):
            raise ValueError(f"{where}.options: expected an object of fio option to string, found {options!r}")
        writes = str(data["rw"]) in WRITING_RW
        ramp = data.get("ramp_time_s")
        try:
            return cls(
                name=data["name"],
                rw=data["rw"],
                bs=data["bs"],
                numjobs=data["numjobs"],
                iodepth=data.get("iodepth"),
                runtime=data.get("runtime_s"),
                ramp_time=DEFAULT_RAMP_TIME if ramp is None else ramp,
                size=data.get("size"),
                offset=data.get("offset"),
                writes=writes,
                extra=tuple((str(k), v) for k, v in options.items()),
            )
        except MatrixError as exc:
            raise ValueError(f"{where}: {exc}") from None


def _check_extra_option(where: str, option: str, value: str) -> None:
    if not _OPTION_NAME.match(option):
        raise MatrixError(f"{where}: option {option!r} is not an fio option name (write it without '--')")
    if option in RESERVED_OPTIONS:
        raise MatrixError(f"{where}: option {option!r} is set by the workload itself, not by extra options")
    # A newline would start a new line (a new option) in a job file.
    if "\n" in value or "\r" in value:
        raise MatrixError(f"{where}: the value of option {option!r} must be one line")


def workload_name(rw: str, bs: str, *, iodepth: int, numjobs: int, size: str | None = None) -> str:
    """The matrix's naming scheme: ``randread-8k-qd128-j4`` (``-512m`` appended for a sized region)."""
    name = f"{rw}-{bs}-qd{iodepth}-j{numjobs}"
    return f"{name}-{size}" if size else name


def make_workload(
    rw: str,
    bs: str,
    *,
    numjobs: int = 1,
    iodepth: int = 1,
    runtime: int = DEFAULT_RUNTIME,
    ramp_time: int = DEFAULT_RAMP_TIME,
    size: str | None = None,
) -> Workload:
    """A workload named by :func:`workload_name`, marked as writing when ``rw`` writes."""
    return Workload(
        name=workload_name(rw, bs, iodepth=iodepth, numjobs=numjobs, size=size),
        rw=rw,
        bs=bs,
        numjobs=numjobs,
        iodepth=iodepth,
        runtime=runtime,
        ramp_time=ramp_time,
        size=size,
        writes=rw in WRITING_RW,
    )


def _sweep(
    rws: Iterable[str], bs: str, numjobs: Iterable[int], iodepths: Iterable[int], size: str | None = None
) -> tuple[Workload, ...]:
    return tuple(
        make_workload(rw, bs, numjobs=jobs, iodepth=depth, size=size)
        for rw in rws
        for jobs in numjobs
        for depth in iodepths
    )


SETS: Mapping[str, tuple[Workload, ...]] = {
    "oracle-8k": _sweep(("randread", "randwrite"), "8k", (4,), (128,)),
    "allflash-4k": _sweep(("randread", "randwrite"), "4k", (1, 2, 4), (1, 8, 32, 128, 256)),
    "allflash-1m": _sweep(("read", "write"), "1m", (1,), (1, 4, 16, 64)),
    "softroce-8k": _sweep(("write", "read", "randwrite", "randread"), "8k", (1, 2, 4, 6, 8), (1,), "2g"),
    "softroce-8k-512m": _sweep(("write", "read", "randwrite", "randread"), "8k", (4,), (1,), "512m"),
}

# Where each set comes from, for reports and --help texts.
SET_SOURCES: Mapping[str, str] = {
    "oracle-8k": "seed 000: NVMe-oF vs iSER for Oracle RAC, fio 8k randread/randwrite numjobs 4 iodepth 128",
    "allflash-4k": "seed 002: iSCSI vs NVMe/TCP on all-flash, 4 KiB random over numjobs x iodepth to QD 256",
    "allflash-1m": "seed 002: iSCSI vs NVMe/TCP on all-flash, 1 MiB sequential read/write",
    "softroce-8k": "seed 001: iSCSI over TCP vs Soft-RoCE, 8 KiB on 2 GB, numjobs 1, 2, 4, 6, 8",
    "softroce-8k-512m": "seed 001: iSCSI over TCP vs Soft-RoCE, 8 KiB on 512 MB, numjobs 4",
}

DEFAULT_SETS: tuple[str, ...] = tuple(SETS)

# How each point is measured, read by pytest_fabricqa.measure.point (samples, steady state, time series, scaling, knee).
MEASURE_KEYS = ("samples", "steady_state", "timeseries", "scaling", "knee_gain_pct")
_OVERRIDE_KEYS = ("sets", "disable", "only", "exclude", "runtime", "ramp_time", "workloads", "extra", *MEASURE_KEYS)
_PER_WORKLOAD_KEYS = ("runtime", "ramp_time", "size", "offset")
_EXTRA_KEYS = (
    "name", "rw", "bs", "numjobs", "iodepth", "runtime", "ramp_time", "size", "offset", "writes", "options",
)  # fmt: skip


def load_matrix(overrides: Mapping[str, Any] | None = None, *, runtime_override: int | None = None) -> list[Workload]:
    """The workloads to run: the default sets, changed by a lab file's overrides.

    ``overrides`` (all keys optional; a YAML example)::

        sets: [oracle-8k, allflash-4k]   # the sets to run, in this order (default: all of SETS)
        disable: [allflash-1m]           # sets to leave out
        only: ["rand*-8k-*"]             # keep only workloads whose name matches a pattern (fnmatch)
        exclude: ["*-qd256-*"]           # then drop workloads whose name matches a pattern
        runtime: 30                      # seconds, for every workload
        ramp_time: 5                     # seconds, for every workload
        workloads:                       # per workload, by exact name: runtime, ramp_time, size, offset
          randread-8k-qd128-j4: {runtime: 120}
        extra:                           # more workloads (appended after the sets)
          - {name: randread-16k-qd64-j2, rw: randread, bs: 16k, numjobs: 2, iodepth: 64,
             options: {norandommap: ""}}
          - {name: randrw-8k-70-qd32-j4, rw: randrw, bs: 8k, numjobs: 4, iodepth: 32, writes: true,
             options: {rwmixread: 70}}

    The section's :data:`MEASURE_KEYS` (samples, steady_state, timeseries, scaling, knee_gain_pct) say how each
    point is measured, not which workloads run: :func:`pytest_fabricqa.measure.point.measure_plan` reads them.

    Runtime precedence, strongest first: ``runtime_override`` (the command line, for a quick smoke run),
    the per-workload ``workloads.<name>.runtime``, the lab-wide ``runtime``, the workload's own. A
    workload that appears in two enabled sets runs once. ``only``/``exclude`` also apply to ``extra``.
    An empty result is returned as an empty list (the caller decides whether that is a mistake).
    Invalid overrides raise :class:`MatrixError` naming the key, e.g. ``sets[1]: unknown set ...``.
    """
    overrides = dict(overrides or {})
    chosen = _selected(overrides)
    only = _names(overrides, "only", default=())
    exclude = _names(overrides, "exclude", default=())
    workloads = [
        w
        for w in chosen.values()
        if (not only or any(fnmatch.fnmatchcase(w.name, p) for p in only))
        and not any(fnmatch.fnmatchcase(w.name, p) for p in exclude)
    ]

    lab_runtime = _optional_int(overrides, "runtime", least=1)
    lab_ramp = _optional_int(overrides, "ramp_time", least=0)
    per_workload = _per_workload(overrides, known=_all_set_names() | set(chosen))

    result: list[Workload] = []
    for workload in workloads:
        changes: dict[str, Any] = {}
        if lab_runtime is not None:
            changes["runtime"] = lab_runtime
        if lab_ramp is not None:
            changes["ramp_time"] = lab_ramp
        changes.update(per_workload.get(workload.name, {}))
        if runtime_override is not None:
            changes["runtime"] = runtime_override
        result.append(replace(workload, **changes) if changes else workload)
    return result


def selected_names(overrides: Mapping[str, Any] | None = None) -> list[str]:
    """The names of the workloads of the selected sets and ``extra`` (before ``only``/``exclude`` narrow them):
    what a lab file's threshold patterns may refer to."""
    return list(_selected(dict(overrides or {})))


def _selected(overrides: dict[str, Any]) -> dict[str, Workload]:
    """The workloads of the enabled sets, then ``extra``, by name; validates the keys and sets."""
    unknown = sorted(set(overrides) - set(_OVERRIDE_KEYS))
    if unknown:
        raise MatrixError(f"{unknown[0]}: unknown key; the known keys are {', '.join(_OVERRIDE_KEYS)}")

    sets = _names(overrides, "sets", default=DEFAULT_SETS)
    disabled = _names(overrides, "disable", default=())
    for key, names in (("sets", sets), ("disable", disabled)):
        for index, name in enumerate(names):
            if name not in SETS:
                raise MatrixError(f"{key}[{index}]: unknown set {name!r}; known sets: {', '.join(SETS)}")

    chosen: dict[str, Workload] = {}
    for set_name in sets:
        if set_name in disabled:
            continue
        for workload in SETS[set_name]:
            chosen.setdefault(workload.name, workload)

    for index, spec in enumerate(_list(overrides, "extra")):
        workload = _extra_workload(f"extra[{index}]", spec)
        if workload.name in chosen or workload.name in _all_set_names():
            raise MatrixError(
                f"extra[{index}]: a workload named {workload.name!r} already exists; give it another name"
            )
        chosen[workload.name] = workload
    return chosen


def case_id(protocol: str, workload: Workload | str, target: str | None = None) -> str:
    """The readable id of one case: ``nvme-rdma-spdk-randread-8k-qd128-j4`` (``nvme-rdma-randread-8k-qd128-j4``
    without a target, as results files before targets had names)."""
    name = workload if isinstance(workload, str) else workload.name
    return f"{protocol}-{target}-{name}" if target else f"{protocol}-{name}"


def _all_set_names() -> set[str]:
    return {workload.name for workloads in SETS.values() for workload in workloads}


def _names(overrides: Mapping[str, Any], key: str, *, default: Sequence[str]) -> tuple[str, ...]:
    if key not in overrides or overrides[key] is None:
        return tuple(default)
    value = overrides[key]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise MatrixError(f"{key}: expected a list of names, not {value!r}")
    return tuple(value)


def _list(overrides: Mapping[str, Any], key: str) -> list[Any]:
    value = overrides.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise MatrixError(f"{key}: expected a list, not {type(value).__name__}")
    return list(value)


def _optional_int(spec: Mapping[str, Any], key: str, *, least: int, where: str = "") -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise MatrixError(f"{where}{key}: expected a whole number >= {least}, not {value!r}")
    return value


def _optional_str(spec: Mapping[str, Any], key: str, *, where: str) -> str | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise MatrixError(f"{where}{key}: expected an fio size such as 8k, not {value!r}")
    return str(value)


def _per_workload(overrides: Mapping[str, Any], *, known: set[str]) -> dict[str, dict[str, Any]]:
    raw = overrides.get("workloads")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise MatrixError(f"workloads: expected a mapping of workload name to settings, not {raw!r}")
    result: dict[str, dict[str, Any]] = {}
    for name, spec in raw.items():
        where = f"workloads.{name}."
        if name not in known:
            raise MatrixError(f"workloads.{name}: no workload has this name (names look like randread-8k-qd128-j4)")
        if not isinstance(spec, Mapping):
            raise MatrixError(f"workloads.{name}: expected a mapping such as {{runtime: 120}}")
        unknown = sorted(set(spec) - set(_PER_WORKLOAD_KEYS))
        if unknown:
            raise MatrixError(f"{where}{unknown[0]}: unknown key; allowed: {', '.join(_PER_WORKLOAD_KEYS)}")
        changes: dict[str, Any] = {}
        for key, least in (("runtime", 1), ("ramp_time", 0)):
            number = _optional_int(spec, key, least=least, where=where)
            if number is not None:
                changes[key] = number
        for key in ("size", "offset"):
            text = _optional_str(spec, key, where=where)
            if text is not None:
                changes[key] = text
        result[str(name)] = changes
    return result


def _extra_workload(where: str, spec: Any) -> Workload:
    if not isinstance(spec, Mapping):
        raise MatrixError(f"{where}: expected a mapping with name, rw, bs, numjobs, iodepth")
    unknown = sorted(set(spec) - set(_EXTRA_KEYS))
    if unknown:
        raise MatrixError(f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(_EXTRA_KEYS)}")
    for key in ("name", "rw", "bs"):
        if not isinstance(spec.get(key), str | int) or isinstance(spec.get(key), bool):
            raise MatrixError(f"{where}.{key}: required, e.g. name: randread-16k-qd64-j2, rw: randread, bs: 16k")
    options = spec.get("options") or {}
    if not isinstance(options, Mapping):
        raise MatrixError(f"{where}.options: expected a mapping of fio option to value")
    writes = spec.get("writes", False)
    if not isinstance(writes, bool):
        raise MatrixError(f"{where}.writes: expected true or false, not {writes!r}")
    try:
        return Workload(
            name=str(spec["name"]),
            rw=str(spec["rw"]),
            bs=str(spec["bs"]),
            numjobs=_optional_int(spec, "numjobs", least=1, where=f"{where}.") or 1,
            iodepth=_optional_int(spec, "iodepth", least=1, where=f"{where}.") or 1,
            runtime=_optional_int(spec, "runtime", least=1, where=f"{where}.") or DEFAULT_RUNTIME,
            ramp_time=_ramp(spec, where),
            size=_optional_str(spec, "size", where=f"{where}."),
            offset=_optional_str(spec, "offset", where=f"{where}."),
            writes=writes,
            extra=_extra_options(options),
        )
    except MatrixError as exc:
        raise MatrixError(f"{where}: {exc}") from None


def _extra_options(options: Mapping[Any, Any]) -> tuple[tuple[str, str], ...]:
    """YAML option values as fio's strings: ``true``/empty is a flag option, ``false`` leaves it out."""
    result: list[tuple[str, str]] = []
    for key, value in options.items():
        if value is False:
            continue
        result.append((str(key), "" if value is None or value is True else str(value)))
    return tuple(result)


def _ramp(spec: Mapping[str, Any], where: str) -> int:
    value = _optional_int(spec, "ramp_time", least=0, where=f"{where}.")
    return DEFAULT_RAMP_TIME if value is None else value
