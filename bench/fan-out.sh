#!/usr/bin/env bash
# Fan-out benchmark (issue 15): the seed P2PKP's table, side by side.
# In the lab (h1 sends; h2..h9 receive; every host's egress `rate RATE delay 5ms`):
#   haul-fanout   haul push FILE haul://h2/.. haul://h3/.. ...   (one command, nodes relay)
#   sendfile      one sender, the file to each peer in parallel (bench/sendfile-baseline:
#                 sendfile(2) out, plain writes in, no hashing: the seed's baseline)
#   haul-parallel one `haul push` per peer, all at once
# for SIZES x PEERS, RUNS each (medians), then with 8 peers at FAIL_SIZE:
#   killed   one relay killed (-9) once it staged half the file: when the 7 others finish
#   slow     one node on a 20 Mbit/s link (given with --rate): when the 7 others finish
#   silent   one relay's link pulled (`haul lab link h4 down`: nothing answers, nothing resets)
#            once it staged half, the default --timeout (60 s): when the 7 others finish
#   frozen   one relay stopped with SIGSTOP once it staged half (resumed after the push)
# Prints a table (seconds, and T(N)/T(1) per method) and writes OUT/fan-out.csv and, with
# gnuplot, OUT/fan-out.png (time vs peers per size).
#
#   sudo bash bench/fan-out.sh          (about 40 minutes with the defaults)
# Environment: SIZES (MiB, default "32 64 128 256"), PEERS (default "1 2 3 6 8"), RUNS (3),
#   BASE_RUNS (runs of the two baselines, default RUNS: they take N times as long),
#   RATE (200mbit), FAIL_SIZE (MiB, 128; FAIL_SIZE=0 skips the failure runs), OUT
#   (bench/results), DATA (/dev/shm), PLAN (haul's --plan, default chain; any other plan
#   is the method `haul-PLAN`, e.g. `PLAN=stripes:2 BASE_RUNS=0` for striped trees alone).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"32 64 128 256"}
PEERS=${PEERS:-"1 2 3 6 8"}
RUNS=${RUNS:-3}
BASE_RUNS=${BASE_RUNS:-$RUNS}
RATE=${RATE:-200mbit}
FAIL_SIZE=${FAIL_SIZE:-128}
OUT=${OUT:-bench/results}
DATA=${DATA:-/dev/shm}
PLAN=${PLAN:-chain}
METHOD=haul-fanout
[ "$PLAN" = chain ] || METHOD=haul-$PLAN
NAME=fanout$$

command -v python3 >/dev/null || { echo "missing python3" >&2; exit 1; }
mkdir -p "$OUT"
CSV=$OUT/fan-out.csv

