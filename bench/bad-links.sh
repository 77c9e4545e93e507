#!/usr/bin/env bash
# Bad links (issue 14): the seed's experiments side by side, in the lab.
#
# h1 and h2 are lab hosts; every impairment sits on the data's way (the
# sender's egress, as tc-netem on the seed's sender), acknowledgements come
# back over `rate RATE delay 10ms`. One file of SIZE MiB per run:
#   haul-quic   h1: haul push --transport quic   -> haul serve on h2
#   haul-tcp    h1: haul push (TLS over TCP)     -> haul serve on h2
#   haul-auto   h1: haul push --transport auto   -> haul serve on h2 (the
#               default; its own connections, not -j 1: it measures both)
#   lftp        h1: lftp get   <- vsftpd on h2   (PushPull's FTP analogue)
#   rclone      h1: rclone copy <- vsftpd on h2
# Sweeps (each point is `rate RATE delay 10ms` plus the impairment, except
# the delay sweep): delay 1-1000 ms, loss 0-50 %, corruption 0-50 %,
# reordering 0-80 % (50 % correlation), duplication 0-80 %.
# A run that does not finish in LIMIT s counts as SIZE/LIMIT, marked `>`;
# a tool that timed out is not run at the harsher points of that sweep.
# Every delivered file is compared with the source byte for byte.
#
# Then the issue's target rows: haul QUIC at 30 % loss against the same link
# clean, 1 GiB at `rate RATE delay 1000ms`, haul QUIC
# sharing the clean bottleneck with an iperf3 TCP flow (fairness), and a
# loopback push over QUIC and over TLS/TCP with the peak RSS of both ends.
#
#   sudo bash bench/bad-links.sh                    # about 90 minutes
# Environment: SIZE (MiB, 256), RUNS (haul runs per point, 3), BASE_RUNS
#   (lftp/rclone, 1), RATE (200mbit), LIMIT (150), SWEEPS ("delay loss corrupt
#   reorder duplicate"), POINTS (one list of points for every sweep, instead
#   of each sweep's own), TOOLS ("haul-quic haul-tcp lftp rclone"; haul-auto
#   too), DELAY_SIZE
#   (MiB for the 1 s row, 1024), DELAY_TOOLS (who runs it: "haul-quic
#   haul-tcp"), TARGETS (1: the target rows), TARGET_ROWS (which: "loss delay
#   fair loopback"), OUT
#   (bench/results), DATA (/dev/shm); APPEND=1 reruns TOOLS x SWEEPS into an
#   existing CSV (those rows replaced, the rest kept), PLOT_ONLY=1 only redraws the plots.
# Writes OUT/bad-links.csv, OUT/bad-links-targets.txt and one PNG per sweep
# (OUT/bad-links-SWEEP.png).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-256}
RUNS=${RUNS:-3}
BASE_RUNS=${BASE_RUNS:-1}
RATE=${RATE:-200mbit}
LIMIT=${LIMIT:-150}
SWEEPS=${SWEEPS-"delay loss corrupt reorder duplicate"}
TOOLS=${TOOLS-"haul-quic haul-tcp lftp rclone"}
DELAY_SIZE=${DELAY_SIZE:-1024}
TARGETS=${TARGETS:-1}
OUT=${OUT:-bench/results}
DATA=${DATA:-/dev/shm}
[ "$(id -u)" = 0 ] || { echo "bench/bad-links.sh needs root (the lab)" >&2; exit 2; }

need=()
for pair in lftp:lftp rclone:rclone iperf3:iperf3 gnuplot:gnuplot-nox /usr/bin/time:time \
  /usr/sbin/vsftpd:vsftpd /usr/sbin/nginx:nginx-light; do
  cmd=${pair%%:*}
  command -v "$cmd" >/dev/null 2>&1 || [ -x "$cmd" ] || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cargo build --release -q -p haul -p haul-bench
