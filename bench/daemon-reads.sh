#!/usr/bin/env bash
# Hash once, for acquire-and-distribute (issue 35): `haul daemon` acquires FILES files over
# HTTP (nginx on 127.0.0.1) and delivers them to SITES sites (`haul serve --plaintext` on
# 127.0.0.1) through the fan-out, under strace. Counted: the bytes the daemon read from the
# files it acquired (read/pread*/readv on their descriptors, staging or final) and the bytes
# it sent from them with sendfile/splice/copy_file_range, each over the bytes acquired.
# Once with the hash cache (the default: the download keeps each file's hashes when it
# publishes it, and the fan-out's origin answers from them), once with --no-hash-cache
# (every file read and hashed to be sent). File sizes from a fixed seed, MIN..MAX MiB: the
# small ones travel in pieces under 1 MiB.
#
#   bash bench/daemon-reads.sh [FILES=12] [SITES=4] [MIN=2] [MAX=96]
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-12}
SITES=${2:-4}
MIN=${3:-2}
MAX=${4:-96}
for tool in nginx strace python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool (scripts/test.sh installs it)" >&2; exit 1; }
done
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul

W=$(realpath "$(mktemp -d /dev/shm/haul-dreads.XXXXXX)")
chmod 755 "$W"
PIDS=()
cleanup() {
  # strace's tracee (the daemon) first: killing strace alone would leave it.
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && pkill -KILL -P "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
export HAUL_CONFIG_DIR=$W/config XDG_CACHE_HOME=$W/cache

# The archive.
PORT=$((20000 + RANDOM % 20000))
mkdir -p "$W/archive" "$W/ngx"
. bench/nginx-archive.sh
nginx_archive_conf "$W/ngx" 127.0.0.1:$PORT "$W/archive"
nginx -p "$W/ngx" -c "$W/ngx/nginx.conf" &
PIDS+=($!)

SIZES=$(python3 -c "
import random
r = random.Random(35)
print(' '.join(str(r.randint($MIN << 20, $MAX << 20)) for _ in range($FILES)))")
TOTAL=$(python3 -c "print(sum(int(x) for x in '$SIZES'.split()))")
head -c $((MAX << 20)) /dev/urandom >"$W/pool.bin"

# The sites.
ADDRS=()
for i in $(seq 1 "$SITES"); do
  mkdir -p "$W/site$i"
  "$HAUL" serve --root "$W/site$i" --listen 127.0.0.1:0 --open --plaintext \
    --identity "$W/id$i" >"$W/node$i.out" 2>&1 &
  PIDS+=($!)
done
for i in $(seq 1 "$SITES"); do
  for _ in $(seq 1 200); do grep -q listening "$W/node$i.out" 2>/dev/null && break; sleep 0.05; done
  ADDRS+=("$(awk '/listening/ {print $NF}' "$W/node$i.out")")
  [ -n "${ADDRS[$((i - 1))]}" ] || { echo "site $i did not start:" >&2; cat "$W/node$i.out" >&2; exit 1; }
done

# One run: $1 = tag, rest = the daemon's global flags.
measure() {
  local tag=$1
  shift
  local dir="$W/archive/$tag" dest="$W/acq/$tag"
  mkdir -p "$dir"
  local i=0
  for size in $SIZES; do
    i=$((i + 1))
    { head -c "$size" "$W/pool.bin"; printf '%s' "$tag-$i"; } >"$dir/f$i.nc"
    touch -d '-1 hour' "$dir/f$i.nc"
  done
  chmod -R a+rX "$dir"
  {
    echo "catalog = \"sqlite:$W/cat-$tag.db\""
    echo "status = \"off\""
    for s in $(seq 1 "$SITES"); do
      printf '\n[[site]]\nname = "s%s"\nurl = "haul://%s/%s"\nplaintext = true\n' "$s" "${ADDRS[$((s - 1))]}" "$tag"
    done
    printf '\n[[source]]\nname = "src"\nurl = "http://127.0.0.1:%s/%s/"\ndest = "%s"\nschedule = "every 1h"\n' "$PORT" "$tag" "$dest"
    printf 'deliver = [%s]\n' "$(seq 1 "$SITES" | sed 's/.*/"s&"/' | paste -sd, -)"
  } >"$W/$tag.toml"
  local t0
  t0=$(date +%s.%N)
  strace -f -qq -y -e trace=read,pread64,readv,preadv,preadv2,sendfile,splice,copy_file_range \
    -o "$W/$tag.strace" "$HAUL" "$@" -q daemon --config "$W/$tag.toml" 2>"$W/$tag.log" &
  local spid=$!
  PIDS+=("$spid")
  # Done when every site holds every file whole.
  local deadline=$((SECONDS + 600)) all=0
  while [ $SECONDS -lt $deadline ]; do
    all=1
    for s in $(seq 1 "$SITES"); do
      for f in $(seq 1 "$FILES"); do
        [ -f "$W/site$s/$tag/f$f.nc" ] || { all=0; break 2; }
      done
    done
    [ $all = 1 ] && break
    sleep 0.2
  done
  local t1
  t1=$(date +%s.%N)
  sleep 1 # the sites' confirmations reach the catalog
  kill -TERM "$(pgrep -P "$spid" -x haul || echo "$spid")" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  if [ $all != 1 ]; then
    echo "$tag: not every site got every file in 600 s" >&2
    tail -20 "$W/$tag.log" >&2
    exit 1
  fi
  for s in $(seq 1 "$SITES"); do
    for f in $(seq 1 "$FILES"); do
      cmp -s "$dir/f$f.nc" "$W/site$s/$tag/f$f.nc" || { echo "$tag: site $s f$f differs" >&2; exit 1; }
    done
  done
  python3 - "$W/$tag.strace" "$dest" "$TOTAL" "$tag" "$t0" "$t1" <<'PY'
import re, sys
log, dest, total, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
secs = float(sys.argv[6]) - float(sys.argv[5])
call = re.compile(r'^(\d+)\s+(\w+)\((.*)$')
resumed = re.compile(r'^(\d+)\s+<\.\.\. (\w+) resumed>.*\) = (\d+)')
fdpath = re.compile(r'\d+<([^>]*)>')
pending = {}
read = sent = 0
def count(name, args, n):
    global read, sent
    paths = fdpath.findall(args)
    if name in ('sendfile', 'splice', 'copy_file_range'):
        # sendfile(out, in, ...); splice and copy_file_range name the source first.
        i = 1 if name == 'sendfile' else 0
        src = paths[i] if len(paths) > i else ''
        if src.startswith(dest):
            sent += n
    elif paths and paths[0].startswith(dest):
        read += n
for line in open(log, errors='replace'):
    m = resumed.match(line)
    if m:
        pid, name, n = m.groups()
        args = pending.pop(pid, None)
        if args is not None:
            count(name, args, int(n))
        continue
    m = call.match(line)
    if not m:
        continue
    pid, name, rest = m.groups()
    if rest.endswith('<unfinished ...>\n') or '<unfinished ...>' in rest:
        pending[pid] = rest
        continue
    r = re.search(r'\) = (\d+)', rest)
    if r:
        count(name, rest, int(r.group(1)))
print(f"{tag:10} acquired {total/2**20:8.1f} MiB  read from them {read/2**20:8.1f} MiB ({read/total:.2f}x)"
      f"  sent from them by sendfile {sent/2**20:8.1f} MiB ({sent/total:.2f}x)  {secs:.1f} s")
PY
  # The next run's room in /dev/shm.
  rm -rf "$dir" "$dest" "$W"/site*/"$tag"
}

echo "$FILES files, $(python3 -c "print(round($TOTAL / 2**20))") MiB, to $SITES sites"
measure cached
measure uncached --no-hash-cache
