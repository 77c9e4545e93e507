#!/usr/bin/env bash
# What verifying every byte costs on this machine, with no protocol at all: the bare
# sendfile(2) -> write baseline of bench/push.sh, then the same with the BLAKE3 hashing any
# verifying transfer must do (sender: read + hash each 4 MiB before sending it; receiver: hash
# each 4 MiB before writing it), first inline on the receiving thread, then on a second
# receiving thread that overlaps with the next recv; and the bare baseline with 1 MiB and
# 16 MiB reads and writes instead of 4 MiB. Rounds are interleaved; prints medians and each
# variant's speed relative to the bare baseline (median of per-round ratios).
#
#   bash bench/hash-limit.sh [ROUNDS=9] [SIZE_MIB=1024] [DIR=/dev/shm]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-9}
SIZE_MIB=${2:-1024}
BASE=${3:-/dev/shm}
cargo build --release -q -p haul-bench
BASELINE=$PWD/target/release/sendfile-baseline
W=$(mktemp -d "$BASE/haul-hash-limit.XXXXXX")
RPID=
cleanup() { [ -n "$RPID" ] && kill "$RPID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
head -c $((SIZE_MIB << 20)) /dev/urandom >"$W/big.bin"

now() { date +%s.%N; }
run() { # $1 = sender flags, rest = receiver flags; prints seconds
  rm -f "$W/out" "$W/addr"
  "$BASELINE" recv 127.0.0.1:0 "$W/out" --fsync "${@:2}" >"$W/addr" &
  RPID=$!
  for _ in $(seq 1 1000); do [ -s "$W/addr" ] && break; sleep 0.01; done
  local t0; t0=$(now)
  # shellcheck disable=SC2086 # $1 is zero or one flag
  "$BASELINE" send "$(cat "$W/addr")" "$W/big.bin" $1 || { echo "send failed" >&2; exit 1; }
  wait "$RPID"; RPID=
  echo "$(now) - $t0" | bc -l
}
declare -A T
for _ in $(seq 1 "$ROUNDS"); do
  T[bare]+="$(run "") "
  T[inline]+="$(run --blake3 --blake3) "
  T[thread]+="$(run --blake3 --blake3-thread) "
  T[bare1m]+="$(run "" --buffer $((1 << 20))) "
  T[bare16m]+="$(run "" --buffer $((16 << 20))) "
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {printf "%.3f", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { paste <(echo "${T[bare]}" | tr ' ' '\n' | grep .) <(echo "${T[$1]}" | tr ' ' '\n' | grep .) | awk '{print $1 / $2}' | median; }
printf '%s MiB over loopback, %s interleaved rounds (dir %s)\n' "$SIZE_MIB" "$ROUNDS" "$BASE"
printf '%-44s %8s %8s   %s\n' variant seconds 'x bare' 'per round'
for k in bare inline thread bare1m bare16m; do
  case $k in
    bare) name="bare: sendfile -> write, no hashing" ;;
    bare1m) name="bare, 1 MiB reads and writes" ;;
    bare16m) name="bare, 16 MiB reads and writes" ;;
    inline) name="BLAKE3 both sides, receiver hashes inline" ;;
    thread) name="BLAKE3 both sides, receiver hashes aside" ;;
  esac
  printf '%-44s %8s %8s   %s\n' "$name" "$(echo "${T[$k]}" | median)" "$(ratio "$k")" \
    "$(echo "${T[$k]}" | xargs printf '%.3f ')"
done
