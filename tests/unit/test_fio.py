"""fio output parsing, figures, command building, on real fio 3.33 output (tests/data/fio/README.md)."""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from fakes import Answer, ScriptedHost

from pytest_fabricqa.core.workloads import MatrixError, make_workload
from pytest_fabricqa.fio import (
    FIGURE_NAMES,
    FioError,
    FioOutputError,
    FioServer,
    LatencyHistogram,
    client_argv,
    client_result_or_raise,
    figures,
    fio_argv,
    job_file,
    job_names,
    parse_client_server,
    parse_fio_output,
    result_or_raise,
    run_fio,
    run_fio_clients,
    server_argv,
    server_stop_argv,
    shared_offsets,
    split_output,
    start_offsets,
    total_mismatch,
)
from pytest_fabricqa.fio.command import host_randseed
from pytest_fabricqa.transport.base import CommandResult

DATA = Path(__file__).resolve().parent.parent / "data" / "fio"
SERVERS = (FioServer("init1", "127.0.0.1", 8766), FioServer("init2", "127.0.0.1", 8767))


def recorded(name: str) -> CommandResult:
    """A recorded fio run as the transport would have returned it."""
    return CommandResult(
        host="vm",
        argv=tuple(shlex.split((DATA / f"{name}.cmd").read_text())),
        exit_code=int((DATA / f"{name}.rc").read_text()),
        stdout=(DATA / f"{name}.out").read_text(),
        stderr=(DATA / f"{name}.stderr").read_text(),
    )


def raw(name: str) -> dict[str, Any]:
    """The recorded JSON, read independently of the parser under test."""
    text = (DATA / f"{name}.out").read_text()
    document: dict[str, Any] = json.loads(text[text.index("\n{") + 1 :] if not text.startswith("{") else text)
    return document


# --- stand-alone runs ---------------------------------------------------------------------------


def test_group_reporting_gives_one_entry_and_fios_own_figures() -> None:
    job = raw("randread-8k-grouped")["jobs"][0]
    result = parse_fio_output(recorded("randread-8k-grouped").stdout, host="vm")

    assert result.fio_version == (DATA / "FIO_VERSION").read_text().strip() == "fio-3.33"
    assert result.host == "vm"
    assert len(result.jobs) == 1
    assert result.read.iops == job["read"]["iops"]
    assert result.read.bytes_per_s == job["read"]["bw_bytes"]
    assert result.read.mbps == pytest.approx(job["read"]["bw_bytes"] / 1e6)
    assert result.read.p99_us == job["read"]["clat_ns"]["percentile"]["99.000000"] / 1000
    assert result.read.p9999_us == job["read"]["clat_ns"]["percentile"]["99.990000"] / 1000
    assert result.read.lat_mean_us == pytest.approx(job["read"]["lat_ns"]["mean"] / 1000)
    assert not result.write.active
    assert result.missing == ()
    assert result.options["rw"] == "randread"
    assert result.options["numjobs"] == "2"


def test_figures_have_exactly_the_shared_names_and_units() -> None:
    job = raw("randread-8k-grouped")["jobs"][0]
    figs = figures(parse_fio_output(recorded("randread-8k-grouped").stdout))

    assert set(figs) == set(FIGURE_NAMES)
    assert figs["iops"] == job["read"]["iops"] + job["write"]["iops"]
    assert figs["mbps"] == pytest.approx((job["read"]["bw_bytes"] + job["write"]["bw_bytes"]) / 1e6)
    assert figs["lat_p50_us"] == job["read"]["clat_ns"]["percentile"]["50.000000"] / 1000
    assert figs["lat_p999_us"] == job["read"]["clat_ns"]["percentile"]["99.900000"] / 1000
    assert figs["cpu_usr_pct"] == job["usr_cpu"]
    assert figs["cpu_sys_pct"] == job["sys_cpu"]


