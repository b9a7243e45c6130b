#!/bin/sh
# Re-records the fio outputs in this folder from this machine's fio (see README.md beside it).
# Targets are files in $WORK (default /tmp/fqa-record, an ext4 file system, so direct=1 works); the
# client/server case starts two fio servers on 127.0.0.1 only and kills them by their pid files afterwards.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/tmp/fqa-record}
mkdir -p "$WORK"
for f in dev0 dev1 srv0 srv1; do
    [ -f "$WORK/$f.img" ] || fallocate -l 256M "$WORK/$f.img"
done
COMMON="--ioengine=libaio --direct=1 --time_based --runtime=3 --ramp_time=1"

rec() {  # rec NAME fio-args... : stdout -> NAME.json (or .out), stderr -> NAME.stderr, exit code -> NAME.rc
    name=$1; shift
    fio "$@" >"$HERE/$name.out" 2>"$HERE/$name.stderr"
    echo $? >"$HERE/$name.rc"
    echo "fio $*" >"$HERE/$name.cmd"
}

# 1. Two devices, group_reporting on: one aggregate job entry.
rec randread-8k-grouped --output-format=json $COMMON --group_reporting --rw=randread --bs=8k \
    --numjobs=2 --iodepth=16 --readonly \
    --name=dev0 --filename="$WORK/dev0.img" --name=dev1 --filename="$WORK/dev1.img"
# 2. The same without group_reporting: one entry per job clone (2 devices x numjobs 2 = 4 entries).
rec randread-8k-perjob --output-format=json $COMMON --rw=randread --bs=8k --numjobs=2 --iodepth=16 \
    --readonly --name=dev0 --filename="$WORK/dev0.img" --name=dev1 --filename="$WORK/dev1.img"
# 3. Mixed random read/write, json+ (clat_ns carries "bins").
rec randrw-4k-jsonplus --output-format=json+ $COMMON --group_reporting --rw=randrw --rwmixread=70 --bs=4k \
    --numjobs=1 --iodepth=32 --name=dev0 --filename="$WORK/dev0.img"
# 4. Sequential write 1 MiB.
rec write-1m --output-format=json $COMMON --group_reporting --rw=write --bs=1m --numjobs=1 --iodepth=4 \
    --name=dev0 --filename="$WORK/dev0.img"
# 5. A synchronous engine with iodepth > 1: fio prints a "note:" line on stdout before the JSON.
rec sync-note --output-format=json --ioengine=psync --direct=1 --time_based --runtime=2 --rw=randread \
    --bs=8k --iodepth=8 --readonly --name=dev0 --filename="$WORK/dev0.img"
# 6. Failures: an unknown option value, and a read-only run on a file that does not exist.
rec fail-bad-option --output-format=json $COMMON --rw=randbogus --bs=8k --name=dev0 --filename="$WORK/dev0.img"
rec fail-missing-file --output-format=json $COMMON --rw=randread --bs=8k --readonly --name=dev0 \
    --filename="$WORK/does-not-exist.img"

# 7. Client/server: two servers on loopback, different ports, each with its own job file (own device path).
#    `readonly` is a command-line-only option (a job file saying `readonly` is dropped: "Bad option <readonly>"),
#    so it goes after each client's job file: `--client=H JOB --readonly`. Placing it before the job file
#    (`--client=H --readonly JOB`) made fio 3.33 run the first job file on both servers.
for p in 8766 8767; do
    fio --server=ip:127.0.0.1,$p --daemonize="$WORK/server-$p.pid"
done
sleep 1
for i in 0 1; do
    cat >"$WORK/client$i.fio" <<JOB
[global]
ioengine=libaio
direct=1
time_based
runtime=3
ramp_time=1
group_reporting
rw=randread
bs=8k
numjobs=2
iodepth=16

[srv$i]
filename=$WORK/srv$i.img
JOB
    # The same read without group_reporting, for the json+ recording.
    sed '/^group_reporting$/d' "$WORK/client$i.fio" >"$WORK/client$i-perjob.fio"
done
rec clientserver-randread-8k --output-format=json --client=ip:127.0.0.1,8766 "$WORK/client0.fio" --readonly \
    --client=ip:127.0.0.1,8767 "$WORK/client1.fio" --readonly
rec clientserver-randread-8k-jsonplus-perjob --output-format=json+ \
    --client=ip:127.0.0.1,8766 "$WORK/client0-perjob.fio" --readonly \
    --client=ip:127.0.0.1,8767 "$WORK/client1-perjob.fio" --readonly
# A write job under --readonly: the server refuses and drops it, yet the client exits 0 with no entries.
sed 's/^rw=randread$/rw=randwrite/' "$WORK/client0.fio" >"$WORK/client0-write.fio"
rec clientserver-write-refused --output-format=json --client=ip:127.0.0.1,8766 "$WORK/client0-write.fio" \
    --readonly
cp "$WORK/client0.fio" "$HERE/clientserver-client0.fio"
for p in 8766 8767; do
    kill "$(cat "$WORK/server-$p.pid")" 2>/dev/null
done

# 7b. Per-host randseed (issue 11): the job files pytest_fabricqa.fio.command.job_file writes for a 2 s randread
#     of case nvme-tcp-randread-8k-qd8-j2 from two hosts, each with its own seed in its job section; fio echoes
#     each host's seed back under that host's "job options". Own servers (8768, 8769), so it runs on its own:
#     sed -n '/^# 7b/,/^# 8\./p' record.sh | sh  (from the repository root, with the package importable).
for p in 8768 8769; do
    fio --server=ip:127.0.0.1,$p --daemonize="$WORK/server-$p.pid"
done
sleep 1
python3 - "$WORK" "$HERE" <<'PY'
import sys
from pytest_fabricqa.fio.command import host_randseed, job_file
from pytest_fabricqa.workloads import make_workload
work, here = sys.argv[1], sys.argv[2]
workload = make_workload("randread", "8k", numjobs=2, iodepth=8, runtime=2, ramp_time=0)
for i, host in enumerate(("srv0", "srv1")):
    seed = host_randseed(f"nvme-tcp-{workload.name}", host)
    text = job_file(workload, [f"{work}/{host}.img"], prefix=f"{host}.", randseed=seed)
    for folder in (work, here):
        with open(f"{folder}/clientserver-randseed-client{i}.fio", "w") as fh:
            fh.write(text)
PY
rec clientserver-randseed --output-format=json --client=ip:127.0.0.1,8768 "$WORK/clientserver-randseed-client0.fio" \
    --readonly --client=ip:127.0.0.1,8769 "$WORK/clientserver-randseed-client1.fio" --readonly
for p in 8768 8769; do
    kill "$(cat "$WORK/server-$p.pid")" 2>/dev/null
done

# 8. Two /proc/stat snapshots around a 3-second fio run (for pytest_fabricqa.cpu).
cat /proc/stat >"$HERE/proc-stat-before.txt"
fio --output-format=json $COMMON --rw=randread --bs=4k --iodepth=32 --readonly --name=dev0 \
    --filename="$WORK/dev0.img" >/dev/null 2>&1
cat /proc/stat >"$HERE/proc-stat-after.txt"
fio --version >"$HERE/FIO_VERSION"
date -u +%Y-%m-%dT%H:%MZ >"$HERE/RECORDED_AT"
