#!/bin/sh
# PID 1 of a fabricqa virtual-lab guest (no systemd; udev only for dm-multipath, started late).
#
# The root file system is the image's initramfs, unpacked into RAM. This script and everything that differs
# between guests (hostname, storage address, MTU, SSH keys, iSCSI initiator name) arrive as a tar file
# through QEMU's fw_cfg, so one cached image serves every guest. Progress lines start with "fabricqa-init:"
# on the serial console, which the host keeps as console.log; the host fails the lab start on any FAILED step.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root

say() { echo "fabricqa-init: $*" > /dev/console; }

# The image's stub /init already mounted /proc, /sys and /dev and unpacked this guest's config over /.
mkdir -p /dev/pts /dev/shm /run /tmp /var/tmp
mount -t devpts -o gid=5,mode=620 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/lock /run/sshd
# SCST keeps each device's persistent-reservation state here and refuses add_device without it (its `make install`
# creates the folder; the image carries only SCST's modules and daemons).
mkdir -p /var/lib/scst/pr
# LIO writes each registration's APTPL metadata under /var/target/pr and answers PERSISTENT RESERVE OUT with NOT
# READY when it cannot ("filp_open(/var/target/pr/aptpl_...) failed"); targetcli's packages create the folder.
mkdir -p /var/target/pr
ln -sf /proc/self/mounts /etc/mtab
modprobe configfs
mount -t configfs configfs /sys/kernel/config
# shellcheck disable=SC1091
. /etc/fabricqa/guest.env
say "step=config ok guest=$FQ_HOSTNAME kernel=$(uname -r)"

hostname "$FQ_HOSTNAME"

# No udev: load explicitly what the storage tests need. A failure is logged and the boot goes on, so the
# console lists every missing module at once (and SSH still works for a look around).
for m in $FQ_MODULES; do
    modprobe "$m" || say "step=modules FAILED: modprobe $m"
done
say "step=modules ok"

# Interfaces get their names from their MAC addresses (set by the host), not from PCI probe order.
rename_by_mac() {
    want_mac=$1
    want_name=$2
    for dev in /sys/class/net/*; do
        [ "$(cat "$dev/address")" = "$want_mac" ] || continue
        name=${dev##*/}
        [ "$name" = "$want_name" ] && return 0
        ip link set "$name" name "fqtmp$$" && ip link set "fqtmp$$" name "$want_name"
        return $?
    done
    return 1
}
# Two passes so a swap (eth0 <-> eth1) cannot collide.
for dev in /sys/class/net/eth*; do
    [ -e "$dev" ] && ip link set "${dev##*/}" name "fq${dev##*/}" 2>/dev/null
done
rename_by_mac "$FQ_MGMT_MAC" eth0 || say "step=network FAILED: no NIC with MAC $FQ_MGMT_MAC"
rename_by_mac "$FQ_STORAGE_MAC" eth1 || say "step=network FAILED: no NIC with MAC $FQ_STORAGE_MAC"
n=2
for mac in ${FQ_PATH_MACS:-}; do
    rename_by_mac "$mac" "eth$n" || say "step=network FAILED: no NIC with MAC $mac"
    n=$((n + 1))
done

ip link set lo up
# QEMU user networking: the guest is always 10.0.2.15, the host's port forward reaches it there.
ip addr add 10.0.2.15/24 dev eth0
ip link set eth0 up
ip link set eth1 mtu "$FQ_STORAGE_MTU" || say "step=storage-link FAILED: mtu $FQ_STORAGE_MTU"
ip addr add "$FQ_STORAGE_ADDRESS" dev eth1 || say "step=storage-link FAILED: address $FQ_STORAGE_ADDRESS"
ip link set eth1 up
# Each further path: eth2, eth3, ... on its own segment and subnet, with the same MTU.
n=2
for address in ${FQ_PATH_ADDRESSES:-}; do
    ip link set "eth$n" mtu "$FQ_STORAGE_MTU" || say "step=storage-link FAILED: eth$n mtu $FQ_STORAGE_MTU"
    ip addr add "$address" dev "eth$n" || say "step=storage-link FAILED: eth$n address $address"
    ip link set "eth$n" up
    n=$((n + 1))
done
say "step=network ok eth1=$FQ_STORAGE_ADDRESS mtu=$FQ_STORAGE_MTU paths=${FQ_PATH_ADDRESSES:-none}"