def test_without_group_reporting_entries_are_combined_and_percentiles_reported_missing() -> None:
    jobs = raw("randread-8k-perjob")["jobs"]
    result = parse_fio_output(recorded("randread-8k-perjob").stdout)

    assert len(result.jobs) == len(jobs) == 4
    assert result.read.iops == pytest.approx(sum(j["read"]["iops"] for j in jobs))
    assert result.read.bytes_per_s == pytest.approx(sum(j["read"]["bw_bytes"] for j in jobs))
    weighted = sum(j["read"]["lat_ns"]["mean"] * j["read"]["clat_ns"]["N"] for j in jobs)
    assert result.read.lat_mean_us == pytest.approx(weighted / sum(j["read"]["clat_ns"]["N"] for j in jobs) / 1000)
    # Percentiles of separate jobs do not add up, and this output has no histograms.
    assert result.read.p99_us is None
    assert any("read latency percentiles" in why for why in result.missing)
    figs = figures(result)
    assert "lat_p99_us" not in figs and "lat_mean_us" in figs
    # CPU as fio's group_reporting computes it: mean per job, weighted by runtime.
    runtime = sum(j["job_runtime"] for j in jobs)
    assert result.usr_cpu_pct == pytest.approx(sum(j["usr_cpu"] * j["job_runtime"] for j in jobs) / runtime)


def test_json_plus_histograms_reproduce_fios_own_percentiles() -> None:
    job = raw("randrw-4k-jsonplus")["jobs"][0]
    result = parse_fio_output(recorded("randrw-4k-jsonplus").stdout)

    for direction in ("read", "write"):
        stats = result.direction(direction)
        assert stats.histogram is not None
        assert stats.histogram.samples == job[direction]["clat_ns"]["N"]
        for key, value_ns in job[direction]["clat_ns"]["percentile"].items():
            assert stats.histogram.percentile_ns(float(key)) == value_ns, (direction, key)


def test_mixed_workload_reports_latency_of_the_dominant_or_the_asked_direction() -> None:
    job = raw("randrw-4k-jsonplus")["jobs"][0]
    result = parse_fio_output(recorded("randrw-4k-jsonplus").stdout)

    assert job["read"]["total_ios"] > job["write"]["total_ios"]  # rwmixread=70
    assert result.dominant_direction == "read"
    assert figures(result)["lat_p99_us"] == job["read"]["clat_ns"]["percentile"]["99.000000"] / 1000
    assert figures(result, "write")["lat_p99_us"] == job["write"]["clat_ns"]["percentile"]["99.000000"] / 1000
    assert figures(result)["iops"] == pytest.approx(job["read"]["iops"] + job["write"]["iops"])


def test_write_only_run_reports_write_latency() -> None:
    job = raw("write-1m")["jobs"][0]
    result = parse_fio_output(recorded("write-1m").stdout)

    assert result.dominant_direction == "write"
    assert not result.read.active
    assert figures(result)["lat_mean_us"] == pytest.approx(job["write"]["lat_ns"]["mean"] / 1000)
    assert figures(result)["mbps"] == pytest.approx(job["write"]["bw_bytes"] / 1e6)


def test_note_before_the_json_is_kept_as_a_note() -> None:
    stdout = recorded("sync-note").stdout
    assert stdout.startswith("note:")
    result = parse_fio_output(stdout)

    assert result.notes == (stdout.splitlines()[0],)
    assert "queue depth will be capped at 1" in result.notes[0]
    assert result.read.iops > 0


def test_older_fio_spelling_in_microseconds_and_kib_reads_the_same() -> None:
    """fio < 3.0 wrote clat/lat in µs and bw in KiB/s without bw_bytes; the parser accepts both."""
    document = raw("randread-8k-grouped")
    modern = parse_fio_output(recorded("randread-8k-grouped").stdout)
    for job in document["jobs"]:
        for direction in ("read", "write"):
            block = job[direction]
            for name in ("clat", "lat", "slat"):
                ns = block.pop(f"{name}_ns")
                block[name] = {k: v / 1000 if k in ("min", "max", "mean", "stddev") else v for k, v in ns.items()}
                if "percentile" in ns:
                    block[name]["percentile"] = {k: v / 1000 for k, v in ns["percentile"].items()}
            block["bw"] = block.pop("bw_bytes") / 1024
    old = parse_fio_output(json.dumps(document, indent=2))

    assert old.read.p99_us == pytest.approx(modern.read.p99_us)
    assert old.read.lat_mean_us == pytest.approx(modern.read.lat_mean_us)
    assert old.read.bytes_per_s == pytest.approx(modern.read.bytes_per_s)


# --- failures -------------------------------------------------------------------------------------


def test_bad_option_raises_fio_error_with_fios_message_and_the_host() -> None:
    command = recorded("fail-bad-option")
    with pytest.raises(FioOutputError):
        parse_fio_output(command.stdout, host="vm")
    with pytest.raises(FioError) as caught:
        result_or_raise(command)

    assert caught.value.host == "vm"
    assert caught.value.result.exit_code == 1
    assert "fio: failed parsing rw=randbogus" in caught.value.messages
    assert str(caught.value).startswith("vm: fio failed: fio: failed parsing rw=randbogus")


