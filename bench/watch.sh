#!/usr/bin/env bash
# A daemon pulling from a haul node every few seconds (issue 33 item 4): how long
# each run takes when the node walks its whole tree per listing, and when it
# runs `haul serve --watch` and lists only what changed since the last run.
# FILES files (in directories of 1,000) sit on the node; after the first run
# (which lists and fetches everything either way) NEW files appear before each
# later run. Prints, per mode, the median of the later runs' durations (from the
# daemon's own "run started" / "run ended" lines) and the files they listed.
#
#   bash bench/watch.sh            # FILES=100000 NEW=10 RUNS=5
# Environment: FILES, NEW, RUNS (later runs measured), DATA (/dev/shm).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-100000}
NEW=${NEW:-10}
RUNS=${RUNS:-5}
DATA=${DATA:-/dev/shm}
command -v python3 >/dev/null || { echo "missing python3" >&2; exit 1; }
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul
W=$(mktemp -d "$DATA/haul-watch.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

echo "making $FILES files..."
python3 - "$W/tree/data" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 1000:04d}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.nc"), "wb") as f:
        f.write(i.to_bytes(8, "little") * 8)
PY

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One mode: start the node (with FLAGS), the daemon, wait for 1 + RUNS runs
# (NEW files written after each), print the later runs' median duration.
measure() {
  local mode=$1; shift
  local port; port=$(free_port)
  echo secret >"$W/token"; chmod 600 "$W/token"
  "$HAUL" serve --root "$W/tree" --listen "127.0.0.1:$port" --plaintext --token-file "$W/token" \
    --identity "$W/id-$mode" "$@" >"$W/node-$mode.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q listening "$W/node-$mode.log" 2>/dev/null && break; sleep 0.1; done
  rm -rf "$W/acq-$mode" "$W/cat-$mode.db"
  cat >"$W/daemon-$mode.toml" <<EOF
catalog = "sqlite:$W/cat-$mode.db"

[[source]]
name = "up"
url = "haul://127.0.0.1:$port/data"
plaintext = true
token_file = "$W/token"
dest = "$W/acq-$mode"
schedule = "every 1s"
EOF
  HAUL_LOG=info "$HAUL" daemon --config "$W/daemon-$mode.toml" >/dev/null 2>"$W/daemon-$mode.log" &
  local daemon=$!
  PIDS+=("$daemon")
  local want=$((RUNS + 1)) done=0 round=0
  while [ "$done" -lt "$want" ]; do
    sleep 0.2
    done=$(grep -c "run ended" "$W/daemon-$mode.log" || true)
    if [ "$done" -gt "$round" ]; then
      round=$done
      for j in $(seq "$NEW"); do
        mkdir -p "$W/tree/data/new$round"
        head -c 64 /dev/urandom >"$W/tree/data/new$round/g$j.nc"
      done
    fi
  done
  kill "$daemon" 2>/dev/null || true
  python3 - "$W/daemon-$mode.log" "$mode" <<'PY'
import re, sys, datetime, statistics
starts, ends = [], []
for line in open(sys.argv[1]):
    t = re.match(r"(\S+Z)", line)
    if not t:
        continue
    when = datetime.datetime.fromisoformat(t.group(1).replace("Z", "+00:00"))
    if "run started" in line:
        starts.append(when)
    m = re.search(r"run ended: (\d+) listed", line)
    if m:
        ends.append((when, int(m.group(1))))
runs = [((e - s).total_seconds(), n) for s, (e, n) in zip(starts, ends)]
later = runs[1:]
med = statistics.median(t for t, _ in later)
print(f"  {sys.argv[2]:<8} first run {runs[0][0]:7.2f} s ({runs[0][1]} listed); later runs median "
      f"{med:6.3f} s (each: {' '.join(f'{t:.3f}' for t, _ in later)}; listed: "
      f"{' '.join(str(n) for _, n in later)})")
PY
}

echo "== $FILES files on the node, $NEW new before each later run, $RUNS later runs"
measure walk
measure watch --watch
