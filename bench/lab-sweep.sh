#!/usr/bin/env bash
# The reference curve of haul's bad-link work (issue 3): iperf3 TCP goodput
# over one emulated link (rate 200 mbit) for every combination of
#   loss  0 1 4 8 16 24 32 %   and   delay 0 100 500 1000 ms.
# The impairment sits on the sender's egress (h1 -> h2, like tc-netem on the
# sender's interface): data packets see the delay and the loss, ACKs do not,
# so the round-trip time equals the configured delay.
#
# Needs root, iproute2, iperf3, python3, and gnuplot for the plot:
#   apt-get install -y iperf3 gnuplot-nox
# Usage: sudo bench/lab-sweep.sh            (about 8 minutes)
# Environment: DURATION (s per point, default 10), LOSSES, DELAYS, RATE,
#   OUT (directory, default bench/results), LAB (command that provides
#   `lab`, default: target/release/haul, else target/release/haul-lab-dev).
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
LOSSES=${LOSSES:-"0 1 4 8 16 24 32"}
DELAYS=${DELAYS:-"0 100 500 1000"}
RATE=${RATE:-200mbit}
SEED=${SEED:-1}
OUT=${OUT:-bench/results}
NAME=sweep$$

if [ "$(id -u)" != 0 ]; then echo "lab-sweep needs root: run it with sudo" >&2; exit 1; fi
for tool in iperf3 python3 ip; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y iperf3 iproute2 python3)" >&2; exit 1; }
done

if [ -z "${LAB:-}" ]; then
  if [ -x target/release/haul ] && target/release/haul lab profiles >/dev/null 2>&1; then
    LAB="target/release/haul lab"
  else
    cargo build --release -q -p haul-lab --bin haul-lab-dev
    LAB="target/release/haul-lab-dev lab"
  fi
fi
lab() { $LAB "$@"; }

mkdir -p "$OUT"
CSV="$OUT/lab-sweep.csv"
trap 'lab down --name "$NAME" >/dev/null 2>&1 || true' EXIT

lab up --name "$NAME" --hosts 2 --seed "$SEED" >/dev/null
echo "delay_ms,loss_pct,rate,goodput_mbit,retransmits,status" > "$CSV"
port=5300
for delay in $DELAYS; do
  for loss in $LOSSES; do
    port=$((port + 1))
    profile="rate $RATE delay ${delay}ms loss ${loss}%"
    lab set --name "$NAME" h1 --dir egress "$profile"
    lab exec --name "$NAME" h2 -- iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
    server=$!
    sleep 0.3
    json=$(timeout $((DURATION + 90)) $LAB exec --name "$NAME" h1 -- \
      iperf3 -c 198.18.0.2 -p "$port" -t "$DURATION" -J --connect-timeout 30000 2>/dev/null || true)
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    row=$(printf '%s' "$json" | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
    e = d.get("end", {})
    bps = e["sum_received"]["bits_per_second"]
    rt = e.get("sum_sent", {}).get("retransmits", "")
    print(f"{bps/1e6:.2f},{rt},ok")
except Exception as ex:
    print("0.00,,failed")
')
    echo "${delay},${loss},${RATE},${row}" | tee -a "$CSV"
  done
done
lab stats --name "$NAME" > "$OUT/lab-sweep-stats.txt" || true

if command -v gnuplot >/dev/null; then
  PLOT="$OUT/lab-sweep.png"
  gnuplot <<GP
set terminal pngcairo size 900,560
set output "$PLOT"
set datafile separator ","
set title "iperf3 TCP goodput over the haul lab: rate $RATE, loss on the data path"
set xlabel "packet loss (%)"
set ylabel "goodput (Mbit/s)"
set logscale y
set yrange [0.01:*]
set grid
set key top right
plot for [d in "$DELAYS"] "$CSV" using (\$1 == d+0 ? \$2 : 1/0):(\$4 > 0 ? \$4 : 0.01) \
  with linespoints lw 2 title sprintf("RTT %s ms", d)
GP
  echo "wrote $CSV and $PLOT"
else
  echo "wrote $CSV (install gnuplot-nox for the plot)"
fi