HAUL=$PWD/target/release/haul
NAME=badlinks$$
W=$(mktemp -d "$DATA/haul-badlinks.XXXXXX")
mkfifo "$W/hold"
NODE= SRV=
cleanup() {
  exec 9>&- 2>/dev/null || true
  [ -n "$NODE" ] && kill "$NODE" 2>/dev/null || true
  wait 2>/dev/null || true
  "$HAUL" lab down --name "$NAME" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
CSV=$OUT/bad-links.csv
# One PNG per sweep from the CSV, every tool in it.
plot() { # $1 sweep
  command -v gnuplot >/dev/null || return 0
  local sweep=$1 unit="%" plots="" t
  [ "$sweep" = delay ] && unit="ms, one way"
  for t in $(awk -F, -v s="$sweep" 'NR > 1 && $1==s {print $4}' "$CSV" | awk '!seen[$0]++'); do
    awk -F, -v s="$sweep" -v t="$t" '$1==s && $4==t {g=$5; sub(/^>/, "", g); if (g != "corrupt") print $2, g}' "$CSV" >"$W/$sweep-$t.dat"
    plots="$plots${plots:+, }\"$W/$sweep-$t.dat\" using 1:2 with linespoints title \"$t\""
  done
  [ -n "$plots" ] || return 0
  gnuplot <<GP
set terminal pngcairo size 900,540
set output "$OUT/bad-links-$sweep.png"
set title "goodput vs $sweep, rate $RATE (lab, $SIZE MiB; a run past ${LIMIT}s plots its bound)"
set xlabel "$sweep ($unit)"
set ylabel "goodput (Mbit/s)"
set logscale y
set yrange [0.5:*]
set grid
set key outside right
plot $plots
GP
}

if [ "${PLOT_ONLY:-0}" = 1 ]; then
  for sweep in $SWEEPS; do plot "$sweep"; done
  exit 0
fi
export HAUL_CONFIG_DIR=$W/config
# The path memory (~/.cache/haul/paths) of this run only; every sweep point
# starts cold (`--rate-hint none`) but the delay row's second transfer.
export XDG_CACHE_HOME=$W/cache
HINT=${HINT---rate-hint none}
"$HAUL" lab up --hosts 2 --link "rate $RATE delay 10ms" --seed 1 --name "$NAME" >/dev/null
inh() { local h=$1; shift; ip netns exec "hl-$NAME-h$h" "$@"; }
setp() { "$HAUL" lab set --name "$NAME" --dir egress "$@" >/dev/null; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mbit() { awk -v s="$1" -v a="$2" -v b="$3" 'BEGIN {printf "%.1f", s*8*1.048576/(b-a)}'; }

# The node on h2, and vsftpd on h2 serving one file of SIZE MiB (data/f00.bin).
mkdir -p "$W/node" "$W/lnode"
inh 2 "$HAUL" serve --root "$W/node" --listen 198.18.0.2:7878 --open --identity "$W/id" \
  >"$W/node.log" 2>&1 &
NODE=$!
inh 2 env HAUL_TESTSERVER_ADDR=198.18.0.2 target/release/remote-servers 1 "$SIZE" \
  <"$W/hold" >"$W/servers.out" 2>&1 &
SRV=$!
exec 9>"$W/hold"
for _ in $(seq 1 600); do grep -q ready "$W/servers.out" 2>/dev/null && break; sleep 0.2; done
grep -q ready "$W/servers.out" || { cat "$W/servers.out"; exit 1; }
FTP=$(awk '$1=="ftp" {print $2}' "$W/servers.out")
FTP_ROOT=$(awk '$1=="ftp-root" {print $2}' "$W/servers.out")
SRC="$W/src.bin"
cp "$FTP_ROOT/data/f00.bin" "$SRC"

# One run of TOOL over the current profile: prints goodput (or >bound), and
# `corrupt` when the delivered file differs from the source.
once() { # $1 tool, $2 source file, $3 size MiB
  local tool=$1 src=$2 size=$3 dst t0 t1 ok=0
  rm -rf "$W/node/d" "$W/node/.haul/partial" "$W/dst"
  mkdir -p "$W/dst"
  t0=$(date +%s.%N)
  case $tool in
    haul-quic | haul-tcp)
      dst="$W/node/d/$(basename "$src")"
      # shellcheck disable=SC2086 # HINT is two words or none
      inh 1 timeout "$LIMIT" "$HAUL" push "$src" haul://198.18.0.2:7878/d/ -j 1 -q \
        --transport "${tool#haul-}" $HINT >"$W/tool.log" 2>&1 && ok=1 ;;
    haul-auto)
      dst="$W/node/d/$(basename "$src")"
      # shellcheck disable=SC2086 # HINT is two words or none
      inh 1 timeout "$LIMIT" "$HAUL" push "$src" haul://198.18.0.2:7878/d/ -q \
        --transport auto $HINT >"$W/tool.log" 2>&1 && ok=1 ;;
    lftp)
      dst="$W/dst/f00.bin"
      inh 1 timeout "$LIMIT" lftp -e "set net:max-retries 0; set net:timeout 30; set ftp:passive-mode on; get /data/f00.bin -o $dst; quit" \
        "${FTP%/data/}" >"$W/tool.log" 2>&1 && ok=1 ;;
    rclone)
      dst="$W/dst/f00.bin"
      local hp=${FTP#*://}; hp=${hp%%/*}
      inh 1 timeout "$LIMIT" rclone copy --retries 1 --low-level-retries 1 --multi-thread-streams 0 \
        ":ftp,host=${hp%:*},port=${hp#*:},user=anonymous,pass=$(rclone obscure haul):/data/f00.bin" "$W/dst" \
        >"$W/tool.log" 2>&1 && ok=1 ;;
  esac
  t1=$(date +%s.%N)
  if [ $ok = 1 ] && [ -f "$dst" ]; then
    if cmp -s "$src" "$dst"; then mbit "$size" "$t0" "$t1"; echo; else echo "corrupt"; fi
  else
    awk -v s="$size" -v l="$LIMIT" 'BEGIN {printf ">%.2f\n", s*8*1.048576/l}'
  fi
}

