fio --output-format=json --ioengine=libaio --direct=1 --time_based --runtime=3 --ramp_time=1 --rw=randread --bs=8k --readonly --name=dev0 --filename=/tmp/fqa-record/does-not-exist.img
