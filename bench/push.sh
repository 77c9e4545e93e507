#!/usr/bin/env bash
# Push benchmark on loopback (issue: foundation). In one run, for each of RUNS rounds:
#   baseline   bare sendfile(2) sender -> plain large writes into a file (no hashing), with fsync
#   baseline-nofsync  the same without fsync
#   baseline-blake3   the same with fsync, plus the hashing any verifying tool must do: the
#                     sender reads and BLAKE3-hashes each 4 MiB before sending it, the receiver
#                     hashes each 4 MiB before writing it (the limit for verifying every byte)
#   baseline-recv-blake3  the same with fsync, the receiver hashing (on a second thread) and the
#                     sender not: the limit for a verifying transfer whose sender already knows
#                     its hashes
#   haul-plain haul push --plaintext --no-hash-cache (sendfile, BLAKE3 per chunk, fsync + rename)
#   haul-tls   haul push over TLS 1.3 --no-hash-cache
#   cached     haul push --plaintext of the same file, its hashes in the hash cache (filled once
#              by `haul hash` before the rounds): digests from the record, bytes by sendfile,
#              no hashing pass at the sender; cached-tls the same over TLS
#   rsync      rsync -a to an rsync daemon on loopback
# then 10,000 files of 4 KiB: haul vs rsync (files per second). Prints medians and ratios.
#
#   bash bench/push.sh [SIZE_MIB=1024] [RUNS=5] [DIR=/dev/shm]
# DIR holds source and destinations; the default tmpfs keeps the disk out of the numbers
# (use a disk path to include it).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MIB=${1:-1024}
RUNS=${2:-5}
BASE=${3:-/dev/shm}

if ! command -v rsync >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync >/dev/null
fi
cargo build --release -q -p haul -p haul-bench
HAUL=$PWD/target/release/haul
BASELINE=$PWD/target/release/sendfile-baseline

