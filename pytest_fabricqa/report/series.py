"""A recorded time series as the results keep it (a case's ``extras["timeseries"]``): per-host windows and the
cluster's. fio's logs are turned into one by :func:`pytest_fabricqa.fio.logs.build_timeseries`; the report draws it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_LOG_MSEC = 1000
"""fio's log interval when a lab sets none (ms)."""


@dataclass(frozen=True)
class Window:
    """One interval of a series: ``t_s`` is its end in seconds since the job started."""

    t_s: float
    iops: float | None = None
    lat_mean_us: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    ios: int = 0


@dataclass(frozen=True)
class TimeSeries:
    """Per-host windows and the cluster's (IOPS summed, percentiles from the hosts' summed bins)."""

    interval_ms: int
    hosts: dict[str, tuple[Window, ...]]
    cluster: tuple[Window, ...]
    notes: tuple[str, ...] = ()
    files: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON form for a case's extras (``extras["timeseries"]``)."""

        def rows(windows: Sequence[Window]) -> list[dict[str, float | int | None]]:
            return [
                {"t_s": w.t_s, "iops": w.iops, "lat_mean_us": w.lat_mean_us, "p50_us": w.p50_us, "p99_us": w.p99_us,
                 "ios": w.ios}
                for w in windows
            ]  # fmt: skip

        return {
            "interval_ms": self.interval_ms,
            "hosts": {host: rows(ws) for host, ws in self.hosts.items()},
            "cluster": rows(self.cluster),
            "notes": list(self.notes),
            "files": list(self.files),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TimeSeries:
        """Read :meth:`to_dict`'s form back (ValueError on a malformed one)."""

        def windows(items: Any) -> tuple[Window, ...]:
            if not isinstance(items, list):
                raise ValueError("time series windows must be a list")
            return tuple(
                Window(float(i["t_s"]), i.get("iops"), i.get("lat_mean_us"), i.get("p50_us"), i.get("p99_us"),
                       int(i.get("ios", 0)))
                for i in items
            )  # fmt: skip

        hosts = data.get("hosts") or {}
        if not isinstance(hosts, Mapping):
            raise ValueError("time series hosts must be an object")
        return cls(
            int(data.get("interval_ms", DEFAULT_LOG_MSEC)),
            {str(h): windows(w) for h, w in hosts.items()},
            windows(data.get("cluster", [])),
            tuple(str(n) for n in data.get("notes", [])),
            tuple(str(f) for f in data.get("files", [])),
        )