# SPDK takes its memory from 2 MiB hugepages (its RDMA transport registers no memory without them), as an SPDK
# host's scripts/setup.sh reserves them.
if [ "${FQ_HUGEPAGES_MB:-0}" -gt 0 ]; then
    echo $((FQ_HUGEPAGES_MB / 2)) > /proc/sys/vm/nr_hugepages
    mkdir -p /dev/hugepages
    mount -t hugetlbfs -o pagesize=2M nodev /dev/hugepages
    got=$(awk '/^HugePages_Total:/ {print $2}' /proc/meminfo)
    if [ "$got" -eq $((FQ_HUGEPAGES_MB / 2)) ] && mountpoint -q /dev/hugepages; then
        say "step=hugepages ok pages=$got"
    else
        say "step=hugepages FAILED: $got of $((FQ_HUGEPAGES_MB / 2)) 2 MiB pages, or no hugetlbfs on /dev/hugepages"
    fi
fi

# Soft-RoCE on every storage link: rxe0 on eth1, rxe1 on eth2, ...
n=1
rxe=ok
for address in "$FQ_STORAGE_ADDRESS" ${FQ_PATH_ADDRESSES:-}; do
    if ! rdma link add "rxe$((n - 1))" type rxe netdev "eth$n"; then
        say "step=rxe FAILED: rdma link add rxe$((n - 1)) type rxe netdev eth$n"
        rxe=failed
    fi
    n=$((n + 1))
done
[ "$rxe" = ok ] && say "step=rxe ok"

# open-iscsi's iscsiadm talks to iscsid; the initiator name came with the config.
if iscsid; then
    say "step=iscsid ok"
else
    say "step=iscsid FAILED"
fi

# dm-multipath as a distribution runs it, for the SCSI targets that serve every path (targets[].paths: all): udev,
# because multipath-tools takes only the disks udev has initialized (started without it, `multipath` finds "no
# paths"), and multipathd. Only block devices are replayed through udev at boot: its network rules would rename
# the NICs named above. The configuration is this lab's, as a host's administrator would write it:
# - find_multipaths yes: a map only for a WWID seen over two paths (or one multipath already remembers), so the
#   guests' own disks and a one-path fabric's LUNs stay plain disks;
# - no_path_retry 3 with a 2 s check: once every path has failed, I/O is queued ~6 s, then fails -- the failover
#   suite's long outage must see errors within its bound (LIO's built-in entry would queue 12 x 5 s);
# - reservation_key file: mpathpersist records each map's key, as a cluster's nodes on dm-multipath must (without
#   it multipathd refuses mpathpersist's preempt: "configured reservation key doesn't match").
cat > /etc/multipath.conf <<'CONF'
defaults {
    user_friendly_names no
    find_multipaths yes
    polling_interval 2
    reservation_key file
}
overrides {
    no_path_retry 3
}
CONF
# multipathd forks before it checks anything, so it is asked whether it runs (it answers once it set up).
multipath_up() {
    multipathd || return 1
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        multipathd show daemon > /dev/null 2>&1 && return 0
        sleep 0.5
    done
    return 1
}
# udevd --daemon returns before its control socket answers: on a loaded host (five guests on two cores, the
# kill test's lab booting beside the shared one, CI of 2970c2d) the settle right after it failed with "Failed to
# wait for daemon to reply: Broken pipe". So it is pinged until it answers, and the settle is tried again once.
udev_up() {
    /lib/systemd/systemd-udevd --daemon || return 1
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30; do
        udevadm control --ping > /dev/null 2>&1 && break
        sleep 0.5
    done
    udevadm trigger --subsystem-match=block --action=add || return 1
    udevadm settle --timeout=60 || udevadm settle --timeout=60
}
if ! udev_up; then
    say "step=multipathd FAILED (udevd did not start or settle)"
elif multipath_up; then
    say "step=multipathd ok"
else
    say "step=multipathd FAILED (is dm_multipath loaded?)"
fi

if /usr/sbin/sshd -E /var/log/sshd.log; then
    say "step=sshd ok"
else
    say "step=sshd FAILED (see /var/log/sshd.log)"
fi
say "READY $FQ_HOSTNAME"

# PID 1 must reap orphans (daemons that double-fork) and must never exit; perl is Essential in Debian.
exec perl -e 'for (;;) { sleep 1 if wait() == -1 }'
