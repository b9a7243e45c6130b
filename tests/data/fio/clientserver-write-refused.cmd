fio --output-format=json --client=ip:127.0.0.1,8766 /tmp/fqa-record/client0-write.fio --readonly