measure() {
if [ "$(id -u)" != 0 ]; then echo "fan-out.sh needs root (the lab): run it with sudo" >&2; exit 1; fi
cargo build --release -q -p haul -p haul-bench
HAUL=$PWD/target/release/haul
BASE=$PWD/target/release/sendfile-baseline
lab() { "$HAUL" lab "$@" --name "$NAME"; }
inh() { local h=$1; shift; ip netns exec "hl-$NAME-h$h" "$@"; }

W=$(mktemp -d "$DATA/haul-fanout.XXXXXX")
PIDS=()
NAME=fanout$$
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  lab down >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
export HAUL_CONFIG_DIR=$W/config

lab up --hosts 9 --link "rate $RATE delay 5ms" --seed 1 >/dev/null
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

start_node() { # $1 = host; NODE[host] is the node's own pid (ip netns exec execs)
  mkdir -p "$W/n$1"
  ip netns exec "hl-$NAME-h$1" "$HAUL" serve --root "$W/n$1" --listen "198.18.0.$1:7878" \
    --open --plaintext --identity "$W/id$1" >"$W/node$1.log" 2>&1 &
  NODE[$1]=$!
  PIDS+=($!)
  for _ in $(seq 1 200); do grep -q listening "$W/node$1.log" 2>/dev/null && return; sleep 0.05; done
  echo "node h$1 did not start:" >&2; cat "$W/node$1.log" >&2; exit 1
}
declare -gA NODE
for h in $(seq 2 9); do start_node "$h"; done
urls() { # $1 = peers, $2 = dest
  for h in $(seq 2 $((1 + $1))); do printf 'haul://198.18.0.%s:7878/%s ' "$h" "$2"; done
}
clear_dests() { for h in $(seq 2 9); do rm -rf "$W/n$h/$1" "$W/n$h/.haul/partial"/* 2>/dev/null || true; done; }

echo "method,size_mib,peers,run,seconds" >"$CSV"
RUN_ID=0
for size in $SIZES; do
  head -c $((size << 20)) /dev/urandom >"$W/f$size.bin"
  for peers in $PEERS; do
    for run in $(seq 1 "$RUNS"); do
      RUN_ID=$((RUN_ID + 1))
      d=r$RUN_ID
      # haul fan-out
      t0=$(now)
      inh 1 "$HAUL" -q push "$W/f$size.bin" $(urls "$peers" "$d") --plaintext --plan "$PLAN"
      t1=$(now)
      echo "$METHOD,$size,$peers,$run,$(awk "BEGIN {print $t1 - $t0}")" >>"$CSV"
      clear_dests "$d"
      [ "$run" -le "$BASE_RUNS" ] || continue
      # bare sendfile, one sender process per peer, all at once
      receivers=()
      for h in $(seq 2 $((1 + peers))); do
        mkdir -p "$W/n$h"
        inh "$h" "$BASE" recv "198.18.0.$h:9000" "$W/n$h/base.bin" >/dev/null &
        receivers+=($!)
      done
      sleep 0.3
      t0=$(now)
      senders=()
      for h in $(seq 2 $((1 + peers))); do
        inh 1 "$BASE" send "198.18.0.$h:9000" "$W/f$size.bin" >/dev/null &
        senders+=($!)
      done
      wait "${senders[@]}" "${receivers[@]}"
      t1=$(now)
      echo "sendfile,$size,$peers,$run,$(awk "BEGIN {print $t1 - $t0}")" >>"$CSV"
      for h in $(seq 2 9); do rm -f "$W/n$h/base.bin"; done
      # parallel haul pushes
      t0=$(now)
      pushes=()
      for h in $(seq 2 $((1 + peers))); do
        inh 1 "$HAUL" -q push "$W/f$size.bin" "haul://198.18.0.$h:7878/p$d/" --plaintext &
        pushes+=($!)
      done
      wait "${pushes[@]}"
      t1=$(now)
      echo "haul-parallel,$size,$peers,$run,$(awk "BEGIN {print $t1 - $t0}")" >>"$CSV"
      clear_dests "p$d"
    done
  done
  rm -f "$W/f$size.bin"
done

# Failures, 8 peers: when the 7 others finish, from each node's report.
[ "$FAIL_SIZE" -gt 0 ] || RUNS=0
head -c $((FAIL_SIZE << 20)) /dev/urandom >"$W/fail.bin"
others_done() { # stdin: --json output; $1: the failed node's index (0-based)
  python3 -c '
import json, sys
skip = int(sys.argv[1])
for line in sys.stdin:
    try: v = json.loads(line)
    except ValueError: continue
    if v.get("event") == "fanout":
        ok = [n for i, n in enumerate(v["nodes"]) if i != skip]
        assert all(n["ok"] for n in ok), [n["error"] for n in ok if not n["ok"]]
        print(max(n["seconds"] for n in ok))
' "$1"
}
for run in $(seq 1 "$RUNS"); do
  RUN_ID=$((RUN_ID + 1))
  d=f$RUN_ID
  t0=$(now)
  inh 1 "$HAUL" -q push "$W/fail.bin" $(urls 8 "$d") --plaintext --plan "$PLAN" >/dev/null
  t1=$(now)
  echo "fail-clean,$FAIL_SIZE,8,$run,$(awk "BEGIN {print $t1 - $t0}")" >>"$CSV"
  clear_dests "$d"
  # killed: h4 (the third node of the chain) once it staged half.
  ( while ! find "$W/n4/.haul/partial" -type f -size +$((FAIL_SIZE / 2 * 1024))k 2>/dev/null | grep -q .; do sleep 0.05; done
    kill -9 "${NODE[4]}" ) &
  killer=$!
  secs=$(inh 1 "$HAUL" push "$W/fail.bin" $(urls 8 "k$d") --plaintext --plan "$PLAN" --timeout 5 --json 2>/dev/null | others_done 2 || true)
  kill "$killer" 2>/dev/null || true
  wait "$killer" 2>/dev/null || true
  if kill -0 "${NODE[4]}" 2>/dev/null; then
    echo "fail-killed run $run: the push ended before h4 staged half; not counted" >&2
  else
    echo "fail-killed,$FAIL_SIZE,8,$run,$secs" >>"$CSV"
    start_node 4
  fi
  clear_dests "k$d"
  # slow: h6 on 20 Mbit/s both ways, said with --rate.
  lab set h6 "rate 20mbit delay 5ms" >/dev/null
  lab set h6 --dir ingress "rate 20mbit" >/dev/null
  secs=$(inh 1 "$HAUL" push "$W/fail.bin" $(urls 8 "s$d") --plaintext --plan "$PLAN" \
    --rate "haul://198.18.0.6:7878/s$d=20mbit" --json 2>/dev/null | others_done 4)
  lab set h6 "rate $RATE delay 5ms" >/dev/null
  lab set h6 --dir ingress "" >/dev/null
  echo "fail-slow,$FAIL_SIZE,8,$run,$secs" >>"$CSV"
  clear_dests "s$d"
  # silent and frozen: h4 goes quiet once it staged half (its link pulled, or the process
  # stopped); the others must not wait out the 60 s --timeout.
  for how in silent frozen; do
    q=${how:0:1}$d  # a destination of its own: a node back from the last run may still hold that one
    rm -f "$W/went-quiet"
    ( while ! find "$W/n4/.haul/partial" -type f -size +$((FAIL_SIZE / 2 * 1024))k 2>/dev/null | grep -q .; do sleep 0.05; done
      if [ "$how" = silent ]; then lab link h4 down >/dev/null; else kill -STOP "${NODE[4]}"; fi
      touch "$W/went-quiet" ) &
    quieter=$!
    secs=$(inh 1 "$HAUL" push "$W/fail.bin" $(urls 8 "$q") --plaintext --plan "$PLAN" --json 2>/dev/null | others_done 2 || true)
    kill "$quieter" 2>/dev/null || true
    wait "$quieter" 2>/dev/null || true
    lab link h4 up >/dev/null
    kill -CONT "${NODE[4]}" 2>/dev/null || true
    if [ -e "$W/went-quiet" ]; then
      echo "fail-$how,$FAIL_SIZE,8,$run,$secs" >>"$CSV"
    else
      echo "fail-$how run $run: the push ended before h4 staged half; not counted" >&2
    fi
    sleep 2  # h4, back, lets go of the transfer it was cut from
    clear_dests "$q"
  done
done

# Peak memory of every node over the whole run (each relayed every size).
for h in $(seq 2 9); do
  if [ -r "/proc/${NODE[$h]}/status" ]; then
    echo "node h$h peak RSS: $(awk '/VmHWM/ {print $2, $3}' "/proc/${NODE[$h]}/status")"
  fi
done | tee "$OUT/fan-out-rss.txt"
}

# SUMMARY_ONLY=1: only the table and plot, from an existing OUT/fan-out.csv.
[ -n "${SUMMARY_ONLY:-}" ] || measure

# Medians, ratios, plot.
python3 - "$CSV" "$OUT" "$METHOD" <<'PY'
import csv, statistics, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
t = collections.defaultdict(list)
for r in rows:
    if r["seconds"]:
        t[(r["method"], int(r["size_mib"]), int(r["peers"]))].append(float(r["seconds"]))
med = {k: statistics.median(v) for k, v in t.items()}
plans = sorted({k[0] for k in med if k[0].startswith("haul-") and k[0] not in ("haul-fanout", "haul-parallel")})
methods = ["haul-fanout"] + plans + ["sendfile", "haul-parallel"]
sizes = sorted({k[1] for k in med if k[0] in methods})
peers = sorted({k[2] for k in med if k[0] in methods})
print("| size | method | " + " | ".join(f"{p} peer{'s' if p > 1 else ''}" for p in peers) + " | T(8)/T(1) |")
print("|---|---|" + "---|" * len(peers) + "---|")
for s in sizes:
    for m in methods:
        cells = [f"{med[(m, s, p)]:.2f}" if (m, s, p) in med else "" for p in peers]
        ratio = ""
        if (m, s, 1) in med and (m, s, max(peers)) in med:
            ratio = f"{med[(m, s, max(peers))] / med[(m, s, 1)]:.2f}"
        print(f"| {s} MiB | {m} | " + " | ".join(cells) + f" | {ratio} |")
for k in ["fail-clean", "fail-killed", "fail-slow", "fail-silent", "fail-frozen"]:
    for (m, s, p), v in med.items():
        if m == k:
            extra = ""
            one = med.get((sys.argv[3], s, 1)) or med.get(("haul-fanout", s, 1))
            if one:
                extra = f" = {v / one:.2f} x T(1 peer)"
            print(f"{k} ({s} MiB, 8 peers, the 7 others): {v:.2f} s{extra}")
out = sys.argv[2]
plots = []
with open(f"{out}/fan-out.dat", "w") as f:
    for s in sizes:
        for m in methods:
            points = [(p, med[(m, s, p)]) for p in peers if (m, s, p) in med]
            if not points:
                continue
            f.write(f"# {s} MiB {m}\n")
            for p, v in points:
                f.write(f"{p} {v:.3f}\n")
            f.write("\n\n")
            plots.append(f"'{out}/fan-out.dat' index {len(plots)} with linespoints title '{s} MiB {m}'")
with open(f"{out}/fan-out.gp", "w") as f:
    f.write(f"set terminal png size 1000,650; set output '{out}/fan-out.png'; set xlabel 'peers'; "
            f"set ylabel 'seconds'; set key left top; set grid\nplot {', '.join(plots)}\n")
PY
if ! command -v gnuplot >/dev/null; then
  apt-get install -y -qq gnuplot-nox >/dev/null 2>&1 || true
fi
if command -v gnuplot >/dev/null && [ -n "${SIZES// /}" ]; then
  gnuplot "$OUT/fan-out.gp"
  echo "plot: $OUT/fan-out.png"
fi