# Median of a tool's runs at one point (a timeout or corrupt copy ends them).
measure() { # $1 tool, $2 file, $3 size MiB
  local n=$RUNS vals=() v
  case $1 in lftp | rclone) n=$BASE_RUNS ;; esac
  for _ in $(seq "$n"); do
    v=$(once "$1" "$2" "$3")
    case $v in '>'* | corrupt) echo "$v"; return ;; esac
    vals+=("$v")
  done
  echo "  $1 runs: ${vals[*]}" >&2
  printf '%s\n' "${vals[@]}" | median
}

# Profiles for the data's way: haul pushes from h1, FTP tools pull to h1.
data_way() { # $1 tool, $2 profile
  case $1 in
    haul-*) setp h1 "$2"; setp h2 "rate $RATE delay 10ms" ;;
    *) setp h2 "$2"; setp h1 "rate $RATE delay 10ms" ;;
  esac
}

points() {
  if [ -n "${POINTS:-}" ]; then echo "$POINTS"; return; fi
  case $1 in
    delay) echo "1 50 250 500 1000" ;;
    loss) echo "0 2 4 8 16 24 32 40 50" ;;
    corrupt) echo "0 1 10 24 50" ;;
    reorder | duplicate) echo "0 25 50 80" ;;
  esac
}
spec() { # $1 sweep, $2 value
  case $1 in
    delay) echo "rate $RATE delay $2ms" ;;
    loss) [ "$2" = 0 ] && echo "rate $RATE delay 10ms" || echo "rate $RATE delay 10ms loss $2%" ;;
    corrupt) [ "$2" = 0 ] && echo "rate $RATE delay 10ms" || echo "rate $RATE delay 10ms corrupt $2%" ;;
    reorder) [ "$2" = 0 ] && echo "rate $RATE delay 10ms" || echo "rate $RATE delay 10ms reorder $2% 50%" ;;
    duplicate) [ "$2" = 0 ] && echo "rate $RATE delay 10ms" || echo "rate $RATE delay 10ms duplicate $2%" ;;
  esac
}

