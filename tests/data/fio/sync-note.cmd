fio --output-format=json --ioengine=psync --direct=1 --time_based --runtime=2 --rw=randread --bs=8k --iodepth=8 --readonly --name=dev0 --filename=/tmp/fqa-record/dev0.img
