#!/usr/bin/env bash
# Install what mgrp needs beyond the Rust toolchain, only if it is missing.
set -euo pipefail

need=()
command -v ip >/dev/null || [ -x /usr/sbin/ip ] || need+=(iproute2)
command -v tc >/dev/null || [ -x /usr/sbin/tc ] || need+=(iproute2)
command -v ethtool >/dev/null || [ -x /usr/sbin/ethtool ] || need+=(ethtool)
command -v sysctl >/dev/null || [ -x /usr/sbin/sysctl ] || need+=(procps)
command -v setpriv >/dev/null || need+=(util-linux)
# Live capture for passive measurement links libpcap (AF_PACKET, TPACKET_V3 ring).
dpkg -s libpcap-dev >/dev/null 2>&1 || need+=(libpcap-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
# The eBPF transfer modes (crates/control): clang compiles the programs, bpftool dumps the
# kernel's types (vmlinux.h), and the vendored libbpf links libelf and zlib (built with make).
command -v clang >/dev/null || need+=(clang)
command -v bpftool >/dev/null || [ -x /usr/sbin/bpftool ] || need+=(bpftool)
command -v make >/dev/null || need+=(make)
dpkg -s libelf-dev >/dev/null 2>&1 || need+=(libelf-dev)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need+=(zlib1g-dev)
# The dashboard's browser test: Debian's Chromium (driven by playwright-core, which downloads no
# browser) and a font for the screenshot.
command -v chromium >/dev/null || need+=(chromium)
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || need+=(fonts-dejavu-core)
# The PostgreSQL store's tests start a server of their own (initdb, pg_ctl, postgres in
# /usr/lib/postgresql/N/bin, which is not on PATH).
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${need[*]} — run as root (or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if [[ " ${need[*]} " == *" postgresql "* ]]; then
    # No default cluster: the package would otherwise create one and start it on port 5432.
    mkdir -p /etc/postgresql-common/createcluster.d
    echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/mgrp.conf
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "cargo not found: install a Rust toolchain (https://rustup.rs) or add ~/.cargo/bin to PATH" >&2
  exit 1
fi
# playwright-core for the dashboard test (pinned in its package-lock.json; needs Node >= 20).
if [ ! -d crates/service/dashboard/test/node_modules/playwright-core ]; then
  command -v npm >/dev/null || { echo "npm not found: install Node.js >= 20 for the dashboard test" >&2; exit 1; }
  npm ci --silent --no-audit --no-fund --prefix crates/service/dashboard/test >/dev/null
fi
[ -c /dev/net/tun ] || { mkdir -p /dev/net && mknod /dev/net/tun c 10 200 && chmod 666 /dev/net/tun; } || {
  echo "no /dev/net/tun: the testbed's delay line needs the tun driver" >&2; exit 1; }
exit 0
