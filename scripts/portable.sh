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
target=${CARGO_TARGET_DIR:-target}
triple=x86_64-unknown-linux-gnu
python3 -c 'import ziglang' 2>/dev/null ||
  python3 -m pip install -q --break-system-packages ziglang==0.17.1 >&2
cargo-zigbuild --version 2>/dev/null | grep -q 0.24.1 ||
  cargo install --locked --quiet cargo-zigbuild --version 0.24.1 >&2
cargo zigbuild --locked --quiet --release -p haul --target "$triple.$glibc" >&2
bin=$target/$triple/release/haul
newest=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
if [ "$(printf '%s\n%s\n' "$newest" "$glibc" | sort -V | tail -1)" != "$glibc" ]; then
  echo "portable.sh: $bin needs glibc $newest, more than $glibc" >&2
  exit 1
fi
echo "$bin"
