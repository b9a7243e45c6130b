fio --output-format=json --ioengine=libaio --direct=1 --time_based --runtime=3 --ramp_time=1 --rw=randbogus --bs=8k --name=dev0 --filename=/tmp/fqa-record/dev0.img
