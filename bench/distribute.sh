#!/usr/bin/env bash
# Acquire and distribute (issue 33), in the lab: h1 is the archive (nginx,
# autoindex), h2 runs `haul daemon`, h3.. are the sites (`haul serve`);
# every host's egress `LINK` (default `rate 100mbit delay 10ms`).
# COUNT files (MIN..MAX MiB, sizes from a fixed seed) appear on the archive
# one every INTERVAL seconds (written elsewhere, then renamed in). For each
# number of sites in SITES, three methods, each with a fresh archive
# directory, catalog and destinations:
#   acquire      the daemon alone (no sites): when each file is fetched
#   distribute   the daemon with deliver = [every site]: one fan-out per batch
#   push-hook    what an operator does today: the daemon plus an on_file hook
#                that runs `haul push FILE haul://SITE/...` for each site in turn
# Measured per file: appearance → fetched by the daemon (its log), and
# appearance → arrival at the last site (each site's transfer log, ms);
# the whole set: first appearance → last arrival; and the bytes the daemon's
# host sent (eth0 tx in its namespace) over the bytes of the data.
#
#   sudo bash bench/distribute.sh
# Environment: COUNT (60), MIN (1), MAX (8) MiB, INTERVAL (0.5 s), SITES
# ("4 8"), RUNS (1), METHODS (all three), LINK, OUT (bench/results), DATA
# (/dev/shm), LOGS (a directory to keep each run's daemon log and file
# appearances in).
# Writes OUT/distribute.csv (one row per file, method and run) and, with
# gnuplot, OUT/distribute.png (latency to the last site, sorted).
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-60}
MIN=${MIN:-1}
MAX=${MAX:-8}
INTERVAL=${INTERVAL:-0.5}
SITES=${SITES:-"4 8"}
METHODS=${METHODS:-"acquire distribute push-hook"}
RUNS=${RUNS:-1}
LINK=${LINK:-"rate 100mbit delay 10ms"}
OUT=${OUT:-bench/results}
DATA=${DATA:-/dev/shm}
NAME=dist$$

if [ "$(id -u)" != 0 ]; then echo "distribute.sh needs root (the lab): run it with sudo" >&2; exit 1; fi
command -v nginx >/dev/null || { echo "missing nginx" >&2; exit 1; }
mkdir -p "$OUT"
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul
MAXSITES=0
for n in $SITES; do [ "$n" -gt "$MAXSITES" ] && MAXSITES=$n; done
HOSTS=$((2 + MAXSITES))

W=$(mktemp -d "$DATA/haul-dist.XXXXXX")
chmod 755 "$W"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$HAUL" lab down --name "$NAME" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
export HAUL_CONFIG_DIR=$W/config
inh() { local h=$1; shift; ip netns exec "hl-$NAME-h$h" "$@"; }
"$HAUL" lab up --hosts "$HOSTS" --link "$LINK" --seed 1 --name "$NAME" >/dev/null

# The archive: nginx in h1's namespace.
mkdir -p "$W/archive" "$W/ngx"
. bench/nginx-archive.sh
nginx_archive_conf "$W/ngx" 198.18.0.1:8080 "$W/archive"
inh 1 nginx -p "$W/ngx" -c "$W/ngx/nginx.conf" &
PIDS+=($!)

# The sites: a node on every site host, its transfer log in JSON.
for h in $(seq 3 "$HOSTS"); do
  mkdir -p "$W/site$h"
  inh "$h" "$HAUL" serve --root "$W/site$h" --listen "198.18.0.$h:7878" --open --plaintext \
    --identity "$W/id$h" --log-format json --log-file "$W/site$h.log" >"$W/node$h.out" 2>&1 &
  PIDS+=($!)
done
for h in $(seq 3 "$HOSTS"); do
  for _ in $(seq 1 200); do grep -q listening "$W/node$h.out" 2>/dev/null && break; sleep 0.05; done
done

