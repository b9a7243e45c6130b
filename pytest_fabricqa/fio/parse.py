"""Reading fio's JSON (``json`` and ``json+``, stand-alone and client/server) into :mod:`.model` objects.

Tolerant by design: fio prints notes before its JSON ("note: both iodepth >= 1 and synchronous I/O
engine are selected ..."), client/server runs prefix the servers' lines with ``<host>``, and older fio
versions spell things differently (``clat`` in µs before fio 3.0, ``bw`` in KiB/s without ``bw_bytes``).
Anything that is not the JSON document is kept as a note; a missing field reads as zero/absent, never as
a crash, and every result records the ``fio version`` it came from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.fio.model import (
    DIRECTIONS,
    ClientServerResult,
    DirectionStats,
    FioResult,
    FioServer,
    JobStats,
    LatencyHistogram,
    SteadyStateStats,
    combine_directions,
    cpu_mean,
    options_tuple,
)

ALL_CLIENTS = "All clients"

# fio starts its JSON document with a line holding only "{" (client/server output too); notes come before.
_JSON_START = re.compile(r"^\{[ \t]*$", re.MULTILINE)
# Lines a fio server sends through the client are prefixed with "<hostname> ".
_SERVER_PREFIX = re.compile(r"^<[^>]*>\s?")


class FioOutputError(FabricQAError, ValueError):
    """fio's output held no readable JSON document (it failed before reporting, or it is not fio's)."""

    def __init__(self, host: str, why: str, text: str) -> None:
        self.host = host
        self.text = text
        tail = "\n".join(text.strip().splitlines()[-8:])
        where = f"{host}: " if host else ""
        message = f"{where}cannot read fio's output: {why}"
        if tail:
            message += f"; output tail:\n{tail}"
        super().__init__(message)


def split_output(text: str, *, host: str = "") -> tuple[dict[str, Any], tuple[str, ...]]:
    """Split fio's stdout into its JSON document and the other non-empty lines (notes), in order."""
    match = _JSON_START.search(text)
    if match is None:
        raise FioOutputError(host, "no JSON document in it", text)
    try:
        document, end = json.JSONDecoder().raw_decode(text, match.start())
    except json.JSONDecodeError as exc:
        raise FioOutputError(host, f"its JSON is malformed ({exc.msg} at line {exc.lineno})", text) from exc
    if not isinstance(document, dict):
        raise FioOutputError(host, "its JSON is not an object", text)
    outside = text[: match.start()] + "\n" + text[end:]
    notes = tuple(line.rstrip() for line in outside.splitlines() if line.strip())
    return document, notes