mkdir -p "$OUT"
CSV=$OUT/bad-links.csv
if [ "${APPEND:-0}" = 1 ] && [ -f "$CSV" ]; then
  # Rerun some tools in some sweeps: those rows go, every other row stays.
  awk -F, -v tools=" $TOOLS " -v sweeps=" $SWEEPS " \
    'NR == 1 || index(tools, " " $4 " ") == 0 || index(sweeps, " " $1 " ") == 0' "$CSV" >"$W/keep.csv"
  cp "$W/keep.csv" "$CSV"
else
  echo "sweep,value,link,tool,goodput_mbit" >"$CSV"
fi
for sweep in $SWEEPS; do
  echo "== $sweep (goodput Mbit/s, SIZE=$SIZE MiB) =="
  printf '| %s |' "$sweep"; for t in $TOOLS; do printf ' %s |' "$t"; done; echo
  declare -A GAVE_UP=()
  for v in $(points "$sweep"); do
    sp=$(spec "$sweep" "$v")
    row="| $v |"
    for t in $TOOLS; do
      if [ -n "${GAVE_UP[$t]:-}" ]; then
        g="${GAVE_UP[$t]}"
      else
        data_way "$t" "$sp"
        g=$(measure "$t" "$SRC" "$SIZE")
        case $g in '>'*) GAVE_UP[$t]=$g ;; esac
      fi
      row="$row $g |"
      echo "$sweep,$v,$sp,$t,$g" >>"$CSV"
    done
    echo "$row"
  done
  unset GAVE_UP
  plot "$sweep"
done

[ "$TARGETS" = 1 ] || { echo "csv: $CSV"; exit 0; }
T=$OUT/bad-links-targets.txt
[ -n "${TARGET_ROWS:-}" ] || : >"$T"
say() { echo "$*" | tee -a "$T"; }

ROWS=" ${TARGET_ROWS:-loss delay fair loopback} "
row() { [[ $ROWS == *" $1 "* ]]; }