def test_missing_file_raises_with_the_jobs_errno_and_keeps_the_parsed_result() -> None:
    command = recorded("fail-missing-file")
    result = parse_fio_output(command.stdout, host="vm")
    assert result.errors == ("job 'dev0' ended with error 22 (Invalid argument)",)

    with pytest.raises(FioError) as caught:
        result_or_raise(command)
    assert "dev0: you need to specify size=" in caught.value.messages
    assert "job 'dev0' ended with error 22 (Invalid argument)" in caught.value.messages
    assert caught.value.fio_result == result


def test_successful_recording_passes_through_result_or_raise() -> None:
    assert result_or_raise(recorded("randread-8k-grouped")).read.iops > 0


def test_split_output_keeps_text_on_both_sides_and_refuses_text_without_json() -> None:
    document, notes = split_output('note: one\n{\n  "jobs" : []\n}\ntrailer\n')
    assert document == {"jobs": []}
    assert notes == ("note: one", "trailer")
    with pytest.raises(FioOutputError, match="no JSON document"):
        split_output("fio: failed parsing rw=randbogus\n", host="el72h1")


# --- client/server --------------------------------------------------------------------------------


def test_client_server_gives_each_host_and_the_total() -> None:
    entries = raw("clientserver-randread-8k")["client_stats"]
    result = parse_client_server(recorded("clientserver-randread-8k").stdout, servers=SERVERS)

    assert result.fio_version == "fio-3.33"
    assert sorted(h.host for h in result.hosts) == ["init1", "init2"]
    for server in SERVERS:
        entry = next(e for e in entries if e["port"] == server.port and e["jobname"] != "All clients")
        host = result.host(server.name)
        assert host.read.iops == entry["read"]["iops"]
        assert host.read.p99_us == entry["read"]["clat_ns"]["percentile"]["99.000000"] / 1000
        assert host.options["filename"] == entry["job options"]["filename"]
    total = next(e for e in entries if e["jobname"] == "All clients")
    assert result.total.read.iops == total["read"]["iops"]
    assert result.total.usr_cpu_pct == total["usr_cpu"]
    assert "percentile" not in total["read"]["clat_ns"]  # fio leaves them out ...
    assert result.total.read.p99_us is None  # ... and without json+ they cannot be rebuilt
    assert result.total.missing and "total read latency percentiles" in result.total.missing[0]
    assert "lat_p99_us" not in figures(result.total)
    assert figures(result.total)["lat_mean_us"] == pytest.approx(total["read"]["lat_ns"]["mean"] / 1000)
    assert any(note.startswith("<vm> Starting 2 processes") for note in result.notes)


def test_client_server_total_equals_the_sum_of_hosts() -> None:
    result = parse_client_server(recorded("clientserver-randread-8k").stdout, servers=SERVERS)
    hosts_iops = sum(h.read.iops for h in result.hosts)

    assert result.total.read.iops != hosts_iops  # fio's total is not the plain sum ...
    assert result.total.read.iops == pytest.approx(hosts_iops, rel=0.01)  # ... but within rounding
    assert total_mismatch(result) is None


def test_client_server_total_mismatch_is_reported_when_a_host_is_lost() -> None:
    document = raw("clientserver-randread-8k")
    document["client_stats"] = [
        e for e in document["client_stats"] if e["port"] != 8767 or e["jobname"] == "All clients"
    ]
    result = parse_client_server(json.dumps(document, indent=2), servers=SERVERS)

    message = total_mismatch(result)
    assert message is not None
    assert message.startswith("the all-clients I/O count of ")
    assert "differs from the sum of 1 hosts" in message and "bytes" in message
    assert f"{result.total.read.total_ios:,} I/Os" in message


def test_client_server_json_plus_fills_the_totals_percentiles_from_merged_histograms() -> None:
    entries = raw("clientserver-randread-8k-jsonplus-perjob")["client_stats"]
    result = parse_client_server(recorded("clientserver-randread-8k-jsonplus-perjob").stdout, servers=SERVERS)

    assert [len(h.jobs) for h in result.hosts] == [2, 2]
    total_entry = next(e for e in entries if e["jobname"] == "All clients")
    assert result.total.missing == ()
    assert result.total.read.histogram is not None
    assert result.total.read.histogram.samples == total_entry["read"]["clat_ns"]["N"]
    merged_p99 = result.total.read.p99_us
    host_p99 = [h.read.p99_us for h in result.hosts]
    assert merged_p99 is not None and None not in host_p99
    assert min(p for p in host_p99 if p) <= merged_p99 <= max(p for p in host_p99 if p)
    assert set(figures(result.total)) == set(FIGURE_NAMES)
    assert total_mismatch(result) is None


