fio --log_avg_msec=100 --output-format=json --name=full --filename=/dev/full --rw=write --bs=4k --size=256k --ioengine=psync --continue_on_error=all --ignore_error=ENOSPC:ENOSPC
