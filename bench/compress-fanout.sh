#!/usr/bin/env bash
# -z through a fan-out (issue 36): each relay forwards the compressed
# frames it received, so every hop carries the compressed bytes, not only
# the first. In the lab, h1 pushes to NODES nodes (h2, h3, ... each a
# `haul serve`) relaying in a chain, every host's egress "$LINK"; with and
# without -z, on CSV-like text and on random bytes (bench/compress-data.py).
# Each run lands in an empty directory on every node, checked there by
# BLAKE3 (`haul check`); medians of RUNS. The relays' own count of frames
# passed on (`/status` relay_forwards.frames_passed_on) is printed too.
#
#   sudo bash bench/compress-fanout.sh              # about 5 minutes
# Environment: MIB (per set, 64), RUNS (3), NODES (3), LINK ('rate 50mbit
#   delay 20ms'), SETS ("csv random"), LEVEL (3).
# Prints, per set: seconds with and without -z, and the speed-up.
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${MIB:-64}
RUNS=${RUNS:-3}
NODES=${NODES:-3}
LINK=${LINK:-rate 50mbit delay 20ms}
SETS=${SETS:-csv random}
LEVEL=${LEVEL:-3}
[ "$(id -u)" = 0 ] || { echo "bench/compress-fanout.sh needs root (the lab)" >&2; exit 2; }
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul
export HAUL_LAB=zfan$$
W=$(mktemp -d /dev/shm/haul-zfan.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$HAUL" lab down >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
export HAUL_CONFIG_DIR=$W/config
"$HAUL" lab up --hosts $((NODES + 1)) --link "$LINK" >/dev/null
for h in $(seq 2 $((NODES + 1))); do
  mkdir -p "$W/n$h"
  "$HAUL" lab exec "h$h" -- "$HAUL" serve --root "$W/n$h" --listen "198.18.0.$h:7878" \
    --open --plaintext --status "198.18.0.$h:9464" >"$W/node$h.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 200); do grep -q listening "$W/node$h.log" 2>/dev/null && break; sleep 0.05; done
done
echo "lab link: $LINK; h1 -> $NODES nodes in a chain; $MIB MiB per set, $RUNS runs"
python3 bench/compress-data.py "$W/src" "$MIB"

urls() { for h in $(seq 2 $((NODES + 1))); do printf 'haul://198.18.0.%s:7878/%s ' "$h" "$1"; done; }
passed_on() { # frames the relays passed on so far, all nodes together
  local n=0
  for h in $(seq 2 $((NODES + 1))); do
    v=$("$HAUL" lab exec h1 -- python3 -c "import json,urllib.request; print(json.load(urllib.request.urlopen('http://198.18.0.$h:9464/status'))['relay_forwards']['frames_passed_on'])")
    n=$((n + v))
  done
  echo "$n"
}

declare -A MED
for set in $SETS; do
  for tool in haul haul-z; do
    flags=()
    [ "$tool" = haul-z ] && flags=(-z --compress-level "$LEVEL")
    times=()
    before=$(passed_on)
    for run in $(seq "$RUNS"); do
      d=$set-$tool-$run
      t0=$(date +%s.%N)
      "$HAUL" lab exec h1 -- "$HAUL" -q push "${flags[@]}" --plaintext --plan chain "$W/src/$set" $(urls "$d")
      t1=$(date +%s.%N)
      for h in $(seq 2 $((NODES + 1))); do
        "$HAUL" -q check "$W/src/$set" "$W/n$h/$d/$set" >/dev/null || { echo "$tool $set: h$h's copy differs" >&2; exit 1; }
        rm -rf "${W:?}/n$h/$d"
      done
      times+=("$(echo "$t1 - $t0" | bc -l)")
    done
    med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    MED[$set/$tool]=$med
    printf '%-7s %-7s median %7.2f s  (runs: %s) frames passed on by relays: %s\n' "$set" "$tool" "$med" \
      "$(printf '%.2f ' "${times[@]}")" "$(($(passed_on) - before))"
  done
  printf '%-7s fan-out -z speed-up over without: %.2fx\n' "$set" "$(echo "${MED[$set/haul]} / ${MED[$set/haul-z]}" | bc -l)"
done