def test_merging_a_histogram_with_itself_keeps_its_percentiles() -> None:
    histogram = parse_fio_output(recorded("randrw-4k-jsonplus").stdout).read.histogram
    assert histogram is not None
    doubled = LatencyHistogram.merge([histogram, histogram])
    assert doubled.samples == 2 * histogram.samples
    for percent in (50.0, 99.0, 99.9, 99.99):
        assert doubled.percentile_ns(percent) == histogram.percentile_ns(percent)


def test_client_server_hosts_without_a_server_list_are_named_address_and_port() -> None:
    result = parse_client_server(recorded("clientserver-randread-8k").stdout)
    assert sorted(h.host for h in result.hosts) == ["127.0.0.1:8766", "127.0.0.1:8767"]
    with pytest.raises(KeyError, match=r"hosts: 127\.0\.0\.1"):
        result.host("el72h1")


def test_server_refusing_a_write_under_readonly_is_a_failure_even_though_fio_exits_0() -> None:
    command = recorded("clientserver-write-refused")
    assert command.exit_code == 0
    with pytest.raises(FioError) as caught:
        client_result_or_raise(command, servers=SERVERS[:1])
    text = str(caught.value)
    assert "<vm> fio: job <(null)> has write or trim bit set, but fio is in read-only mode" in text
    assert "server init1 (ip:127.0.0.1,8766) reported no job" in text


def test_stand_alone_parser_refuses_client_server_output_and_vice_versa() -> None:
    with pytest.raises(FioOutputError, match="parse_client_server"):
        parse_fio_output(recorded("clientserver-randread-8k").stdout)
    with pytest.raises(FioOutputError, match="not client/server"):
        parse_client_server(recorded("randread-8k-grouped").stdout)


# --- command lines --------------------------------------------------------------------------------

READ = make_workload("randread", "8k", numjobs=4, iodepth=128, runtime=60, ramp_time=5)
WRITE = make_workload("randwrite", "8k", numjobs=4, iodepth=128)


def test_fio_argv_has_the_fixed_options_and_one_job_per_device() -> None:
    argv = fio_argv(READ, ["/dev/nvme0n1", "/dev/nvme1n1"])

    assert argv[0] == "fio"
    for option in ("--output-format=json+", "--ioengine=libaio", "--direct=1", "--time_based", "--runtime=60",
                   "--ramp_time=5", "--group_reporting", "--rw=randread", "--bs=8k", "--numjobs=4",
                   "--iodepth=128", "--readonly"):  # fmt: skip
        assert option in argv
    assert argv[-4:] == ["--name=nvme0n1", "--filename=/dev/nvme0n1", "--name=nvme1n1", "--filename=/dev/nvme1n1"]
    # Global options must precede the first job section to apply to every job.
    assert max(argv.index(o) for o in ("--readonly", "--group_reporting")) < argv.index("--name=nvme0n1")


def test_write_workloads_drop_readonly_and_size_offset_and_extras_are_passed() -> None:
    sized = make_workload("randwrite", "8k", numjobs=1, size="2g")
    argv = fio_argv(sized, ["/dev/sdb"], output_format="json", group_reporting=False)
    assert "--readonly" not in argv and "--group_reporting" not in argv
    assert "--size=2g" in argv and "--output-format=json" in argv

    with pytest.raises(ValueError, match="output_format"):
        fio_argv(READ, ["/dev/sdb"], output_format="terse")
    with pytest.raises(ValueError, match="at least one device"):
        fio_argv(READ, [])


def test_job_names_are_unique_and_safe() -> None:
    assert job_names(["/dev/sdb", "/dev/disk/by-id/x y", "/other/sdb"]) == ["sdb", "x_y", "sdb-2"]
    assert job_names(["/dev/nvme0n1"], prefix="el72h1.") == ["el72h1.nvme0n1"]


def test_job_file_never_says_readonly_and_has_one_section_per_device() -> None:
    text = job_file(READ, ["/dev/nvme0n1", "/dev/nvme1n1"], prefix="el72h1.")
    lines = text.splitlines()
    assert "readonly" not in lines
    assert lines[1] == "[global]"
    assert "ioengine=libaio" in lines and "time_based" in lines and "iodepth=128" in lines
    assert "[el72h1.nvme0n1]" in lines and "filename=/dev/nvme1n1" in lines
    # The recorded client/server run used the same shape of job file.
    assert "[global]" in (DATA / "clientserver-client0.fio").read_text()