def fio_messages(notes: Sequence[str], stderr: str = "") -> tuple[str, ...]:
    """fio's own complaints: every stderr line, then the notes that are fio errors (``fio: ...``,
    ``Bad option``), with the ``<host>`` prefix of client/server lines kept so the host stays named."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for note in notes:
        bare = _SERVER_PREFIX.sub("", note).strip()
        if bare.startswith(("fio:", "Bad option", "error", "Error")) or "err=" in bare:
            lines.append(note.strip())
    return tuple(dict.fromkeys(lines))  # keep order, drop repeats (every server repeats the same line)


def parse_fio_output(text: str, *, host: str = "") -> FioResult:
    """Parse a stand-alone fio run's stdout (``--output-format=json`` or ``json+``) into a FioResult.

    ``host`` is the lab name of the host fio ran on; it is recorded on the result and named in errors.
    Client/server output is refused here: use :func:`parse_client_server`.
    """
    document, notes = split_output(text, host=host)
    if "client_stats" in document:
        raise FioOutputError(host, "this is client/server output; use parse_client_server()", text)
    jobs = tuple(_job(entry) for entry in _entries(document.get("jobs")))
    return _result(document, host, jobs, notes)


def parse_client_server(text: str, *, servers: Sequence[FioServer] = (), host: str = "") -> ClientServerResult:
    """Parse the stdout of ``fio --client=A JOB --client=B JOB ...`` into per-host figures and the total.

    Entries are grouped by the server they came from (fio's ``hostname`` and ``port``); a group is named
    after the :class:`FioServer` with that address and port, else after the address alone if only one
    server has it, else ``address:port``. ``host`` is the host that ran the client (for error messages).
    """
    document, notes = split_output(text, host=host)
    if "client_stats" not in document:
        raise FioOutputError(host, "no client_stats in it (not client/server output)", text)
    jobs = [_job(entry) for entry in _entries(document.get("client_stats"))]
    per_job = [job for job in jobs if job.name != ALL_CLIENTS]
    all_clients = [job for job in jobs if job.name == ALL_CLIENTS]

    groups: dict[tuple[str | None, int | None], list[JobStats]] = {}
    for job in per_job:
        groups.setdefault((job.hostname, job.port), []).append(job)
    hosts = tuple(
        _result(document, _server_name(address, port, servers), tuple(group), ())
        for (address, port), group in groups.items()
    )
    total = _total(document, hosts, all_clients[0] if all_clients else None, notes)
    return ClientServerResult(fio_version=_version(document), hosts=hosts, total=total, notes=notes)


def _total(
    document: Mapping[str, Any], hosts: Sequence[FioResult], entry: JobStats | None, notes: tuple[str, ...]
) -> FioResult:
    """fio's "All clients" figures, with the percentiles fio leaves out filled from the hosts."""
    directions: dict[str, DirectionStats] = {}
    missing: list[str] = []
    for direction in DIRECTIONS:
        combined, why = combine_directions(direction, [h.direction(direction) for h in hosts])
        if entry is None:
            # No "All clients" entry (fio prints none for a single server): the hosts' sum is the total.
            directions[direction] = combined
            missing.extend(f"total {reason}" for reason in why)
            continue
        fio_total = entry.direction(direction)
        if fio_total.percentiles_us or not fio_total.active:
            directions[direction] = fio_total
            continue
        missing.extend(f"total {reason}" for reason in why)
        directions[direction] = replace(fio_total, percentiles_us=combined.percentiles_us, histogram=combined.histogram)
    if entry is None:
        usr, sys = cpu_mean([job for h in hosts for job in h.jobs])
    else:
        usr, sys = entry.usr_cpu_pct, entry.sys_cpu_pct
    return FioResult(
        fio_version=_version(document),
        host=ALL_CLIENTS,
        jobs=() if entry is None else (entry,),
        read=directions["read"],
        write=directions["write"],
        usr_cpu_pct=usr,
        sys_cpu_pct=sys,
        global_options=options_tuple(document.get("global options")),
        notes=notes,
        missing=tuple(missing),
        timestamp=_optional_int(document.get("timestamp")),
    )


def _server_name(address: str | None, port: int | None, servers: Sequence[FioServer]) -> str:
    for server in servers:
        if server.address == address and (port is None or server.port == port):
            return server.name
    same_address = [server for server in servers if server.address == address]
    if len(same_address) == 1 and port is None:
        return same_address[0].name
    if address is None:
        return "unknown"
    return f"{address}:{port}" if port is not None else address


def _result(document: Mapping[str, Any], host: str, jobs: tuple[JobStats, ...], notes: tuple[str, ...]) -> FioResult:
    """The run's figures: fio's own when it reported one entry, combined from its entries otherwise."""
    missing: list[str] = []
    if len(jobs) == 1:
        read, write = jobs[0].read, jobs[0].write
        usr, sys = jobs[0].usr_cpu_pct, jobs[0].sys_cpu_pct
    else:
        read, why_read = combine_directions("read", [job.read for job in jobs])
        write, why_write = combine_directions("write", [job.write for job in jobs])
        missing.extend(why_read + why_write)
        usr, sys = cpu_mean(jobs)
    return FioResult(
        fio_version=_version(document),
        host=host,
        jobs=jobs,
        read=read,
        write=write,
        usr_cpu_pct=usr,
        sys_cpu_pct=sys,
        global_options=options_tuple(document.get("global options")),
        notes=notes,
        missing=tuple(missing),
        timestamp=_optional_int(document.get("timestamp")),
    )


def _version(document: Mapping[str, Any]) -> str:
    return str(document.get("fio version") or "unknown")


def _entries(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [entry for entry in value if isinstance(entry, Mapping)]


def _job(entry: Mapping[str, Any]) -> JobStats:
    port = entry.get("port")
    hostname = entry.get("hostname")
    return JobStats(
        name=str(entry.get("jobname", "")),
        read=_direction("read", entry.get("read")),
        write=_direction("write", entry.get("write")),
        error=_int(entry.get("error")),
        usr_cpu_pct=_float(entry.get("usr_cpu")),
        sys_cpu_pct=_float(entry.get("sys_cpu")),
        runtime_ms=_int(entry.get("job_runtime")),
        options=options_tuple(entry.get("job options")),
        hostname=None if hostname is None else str(hostname),
        port=None if port is None else _int(port),
        steadystate=_steadystate(entry.get("steadystate")),
        start_ms=_optional_int(entry.get("job_start")),
        total_err=_int(entry.get("total_err")),
    )


def _steadystate(block: Any) -> SteadyStateStats | None:
    if not isinstance(block, Mapping) or "attained" not in block:
        return None
    data = block.get("data") if isinstance(block.get("data"), Mapping) else {}
    assert isinstance(data, Mapping)
    raw = data.get("iops")
    iops = tuple(_float(v) for v in raw) if isinstance(raw, list) else ()
    # fio prints the limit as "iops_slope:20.000000%"; keep what the user wrote ("20%").
    spec = re.sub(r"(\d+\.\d*?)0+(%?)$", r"\1\2", str(block.get("ss", ""))).replace(".%", "%").rstrip(".")
    return SteadyStateStats(
        spec=spec,
        attained=bool(_int(block.get("attained"))),
        duration_s=_int(block.get("duration")),
        criterion=str(block.get("criterion", "")),
        iops_mean=_float(data.get("iops_mean")),
        iops=iops,
    )


def _direction(name: str, block: Any) -> DirectionStats:
    if not isinstance(block, Mapping):
        return DirectionStats(name)
    # fio >= 3.0 reports latency in ns ("clat_ns"); older versions in µs ("clat").
    clat, clat_to_us = _latency_block(block, "clat")
    lat, lat_to_us = _latency_block(block, "lat")
    samples = _int(clat.get("N")) if clat else _int(block.get("total_ios"))
    percentile_source, percentile_to_us = clat, clat_to_us
    if not clat.get("percentile") and lat.get("percentile"):  # fio run with lat_percentiles=1
        percentile_source, percentile_to_us = lat, lat_to_us
    percentiles: tuple[tuple[float, float], ...] = ()
    raw_percentiles = percentile_source.get("percentile")
    if samples and isinstance(raw_percentiles, Mapping):
        percentiles = tuple(
            sorted((float(key), _float(value) * percentile_to_us) for key, value in raw_percentiles.items())
        )
    histogram = None
    raw_bins = percentile_source.get("bins")
    if isinstance(raw_bins, Mapping) and raw_bins:
        to_ns = percentile_to_us * 1000.0
        histogram = LatencyHistogram(
            tuple(sorted((round(float(key) * to_ns), _int(count)) for key, count in raw_bins.items()))
        )
    bw_bytes = block.get("bw_bytes")
    return DirectionStats(
        name,
        total_ios=_int(block.get("total_ios")),
        io_bytes=_int(block.get("io_bytes")) if "io_bytes" in block else _int(block.get("io_kbytes")) * 1024,
        runtime_ms=_int(block.get("runtime")),
        iops=_float(block.get("iops")),
        bytes_per_s=_float(bw_bytes) if bw_bytes is not None else _float(block.get("bw")) * 1024.0,
        samples=samples,
        lat_mean_us=_float(lat.get("mean")) * lat_to_us if samples and lat else None,
        clat_mean_us=_float(clat.get("mean")) * clat_to_us if samples and clat else None,
        percentiles_us=percentiles,
        histogram=histogram,
        lat_max_us=_float(lat.get("max")) * lat_to_us if samples and lat and "max" in lat else None,
    )


def _latency_block(block: Mapping[str, Any], name: str) -> tuple[Mapping[str, Any], float]:
    """fio's latency block ``name`` and the factor that turns its values into µs."""
    nanoseconds = block.get(f"{name}_ns")
    if isinstance(nanoseconds, Mapping):
        return nanoseconds, 1e-3
    microseconds = block.get(name)
    if isinstance(microseconds, Mapping):
        return microseconds, 1.0
    return {}, 1.0


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _optional_int(value: Any) -> int | None:
    return None if value is None else _int(value)
