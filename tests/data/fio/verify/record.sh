#!/bin/sh
# Re-records fio's verify output in this folder (see README.md beside it): fio in user space on a regular file,
# written with a verifiable pattern, some bytes then changed with dd, then read back with verify_only.
# Nothing but $WORK/dev.img is written (default /tmp/fqa-verify, an ext4 file system, so direct=1 works).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/tmp/fqa-verify}
mkdir -p "$WORK"
rm -f "$WORK/dev.img"
fallocate -l 64M "$WORK/dev.img"
DEV="$WORK/dev.img"

rec() {  # rec NAME fio-args... : stdout -> NAME.out, stderr -> NAME.stderr, exit code -> NAME.rc, argv -> NAME.cmd
    name=$1; shift
    fio "$@" >"$HERE/$name.out" 2>"$HERE/$name.stderr"
    echo $? >"$HERE/$name.rc"
    echo "fio $*" >"$HERE/$name.cmd"
}
# The region of every case: 2 MiB at 1 MiB, 8 KiB blocks, sequential, crc32c with fio's header in each block.
JOB="--output-format=json --ioengine=libaio --direct=1 --rw=write --bs=8k --iodepth=8 --offset=1M --size=2M \
--verify=crc32c --verify_state_save=0 --name=region0 --filename=$DEV"

# 1. Write with verify: every block read back while writing (verify_backlog) and at the end (do_verify).
rec write-verify-8k $JOB --do_verify=1 --verify_backlog=64 --continue_on_error=verify
# 2. verify_only of the intact region: every block read back and checked, nothing written.
rec verify-only-clean-8k $JOB --verify_only=1 --continue_on_error=verify
# 3. Corrupt two blocks with dd: the second 4 KiB of block 5 (data: its header stays intact) and the whole first
#    4 KiB of block 9 (its header).
dd if=/dev/urandom of="$DEV" bs=4096 count=1 seek=$(( (1048576 + 5 * 8192 + 4096) / 4096 )) conv=notrunc oflag=direct 2>/dev/null
dd if=/dev/zero of="$DEV" bs=4096 count=1 seek=$(( (1048576 + 9 * 8192) / 4096 )) conv=notrunc oflag=direct 2>/dev/null
echo "block 5 data at byte $(( 1048576 + 5 * 8192 + 4096 )) (urandom, 4096 bytes); block 9 header at byte $(( 1048576 + 9 * 8192 )) (zeros, 4096 bytes)" >"$HERE/corrupted-at.txt"
# 4. verify_only with continue_on_error=verify: both blocks named, the job's error is 84 (EILSEQ), exit code 0.
rec verify-only-corrupt-8k $JOB --verify_only=1 --continue_on_error=verify
# 5. The same without continue_on_error: fio stops the job at the first failed batch, exit code 1.
rec verify-only-corrupt-8k-stops $JOB --verify_only=1
# 6. verify_only WITH verify_backlog (fio 3.33): reads the region and reports no mismatch at all. A verify that
#    cannot fail: the plugin never combines the two (pytest_fabricqa/fio/verify.py).
rec verify-only-backlog-misses-8k $JOB --verify_only=1 --verify_backlog=64 --continue_on_error=verify
fio --version >"$HERE/FIO_VERSION"
date -u '+%Y-%m-%d %H:%M UTC' >"$HERE/RECORDED_AT"
rm -f "$DEV"
