#!/usr/bin/env bash
# Where a corrupted link's goodput goes (issue 14): haul QUIC pushes h1 -> h2
# over `rate 200mbit delay 10ms`, clean, at `loss 30%` and at `corrupt 50%`,
# each with the lab's link counters (packets offered to h1's egress, damaged,
# dropped by the rate queue; packets that crossed the link = h2's ingress)
# and the machine's CPU use during the push.
#
#   sudo bash bench/corrupt-link.sh
# Environment: RUNS_LIST (default "clean corrupt clean corrupt clean corrupt";
#   words: clean, loss, corrupt), SIZE (MiB, 256), HAUL (the binary; default
#   target/release/haul, built by this script), DATA (/dev/shm).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/corrupt-link.sh needs root (the lab)" >&2; exit 2; }
SIZE=${SIZE:-256}
RUNS_LIST=${RUNS_LIST:-clean corrupt clean corrupt clean corrupt}
if [ -z "${HAUL:-}" ]; then
  cargo build --release -q -p haul
  HAUL=$PWD/target/release/haul
fi
NAME=cl$$
W=$(mktemp -d "${DATA:-/dev/shm}/haul-corrupt.XXXXXX")
export HAUL_CONFIG_DIR=$W/config
NODE=
cleanup() {
  [ -n "$NODE" ] && kill "$NODE" 2>/dev/null || true
  wait 2>/dev/null || true
  "$HAUL" lab down --name "$NAME" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
"$HAUL" lab up --hosts 2 --link "rate 200mbit delay 10ms" --seed 1 --name "$NAME" >/dev/null
inh() { local h=$1; shift; ip netns exec "hl-$NAME-h$h" "$@"; }
mkdir -p "$W/node"
inh 2 "$HAUL" serve --root "$W/node" --listen 198.18.0.2:7878 --open --identity "$W/id" >"$W/node.log" 2>&1 &
NODE=$!
for _ in $(seq 1 100); do grep -q listening "$W/node.log" 2>/dev/null && break; sleep 0.05; done
head -c $((SIZE << 20)) /dev/urandom >"$W/src.bin"
cpu() { awk '/^cpu / {print $2+$3+$4+$6+$7+$8, $5}' /proc/stat; }
# h1's egress and h2's ingress counters: packets, bytes, damaged, queue drops.
counters() {
  "$HAUL" lab stats --name "$NAME" |
    awk '$1=="h1" && $2=="egress" {o=$3; d=$6; q=$9} $1=="h2" && $2=="ingress" {c=$3; b=$4} END {print o, d, q, c, b}'
}
for run in $RUNS_LIST; do
  case $run in
    clean) p="rate 200mbit delay 10ms" ;;
    loss) p="rate 200mbit delay 10ms loss 30%" ;;
    corrupt) p="rate 200mbit delay 10ms corrupt 50%" ;;
    *) echo "RUNS_LIST: $run is not clean, loss or corrupt" >&2; exit 2 ;;
  esac
  "$HAUL" lab set --name "$NAME" --dir egress h1 "$p" >/dev/null
  rm -rf "$W/node/d" "$W/node/.haul/partial"
  read -r o0 d0 q0 c0 b0 < <(counters)
  read -r busy0 idle0 < <(cpu)
  t0=$(date +%s.%N)
  inh 1 "$HAUL" push "$W/src.bin" haul://198.18.0.2:7878/d/ -j 1 -q --transport quic
  t1=$(date +%s.%N)
  read -r busy1 idle1 < <(cpu)
  read -r o1 d1 q1 c1 b1 < <(counters)
  cmp -s "$W/src.bin" "$W/node/d/src.bin" || echo "$run: THE COPY DIFFERS"
  awk -v run="$run" -v s="$SIZE" -v a="$t0" -v b="$t1" -v busy=$((busy1 - busy0)) -v idle=$((idle1 - idle0)) \
    -v o=$((o1 - o0)) -v d=$((d1 - d0)) -v q=$((q1 - q0)) -v c=$((c1 - c0)) -v lb=$((b1 - b0)) 'BEGIN {
      t = b - a
      printf "%-8s %6.1f Mbit/s in %6.2f s; offered %d packets, %d damaged, %d queue drops; %d crossed the link (%.1f Mbit/s on it); CPU %.0f%%\n",
        run, s * 8 * 1.048576 / t, t, o, d, q, c, lb * 8 / t / 1e6, 100 * busy / (busy + idle)
    }'
done
