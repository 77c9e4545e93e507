#!/usr/bin/env bash
# -S on a sparse file (issue 36): a GIB GiB file holding DATA_MIB MiB of data
# in 1 MiB extents spread over it, the rest holes (a VM image). haul with
# and without -S, and rsync with and without -S, over ssh across a lab link
# (sshd in h2, clients in h1: bench/lab-sshd.sh): time, the bytes h1 sent
# (its interface's tx_bytes) and what the copy allocates on disk. Every copy
# is checked byte for byte (haul check).
#
#   sudo bash bench/sparse.sh                       # about 15 minutes
# Environment: GIB (10), DATA_MIB (100), RUNS (2), LINK ('rate 1gbit delay 1ms'),
#   TOOLS ("haul haul-S rsync rsync-S"), SCRATCH (/dev/shm: where the file
#   and its copy are; a disk's filesystem shows what reading holes costs
#   there), COLD (1: before each copy drop the page cache and haul's hash
#   record of the file kept as an xattr, as a file sent once finds them), HAUL_BIN (a haul binary to run instead of building one).
set -euo pipefail
cd "$(dirname "$0")/.."
GIB=${GIB:-10}
DATA_MIB=${DATA_MIB:-100}
RUNS=${RUNS:-2}
LINK=${LINK:-rate 1gbit delay 1ms}
TOOLS=${TOOLS:-haul haul-S rsync rsync-S}
[ "$(id -u)" = 0 ] || { echo "bench/sparse.sh needs root (the lab)" >&2; exit 2; }
for pair in /usr/sbin/sshd:openssh-server ssh:openssh-client rsync:rsync; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "${pair%%:*}" ] ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pair#*:}" >/dev/null; }
done
[ -n "${HAUL_BIN:-}" ] || cargo build --release -q -p haul
HAUL=${HAUL_BIN:-$PWD/target/release/haul}
BENCH=sbench
# shellcheck source=bench/lab-sshd.sh
. bench/lab-sshd.sh
echo "lab link: $LINK; a $GIB GiB file with $DATA_MIB MiB of data; $RUNS runs"

mkdir -p "$W/src"
python3 - "$W/src/disk.img" "$GIB" "$DATA_MIB" <<'EOF'
import os, sys
path, gib, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = gib << 30
with open(path, "wb") as f:
    f.truncate(size)
    step = size // mib
    for i in range(mib):
        f.seek(i * step + (i * 4096) % (1 << 20))
        f.write(os.urandom(1 << 20))
EOF
echo "source: $(du -k --apparent-size "$W/src/disk.img" | cut -f1) KiB apparent, $(du -k "$W/src/disk.img" | cut -f1) KiB allocated"

tx() { "${CLI[@]}" cat /sys/class/net/eth0/statistics/tx_bytes; }
copy() { # tool
  local dst=$W/dst
  case $1 in
    haul) "${CLI[@]}" "$HAUL" -q push "$W/src/disk.img" "root@$ADDR:$dst/" -e "$RSH" --remote-haul "$HAUL" ;;
    haul-S) "${CLI[@]}" "$HAUL" -q push -S "$W/src/disk.img" "root@$ADDR:$dst/" -e "$RSH" --remote-haul "$HAUL" ;;
    rsync) "${CLI[@]}" rsync -a -e "$RSH" "$W/src/disk.img" "root@$ADDR:$dst/" ;;
    rsync-S) "${CLI[@]}" rsync -aS -e "$RSH" "$W/src/disk.img" "root@$ADDR:$dst/" ;;
  esac
}
for tool in $TOOLS; do
  times=() sent=()
  for _ in $(seq "$RUNS"); do
    rm -rf "$W/dst" && mkdir -p "$W/dst"
    if [ "${COLD:-0}" = 1 ]; then
      command -v setfattr >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq attr >/dev/null; }
      setfattr -x user.haul.blake3 "$W/src/disk.img" 2>/dev/null || true
      sync && echo 3 >/proc/sys/vm/drop_caches
    fi
    b0=$(tx)
    t0=$(date +%s.%N)
    copy "$tool"
    t1=$(date +%s.%N)
    b1=$(tx)
    "$HAUL" -q check "$W/src/disk.img" "$W/dst/disk.img" >/dev/null || { echo "$tool: copy differs" >&2; exit 1; }
    times+=("$(echo "$t1 - $t0" | bc -l)")
    sent+=("$(((b1 - b0) >> 20))")
    alloc=$(du -k "$W/dst/disk.img" | cut -f1)
  done
  med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%-8s median %7.2f s  wire %s MiB  allocated %s MiB  (runs: %s)\n' "$tool" "$med" \
    "$(printf '%s\n' "${sent[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')" \
    "$((alloc >> 10))" "$(printf '%.2f ' "${times[@]}")"
done
