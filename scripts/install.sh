#!/usr/bin/env bash
# Installs what pytest-fabricqa and its virtual lab need on a Debian 12 machine, as root:
# the Debian packages (QEMU, the VDE switch, mmdebstrap to build the guests, fio, ssh, Chromium for the report's
# layout test), the plugin itself (editable, with its dev tools), and the virtual lab's image (built from Debian
# packages plus SPDK and SCST compiled from the archives in $FABRICQA_VENDOR_DIR or ../shared/vendor; all cached).
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
APT_PACKAGES=(
  qemu-system-x86 qemu-utils vde2 mmdebstrap cpio zstd kmod
  openssh-client openssh-server
  fio nvme-cli iproute2 util-linux e2fsprogs fdisk lvm2
  tgt  # tests/integration/test_tgt_local.py drives a tgtd of its own on loopback
  chromium  # tests/unit/test_report_layout.py lays the HTML report out in headless Chromium (~25 s to install)
  # Building SPDK's nvmf_tgt against Debian's DPDK (pytest_fabricqa/vlab/vendor.py), with ISA-L (nasm, autotools)
  build-essential pkg-config libdpdk-dev libibverbs-dev librdmacm-dev libaio-dev libnuma-dev uuid-dev libssl-dev
  nasm autoconf automake libtool python3
  # Building SCST's modules against the guest kernel's headers (fetched with apt-get download) and iscsi-scstd
  dpkg-dev binutils
)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check -e '.[dev]'

# Build (or find in the cache) the virtual lab's kernel and root filesystem.
python3 -m pytest_fabricqa.vlab.cli build
