#!/usr/bin/env bash
# The hash cache on an unchanged tree (issue 35). For each of RUNS rounds, with every record
# removed first (`setfattr -x user.haul.blake3`, and the store emptied):
#   check-1    haul check SRC DST: both trees read and hashed, records kept
#   check-2    the same again: answered from the records
#   push-c-1   haul push -c SRC to a node serving DST's copy (records removed again): the
#              client hashes SRC, the node hashes what it holds (List{sums})
#   push-c-2   the same again
#   rsync-c    rsync -rnc SRC/ DST/ (MD5 of every file on both sides, nothing copied)
#   rclone     rclone check SRC DST (when rclone is installed: apt-get install rclone)
# SRC and DST are separate copies (distinct inodes) of a tree of SIZE_GIB in 256 MiB files.
# Prints medians and ratios.
#
#   bash bench/hash-cache.sh [SIZE_GIB=4] [RUNS=3] [DIR=/dev/shm]
# DIR must keep user xattrs (tmpfs does since Linux 6.6; ext4, xfs, btrfs do) and hold twice
# SIZE_GIB.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_GIB=${1:-4}
RUNS=${2:-3}
BASE=${3:-/dev/shm}

for tool in rsync setfattr; do
  command -v $tool >/dev/null && continue
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync attr >/dev/null
done
command -v rclone >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rclone >/dev/null 2>&1 || true
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul

W=$(mktemp -d "$BASE/haul-hc.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
export HAUL_CONFIG_DIR=$W/config XDG_CACHE_HOME=$W/cache

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# A run that fails is not a timing: the script stops and shows why.
timed() {
  local t0; t0=$(now)
  if ! "$@" >"$W/last.out" 2>&1; then
    echo "failed: $*" >&2; cat "$W/last.out" >&2; return 1
  fi
  echo "$(now) - $t0" | bc -l
}

mkdir -p "$W/src" "$W/node/dst"
for i in $(seq 1 $((SIZE_GIB * 4))); do
  head -c $((256 << 20)) /dev/urandom > "$W/src/f$i"
done
cp -r "$W/src/." "$W/node/dst/"
# An hour old: a record taken within a timestamp tick of a file's mtime is not trusted.
touch -d '1 hour ago' "$W"/src/* "$W"/node/dst/*

"$HAUL" serve --root "$W/node" --listen 127.0.0.1:0 --open --plaintext --identity "$W/identity" >"$W/node.out" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q listening "$W/node.out" 2>/dev/null && break; sleep 0.05; done
ADDR=$(awk '/listening/ {print $NF}' "$W/node.out")

forget() {
  for f in "$W"/src/* "$W"/node/dst/*; do setfattr -x user.haul.blake3 "$f" 2>/dev/null || true; done
  rm -rf "$W/cache"
}
declare -A T
for r in $(seq 1 "$RUNS"); do
  forget
  T[check1]+="$(timed "$HAUL" check "$W/src/" "$W/node/dst/") "
  T[check2]+="$(timed "$HAUL" check "$W/src/" "$W/node/dst/") "
  forget
  T[pushc1]+="$(timed "$HAUL" push -q -c --plaintext "$W/src/" "haul://$ADDR/dst/") "
  T[pushc2]+="$(timed "$HAUL" push -q -c --plaintext "$W/src/" "haul://$ADDR/dst/") "
  T[rsync]+="$(timed rsync -rnc "$W/src/" "$W/node/dst/") "
  if command -v rclone >/dev/null; then
    T[rclone]+="$(timed rclone check "$W/src" "$W/node/dst") "
  fi
done

med() { echo "${T[$1]}" | tr ' ' '\n' | grep . | median; }
ratio() { # median over rounds of $1/$2
  paste <(echo "${T[$1]}" | tr ' ' '\n' | grep .) <(echo "${T[$2]}" | tr ' ' '\n' | grep .) |
    awk '{print $1 / $2}' | median
}
printf '\nseconds per round\n'
for k in check1 check2 pushc1 pushc2 rsync rclone; do
  [ -n "${T[$k]:-}" ] || continue
  printf '  %-8s %s\n' "$k" "$(echo "${T[$k]}" | tr -s ' ' | xargs printf '%.3f ')"
done
printf '\n%s GiB unchanged tree (two copies), %s rounds, medians (dir %s)\n' "$SIZE_GIB" "$RUNS" "$BASE"
for k in check1 check2 pushc1 pushc2 rsync rclone; do
  [ -n "${T[$k]:-}" ] || continue
  printf '%-10s %8.3f s\n' "$k" "$(med $k)"
done
printf 'check: first / second run          = %.1f  (target >= 20)\n' "$(ratio check1 check2)"
printf 'push -c: first / second run        = %.1f  (target >= 20)\n' "$(ratio pushc1 pushc2)"
printf 'rsync -c / second check            = %.1f  (target >= 10)\n' "$(ratio rsync check2)"
printf 'rsync -c / second push -c          = %.1f  (target >= 10)\n' "$(ratio rsync pushc2)"
if [ -n "${T[rclone]:-}" ]; then
  printf 'rclone check / second check        = %.1f  (target >= 10)\n' "$(ratio rclone check2)"
fi
