#!/usr/bin/env bash
# Installs what haul's tests need on a fresh Debian machine, then runs every
# test in the workspace. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pair in ip:iproute2 ping:iputils-ping iperf3:iperf3 nft:nftables; do
  cmd=${pair%%:*} pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "note: missing ${need[*]} (needed by the network-lab tests, which run as root)" >&2
  fi
fi

cargo test --workspace --locked "$@"
