#!/usr/bin/env bash
# haul daemon benchmark (issue 16), on the real nginx of the remote-pull
# benchmark, with each catalog (SQLite, then PostgreSQL started here in a
# temp dir):
#  (a) a source of COUNT files (empty, so listing and deciding dominate): a
#      first run (every file new: decisions per second), then a second run
#      after NEW more files appear (only they are fetched), next to the bare
#      listing (one GET of nginx's index page with curl);
#  (b) SOURCES sources of PER files each, all due at once (first runs: wall
#      time until every source's run ended, files per second), against the
#      baseline of the same SOURCES*PER files as one source;
#  (c) the idle daemon of (b) between runs: CPU from /proc/PID/stat over
#      IDLE seconds (utime+stime), as a share of one core;
#  (d) is bench/daemon-ftp.sh (16 large files from vsftpd, against lftp).
#
#   bash bench/daemon.sh [COUNT=100000] [NEW=100]
#   PARTS="b c" SOURCES=20 PER=1000 IDLE=60 REPEAT=3 bash bench/daemon.sh
#   CATALOGS=postgres PARTS=a bash bench/daemon.sh   (part (a) on one catalog)
#
# Each part prints one line per measurement; with REPEAT > 1, (b) runs
# REPEAT times per catalog and prints the median too.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-100000}
NEW=${2:-100}
PARTS=${PARTS:-a b c}
SOURCES=${SOURCES:-20}
PER=${PER:-1000}
IDLE=${IDLE:-60}
REPEAT=${REPEAT:-3}
CATALOGS=${CATALOGS:-sqlite postgres}
# HAUL_BIN=path: measure that haul binary (e.g. an older build, for a
# baseline) instead of building this tree's.
if [ -z "${HAUL_BIN:-}" ]; then
  cargo build --release -q -p haul -p haul-bench
