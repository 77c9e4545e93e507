#!/usr/bin/env bash
# Bad links (issue 14), first part: haul over QUIC against haul over TCP in the lab, the
# data's way impaired (h1's egress: h1 pushes to a node on h2), one file of SIZE MiB.
#   sweeps: loss (LOSSES, % at `rate RATE delay 10ms`), and `rate RATE delay 1000ms`
# Prints goodput (Mbit/s, medians of RUNS) per transport and the ratio to the same
# transport's clean run; writes OUT/bad-links.csv. A run that does not finish in LIMIT
# seconds counts as SIZE/LIMIT (an upper bound), marked `>`.
# Still to come (issue 14): lftp/rclone over FTP side by side, corruption/reordering/
# duplication sweeps, plots, the fairness run.
#
#   sudo bash bench/bad-links.sh
# Environment: SIZE (MiB, 64), RUNS (3), RATE (200mbit), LOSSES ("0 5 16 30"), LIMIT (120),
#   DELAY_SIZE (MiB for the 1 s delay run, 256), OUT (bench/results), DATA (/dev/shm).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-64}
RUNS=${RUNS:-3}
RATE=${RATE:-200mbit}
LOSSES=${LOSSES:-"0 5 16 30"}
LIMIT=${LIMIT:-120}
DELAY_SIZE=${DELAY_SIZE:-256}
OUT=${OUT:-bench/results}
DATA=${DATA:-/dev/shm}
[ "$(id -u)" = 0 ] || { echo "bench/bad-links.sh needs root (the lab)" >&2; exit 2; }

cargo build --release -q -p haul
HAUL=$PWD/target/release/haul
NAME=badlinks$$
W=$(mktemp -d "$DATA/haul-badlinks.XXXXXX")
NODE=
cleanup() {
  [ -n "$NODE" ] && kill "$NODE" 2>/dev/null || true
  wait 2>/dev/null || true
  "$HAUL" lab down --name "$NAME" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
export HAUL_CONFIG_DIR=$W/config
"$HAUL" lab up --hosts 2 --link "rate $RATE delay 10ms" --seed 1 --name "$NAME" >/dev/null
inh() { local h=$1; shift; ip netns exec "hl-$NAME-h$h" "$@"; }
setp() { "$HAUL" lab set --name "$NAME" --dir egress "$@" >/dev/null; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

inh 2 "$HAUL" serve --root "$W/node" --listen 198.18.0.2:7878 --open --identity "$W/id" \
  >"$W/node.log" 2>&1 &
NODE=$!
sleep 1
head -c $((DELAY_SIZE << 20)) /dev/urandom >"$W/big.bin"
head -c $((SIZE << 20)) "$W/big.bin" >"$W/file.bin"

# One push; prints goodput in Mbit/s (or ">x" when it hit LIMIT).
push_once() { # $1 transport, $2 file, $3 size MiB
  rm -rf "$W/node/d" "$W/node/.haul/partial"
  local t0 t1
  t0=$(date +%s.%N)
  if inh 1 timeout "$LIMIT" "$HAUL" push "$2" haul://198.18.0.2:7878/d --transport "$1" \
       -j 1 --json >"$W/out" 2>"$W/err"; then
    t1=$(date +%s.%N)
    awk -v s="$3" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", s*8*1.048576/(b-a)}'
  else
    { echo "push over $1 failed or hit ${LIMIT}s:"; grep -v progress "$W/out" | tail -3; tail -3 "$W/err"; } >&2
    awk -v s="$3" -v l="$LIMIT" 'BEGIN {printf ">%.2f\n", s*8*1.048576/l}'
  fi
}

measure() { # $1 transport, $2 file, $3 size MiB: median of RUNS (a timeout ends the runs)
  local vals=() v
  for _ in $(seq "$RUNS"); do
    v=$(push_once "$1" "$2" "$3")
    vals+=("$v")
    case $v in '>'*) echo "$v"; return ;; esac
  done
  printf '%s\n' "${vals[@]}" | median
}

mkdir -p "$OUT"
CSV=$OUT/bad-links.csv
echo "link,transport,goodput_mbit,ratio_to_clean" >"$CSV"
declare -A CLEAN
printf '| h1 egress | haul QUIC | x clean | haul TCP | x clean |\n|---|---|---|---|---|\n'
for loss in $LOSSES; do
  spec="rate $RATE delay 10ms"
  [ "$loss" != 0 ] && spec="$spec loss ${loss}%"
  setp h1 "$spec"
  row="| \`$spec\` "
  for tr in quic tcp; do
    g=$(measure "$tr" "$W/file.bin" "$SIZE")
    [ "$loss" = 0 ] && CLEAN[$tr]=$g
    r=$(awk -v g="${g#>}" -v c="${CLEAN[$tr]}" 'BEGIN {printf "%.2f", g/c}')
    row="$row| $g | $r "
    echo "$spec,$tr,$g,$r" >>"$CSV"
  done
  echo "$row|"
done
spec="rate $RATE delay 1000ms"
setp h1 "$spec"
row="| \`$spec\`, ${DELAY_SIZE} MiB "
rate_mbit=$(echo "$RATE" | sed 's/mbit//')
for tr in quic tcp; do
  g=$(RUNS=1 measure "$tr" "$W/big.bin" "$DELAY_SIZE")
  r=$(awk -v g="${g#>}" -v l="$rate_mbit" 'BEGIN {printf "%.2f", g/l}')
  row="$row| $g | $r of link "
  echo "$spec,$tr,$g,$r" >>"$CSV"
done
echo "$row|"
echo "csv: $CSV"
