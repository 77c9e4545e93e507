#!/usr/bin/env bash
# Peak memory while moving one large file (default 10 GiB) with haul push and
# pull over loopback. The source is sparse (reads cost no disk); the node's root
# is on disk under DIR.
#   bash bench/rss.sh [SIZE_GIB=10] [DIR=/tmp]
set -euo pipefail
cd "$(dirname "$0")/.."
GIB=${1:-10}
BASE=${2:-/tmp}
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul
W=$(mktemp -d "$BASE/haul-rss.XXXXXX")
NODE_PID=
trap '[ -n "$NODE_PID" ] && kill $NODE_PID 2>/dev/null; rm -rf "$W"' EXIT
truncate -s "${GIB}G" "$W/big.bin"
mkdir -p "$W/node"
"$HAUL" serve --root "$W/node" --listen 127.0.0.1:0 --open --plaintext >"$W/node.out" 2>/dev/null &
NODE_PID=$!
for _ in $(seq 1 100); do grep -q listening "$W/node.out" && break; sleep 0.05; done
ADDR=$(awk '/listening/ {print $NF}' "$W/node.out")
/usr/bin/time -f "%e %M" -o "$W/push.time" "$HAUL" push -q --plaintext "$W/big.bin" "haul://$ADDR/"
rm -f "$W/big.bin"
/usr/bin/time -f "%e %M" -o "$W/pull.time" "$HAUL" pull -q --plaintext "haul://$ADDR/big.bin" "$W/back"
NODE_KB=$(awk '/VmHWM/ {print $2}' /proc/$NODE_PID/status)
read -r PUSH_S PUSH_KB < "$W/push.time"
read -r PULL_S PULL_KB < "$W/pull.time"
printf '%s GiB file: push %.1fs, client peak RSS %d MiB; pull %.1fs, client peak RSS %d MiB; node peak RSS %d MiB (target <= 64 MiB)\n' \
  "$GIB" "$PUSH_S" $((PUSH_KB / 1024)) "$PULL_S" $((PULL_KB / 1024)) $((NODE_KB / 1024))
