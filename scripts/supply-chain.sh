#!/usr/bin/env bash
# The supply-chain check CI runs: cargo-deny (installed if missing, pinned)
# over deny.toml — licenses, bans (one version of each crate but the
# exceptions it names, no wildcards) and sources (crates.io only). The
# advisories check needs the RustSec database from GitHub: run
# `cargo deny check advisories` where the network allows.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.20.2
cargo deny --version 2>/dev/null | grep -q "$version" ||
  cargo install --locked --quiet cargo-deny --version "$version"
cargo deny --log-level error check licenses bans sources
