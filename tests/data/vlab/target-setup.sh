#!/bin/sh
# Run on the storage guest (vstor role): two null_blk devices, nvmet over tcp+rdma, LIO iSCSI+iSER.
set -e
ADDR=$1
NQN=nqn.2024-01.io.fabricqa:vlab-null0
IQN=iqn.2024-01.io.fabricqa:vlab-null1
modprobe null_blk nr_devices=2 gb=1
N=/sys/kernel/config/nvmet
mkdir $N/subsystems/$NQN
echo 1 > $N/subsystems/$NQN/attr_allow_any_host
mkdir $N/subsystems/$NQN/namespaces/1
echo -n /dev/nullb0 > $N/subsystems/$NQN/namespaces/1/device_path
echo 1 > $N/subsystems/$NQN/namespaces/1/enable
mkdir $N/ports/1
echo ipv4 > $N/ports/1/addr_adrfam; echo tcp > $N/ports/1/addr_trtype
echo $ADDR > $N/ports/1/addr_traddr; echo 4420 > $N/ports/1/addr_trsvcid
ln -s $N/subsystems/$NQN $N/ports/1/subsystems/$NQN
mkdir $N/ports/2
echo ipv4 > $N/ports/2/addr_adrfam; echo rdma > $N/ports/2/addr_trtype
echo $ADDR > $N/ports/2/addr_traddr; echo 4421 > $N/ports/2/addr_trsvcid
ln -s $N/subsystems/$NQN $N/ports/2/subsystems/$NQN
T=/sys/kernel/config/target
mkdir -p $T/core/iblock_0/null1
echo udev_path=/dev/nullb1 > $T/core/iblock_0/null1/control
echo 1 > $T/core/iblock_0/null1/enable
mkdir -p $T/iscsi/$IQN/tpgt_1/lun/lun_0
ln -s $T/core/iblock_0/null1 $T/iscsi/$IQN/tpgt_1/lun/lun_0/null1
mkdir $T/iscsi/$IQN/tpgt_1/np/$ADDR:3260
echo 1 > $T/iscsi/$IQN/tpgt_1/np/$ADDR:3260/iser
echo 0 > $T/iscsi/$IQN/tpgt_1/attrib/authentication
echo 1 > $T/iscsi/$IQN/tpgt_1/attrib/generate_node_acls
echo 1 > $T/iscsi/$IQN/tpgt_1/attrib/cache_dynamic_acls
echo 0 > $T/iscsi/$IQN/tpgt_1/attrib/demo_mode_write_protect
echo 1 > $T/iscsi/$IQN/tpgt_1/enable
echo target ready