# The files' sizes: fixed by the seed, so every method sees the same set.
SIZES=$(python3 -c "
import random
r = random.Random(33)
print(' '.join(str(r.randint($MIN << 20, $MAX << 20)) for _ in range($COUNT)))")
TOTAL=$(python3 -c "print(sum(int(x) for x in '$SIZES'.split()))")
head -c $((MAX << 20)) /dev/urandom >"$W/pool.bin"

CSV=$OUT/distribute.csv
[ -f "$CSV" ] || echo "method,sites,run,file,bytes,to_daemon,to_last_site" >"$CSV"
SUMMARY=$W/summary.txt
: >"$SUMMARY"

tx_bytes() { inh 2 cat /sys/class/net/eth0/statistics/tx_bytes; }

# One method: $1 method, $2 sites, $3 run.
measure() {
  local method=$1 n=$2 run=$3 tag="$1-$2-$3"
  local dir="$W/archive/$tag" dest="$W/acq/$tag"
  mkdir -p "$dir"
  chmod 755 "$dir"
  {
    echo "catalog = \"sqlite:$W/cat-$tag.db\""
    echo "status = \"off\""
    echo "worker = \"bench\""
    echo "down_retry = \"1s\""
    if [ "$method" = distribute ]; then
      for h in $(seq 3 $((2 + n))); do
        printf '\n[[site]]\nname = "h%s"\nurl = "haul://198.18.0.%s:7878/%s"\nplaintext = true\n' "$h" "$h" "$tag"
      done
    fi
    printf '\n[[source]]\nname = "s"\nurl = "http://198.18.0.1:8080/%s/"\ndest = "%s"\nschedule = "every 1s"\njobs = 4\n' "$tag" "$dest"
    if [ "$method" = distribute ]; then
      printf 'deliver = [%s]\n' "$(seq 3 $((2 + n)) | sed 's/.*/"h&"/' | paste -sd, -)"
    fi
    if [ "$method" = push-hook ]; then
      local urls
      urls=$(seq 3 $((2 + n)) | sed "s|.*|haul://198.18.0.&:7878/$tag|" | paste -sd' ' -)
      printf "on_file = 'for u in %s; do %s -q push --plaintext \"\$HAUL_LOCAL_PATH\" \"\$u/\" || exit 1; done'\n" "$urls" "$HAUL"
    fi
  } >"$W/$tag.toml"
  if [ "$method" = push-hook ]; then
    # hook_timeout is global: long enough for n pushes of the largest file.
    sed -i '1i hook_timeout = "1h"' "$W/$tag.toml"
  fi
  local tx0
  tx0=$(tx_bytes)
  HAUL_LOG=info inh 2 "$HAUL" daemon --config "$W/$tag.toml" 2>"$W/$tag.daemon.log" &
  local dpid=$!
  sleep 1
  # Files appear one every INTERVAL seconds.
  : >"$W/$tag.appear"
  local i=0
  for size in $SIZES; do
    i=$((i + 1))
    head -c "$size" "$W/pool.bin" >"$W/tmp.nc"
    printf '%s' "$tag-$i" >>"$W/tmp.nc"  # every file differs
    chmod 644 "$W/tmp.nc"
    mv "$W/tmp.nc" "$dir/f$i.nc"
    echo "f$i.nc $(date +%s.%N)" >>"$W/$tag.appear"
    sleep "$INTERVAL"
  done
  # Done when every site holds every file (acquire: the daemon does).
  local want=$COUNT deadline=$((SECONDS + 3600))
  while [ $SECONDS -lt $deadline ]; do
    if [ "$method" = acquire ]; then
      [ "$(grep -c ': fetched ' "$W/$tag.daemon.log" || true)" -ge "$want" ] && break
    else
      local all=1
      for h in $(seq 3 $((2 + n))); do
        [ "$(grep -c "\"path\":\"$tag/f" "$W/site$h.log" 2>/dev/null || true)" -ge "$want" ] || { all=0; break; }
      done
      [ $all = 1 ] && break
    fi
    sleep 0.5
  done
  local tx1
  tx1=$(tx_bytes)
  kill -TERM "$dpid" 2>/dev/null || true
  wait "$dpid" 2>/dev/null || true
  [ -n "${LOGS:-}" ] && mkdir -p "$LOGS" && cp "$W/$tag.daemon.log" "$W/$tag.appear" "$LOGS/"
  python3 - "$method" "$n" "$run" "$tag" "$W" "$CSV" "$((tx1 - tx0))" "$TOTAL" >>"$SUMMARY" <<'PY'
import json, re, statistics, sys
from datetime import datetime, timezone
method, n, run, tag, w, csv, tx, total = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], int(sys.argv[7]), int(sys.argv[8])
def ts(text):
    text = text.rstrip("Z")
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in text else "%Y-%m-%dT%H:%M:%S"
    return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc).timestamp()
appear = {}
for line in open(f"{w}/{tag}.appear"):
    name, t = line.split()
    appear[name] = float(t)
