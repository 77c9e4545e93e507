#!/usr/bin/env bash
# -z on a slow link (issue 36): haul with and without -z, and rsync with
# and without -z, over ssh across a lab link, on three kinds of data:
#   csv     CSV-like text (timestamps, station names, readings)
#   float   a NetCDF-like array: a smooth float32 field, as raw bytes
#   random  bytes that do not compress
# A real OpenSSH sshd runs in lab host h2; every client runs in h1. haul
# reaches h2 over ssh (`haul push SRC root@h2:DST/`: ssh starts the node,
# the data goes direct over TCP+TLS); rsync runs `rsync -a[z] -e ssh`.
# Each tool copies each set into an empty directory RUNS times; medians,
# each file checked by size and BLAKE3 (b3sum-free: haul check).
#
#   sudo bash bench/compress.sh                     # about 10 minutes
# Environment: MIB (per set, 64), RUNS (3), LINK ('rate 50mbit delay 20ms'),
#   SETS ("csv float random"), LEVEL (haul's --compress-level, 3).
# Prints, per set: seconds per tool, haul -z against haul (speed-up), and
# haul -z against rsync -z.
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${MIB:-64}
RUNS=${RUNS:-3}
LINK=${LINK:-rate 50mbit delay 20ms}
SETS=${SETS:-csv float random}
LEVEL=${LEVEL:-3}
[ "$(id -u)" = 0 ] || { echo "bench/compress.sh needs root (the lab)" >&2; exit 2; }

need=()
for pair in /usr/sbin/sshd:openssh-server ssh:openssh-client rsync:rsync; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "${pair%%:*}" ] || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul

BENCH=zbench
# shellcheck source=bench/lab-sshd.sh
. bench/lab-sshd.sh
echo "lab link: $LINK (sshd in h2, clients in h1); $MIB MiB per set, $RUNS runs"

python3 bench/compress-data.py "$W/src" "$MIB"

copy() { # tool set
  local tool=$1 set=$2 dst=$W/dst
  case $tool in
    haul) "${CLI[@]}" "$HAUL" -q push "$W/src/$set" "root@$ADDR:$dst/" -e "$RSH" --remote-haul "$HAUL" ;;
    haul-z) "${CLI[@]}" "$HAUL" -q push -z --compress-level "$LEVEL" "$W/src/$set" "root@$ADDR:$dst/" -e "$RSH" --remote-haul "$HAUL" ;;
    rsync) "${CLI[@]}" rsync -a -e "$RSH" "$W/src/$set" "root@$ADDR:$dst/" ;;
    rsync-z) "${CLI[@]}" rsync -az -e "$RSH" "$W/src/$set" "root@$ADDR:$dst/" ;;
  esac
}

declare -A MED
TOOLS="haul haul-z rsync rsync-z"
for set in $SETS; do
  for tool in $TOOLS; do
    times=()
    for _ in $(seq "$RUNS"); do
      rm -rf "$W/dst" && mkdir -p "$W/dst"
      t0=$(date +%s.%N)
      copy "$tool" "$set"
      t1=$(date +%s.%N)
      "$HAUL" -q check "$W/src/$set" "$W/dst/$set" >/dev/null || { echo "$tool $set: copy differs" >&2; exit 1; }
      times+=("$(echo "$t1 - $t0" | bc -l)")
    done
    med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    MED[$set/$tool]=$med
    printf '%-7s %-8s median %7.2f s  (runs: %s)\n' "$set" "$tool" "$med" "$(printf '%.2f ' "${times[@]}")"
  done
  printf '%-7s haul -z speed-up over haul: %.2fx; haul -z vs rsync -z (speed): %.2fx\n' "$set" \
    "$(echo "${MED[$set/haul]} / ${MED[$set/haul-z]}" | bc -l)" \
    "$(echo "${MED[$set/rsync-z]} / ${MED[$set/haul-z]}" | bc -l)"
done
