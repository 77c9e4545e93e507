#!/usr/bin/env bash
# Remote-pull benchmark (issue: FTP/HTTP/S3 sources). Real vsftpd and nginx on
# loopback serve COUNT files of MIB MiB; in each of RUNS rounds, side by side:
#   haul -j auto, haul -j 1/2/4/8         (haul pull URL DEST)
#   lftp  mirror --parallel=4
#   aria2c -x4 -j4                         (one URL per file)
#   rclone copy --transfers 4              (on-the-fly :ftp / :http remotes)
# Prints each tool's median MB/s per protocol, haul auto / best other tool,
# and haul auto / haul's best fixed -j.
#
#   bash bench/remote-pull.sh [COUNT=16] [MIB=64] [RUNS=3] [DEST_DIR=/dev/shm]
#
# PROTOS (default "ftp http") picks the protocols and FIXED_J (default
# "1 2 4 8") haul's fixed -j levels: PROTOS=http FIXED_J= runs only haul
# auto against the other tools, for more rounds in the same time.
#
# With LAB='rate 500mbit delay 50ms' (any lab profile; needs root) the servers
# run in lab host h2 (198.18.0.2) and every client in h1, across that link
# in each direction (see docs/LAB.md).
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-16}
MIB=${2:-64}
RUNS=${3:-3}
BASE=${4:-/dev/shm}
LAB=${LAB:-}
PROTOS=${PROTOS:-ftp http}
FIXED_J=${FIXED_J-1 2 4 8}

need=()
for pair in lftp:lftp aria2c:aria2 rclone:rclone; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cargo build --release -q -p haul -p haul-bench
HAUL=$PWD/target/release/haul

W=$(mktemp -d "$BASE/haul-rbench.XXXXXX")
mkfifo "$W/hold"
SRV_RUN=()
CLI_RUN=()
if [ -n "$LAB" ]; then
  export HAUL_LAB=rpull
  "$HAUL" lab down >/dev/null 2>&1 || true
  "$HAUL" lab up --hosts 2 --link "$LAB" >/dev/null
  SRV_RUN=("$HAUL" lab exec h2 -- env HAUL_TESTSERVER_ADDR=198.18.0.2)
  CLI_RUN=("$HAUL" lab exec h1 --)
  echo "lab link: $LAB (servers in h2, clients in h1)"
fi
cleanup() {
  exec 9>&- 2>/dev/null || true
  [ -n "${SRV:-}" ] && wait "$SRV" 2>/dev/null
  [ -n "$LAB" ] && "$HAUL" lab down >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
# The server process lives while fd 9 (its stdin) is open.
"${SRV_RUN[@]}" target/release/remote-servers "$COUNT" "$MIB" <"$W/hold" >"$W/servers.out" 2>&1 &
SRV=$!
exec 9>"$W/hold"
for _ in $(seq 1 600); do grep -q ready "$W/servers.out" 2>/dev/null && break; sleep 0.2; done
grep -q ready "$W/servers.out" || { cat "$W/servers.out"; exit 1; }
FTP=$(awk '$1=="ftp" {print $2}' "$W/servers.out")
HTTP=$(awk '$1=="http" {print $2}' "$W/servers.out")
TOTAL=$((COUNT * MIB * 1048576))
echo "files: $COUNT x $MIB MiB; ftp $FTP; http $HTTP; dest $BASE"

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
RES="$W/results"
: >"$RES"

run() { # $1 protocol, $2 tool label, rest: command (DEST is $W/dst)
  local proto=$1 label=$2; shift 2
  rm -rf "$W/dst"; mkdir -p "$W/dst"
  sync
  local t0 t1
  t0=$(now)
  if ! "${CLI_RUN[@]}" "$@" >"$W/tool.log" 2>&1; then
    echo "  $label ($proto) FAILED:"; tail -5 "$W/tool.log"; return 0
  fi
  t1=$(now)
  local got
  got=$(find "$W/dst" -type f -name 'f*.bin' | wc -l)
  if [ "$got" -ne "$COUNT" ]; then echo "  $label ($proto): only $got of $COUNT files"; return 0; fi
  local mbs
  mbs=$(awk -v b="$TOTAL" -v a="$t0" -v c="$t1" 'BEGIN {printf "%.1f", b / (c - a) / 1e6}')
  echo "$proto $label $mbs" >>"$RES"
  printf '  %-5s %-14s %8s MB/s\n' "$proto" "$label" "$mbs"
}

URLS="$W/urls"
for r in $(seq 1 "$RUNS"); do
  echo "round $r"
  for proto in $PROTOS; do
    if [ "$proto" = ftp ]; then URL=$FTP; else URL=$HTTP; fi
    run "$proto" haul-auto "$HAUL" pull "$URL" "$W/dst" -q -j auto
    for j in $FIXED_J; do run "$proto" "haul-j$j" "$HAUL" pull "$URL" "$W/dst" -q -j "$j"; done
    run "$proto" lftp lftp -e "set net:max-retries 2; set ftp:passive-mode on; mirror --parallel=4 ${URL#*://*/} $W/dst; quit" "${URL%/data/}"
    : >"$URLS"
    for i in $(seq 0 $((COUNT - 1))); do printf '%sf%02d.bin\n' "$URL" "$i" >>"$URLS"; done
    run "$proto" aria2c aria2c -q -x4 -j4 --file-allocation=none --allow-overwrite=true -d "$W/dst" -i "$URLS"
    HOSTPORT=${URL#*://}; HOSTPORT=${HOSTPORT%%/*}
    if [ "$proto" = ftp ]; then
      RC=":ftp,host=${HOSTPORT%:*},port=${HOSTPORT#*:},user=anonymous,pass=$(rclone obscure haul):/data"
    else
      RC=":http,url='${URL}':"
    fi
    run "$proto" rclone rclone copy --transfers 4 "$RC" "$W/dst"
  done
done

echo
echo "medians over $RUNS rounds (MB/s):"
for proto in $PROTOS; do
  best_other=0 best_fixed=0 auto=0
  for label in haul-auto haul-j1 haul-j2 haul-j4 haul-j8 lftp aria2c rclone; do
    m=$(awk -v p="$proto" -v l="$label" '$1==p && $2==l {print $3}' "$RES" | median)
    [ -z "$m" ] && continue
    printf '  %-5s %-10s %8.1f\n' "$proto" "$label" "$m"
    case $label in
      haul-auto) auto=$m ;;
      haul-j*) best_fixed=$(awk -v a="$best_fixed" -v b="$m" 'BEGIN {print (b > a) ? b : a}') ;;
      *) best_other=$(awk -v a="$best_other" -v b="$m" 'BEGIN {print (b > a) ? b : a}') ;;
    esac
  done
  awk -v p="$proto" -v a="$auto" -v o="$best_other" -v f="$best_fixed" 'BEGIN {
    printf "  %s: haul auto / best other tool = %.2fx (target >= 1.0)", p, (o > 0) ? a / o : 0
    if (f > 0) printf "; auto / best fixed -j = %.2fx (target >= 0.9)", a / f
    printf "\n" }'
done
