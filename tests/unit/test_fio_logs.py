"""fio's time-series logs (recorded with fio 3.33, tests/data/fio/series): names, parsing, windows, merging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_fabricqa.fio import parse_client_server
from pytest_fabricqa.fio.logs import (
    PLAT_BINS,
    LogError,
    build_timeseries,
    histogram_of,
    log_options,
    parse_hist_log,
    parse_log,
    parse_log_name,
    plat_idx_to_val,
    window_counts,
)
from pytest_fabricqa.fio.model import LatencyHistogram
from pytest_fabricqa.report.series import TimeSeries

DATA = Path(__file__).parents[1] / "data" / "fio" / "series"
LOGS = DATA / "logs"


def _files(pattern: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(LOGS.glob(pattern))}


def test_client_names_each_servers_log_after_its_address() -> None:
    name = parse_log_name("vnode1_clat_hist.2.log.127.0.0.1")
    assert name is not None
    assert (name.prefix, name.kind, name.job, name.address) == ("vnode1", "clat_hist", 2, "127.0.0.1")
    stand_alone = parse_log_name("/tmp/x/standalone_iops.1.log")
    assert stand_alone is not None and stand_alone.address is None and stand_alone.kind == "iops"
    assert parse_log_name("fabricqa-vnode1-randread.fio") is None
    # Every file the recorded client/server run left follows the pattern.
    assert all(parse_log_name(n) for n in _files("vnode*"))


def test_log_options_name_every_log_and_interval() -> None:
    options = dict(log_options("/tmp/d/vnode1", avg_msec=500, hist_msec=250))
    assert options == {
        "write_iops_log": "/tmp/d/vnode1",
        "write_lat_log": "/tmp/d/vnode1",
        "write_hist_log": "/tmp/d/vnode1",
        "log_avg_msec": "500",
        "log_hist_msec": "250",
    }
    with pytest.raises(ValueError):
        log_options("x", avg_msec=0)


def test_histogram_bins_map_to_the_latencies_json_plus_uses() -> None:
    assert [plat_idx_to_val(i) for i in (0, 1, 127)] == [0, 1, 127]
    assert plat_idx_to_val(128) == 129 and plat_idx_to_val(129) == 131  # width 2 from group 2 on, the middle
    assert plat_idx_to_val(PLAT_BINS - 1) > 16_000_000_000  # the last group reaches ~17 s
    with pytest.raises(ValueError):
        plat_idx_to_val(PLAT_BINS)
    # Every bin the recorded log filled is a bin key of the same job's json+ output.
    document = json.loads((DATA / "standalone-libaio.json").read_text())
    keys = {int(k) for k in document["jobs"][0]["read"]["clat_ns"]["bins"]}
    records = parse_hist_log((LOGS / "standalone_clat_hist.1.log").read_text())
    assert {plat_idx_to_val(i) for r in records for i, c in enumerate(r.counts) if c} <= keys


def test_parse_refuses_what_fio_does_not_write() -> None:
    with pytest.raises(LogError, match="log:1: not a line of comma-separated integers"):
        parse_log("500, abc, 0, 0\n")
    with pytest.raises(LogError, match="expected 1856"):
        parse_hist_log("500, 0, 4096, 1, 2, 3\n")
    samples = parse_log((LOGS / "vnode1_iops.1.log.127.0.0.1").read_text())
    assert samples[0].time_ms == 500 and samples[0].value > 0 and samples[0].ddir == 0


def test_client_histogram_lines_are_sums_over_every_other_window() -> None:
    """The recorded finding: the last two client-side lines add up to the job's I/O count in the JSON."""
    result = parse_client_server((DATA / "clientserver.json").read_text())
    vnode1 = next(h for h in result.hosts if h.host.startswith("127.0.0.1"))
    raw = [parse_hist_log((LOGS / f"vnode1_clat_hist.{j}.log.127.0.0.1").read_text()) for j in (1, 2)]
    assert sum(sum(r[-1].counts) + sum(r[-2].counts) for r in raw) == vnode1.read.total_ios
    # Undone, each window holds about IOPS x 0.5 s of I/O (the IOPS log's figure for the same window).
    iops = parse_log((LOGS / "vnode1_iops.1.log.127.0.0.1").read_text())
    windows = window_counts(raw[0], through_client=True)
    for sample, window in zip(iops, windows, strict=False):
        assert sum(window.counts) == pytest.approx(sample.value * 0.5, rel=0.05)
    assert sum(sum(w.counts) for w in windows) == sum(sum(r.counts) for r in raw[0][-2:])
    # Stand-alone lines are per window already.
    alone = parse_hist_log((LOGS / "standalone_clat_hist.1.log").read_text())
    assert window_counts(alone, through_client=False) == alone


def test_cluster_percentiles_come_from_summed_bins_not_averaged_percentiles() -> None:
    series = build_timeseries(_files("vnode*"), host_of={"vnode1": "vnode1", "vnode2": "vnode2"}, interval_ms=500)
    assert set(series.hosts) == {"vnode1", "vnode2"}
    assert len(series.cluster) == 7  # vnode2's job 1 did not log the 4 s window: left out, and said so
    assert any("vnode2" in note and "4 s" in note for note in series.notes)
    first = series.cluster[0]
    h1, h2 = series.hosts["vnode1"][0], series.hosts["vnode2"][0]
    assert first.t_s == 0.5
    assert first.iops == pytest.approx((h1.iops or 0) + (h2.iops or 0))
    assert first.ios == h1.ios + h2.ios
    # The cluster's p99 is read from the two hosts' bins added together...
    records = {
        host: [
            window_counts(parse_hist_log((LOGS / name).read_text()), through_client=True)[0]
            for name in _files(f"{host}_clat_hist.*")
        ]
        for host in ("vnode1", "vnode2")
    }
    merged = LatencyHistogram.merge(histogram_of(r.counts) for rs in records.values() for r in rs)
    assert first.p99_us == pytest.approx((merged.percentile_ns(99.0) or 0) / 1000.0)
    # ... and lies between the hosts' own p99s, as a merged distribution must.
    assert min(h1.p99_us or 0, h2.p99_us or 0) <= (first.p99_us or 0) <= max(h1.p99_us or 0, h2.p99_us or 0)
    assert 30 < (h1.lat_mean_us or 0) < 50  # 4 KiB at QD 8 and ~200k IOPS per job: ~40 µs, from the ns log


def test_unknown_prefix_is_left_out_and_series_round_trip_through_json() -> None:
    series = build_timeseries(_files("vnode*"), host_of={"vnode1": "vnode1"}, interval_ms=500)
    assert set(series.hosts) == {"vnode1"}
    assert any("'vnode2'" in note for note in series.notes)
    again = TimeSeries.from_dict(json.loads(json.dumps(series.to_dict())))
    assert again == series


def test_stand_alone_logs_of_two_jobs_make_one_host() -> None:
    series = build_timeseries(
        _files("standalone_*"), host_of={"standalone": "local"}, interval_ms=500, through_client=False
    )
    windows = series.hosts["local"]
    assert len(windows) >= 6
    assert all(w.p99_us is not None and w.p99_us >= (w.p50_us or 0) for w in windows)