fetched = {}
for line in open(f"{w}/{tag}.daemon.log"):
    m = re.match(r"(\S+)\s+INFO s: fetched (\S+) \(", line)
    if m:
        fetched.setdefault(m.group(2), ts(m.group(1)))
last = {}
if method != "acquire":
    for h in range(3, 3 + n):
        seen = {}
        for line in open(f"{w}/site{h}.log"):
            try:
                v = json.loads(line)
            except ValueError:
                continue
            p = v.get("path", "")
            if v.get("event") == "file_received" and p.startswith(tag + "/"):
                seen.setdefault(p[len(tag) + 1:], ts(v["time"]))
        for f, t in seen.items():
            last[f] = max(last.get(f, 0), t)
to_d, to_s, rows = [], [], []
for f, t0 in appear.items():
    d = fetched.get(f, float("nan")) - t0
    s = last.get(f, float("nan")) - t0 if method != "acquire" else float("nan")
    to_d.append(d); to_s.append(s)
    rows.append(f"{method},{n},{run},{f},,{d:.3f},{s:.3f}")
with open(csv, "a") as out:
    out.write("\n".join(rows) + "\n")
end = max(last.values()) if last else max(fetched.values())
whole = end - min(appear.values())
def q(v, p):
    v = sorted(x for x in v if x == x)
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))] if v else float("nan")
line = (f"{method:10} sites={n} run={run}: whole set {whole:.1f}s; to daemon median {q(to_d,.5):.2f}s p95 {q(to_d,.95):.2f}s")
if method != "acquire":
    line += f"; to last site median {q(to_s,.5):.2f}s p95 {q(to_s,.95):.2f}s"
line += f"; daemon host sent {tx/total:.2f}x the data"
print(line)
PY
  tail -1 "$SUMMARY"
  rm -rf "$dir" "$dest"
  for h in $(seq 3 $((2 + n))); do rm -rf "${W:?}/site$h/$tag"; done
}

for n in $SITES; do
  for run in $(seq 1 "$RUNS"); do
    for method in $METHODS; do
      measure "$method" "$n" "$run"
    done
  done
done

echo
echo "COUNT=$COUNT files of $MIN..$MAX MiB ($((TOTAL >> 20)) MiB), one every ${INTERVAL}s; link: $LINK"
cat "$SUMMARY"
python3 - "$SUMMARY" <<'PY'
import re, sys, collections
whole = collections.defaultdict(list)
p95 = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\S+)\s+sites=(\d+) run=\d+: whole set ([\d.]+)s; to daemon median [\d.]+s p95 ([\d.]+)s(?:; to last site median [\d.]+s p95 ([\d.]+)s)?", line)
    if not m: continue
    meth, n, w, pd, ps = m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(4)), m.group(5)
    whole[(meth, n)].append(w)
    if ps: p95[(meth, n)].append((float(ps), pd))
import statistics as st
for n in sorted({k[1] for k in whole}):
    a = st.median(whole.get(("acquire", n), [float("nan")]))
    for meth in ("distribute", "push-hook"):
        if (meth, n) in whole:
            r = st.median(whole[(meth, n)]) / a
            lat = st.median(s / d for s, d in p95[(meth, n)]) if p95[(meth, n)] else float("nan")
            print(f"sites={n}: {meth} whole set / acquisition alone = {r:.2f}x; p95 to last site / p95 to daemon = {lat:.2f}x")
PY
if command -v gnuplot >/dev/null; then
  python3 - "$CSV" "$W/plot" <<'PY'
import csv, sys, collections
rows = collections.defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    if r["method"] != "acquire" and r["to_last_site"] not in ("", "nan"):
        rows[(r["method"], r["sites"])].append(float(r["to_last_site"]))
for (m, n), v in rows.items():
    with open(f"{sys.argv[2]}-{m}-{n}.dat", "w") as f:
        for i, x in enumerate(sorted(v)):
            f.write(f"{(i + 1) / len(v):.4f} {x:.3f}\n")
PY
  plots=""
  for f in "$W"/plot-*.dat; do
    t=$(basename "$f" .dat); t=${t#plot-}
    plots="$plots${plots:+, }'$f' using 2:1 with lines title '$t'"
  done
  gnuplot -e "set terminal png size 900,540; set output '$OUT/distribute.png'; set xlabel 'seconds from appearance to the last site'; set ylabel 'fraction of files'; set key bottom right; plot $plots" && echo "plot: $OUT/distribute.png"
fi