W=$(mktemp -d "$BASE/haul-bench.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

head -c $((SIZE_MIB << 20)) /dev/urandom > "$W/big.bin"
mkdir -p "$W/small"
for d in $(seq 0 99); do
  mkdir -p "$W/small/d$d"
  for f in $(seq 0 99); do head -c 4096 /dev/urandom > "$W/small/d$d/f$f"; done
done

# Nodes and daemons.
start_node() { # $1 = name, rest = flags; sets ADDR
  local log="$W/node-$1.out"
  mkdir -p "$W/$1"
  "$HAUL" serve --root "$W/$1" --listen 127.0.0.1:0 --open --identity "$W/identity" "${@:2}" >"$log" 2>/dev/null &
  PIDS+=($!)
  for _ in $(seq 1 100); do grep -q listening "$log" 2>/dev/null && break; sleep 0.05; done
  ADDR=$(awk '/listening/ {print $NF}' "$log")
}
start_node plain --plaintext; PLAIN=$ADDR
start_node tls; TLS=$ADDR
FP=$(awk '/^fingerprint/ {print $2}' "$W/node-tls.out")
RPORT=$((20000 + RANDOM % 20000))
mkdir -p "$W/rsyncdst"
cat > "$W/rsyncd.conf" <<CONF
use chroot = no
uid = root
gid = root
[dst]
path = $W/rsyncdst
read only = no
CONF
rsync --daemon --no-detach --address=127.0.0.1 --port=$RPORT --config="$W/rsyncd.conf" &
PIDS+=($!)
sleep 0.5
export HAUL_CONFIG_DIR=$W/config

run_baseline() { # $1 = --fsync or "", $2 = the receiver's hashing flag or "", $3 = the sender's (default: $2)
  set -- "$1" "${2:-}" "${3-${2:-}}"
  rm -f "$W/base.out"
  local addr_file="$W/base.addr"
  "$BASELINE" recv 127.0.0.1:0 "$W/base.out" $1 $2 >"$addr_file" &
  local rpid=$!
  for _ in $(seq 1 1000); do [ -s "$addr_file" ] && break; sleep 0.01; done
  local t0; t0=$(now)
  # A sender that fails (no address yet) must not leave the receiver waiting.
  if ! "$BASELINE" send "$(cat "$addr_file")" "$W/big.bin" $3; then
    kill $rpid 2>/dev/null; wait $rpid 2>/dev/null
    echo "baseline run failed" >&2; return 1
  fi
  wait $rpid
  echo "$(now) - $t0" | bc -l
}
timed() { local t0; t0=$(now); "$@" >/dev/null; echo "$(now) - $t0" | bc -l; }

# Every output is removed right after its run (outside the timing), so each
# tool writes into the same amount of free memory.
clean() { rm -rf "$W/base.out" "$W/plain/r" "$W/tls/r" "$W/plain/s" "$W/tls/s" "$W/rsyncdst"/*; }
# The source's hashes, kept once for the cached rows (the other rows pass
# --no-hash-cache: every byte read and hashed, as before the cache).
"$HAUL" hash "$W/big.bin" >/dev/null
declare -A T
for r in $(seq 1 "$RUNS"); do
  clean; T[base]+="$(run_baseline --fsync) "
  clean; T[base_nofsync]+="$(run_baseline "") "
  clean; T[base_blake3]+="$(run_baseline --fsync --blake3) "
  clean; T[base_recv_blake3]+="$(run_baseline --fsync --blake3-thread "") "
  clean; T[plain]+="$(timed "$HAUL" push -q --no-hash-cache --plaintext -j 1 "$W/big.bin" "haul://$PLAIN/r/") "
  clean; T[tls]+="$(timed "$HAUL" push -q --no-hash-cache -j 1 --fingerprint "$FP" "$W/big.bin" "haul://$TLS/r/") "
  clean; T[cached]+="$(timed "$HAUL" push -q --plaintext -j 1 "$W/big.bin" "haul://$PLAIN/r/") "
  clean; T[cached_tls]+="$(timed "$HAUL" push -q -j 1 --fingerprint "$FP" "$W/big.bin" "haul://$TLS/r/") "
  clean; T[rsync]+="$(timed rsync -a "$W/big.bin" "rsync://127.0.0.1:$RPORT/dst/") "
  clean; T[small_haul]+="$(timed "$HAUL" push -q --plaintext "$W/small" "haul://$PLAIN/s") "
  clean; T[small_haul_tls]+="$(timed "$HAUL" push -q --fingerprint "$FP" "$W/small" "haul://$TLS/s") "
  clean; T[small_rsync]+="$(timed rsync -a "$W/small" "rsync://127.0.0.1:$RPORT/dst/") "
done

med() { echo "${T[$1]}" | tr ' ' '\n' | grep . | median; }
# Ratios are taken within each round (the tools ran back to back), then the
# median over rounds: robust to this shared machine drifting between rounds.
ratio() { # $1 = numerator key, $2 = denominator key: median over rounds of $1/$2
  paste <(echo "${T[$1]}" | tr ' ' '\n' | grep .) <(echo "${T[$2]}" | tr ' ' '\n' | grep .) |
    awk '{print $1 / $2}' | median
}
# On tmpfs the two baseline runs do the same work: the faster of the pair is
# the round's baseline (the strictest reference for haul).
T[base_best]=$(paste <(echo "${T[base]}" | tr ' ' '\n' | grep .) <(echo "${T[base_nofsync]}" | tr ' ' '\n' | grep .) |
  awk '{print ($1 < $2) ? $1 : $2}' | tr '\n' ' ')
MB=$SIZE_MIB
printf '\nseconds per round (the medians below come from these)\n'
for k in base base_nofsync base_blake3 base_recv_blake3 plain tls cached cached_tls rsync small_haul small_haul_tls small_rsync; do
  printf '  %-15s %s\n' "$k" "$(echo "${T[$k]}" | tr -s ' ' | xargs printf '%.3f ')"
done
printf '\n%s MiB file over loopback, %s runs, medians (dir %s)\n' "$SIZE_MIB" "$RUNS" "$BASE"
printf '%-22s %8s %10s\n' tool seconds MiB/s
for k in base base_nofsync base_blake3 base_recv_blake3 plain tls cached cached_tls rsync; do
  s=$(med $k)
  printf '%-22s %8.3f %10.1f\n' "$k" "$s" "$(echo "$MB / $s" | bc -l)"
done
printf 'haul plaintext / best baseline      = %.2f  (target >= 0.8)\n' "$(ratio base_best plain)"
printf 'haul TLS / best baseline            = %.2f  (target >= 0.5)\n' "$(ratio base_best tls)"
printf 'haul plaintext / baseline (fsync)   = %.2f\n' "$(ratio base plain)"
printf 'haul plaintext / baseline (nofsync) = %.2f\n' "$(ratio base_nofsync plain)"
printf 'hashing baseline / best baseline    = %.2f  (what verifying every byte costs on this box)\n' "$(ratio base_best base_blake3)"
printf 'haul plaintext / hashing baseline   = %.2f  (haul against the limit for verifying tools)\n' "$(ratio base_blake3 plain)"
printf 'haul TLS / baseline (fsync)         = %.2f\n' "$(ratio base tls)"
printf 'receiver-only hashing / best baseline = %.2f  (the limit for a sender that knows its hashes)\n' "$(ratio base_best base_recv_blake3)"
printf 'cached plaintext / receiver-only hashing = %.2f  (target >= 0.9)\n' "$(ratio base_recv_blake3 cached)"
printf 'cached plaintext / haul plaintext   = %.2f  (the cache'"'"'s gain)\n' "$(ratio plain cached)"
printf 'cached plaintext / best baseline    = %.2f\n' "$(ratio base_best cached)"
printf 'cached TLS / best baseline          = %.2f  (target >= 0.6)\n' "$(ratio base_best cached_tls)"
printf 'haul plaintext / rsync              = %.2f  (target >= 1.5)\n' "$(ratio rsync plain)"
sh=$(med small_haul); st=$(med small_haul_tls); sr=$(med small_rsync)
printf '\n10,000 files of 4 KiB: haul plaintext %.0f files/s, haul TLS %.0f files/s, rsync %.0f files/s\n' \
  "$(echo "10000 / $sh" | bc -l)" "$(echo "10000 / $st" | bc -l)" "$(echo "10000 / $sr" | bc -l)"
printf 'haul / rsync (files per second) = %.2f plaintext, %.2f TLS  (target >= 2)\n' \
  "$(ratio small_rsync small_haul)" "$(ratio small_rsync small_haul_tls)"