def test_client_argv_puts_readonly_after_each_job_file() -> None:
    argv = client_argv([(SERVERS[0], "/tmp/a.fio"), (SERVERS[1], "/tmp/b.fio")], readonly=True)
    assert argv == [
        "fio", "--output-format=json+",
        "--client=ip:127.0.0.1,8766", "/tmp/a.fio", "--readonly",
        "--client=ip:127.0.0.1,8767", "/tmp/b.fio", "--readonly",
    ]  # fmt: skip
    # The recorded run that worked used exactly this order.
    recorded_argv = recorded("clientserver-randread-8k").argv
    assert recorded_argv.index("--readonly") == recorded_argv.index("--client=ip:127.0.0.1,8766") + 2
    assert "--readonly" not in client_argv([(SERVERS[0], "/tmp/a.fio")], readonly=False)


def test_server_argv_and_ipv6() -> None:
    assert server_argv(address="127.0.0.1", port=8766, pidfile="/run/fio.pid") == [
        "fio", "--server=ip:127.0.0.1,8766", "--daemonize=/run/fio.pid",
    ]  # fmt: skip
    assert server_argv() == ["fio", "--server=,8765"]
    assert FioServer("h", "fd00::1", 4444).connect_string == "ip6:fd00::1,4444"
    assert server_stop_argv("/run/fio.pid") == ["pkill", "-x", "fio", "--pidfile", "/run/fio.pid"]


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_run_fio_for_real_on_a_file(tmp_path: Path) -> None:
    """The built argv really runs: a 1-second libaio O_DIRECT read of a file (tmp_path must allow O_DIRECT)."""
    from pytest_fabricqa.transport.local import LocalHost

    device = tmp_path / "dev.img"
    with device.open("wb") as handle:
        handle.truncate(16 * 1024 * 1024)
    try:  # tmpfs (a /tmp in RAM) refuses O_DIRECT; fio would then fail for a reason unrelated to the argv
        os.close(os.open(device, os.O_RDONLY | os.O_DIRECT))
    except OSError:
        pytest.skip(f"{tmp_path} does not support O_DIRECT")
    workload = make_workload("randread", "4k", numjobs=1, iodepth=4, runtime=1, ramp_time=0)
    result = run_fio(LocalHost("local"), workload, [str(device)])

    assert result.fio_version.startswith("fio-")
    assert result.host == "local"
    figs = figures(result)
    assert set(figs) == set(FIGURE_NAMES)
    assert figs["iops"] > 0 and not math.isnan(figs["lat_p99_us"])

    with pytest.raises(FioError, match=r"local: fio failed: .*missing\.img"):
        run_fio(LocalHost("local"), workload, [str(tmp_path / "missing.img")])


class _Controller(ScriptedHost):
    """A host that keeps the job files it is sent and answers the fio client with a recorded run."""

    def __init__(self, answer: CommandResult) -> None:
        super().__init__("controller")
        self.recorded = answer
        self.files: dict[str, str] = {}

    def answer(self, argv: tuple[str, ...]) -> Answer:
        # client_script_argv: sh -c SCRIPT sh WORKDIR N NAME1 TEXT1 ... then fio's argv.
        count = int(argv[5])
        self.files.update(dict(zip(argv[6 : 6 + 2 * count : 2], argv[7 : 7 + 2 * count : 2], strict=True)))
        return self.recorded.exit_code, self.recorded.stdout, self.recorded.stderr


