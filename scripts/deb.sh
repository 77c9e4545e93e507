#!/usr/bin/env bash
# Builds haul's Debian package with cargo-deb (installed if missing) from the
# metadata in crates/haul/Cargo.toml: the binary, its manual page, shell
# completions, the systemd units and the monitoring kit, as
# TARGET/debian/haul.deb. Prints that path (cargo-deb's own output goes to
# stderr).
#
#   bash scripts/deb.sh              # release build (what ships)
#   PROFILE=dist bash scripts/deb.sh # the same, its debug info in haul-dbgsym (.ddeb)
#   PROFILE=dev bash scripts/deb.sh  # the tests' build, for CI's install check only
#                                     (cargo-deb warns: a dev build is not for release)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-release}
target=${CARGO_TARGET_DIR:-target}
cargo deb --version 2>/dev/null | grep -q 3.8.0 ||
  cargo install --locked --quiet cargo-deb --version 3.8.0
cargo build --locked --quiet -p haul --profile "$profile"
dir=$target/$profile
[ "$profile" = dev ] && dir=$target/debug
bin=$dir/haul
assets=$dir/deb-assets
rm -rf "$assets" && mkdir -p "$assets"
"$bin" man | gzip -9n >"$assets/haul.1.gz"
"$bin" completions bash >"$assets/haul.bash"
"$bin" completions zsh >"$assets/_haul"
"$bin" completions fish >"$assets/haul.fish"
fast=()
case $profile in
  release) ;;
  # dist keeps line tables: cargo-deb strips the packaged binary and puts
  # the debug info in a separate haul-dbgsym package beside it.
  dist) fast=(--dbgsym) ;;
  *) fast=(--fast) ;;
esac
out=$target/debian/haul.deb
mkdir -p "$target/debian"
cargo deb --locked --quiet -p haul --no-build --profile "$profile" "${fast[@]}" --output "$out" >&2
echo "$out"