# 0. 30 % loss against the same link without loss, haul QUIC, SIZE MiB,
#    medians of RUNS (the sweep's points are 24 and 32 %).
if row loss; then
data_way haul-quic "rate $RATE delay 10ms"
clean=$(measure haul-quic "$SRC" "$SIZE")
data_way haul-quic "rate $RATE delay 10ms loss 30%"
lossy=$(measure haul-quic "$SRC" "$SIZE")
say "loss 30%, $SIZE MiB, haul-quic: $lossy Mbit/s against $clean clean ($(awk -v l="${lossy#>}" -v c="$clean" 'BEGIN {printf "%.2f", l/c}') of clean; target >= 0.7)"
fi

# 1. One second one way, DELAY_SIZE MiB, from the first byte.
if row delay; then
head -c $((DELAY_SIZE << 20)) /dev/urandom >"$W/big.bin"
for t in ${DELAY_TOOLS:-haul-quic haul-tcp}; do
  data_way "$t" "rate $RATE delay 1000ms"
  # QUIC: the first transfer finds the rate (nothing remembered yet), the
  # second starts at what the first reached (the path memory).
  rm -rf "$W/cache"
  for n in first second; do
    g=$(HINT="" LIMIT=$((LIMIT * 4)) once "$t" "$W/big.bin" "$DELAY_SIZE")
    say "delay 1000ms, $DELAY_SIZE MiB, $t, $n transfer: $g Mbit/s ($(awk -v g="${g#>}" -v r="${RATE%mbit}" 'BEGIN {printf "%.2f", g/r}') of the link)"
    [ "$t" = haul-quic ] || break
  done
done
rm -f "$W/big.bin"
fi

# 2. Fairness: a 60 s QUIC push and a 20 s iperf3 TCP flow from h1 to h2
#    share h1's clean uplink; each flow's rate while both run.
if row fair; then
setp h1 "rate $RATE delay 10ms"; setp h2 "rate $RATE delay 10ms"
inh 2 iperf3 -s -D -1 >/dev/null 2>&1
head -c $((2048 << 20)) /dev/zero >"$W/fair.bin"
rm -rf "$W/node/d" "$W/node/.haul/partial"
( inh 1 timeout 60 "$HAUL" push "$W/fair.bin" haul://198.18.0.2:7878/d/ -j 1 --json --transport quic 2>/dev/null |
    while IFS= read -r line; do echo "$(date +%s.%N) $line"; done >"$W/fair.json" ) &
FAIR=$!
sleep 10
t0=$(date +%s.%N)
inh 1 iperf3 -c 198.18.0.2 -t 20 -J >"$W/iperf.json" 2>/dev/null || true
t1=$(date +%s.%N)
wait "$FAIR" 2>/dev/null || true
tcp=$(python3 -c 'import json,sys; print("%.1f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/1e6))' "$W/iperf.json")
quic=$(python3 - "$W/fair.json" "$t0" "$t1" <<'PY'
import json, sys
path, a, b = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
pts = []
for line in open(path):
    t, _, js = line.partition(" ")
    try:
        e = json.loads(js)
    except ValueError:
        continue
    if e.get("event") == "progress":
        pts.append((float(t), e.get("bytes", 0)))
inside = [p for p in pts if a <= p[0] <= b]
if len(inside) < 2:
    print("nan")
else:
    (ta, ba), (tb, bb) = inside[0], inside[-1]
    print("%.1f" % ((bb - ba) * 8 / (tb - ta) / 1e6))
PY
)
say "fairness, clean $RATE shared: haul QUIC $quic Mbit/s, iperf3 TCP $tcp Mbit/s (QUIC/TCP $(awk -v q="$quic" -v t="$tcp" 'BEGIN {printf "%.2f", q/t}'); target <= 2)"
rm -f "$W/fair.bin"
fi

# 3. Loopback, clean: 1 GiB pushed over QUIC and over TLS/TCP; peak RSS of
#    the client and the node (GNU time), medians of RUNS.
if row loopback; then
head -c $((1024 << 20)) /dev/urandom >"$W/loop.bin"
for t in quic tcp; do
  vals=() rss=()
  for _ in $(seq "$RUNS"); do
    rm -rf "$W/lnode"
    /usr/bin/time -f %M -o "$W/node.rss" "$HAUL" serve --root "$W/lnode" --listen 127.0.0.1:7979 --open \
      --identity "$W/lid" >"$W/lnode.log" 2>&1 &
    LN=$!
    sleep 0.5
    t0=$(date +%s.%N)
    /usr/bin/time -f %M -o "$W/client.rss" "$HAUL" push "$W/loop.bin" haul://127.0.0.1:7979/d/ -q \
      --transport "$t" >/dev/null 2>&1
    t1=$(date +%s.%N)
    pkill -INT -P "$LN" || true; wait "$LN" 2>/dev/null || true
    vals+=("$(mbit 1024 "$t0" "$t1")")
    rss+=("$(( $(cat "$W/client.rss") / 1024 ))/$(( $(tail -1 "$W/node.rss") / 1024 ))")
  done
  g=$(printf '%s\n' "${vals[@]}" | median)
  eval "LOOP_$t=$g"
  say "loopback 1 GiB over $t: $g Mbit/s (runs: ${vals[*]}); peak RSS client/node MiB: ${rss[*]}"
done
say "loopback QUIC / TLS-over-TCP: $(awk -v q="$LOOP_quic" -v t="$LOOP_tcp" 'BEGIN {printf "%.2f", q/t}') (target >= 0.5)"
fi
echo "csv: $CSV; targets: $T"
