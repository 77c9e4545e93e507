#!/usr/bin/env bash
# haul over ssh against the tools people use over ssh (issue 32), side by
# side in one run: a real OpenSSH sshd started here, the same key for all.
#   haul-tcp     haul push SRC host:DST/             (ssh starts the node; data direct over TCP+TLS)
#   haul-quic    ... --transport quic                 (data direct over QUIC)
#   haul-tunnel  ... --ssh-tunnel                     (data through the ssh channel, rsync's way)
#   rsync        rsync -a -e ssh SRC host:DST/
#   scp          scp -r SRC host:DST/
#   sftp         sftp -b (put -r SRC DST)
# Datasets: one file of MIB MiB, and SMALL small files (1-8 KiB, 100 a
# directory). Each tool copies into an empty directory RUNS times; the
# medians, MB/s, and each tool / rsync are printed. Every copy is checked
# (file count and bytes; the big file byte for byte).
#
#   bash bench/ssh.sh [MIB=1024] [SMALL=10000] [RUNS=3] [BASE=/dev/shm]
#
# With LAB='rate 1gbit delay 25ms' (any lab profile; needs root) sshd runs in
# lab host h2 (198.18.0.2) and every client in h1, across that link.
# TOOLS picks tools (default: all six).
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${1:-1024}
SMALL=${2:-10000}
RUNS=${3:-3}
BASE=${4:-/dev/shm}
LAB=${LAB:-}
TOOLS=${TOOLS:-haul-tcp haul-quic haul-tunnel rsync scp sftp}

need=()
for pair in /usr/sbin/sshd:openssh-server ssh:openssh-client rsync:rsync; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "${pair%%:*}" ] || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul

W=$(mktemp -d "$BASE/haul-sshbench.XXXXXX")
ADDR=127.0.0.1
SRV_RUN=()
CLI_RUN=()
if [ -n "$LAB" ]; then
  export HAUL_LAB=sshbench
  "$HAUL" lab down >/dev/null 2>&1 || true
  "$HAUL" lab up --hosts 2 --link "$LAB" >/dev/null
  ADDR=198.18.0.2
  SRV_RUN=("$HAUL" lab exec h2 --)
  CLI_RUN=("$HAUL" lab exec h1 --)
  echo "lab link: $LAB (sshd in h2, clients in h1)"
fi
cleanup() {
  [ -f "$W/sshd.pid" ] && kill "$(cat "$W/sshd.pid")" 2>/dev/null
  [ -n "${SSHD:-}" ] && { kill "$SSHD" 2>/dev/null; wait "$SSHD" 2>/dev/null; }
  [ -n "$LAB" ] && "$HAUL" lab down >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT

# sshd with its own keys, on a free port.
mkdir -p /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$W/host" && ssh-keygen -q -t ed25519 -N '' -f "$W/client"
cp "$W/client.pub" "$W/authorized_keys"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$W/sshd_config" <<EOF
ListenAddress $ADDR
Port $PORT
HostKey $W/host
PidFile $W/sshd.pid
AuthorizedKeysFile $W/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin yes
SetEnv SHLVL=1
PasswordAuthentication no
UseDNS no
MaxStartups 100
MaxSessions 100
Subsystem sftp internal-sftp
EOF
echo "[$ADDR]:$PORT $(cut -d' ' -f1,2 "$W/host.pub")" >"$W/known_hosts"
"${SRV_RUN[@]}" /usr/sbin/sshd -D -e -f "$W/sshd_config" 2>"$W/sshd.log" &
SSHD=$!
SSH_OPTS="-i $W/client -o IdentitiesOnly=yes -o UserKnownHostsFile=$W/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes"
RSH="ssh $SSH_OPTS -p $PORT"
for _ in $(seq 100); do
  "${CLI_RUN[@]}" $RSH root@$ADDR true 2>/dev/null && break
  sleep 0.1
done

# The datasets.
mkdir -p "$W/src/big" "$W/src/small"
head -c $((MIB << 20)) /dev/urandom >"$W/src/big/big.bin"
python3 - "$W/src/small" "$SMALL" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
for i in range(n):
    d = os.path.join(root, f"d{i // 100:04d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.dat"), "wb") as f:
        f.write(rng.randbytes(rng.randint(1024, 8192)))
EOF
bytes_of() { find "$1" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}'; }
files_of() { find "$1" -type f | wc -l; }

# One copy of $W/src/SET into an empty $W/dst with TOOL.
copy() {
  local tool=$1 set=$2 dst=$W/dst
  local haul=("${CLI_RUN[@]}" "$HAUL" -q push "$W/src/$set" "root@$ADDR:$dst/" -e "$RSH" --remote-haul "$HAUL")
  case $tool in
    haul-tcp) "${haul[@]}" ;;
    haul-quic) "${haul[@]}" --transport quic ;;
    haul-tunnel) "${haul[@]}" --ssh-tunnel ;;
    rsync) "${CLI_RUN[@]}" rsync -a -e "$RSH" "$W/src/$set" "root@$ADDR:$dst/" ;;
    scp) "${CLI_RUN[@]}" scp -q -r $SSH_OPTS -P "$PORT" "$W/src/$set" "root@$ADDR:$dst/" ;;
    sftp)
      printf 'put -r %s %s\n' "$W/src/$set" "$dst/$set" >"$W/batch"
      "${CLI_RUN[@]}" sftp -q $SSH_OPTS -P "$PORT" -b "$W/batch" "root@$ADDR" >/dev/null
      ;;
  esac
}

declare -A MED
for set in big small; do
  want_bytes=$(bytes_of "$W/src/$set") want_files=$(files_of "$W/src/$set")
  echo "== $set: $want_files file(s), $((want_bytes >> 20)) MiB; $RUNS run(s) each"
  for tool in $TOOLS; do
    times=()
    for _ in $(seq "$RUNS"); do
      rm -rf "$W/dst" && mkdir -p "$W/dst"
      sync
      t0=$(date +%s.%N)
      copy "$tool" "$set"
      t1=$(date +%s.%N)
      got_bytes=$(bytes_of "$W/dst/$set") got_files=$(files_of "$W/dst/$set")
      if [ "$got_bytes" != "$want_bytes" ] || [ "$got_files" != "$want_files" ]; then
        echo "$tool: copied $got_files file(s), $got_bytes bytes; wanted $want_files, $want_bytes" >&2
        exit 1
      fi
      if [ "$set" = big ] && ! cmp -s "$W/src/big/big.bin" "$W/dst/big/big.bin"; then
        echo "$tool: big.bin differs" >&2
        exit 1
      fi
      times+=("$(echo "$t1 - $t0" | bc -l)")
    done
    med=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    MED[$set/$tool]=$med
    printf '  %-12s median %7.2f s  %8.1f MB/s   (runs: %s)\n' "$tool" "$med" \
      "$(echo "$want_bytes / $med / 1000000" | bc -l)" "$(printf '%.2f ' "${times[@]}")"
  done
  if [ -n "${MED[$set/rsync]:-}" ]; then
    for tool in $TOOLS; do
      [ "$tool" = rsync ] && continue
      printf '  %s / rsync (speed): %.2fx\n' "$tool" "$(echo "${MED[$set/rsync]} / ${MED[$set/$tool]}" | bc -l)"
    done
  fi
done
