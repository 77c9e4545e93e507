#!/usr/bin/env bash
# haul daemon benchmark, part (d) of issue 16: PushPull's concurrency
# experiment. COUNT files of MIB MiB on the real vsftpd of the remote-pull
# benchmark; one daemon source fetches them all with jobs = 1, 2, 4, 8 and
# auto (a fresh catalog and destination each time: the run's own duration
# from /status), side by side with `lftp mirror --parallel=N` of the same
# directory. REPEAT runs each; medians.
#
#   bash bench/daemon-ftp.sh [COUNT=16] [MIB=1024]
#   REPEAT=3 JOBS="1 2 4 8 auto" bash bench/daemon-ftp.sh 16 256
#
# Needs lftp (apt-get install lftp), vsftpd, room for COUNT*MIB MiB twice
# (source, destination; the destination is removed after each run).
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-16}
MIB=${2:-1024}
REPEAT=${REPEAT:-3}
JOBS=${JOBS:-1 2 4 8 auto}
if [ -z "${HAUL_BIN:-}" ]; then
  cargo build --release -q -p haul -p haul-bench
fi
HAUL=${HAUL_BIN:-$PWD/target/release/haul}
SERVERS=${SERVERS_BIN:-$PWD/target/release/remote-servers}
command -v lftp >/dev/null || { echo "lftp is not installed (apt-get install lftp)"; exit 1; }
W=$(mktemp -d /var/tmp/haul-dftp.XXXXXX)
chmod 755 "$W"
mkfifo "$W/hold"
"$SERVERS" "$COUNT" "$MIB" <"$W/hold" >"$W/servers.out" 2>&1 &
SRV=$!
exec 3>"$W/hold"
cleanup() {
  exec 3>&- || true
  wait "$SRV" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
until grep -q '^ready' "$W/servers.out"; do
  kill -0 "$SRV" 2>/dev/null || { cat "$W/servers.out"; exit 1; }
  sleep 0.5
done
URL=$(awk '$1=="ftp"{print $2}' "$W/servers.out")
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
total_mib=$((COUNT * MIB))

daemon_run() { # JOBS -> seconds of the source's first run
  local port pid secs=""
  port=$(free_port)
  rm -rf "$W/dest" "$W/cat.db"*
  cat >"$W/haul.toml" <<EOF
catalog = "sqlite:$W/cat.db"
status = "127.0.0.1:$port"
worker = "bench"
max_files = 64
max_files_per_host = 64

[[source]]
name = "big"
url = "$URL"
dest = "$W/dest"
schedule = "every 24h"
jobs = $( [ "$1" = auto ] && echo '"auto"' || echo "$1")
max_conn = 16
EOF
  "$HAUL" daemon --config "$W/haul.toml" >/dev/null 2>"$W/daemon.log" &
  pid=$!
  for _ in $(seq 1 36000); do
    secs=$(curl -s "127.0.0.1:$port/status" 2>/dev/null |
      python3 -c 'import json,sys; v=json.load(sys.stdin)["sources"]["big"]; print(v["last_run_seconds"] if v["runs"] else "")' 2>/dev/null || true)
    [ -n "$secs" ] && break
    sleep 0.2
  done
  kill -TERM "$pid"
  wait "$pid" || true
  [ "$(find "$W/dest" -type f -name 'f*.bin' | wc -l)" = "$COUNT" ] || { echo "daemon run incomplete" >&2; tail "$W/daemon.log" >&2; exit 1; }
  rm -rf "$W/dest"
  echo "$secs"
}

lftp_run() { # N -> seconds
  rm -rf "$W/dest"
  local t
  /usr/bin/time -f %e -o "$W/lftp.t" lftp -e "set net:max-retries 2; mirror --parallel=$1 /data/ $W/dest; quit" \
    "${URL%/data/}" >/dev/null 2>&1
  t=$(tail -1 "$W/lftp.t")
  [ "$(find "$W/dest" -type f -name 'f*.bin' | wc -l)" = "$COUNT" ] || { echo "lftp run incomplete" >&2; exit 1; }
  rm -rf "$W/dest"
  echo "$t"
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

echo "$COUNT files x $MIB MiB from vsftpd ($URL), $REPEAT runs each, medians:"
echo "| concurrency | haul daemon s | MiB/s | lftp mirror s | MiB/s | haul/lftp time |"
echo "|---|---|---|---|---|---|"
for j in $JOBS; do
  hs=() ls=()
  for _ in $(seq 1 "$REPEAT"); do
    hs+=("$(daemon_run "$j")")
    [ "$j" != auto ] && ls+=("$(lftp_run "$j")")
  done
  h=$(printf '%s\n' "${hs[@]}" | median)
  if [ "$j" = auto ]; then
    printf '| auto | %.2f | %.0f | — | — | — |\n' "$h" "$(python3 -c "print($total_mib / $h)")"
  else
    l=$(printf '%s\n' "${ls[@]}" | median)
    printf '| %s | %.2f | %.0f | %.2f | %.0f | %.2f |\n' "$j" "$h" "$(python3 -c "print($total_mib / $h)")" \
      "$l" "$(python3 -c "print($total_mib / $l)")" "$(python3 -c "print($h / $l)")"
  fi
done