fi
HAUL=${HAUL_BIN:-$PWD/target/release/haul}
SERVERS=${SERVERS_BIN:-$PWD/target/release/remote-servers}
W=$(mktemp -d /dev/shm/haul-dbench.XXXXXX)
chmod 755 "$W"
mkfifo "$W/hold"
"$SERVERS" "$COUNT" 0 <"$W/hold" >"$W/servers.out" 2>&1 &
SRV=$!
exec 3>"$W/hold"
PG_PID=
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
cleanup() {
  exec 3>&- || true
  if [ -n "$PG_PID" ]; then
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$W/pg/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  wait "$SRV" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
until grep -q '^ready' "$W/servers.out"; do
  kill -0 "$SRV" 2>/dev/null || { cat "$W/servers.out"; exit 1; }
  sleep 0.5
done
URL=$(awk '$1=="http"{print $2}' "$W/servers.out")
HTTP_DATA=$(awk '$1=="http-root"{print $2}' "$W/servers.out")/data
bare=$( { /usr/bin/time -f %e curl -s -o /dev/null "$URL"; } 2>&1 )
# haul's own listing of it (crawl and parse, no file taken, no catalog).
/usr/bin/time -f %e -o "$W/hlist.t" "$HAUL" -q pull "$URL" "$W/none" --include 'no-such-file' >/dev/null 2>&1 || true
hlist=$(tail -1 "$W/hlist.t")
echo "bare listing of $COUNT files: ${bare}s (curl of the index), ${hlist}s (haul pull, a filter that takes nothing)"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

run_daemon() { # CATALOG NAME -> prints the run's seconds
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$W/haul.toml" <<EOF
catalog = "$1"
status = "127.0.0.1:$port"
worker = "bench"

[[source]]
name = "$2"
url = "$URL"
dest = "$W/dest-$2"
schedule = "every 24h"
jobs = 8
EOF
  "$HAUL" daemon --config "$W/haul.toml" 2>"$W/daemon.log" &
  local pid=$!
  local secs=""
  for _ in $(seq 1 3600); do
    secs=$(curl -s "127.0.0.1:$port/status" 2>/dev/null |
      python3 -c 'import json,sys; s=json.load(sys.stdin)["sources"]; v=list(s.values())[0]; print(v["last_run_seconds"] if v["runs"] else "")' 2>/dev/null || true)
    [ -n "$secs" ] && break
    sleep 0.5
  done
  kill -TERM "$pid"
  wait "$pid" || true
  echo "$secs"
}

bench_catalog() { # CATALOG LABEL
  local first second
  rm -rf "$HTTP_DATA"/new-*
  first=$(run_daemon "$1" "src-$2")
  for i in $(seq 1 "$NEW"); do : >"$HTTP_DATA/new-$i.bin"; done
  second=$(run_daemon "$1" "src-$2")
  python3 - "$2" "$COUNT" "$NEW" "$first" "$second" "$bare" "$hlist" <<'EOF'
import sys
label, count, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
first, second, bare, hlist = map(float, sys.argv[4:8])
print(f"{label}: first run {first:.1f}s ({count/first:.0f} files decided and fetched per second); "
      f"second run with {new} new: {second:.2f}s = {second/bare:.1f}x curl's listing, {second/hlist:.1f}x haul's")
EOF
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

HTTP_ROOT=$(awk '$1=="http-root"{print $2}' "$W/servers.out")
HTTP_BASE=${URL%/data/}
many_made=
make_many() { # SOURCES directories of PER empty files under nginx's root
  [ -n "$many_made" ] && return
  for s in $(seq -w 1 "$SOURCES"); do
    mkdir -p "$HTTP_ROOT/many/s$s"
    (cd "$HTTP_ROOT/many/s$s" && seq -f "f%05g.bin" 1 "$PER" | xargs touch)
  done
  chmod -R a+rX "$HTTP_ROOT/many"
  many_made=1
}

# The config of N sources (the list of URLs in $W/urls), one daemon.
many_config() { # CATALOG PORT SCHEDULE
  {
    echo "catalog = \"$1\""
    echo "status = \"127.0.0.1:$2\""
    echo "worker = \"bench\""
    echo "max_files = 64"
    echo "max_files_per_host = 64"
    local i=0
    while read -r u; do
      i=$((i + 1))
      printf '\n[[source]]\nname = "m%02d"\nurl = "%s"\ndest = "%s"\nschedule = "%s"\njobs = 8\n' \
        "$i" "$u" "$W/many-dest/m$i" "$3"
    done <"$W/urls"
  } >"$W/many.toml"
}

# Seconds from the daemon's start until every source ended its first run
# (read from /status every 0.1 s) into $SECS; leaves the daemon running in
# $DPID (not in a subshell: the daemon would hold its output open).
many_run() { # CATALOG
  local port t0 secs
  port=$(free_port)
  many_config "$1" "$port" "every 24h"
  rm -rf "$W/many-dest"
  t0=$(date +%s.%N)
  "$HAUL" daemon --config "$W/many.toml" >/dev/null 2>"$W/many.log" &
  DPID=$!
  secs=""
  for _ in $(seq 1 36000); do
    if curl -s "127.0.0.1:$port/status" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)["sources"]
sys.exit(0 if s and all(v["runs"] >= 1 for v in s.values()) else 1)' 2>/dev/null; then
      secs=$(python3 -c "import time; print(f'{time.time() - $t0:.2f}')")
      break
    fi
    sleep 0.1
  done
  SECS=$secs
}

stop_daemon() {
  kill -TERM "$DPID" 2>/dev/null || true
  wait "$DPID" 2>/dev/null || true
}

# CPU seconds (utime+stime) of PID so far.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

bench_many() { # CATALOG LABEL FRESH_CATALOG_COMMAND
  make_many
  local total=$((SOURCES * PER)) many=() one=() secs
  for r in $(seq 1 "$REPEAT"); do
    # Baseline: the same files as one source (the parent directory).
    $3 one-$r
    echo "$HTTP_BASE/many/" >"$W/urls"
    many_run "$CATALOG"
    stop_daemon
    one+=("$SECS")
    # SOURCES sources at once.
    $3 many-$r
    for s in $(seq -w 1 "$SOURCES"); do echo "$HTTP_BASE/many/s$s/"; done >"$W/urls"
    many_run "$CATALOG"
    secs=$SECS
    many+=("$secs")
    if [ "$r" = "$REPEAT" ] && [[ " $PARTS " == *" c "* ]]; then
      # (c): the daemon of the last repeat, idle until its next runs (24 h away).
      sleep 2
      local c0 c1
      c0=$(cpu_seconds "$DPID")
      sleep "$IDLE"
      c1=$(cpu_seconds "$DPID")
      python3 - "$2" "$c0" "$c1" "$IDLE" "$SOURCES" <<'PY'
import sys
label, c0, c1, idle, n = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
print(f"(c) {label}: idle daemon with {n} sources: {c1 - c0:.3f} CPU s in {idle:.0f} s = {100 * (c1 - c0) / idle:.3f} % of a core")
PY
    fi
    stop_daemon
    echo "(b) $2 run $r: $SOURCES x $PER files: ${secs}s ($(python3 -c "print(round($total / $secs))") files/s); one source of $total: ${one[-1]}s"
  done
  python3 - "$2" "$total" "$SOURCES" "$PER" "${many[*]}" "${one[*]}" <<'PY'
import statistics, sys
label, total, n, per = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
many = [float(x) for x in sys.argv[5].split()]
one = [float(x) for x in sys.argv[6].split()]
m, o = statistics.median(many), statistics.median(one)
print(f"(b) {label}: median of {len(many)}: {n} sources x {per} files {m:.2f}s ({total / m:.0f} files/s); "
      f"one source of {total} files {o:.2f}s ({total / o:.0f} files/s); ratio {m / o:.2f}")
PY
}

fresh_sqlite() { CATALOG="sqlite:$W/many-$1.db"; }
fresh_pg() {
  "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U haul -d postgres -qc "CREATE DATABASE \"m$1\"" >/dev/null
  CATALOG="postgres://haul@127.0.0.1:$PG_PORT/m$1"
}

start_pg() {
  [ -n "$PG_PID" ] && return
  mkdir -p "$W/pg"
  chown postgres "$W/pg"
  PG_PORT=$(free_port)
  runuser -u postgres -- "$PG_BIN/initdb" -D "$W/pg/data" -U haul --auth=trust --no-sync >/dev/null
  # Not holding fd 3 (the servers' stdin: they stop when it closes).
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$W/pg/data" -l "$W/pg/server.log" -w \
    -o "-h 127.0.0.1 -p $PG_PORT -k $W/pg" start >/dev/null 3>&-
  PG_PID=started
  until "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U haul -d postgres -qc 'SELECT 1' >/dev/null 2>&1; do sleep 0.2; done
}

if [[ " $PARTS " == *" a "* ]]; then
  if [[ " $CATALOGS " == *" sqlite "* ]]; then
    bench_catalog "sqlite:$W/catalog.db" sqlite
  fi
  if [[ " $CATALOGS " == *" postgres "* ]]; then
    start_pg
    "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U haul -d postgres -qc 'CREATE DATABASE bench' >/dev/null
    bench_catalog "postgres://haul@127.0.0.1:$PG_PORT/bench" postgres
  fi
fi
if [[ " $PARTS " == *" b "* ]] || [[ " $PARTS " == *" c "* ]]; then
  bench_many "" sqlite fresh_sqlite
  start_pg
  bench_many "" postgres fresh_pg
fi