def test_each_host_gets_its_own_randseed_in_every_job_section() -> None:
    # fio seeds random offsets from the job number, and each fio --server numbers its jobs from 1: without a
    # seed of their own, two initiators send the same offset stream to the same LUN.
    workload = make_workload("randread", "8k", numjobs=2, iodepth=8, runtime=2, ramp_time=0)
    case = f"nvme-tcp-{workload.name}"
    seeds = {host: host_randseed(case, host) for host in ("srv0", "srv1")}
    assert seeds["srv0"] != seeds["srv1"]
    assert host_randseed(case, "srv0") == seeds["srv0"]  # the same case repeats its offsets run after run
    assert host_randseed(f"iscsi-{workload.name}", "srv0") != seeds["srv0"]
    text = job_file(workload, ["/dev/nvme1n1", "/dev/nvme2n1"], prefix="srv0.", randseed=seeds["srv0"])
    sections = text.split("\n\n")
    assert "randseed" not in sections[0]  # not in [global]: fio's JSON reports global options once for all hosts
    assert all(f"randseed={seeds['srv0']}" in section.splitlines() for section in sections[1:])
    # The job files of the recorded run (tests/data/fio/record.sh, 7b) are exactly what job_file writes.
    for i, host in enumerate(("srv0", "srv1")):
        expected = job_file(workload, [f"/tmp/fqa-record/{host}.img"], prefix=f"{host}.", randseed=seeds[host])
        assert (DATA / f"clientserver-randseed-client{i}.fio").read_text() == expected
    with pytest.raises(MatrixError, match="'randseed' is set by the workload itself"):
        make_workload("randread", "8k").__class__(name="r", rw="randread", bs="8k", extra=(("randseed", "1"),))


def test_a_client_server_run_sends_and_reports_one_seed_per_host() -> None:
    workload = make_workload("randread", "8k", numjobs=2, iodepth=8, runtime=2, ramp_time=0)
    case = f"nvme-tcp-{workload.name}"
    servers = [FioServer("srv0", "127.0.0.1", 8768), FioServer("srv1", "127.0.0.1", 8769)]
    controller = _Controller(recorded("clientserver-randseed"))
    jobs = [(server, [f"/tmp/fqa-record/{server.name}.img"]) for server in servers]
    result = run_fio_clients(controller, jobs, workload, case=case)
    sent = {path.split("fabricqa-", 1)[1].split("-", 1)[0]: text for path, text in controller.files.items()}
    assert set(sent) == {"srv0", "srv1"}
    for server in servers:
        seed = host_randseed(case, server.name)
        assert f"randseed={seed}" in sent[server.name]
        # fio 3.33 echoed each host's seed under that host's own "job options".
        assert result.host(server.name).randseeds == (seed,)


def test_hosts_sharing_a_random_offset_stream_is_a_failure_reason() -> None:
    # The run recorded before issue 11: no randseed, so fio's default seed gave both servers the same offsets.
    before = parse_client_server(recorded("clientserver-randread-8k").stdout, servers=SERVERS)
    assert shared_offsets(before) == (
        "hosts init1, init2 reported no randseed: fio's default seed sends every host the same random offsets"
    )
    servers = [FioServer("srv0", "127.0.0.1", 8768), FioServer("srv1", "127.0.0.1", 8769)]
    after = parse_client_server(recorded("clientserver-randseed").stdout, servers=servers)
    assert shared_offsets(after) is None
    # Two hosts given the same seed (the same case and host name twice) are caught too.
    text = recorded("clientserver-randseed").stdout
    seeds = [host.randseeds[0] for host in after.hosts]
    same = parse_client_server(text.replace(str(seeds[1]), str(seeds[0])), servers=servers)
    assert shared_offsets(same) == f"hosts shared a random offset stream: srv0, srv1 (randseed {seeds[0]})"


def test_how_far_apart_the_hosts_started_comes_from_fios_job_start() -> None:
    servers = [FioServer("srv0", "127.0.0.1", 8768), FioServer("srv1", "127.0.0.1", 8769)]
    # fio 3.33 (recorded) has no per-job start time: nothing is invented.
    recorded_333 = parse_client_server(recorded("clientserver-randseed").stdout, servers=servers)
    assert all(host.start_ms is None for host in recorded_333.hosts) and start_offsets(recorded_333) == {}
    # fio >= 3.36 adds "job_start" (ms since the epoch) to every job entry (stat.c, commit 12d325ca): the same
    # recording with that key added, srv1's jobs 37 ms after srv0's.
    document, _ = split_output(recorded("clientserver-randseed").stdout)
    starts = {8768: 1796083200000, 8769: 1796083200037}
    for entry in document["client_stats"]:
        entry["job_start"] = starts[entry["port"]] + (0 if entry["jobname"] == "All clients" else 1)
    with_start = parse_client_server(json.dumps(document, indent=1) + "\n", servers=servers)
    assert with_start.host("srv0").start_ms == 1796083200001
    assert start_offsets(with_start) == {"srv0": 0.0, "srv1": 37.0}
    # One host without it and the answer is none, not half of one.
    del document["client_stats"][0]["job_start"], document["client_stats"][2]["job_start"]
    assert start_offsets(parse_client_server(json.dumps(document, indent=1) + "\n", servers=servers)) == {}
