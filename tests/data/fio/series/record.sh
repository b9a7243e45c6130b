#!/bin/sh
# Re-records the time-series and steady-state outputs in this folder from this machine's fio (see README.md).
# Targets are files in $WORK (default /var/tmp/fqa-series, ext4, so direct=1 works). The client/server case
# starts two fio servers on 127.0.0.1 and 127.0.0.2 (both loopback; two addresses, because fio's client names a
# server's log files after the address it connected to) and kills them by their pid files afterwards.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/var/tmp/fqa-series}
rm -rf "$WORK/logs" && mkdir -p "$WORK/logs"
for f in dev0 srv0 srv1; do
    [ -f "$WORK/$f.img" ] || fallocate -l 256M "$WORK/$f.img"
done
cd "$WORK/logs" || exit 1

# 1. Stand-alone, libaio, 2 jobs: iops/lat logs averaged over 500 ms, histogram log every 500 ms.
fio --output-format=json+ --ioengine=libaio --direct=1 --time_based --runtime=4 --ramp_time=1 --rw=randread \
    --bs=4k --iodepth=8 --numjobs=2 --group_reporting --readonly --name=dev0 --filename="$WORK/dev0.img" \
    --write_iops_log=standalone --write_lat_log=standalone --write_hist_log=standalone \
    --log_avg_msec=500 --log_hist_msec=500 >"$HERE/standalone-libaio.json" 2>"$HERE/standalone-libaio.stderr"
# 2. Stand-alone, psync, 1 job, the same logs.
fio --output-format=json+ --ioengine=psync --direct=1 --time_based --runtime=3 --rw=randread --bs=8k \
    --readonly --name=dev0 --filename="$WORK/dev0.img" \
    --write_iops_log=psync --write_lat_log=psync --write_hist_log=psync \
    --log_avg_msec=500 --log_hist_msec=500 >"$HERE/standalone-psync.json" 2>"$HERE/standalone-psync.stderr"
# 3. Steady state: fio's ss= (IOPS slope within 20% over 3 s after 1 s) on a 10 s run; reached or not, the
#    JSON carries a "steadystate" object.
fio --output-format=json --ioengine=libaio --direct=1 --time_based --runtime=10 --rw=randread --bs=4k \
    --iodepth=8 --readonly --name=dev0 --filename="$WORK/dev0.img" \
    --ss=iops_slope:20% --ss_dur=3 --ss_ramp=1 >"$HERE/steadystate.json" 2>"$HERE/steadystate.stderr"
# 3b. The same with a limit no run meets (slope within 0.001%): "attained" : 0 after the full 4 s.
fio --output-format=json --ioengine=libaio --direct=1 --time_based --runtime=4 --rw=randread --bs=4k \
    --iodepth=8 --readonly --name=dev0 --filename="$WORK/dev0.img" \
    --ss=iops_slope:0.001% --ss_dur=2 --ss_ramp=1 >"$HERE/steadystate-missed.json" 2>"$HERE/steadystate-missed.stderr"

# 4. Client/server: one job file per server, logs named after the lab host (vnode1/vnode2) in the client's
#    folder; the client writes each server's logs as <name>.<server address>.
fio --server=ip:127.0.0.1,8776 --daemonize="$WORK/server-1.pid"
fio --server=ip:127.0.0.2,8777 --daemonize="$WORK/server-2.pid"
sleep 1
for i in 1 2; do
    cat >"$WORK/vnode$i.fio" <<JOB
[global]
ioengine=libaio
direct=1
time_based
runtime=4
ramp_time=1
group_reporting
rw=randread
bs=4k
numjobs=2
iodepth=8
write_iops_log=$WORK/logs/vnode$i
write_lat_log=$WORK/logs/vnode$i
write_hist_log=$WORK/logs/vnode$i
log_avg_msec=500
log_hist_msec=500
ss=iops_slope:20%
ss_dur=2
ss_ramp=1

[vnode$i.srv]
filename=$WORK/srv$((i - 1)).img
JOB
done
fio --output-format=json+ --client=ip:127.0.0.1,8776 "$WORK/vnode1.fio" --readonly \
    --client=ip:127.0.0.2,8777 "$WORK/vnode2.fio" --readonly >"$HERE/clientserver.json" 2>"$HERE/clientserver.stderr"
cp "$WORK/vnode1.fio" "$HERE/clientserver-vnode1.fio"
for i in 1 2; do pkill --pidfile "$WORK/server-$i.pid"; done

# Keep every log file written (names as fio wrote them), trimmed of nothing.
mkdir -p "$HERE/logs" && rm -f "$HERE/logs/"*
for f in "$WORK/logs/"*; do cp "$f" "$HERE/logs/"; done
ls -l "$HERE/logs"
