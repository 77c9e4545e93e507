#!/usr/bin/env bash
# 10,000 files of 4 KiB onto a disk-backed directory, where durability costs:
# haul (fsync of every file before its rename, directories synced at the end)
# vs rsync to a daemon with and without --fsync. Medians of RUNS.
#   bash bench/small-files-disk.sh [RUNS=3] [DIR=/tmp]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
BASE=${2:-/tmp}
command -v rsync >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync >/dev/null; }
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul
W=$(mktemp -d "$BASE/haul-small.XXXXXX")
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"' EXIT
for d in $(seq 0 99); do mkdir -p "$W/src/d$d"; for f in $(seq 0 99); do head -c 4096 /dev/urandom > "$W/src/d$d/f$f"; done; done
mkdir -p "$W/node"
"$HAUL" serve --root "$W/node" --listen 127.0.0.1:0 --open --plaintext >"$W/node.out" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q listening "$W/node.out" && break; sleep 0.05; done
ADDR=$(awk '/listening/ {print $NF}' "$W/node.out")
RPORT=$((20000 + RANDOM % 20000))
mkdir -p "$W/rdst"
printf 'use chroot = no\nuid = root\ngid = root\n[dst]\npath = %s\nread only = no\n' "$W/rdst" > "$W/rsyncd.conf"
rsync --daemon --no-detach --address=127.0.0.1 --port=$RPORT --config="$W/rsyncd.conf" &
PIDS+=($!)
sleep 0.5
now() { date +%s.%N; }
timed() { sync; local t0; t0=$(now); "$@" >/dev/null; echo "$(now) - $t0" | bc -l; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
H= R= RF=
for r in $(seq 1 "$RUNS"); do
  rm -rf "$W/node/x" "$W/rdst"/*
  H+="$(timed "$HAUL" push -q --plaintext "$W/src" "haul://$ADDR/x") "
  R+="$(timed rsync -a "$W/src" "rsync://127.0.0.1:$RPORT/dst/") "
  rm -rf "$W/rdst"/*
  RF+="$(timed rsync -a --fsync "$W/src" "rsync://127.0.0.1:$RPORT/dst/") "
done
h=$(echo $H | tr ' ' '\n' | median); r=$(echo $R | tr ' ' '\n' | median); rf=$(echo $RF | tr ' ' '\n' | median)
printf '10,000 x 4 KiB to disk (%s), %s runs, medians: haul %.0f files/s (durable: fsync or group syncfs before rename), rsync %.0f files/s (no fsync), rsync --fsync %.0f files/s\n' \
  "$BASE" "$RUNS" "$(echo "10000/$h" | bc -l)" "$(echo "10000/$r" | bc -l)" "$(echo "10000/$rf" | bc -l)"
printf 'haul / rsync = %.2f; haul / rsync --fsync = %.2f\n' "$(echo "$r/$h" | bc -l)" "$(echo "$rf/$h" | bc -l)"
