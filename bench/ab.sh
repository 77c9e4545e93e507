#!/usr/bin/env bash
# Interleaved A/B of haul builds: how changes in docs/BENCHMARKS.md were judged.
# Starts one plaintext node per build, then for each round pushes the same
# data with every build in turn (each into its own node), and prints per build
# the median wall time, the client's CPU (user+sys) and the node's CPU.
#
#   bash bench/ab.sh big|small ROUNDS BIN_A BIN_B [BIN...] [DIR=/dev/shm via AB_DIR]
#
# big:   one 1 GiB file, `push -j 1`   small: 10,000 files of 4 KiB, `push` (-j auto)
# Copy each build's target/release/haul to its own path first (names must differ).
# AB_DIR=/tmp puts data and nodes on disk (a `sync` runs before every push).
# AB_TLS=1 runs nodes and pushes over TLS instead of --plaintext.
# AB_STATUS_FOR=NAME: the node of the build named NAME also serves
# `--status`, and a poller GETs its /metrics, /status and the console page /
# every second (as a Prometheus scrape and an open console would): the cost
# of node metrics and the console,
# with the same binary copied under two names (docs/BENCHMARKS.md).
set -euo pipefail
KIND=$1 ROUNDS=$2
shift 2
[ -x /usr/bin/time ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null; }
DIR=${AB_DIR:-/dev/shm}
W=$(mktemp -d "$DIR/haul-ab.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT

case $KIND in
  big) head -c $((1 << 30)) /dev/urandom >"$W/big.bin"; SRC=$W/big.bin; FLAGS=(-j 1) ;;
  small)
    for d in $(seq 0 99); do
      mkdir -p "$W/small/d$d"
      for f in $(seq 0 99); do head -c 4096 /dev/urandom >"$W/small/d$d/f$f"; done
    done
    SRC=$W/small; FLAGS=() ;;
  *) echo "usage: bench/ab.sh big|small ROUNDS BIN_A BIN_B [BIN...]" >&2; exit 2 ;;
esac

declare -A ADDR NODE WALL CCPU NCPU SEC
export HAUL_CONFIG_DIR=$W/config
for b in "$@"; do
  n=$(basename "$b")
  if [ -n "${AB_TLS:-}" ]; then MODE=(); else MODE=(--plaintext); fi
  mkdir -p "$W/$n"
  STATUS=()
  [ "$n" = "${AB_STATUS_FOR:-}" ] && STATUS=(--status 127.0.0.1:0)
  "$b" serve --root "$W/$n" --listen 127.0.0.1:0 --open "${MODE[@]}" "${STATUS[@]}" --identity "$W/id.$n" >"$W/$n.out" 2>&1 &
  NODE[$n]=$!
  PIDS+=($!)
done
for b in "$@"; do
  n=$(basename "$b")
  for _ in $(seq 1 100); do grep -q listening "$W/$n.out" && break; sleep 0.05; done
  ADDR[$n]=$(awk '/listening/ {print $NF}' "$W/$n.out")
  if [ -n "${AB_TLS:-}" ]; then
    SEC[$n]="--fingerprint $(awk '/^fingerprint/ {print $2}' "$W/$n.out")"
  else
    SEC[$n]=--plaintext
  fi
  if [ "$n" = "${AB_STATUS_FOR:-}" ]; then
    url=$(awk '/^status http/ {print $2}' "$W/$n.out")
    [ -n "$url" ] || { echo "the node of $n did not say where its status is" >&2; exit 1; }
    ( while sleep 1; do
        curl -sf "$url" >/dev/null; curl -sf "${url%/metrics}/status" >/dev/null
        curl -sf "${url%/metrics}/" >/dev/null
      done ) &
    PIDS+=($!)
  fi
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {printf "%.3f", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
HZ=$(getconf CLK_TCK)
for _ in $(seq 1 "$ROUNDS"); do
  for b in "$@"; do
    n=$(basename "$b")
    rm -rf "${W:?}/$n/r"
    [ "$DIR" = /dev/shm ] || sync
    n0=$(ticks "${NODE[$n]}")
    t0=$(date +%s.%N)
    read -r user sys < <({ /usr/bin/time -f "%U %S" "$b" push -q ${SEC[$n]} "${FLAGS[@]}" "$SRC" "haul://${ADDR[$n]}/r/" >/dev/null; } 2>&1)
    t1=$(date +%s.%N)
    n1=$(ticks "${NODE[$n]}")
    WALL[$n]+="$(printf '%.3f' "$(echo "$t1 - $t0" | bc -l)") "
    CCPU[$n]+="$(echo "$user + $sys" | bc -l) "
    NCPU[$n]+="$(echo "($n1 - $n0) / $HZ" | bc -l) "
  done
done
printf '%s%s, %s rounds, medians (dir %s)\n' "$KIND" "${AB_TLS:+ over TLS}" "$ROUNDS" "$DIR"
for b in "$@"; do
  n=$(basename "$b")
  printf '%-20s wall %s s  client CPU %s s  node CPU %s s   walls: %s\n' "$n" \
    "$(echo "${WALL[$n]}" | median)" "$(echo "${CCPU[$n]}" | median)" "$(echo "${NCPU[$n]}" | median)" "${WALL[$n]}"
done
