#!/usr/bin/env bash
# Builds haul's Debian package with cargo-deb (installed if missing) from the
# metadata in crates/haul/Cargo.toml: the binary, its manual page, shell
# completions, the systemd units and the monitoring kit. Prints the .deb's
# path on the last line.
#
#   bash scripts/deb.sh              # release build (what ships)
#   PROFILE=dev bash scripts/deb.sh  # the tests' build, for CI's install check only
#                                     (cargo-deb warns: a dev build is not for release)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-release}
target=${CARGO_TARGET_DIR:-target}
command -v cargo-deb >/dev/null 2>&1 || cargo install --locked --quiet cargo-deb --version 3.8.0
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
[ "$profile" = release ] || fast=(--fast)
cargo deb --locked --quiet -p haul --no-build --profile "$profile" "${fast[@]}" 2>&1 | tail -1
