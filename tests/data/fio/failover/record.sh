#!/bin/sh
# Re-records fio's IOPS logs around a stall in this folder (see README.md beside it): fio in user space on a
# regular file in $WORK (default /tmp/fqa-failover, ext4, so direct=1 works) and over TCP on loopback (port 8799);
# no block device is touched. Every case: NAME.cmd (the exact command), NAME.json (fio's stdout),
# NAME.stderr, NAME.rc, NAME_iops.<job>.log; the runs a signal stopped also NAME.fault (when the stop and the
# continue were sent, Unix ms, on the same clock as their logs: they log with log_unix_epoch=1).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/tmp/fqa-failover}
PORT=${PORT:-8799}
mkdir -p "$WORK"
rm -f "$WORK"/*_iops.*.log "$WORK/dev.img"
fallocate -l 64M "$WORK/dev.img"
LOG="--log_avg_msec=100 --output-format=json"
FILE="--filename=$WORK/dev.img --size=64M --ioengine=psync --direct=1 --rw=randwrite --bs=4k"

now_ms() { date +%s%3N; }
finish() {  # finish NAME: move the logs here, keep the exit code and the command
    name=$1
    for log in "$WORK/${name}"_iops.*.log; do mv "$log" "$HERE/"; done
}

# 1. fio's own pause: 2 s of thinktime; thinktime_iotime=2s (thinktime_blocks too high to trigger first).
name=thinktime-iotime
set -- fio $LOG --name=paused $FILE --rate_iops=500 --time_based --runtime=10s \
    --thinktime=2s --thinktime_blocks=1000000 --thinktime_iotime=2s --write_iops_log="$WORK/$name"
echo "$*" >"$HERE/$name.cmd"
nice -n 19 "$@" >"$HERE/$name.json" 2>"$HERE/$name.stderr"; echo $? >"$HERE/$name.rc"
finish $name

# 2. One host, two jobs: "steady" runs throughout, "paused" stops after 1,000 blocks (4 s at 250 IOPS) for 4 s:
#    the host's throughput halves and never comes back within the run, with no stall.
name=half-throughput
set -- fio $LOG $FILE --rate_iops=250 --time_based --runtime=8s --write_iops_log="$WORK/$name" \
    --name=steady --name=paused --thinktime=4s --thinktime_blocks=1000
echo "$*" >"$HERE/$name.cmd"
nice -n 19 "$@" >"$HERE/$name.json" 2>"$HERE/$name.stderr"; echo $? >"$HERE/$name.rc"
finish $name

# 3. fio itself stopped: SIGSTOP 2 s after the start, SIGCONT 2 s later. --thread: one process (without it the
#    job runs in a forked child and stopping the pid fio started stops nothing).
name=sigstop
set -- fio $LOG --thread --name=stopped $FILE --rate_iops=500 --time_based --runtime=6s \
    --write_iops_log="$WORK/$name" --log_unix_epoch=1
echo "$*" >"$HERE/$name.cmd"
nice -n 19 "$@" >"$HERE/$name.json" 2>"$HERE/$name.stderr" &
FIO=$!
sleep 2
start=$(now_ms); kill -STOP $FIO; sleep 2; end=$(now_ms); kill -CONT $FIO
wait $FIO; echo $? >"$HERE/$name.rc"
echo "$start $end" >"$HERE/$name.fault"
finish $name

# 4. I/O in flight and nothing completes, fio running: fio's net engine writes 4 KiB at 500/s over TCP to a
#    fio receiver on loopback (small socket buffers), the receiver is SIGSTOPped for 2 s: the sender's writes
#    block in the kernel (what a lost path with queueing looks like to fio).
name=receiver-stopped
nice -n 19 fio --output-format=json --output="$WORK/$name-receiver.json" --thread --name=receiver --ioengine=net \
    --listen --port=$PORT --protocol=tcp --window_size=16k --rw=read --bs=4k --size=1G 2>"$WORK/$name-receiver.stderr" &
RECEIVER=$!
sleep 1
set -- fio $LOG --name=sender --ioengine=net --hostname=127.0.0.1 --port=$PORT --protocol=tcp --window_size=16k \
    --rw=write --bs=4k --size=1G --rate_iops=500 --time_based --runtime=6s --write_iops_log="$WORK/$name" \
    --log_unix_epoch=1
echo "$*" >"$HERE/$name.cmd"
nice -n 19 "$@" >"$HERE/$name.json" 2>"$HERE/$name.stderr" &
FIO=$!
sleep 2
start=$(now_ms); kill -STOP $RECEIVER; sleep 2; end=$(now_ms); kill -CONT $RECEIVER
wait $FIO; echo $? >"$HERE/$name.rc"
echo "$start $end" >"$HERE/$name.fault"
wait $RECEIVER
finish $name

# 5. A real I/O error: writes to /dev/full fail with ENOSPC. fio 3.33 ends the job at the first one although
#    continue_on_error=all and ignore_error name it (ENOSPC ends a job in fio); total_err 1, error 28, exit 1.
name=io-error-enospc
set -- fio $LOG --name=full --filename=/dev/full --rw=write --bs=4k --size=256k --ioengine=psync \
    --continue_on_error=all --ignore_error=ENOSPC:ENOSPC
echo "$*" >"$HERE/$name.cmd"
nice -n 19 "$@" >"$HERE/$name.json" 2>"$HERE/$name.stderr"; echo $? >"$HERE/$name.rc"

fio --version >"$HERE/FIO_VERSION"
date -u '+%Y-%m-%d %H:%M UTC' >"$HERE/RECORDED_AT"
rm -f "$WORK/dev.img" "$WORK/$name-receiver.json" "$WORK/$name-receiver.stderr"
