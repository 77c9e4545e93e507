#!/usr/bin/env bash
# Builds haul for older Linux systems: the release build, linked against
# glibc 2.17 (RHEL/CentOS 7 and everything since) with zig as the C
# compiler and linker (cargo-zigbuild; zig from PyPI's ziglang). The
# ordinary release build needs the glibc of the machine that built it
# (2.34 on Debian 12), so `--ssh-install` could not run it on an older host;
# run this build instead (`--ssh-install` copies the haul that runs).
# Prints the binary's path once it checked the newest glibc symbol it needs.
#
#   bash scripts/portable.sh              # glibc 2.17
#   GLIBC=2.28 bash scripts/portable.sh   # another floor
set -euo pipefail
cd "$(dirname "$0")/.."
glibc=${GLIBC:-2.17}
zig=0.17.1
zigbuild=0.24.1
arch=$(uname -m)
triple=$arch-unknown-linux-gnu
command -v objdump >/dev/null || { echo "portable.sh: needs objdump (apt-get install binutils)" >&2; exit 1; }
[ "$(python3 -m pip show ziglang 2>/dev/null | sed -n 's/^Version: //p')" = "$zig" ] ||
  python3 -m pip install -q --break-system-packages "ziglang==$zig" >&2
# That zig, not another one on PATH.
CARGO_ZIGBUILD_ZIG_PATH=$(python3 -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
export CARGO_ZIGBUILD_ZIG_PATH
cargo-zigbuild --version 2>/dev/null | grep -qxF "cargo-zigbuild $zigbuild" ||
  cargo install --locked --quiet cargo-zigbuild --version "$zigbuild" >&2
cargo zigbuild --locked --quiet --release -p haul --target "$triple.$glibc" >&2
target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin=$target/$triple/release/haul
newest=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1 || true)
if [ -z "$newest" ]; then
  echo "portable.sh: $bin names no glibc symbol version: not checked" >&2
  exit 1
fi
if [ "$(printf '%s\n%s\n' "$newest" "$glibc" | sort -V | tail -1)" != "$glibc" ]; then
  echo "portable.sh: $bin needs glibc $newest, more than $glibc" >&2
  exit 1
fi
echo "$bin"
