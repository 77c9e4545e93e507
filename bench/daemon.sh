#!/usr/bin/env bash
# haul daemon benchmark, part (a) of issue 16: a source of COUNT files (empty,
# so listing and deciding dominate) on the real nginx of the remote-pull
# benchmark. For each catalog (SQLite, then PostgreSQL started here in a temp
# dir): a first run (every file new: decisions per second), then a second run
# after NEW more files appear (only they are fetched), next to the bare
# listing (one GET of nginx's index page with curl).
#
#   bash bench/daemon.sh [COUNT=100000] [NEW=100]
#
# Not done here yet: (b) 20 sources x 1,000 files, (c) idle CPU, (d) the
# 16 x 1 GiB concurrency sweep against lftp.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-100000}
NEW=${2:-100}
cargo build --release -q -p haul -p haul-bench
HAUL=$PWD/target/release/haul
W=$(mktemp -d /dev/shm/haul-dbench.XXXXXX)
chmod 755 "$W"
mkfifo "$W/hold"
target/release/remote-servers "$COUNT" 0 <"$W/hold" >"$W/servers.out" 2>&1 &
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

bench_catalog "sqlite:$W/catalog.db" sqlite

mkdir -p "$W/pg"
chown postgres "$W/pg"
PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
runuser -u postgres -- "$PG_BIN/initdb" -D "$W/pg/data" -U haul --auth=trust --no-sync >/dev/null
# Not holding fd 3 (the servers' stdin: they stop when it closes).
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$W/pg/data" -l "$W/pg/server.log" -w \
  -o "-h 127.0.0.1 -p $PG_PORT -k $W/pg" start >/dev/null 3>&-
PG_PID=started
until "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U haul -d postgres -qc 'SELECT 1' >/dev/null 2>&1; do sleep 0.2; done
"$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U haul -d postgres -qc 'CREATE DATABASE bench' >/dev/null
bench_catalog "postgres://haul@127.0.0.1:$PG_PORT/bench" postgres
