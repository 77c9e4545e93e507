#!/usr/bin/env bash
# Fan-out over ssh (issue 32) against the flat tools cluster operators use,
# side by side in the lab: h1 sends; h2..h9 each run a real sshd (its own
# mount namespace, where DEST is that host's own directory, so every tool
# copies to the same path); every host's egress `rate RATE delay 5ms`.
#   haul        haul push FILE host1:DEST/ ... hostN:DEST/   (nodes started over ssh, relaying)
#   pdcp        pdcp -R ssh -w HOSTS FILE DEST/               (Debian pdsh)
#   pscp        parallel-scp -H HOSTS FILE DEST/              (Debian pssh)
#   clush       clush -w HOSTS --copy FILE --dest DEST/       (Debian clustershell)
#   taktuk      taktuk -m HOST... broadcast put [ FILE ] [ DEST/ ]
# T(1) (one peer) and T(8), RUNS each (medians), and T(8)/T(1) per tool;
# then haul's setup: a 1 KiB file to 8 nodes, end to end.
#
#   sudo bash bench/ssh-fanout.sh [MIB=64] [RUNS=3]
# Environment: RATE (100mbit), TOOLS (default all five), DATA (/dev/shm),
# HAUL_ARGS (more flags for haul, e.g. `--plan stripes:2`).
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${1:-64}
RUNS=${2:-3}
RATE=${RATE:-100mbit}
TOOLS=${TOOLS:-haul pdcp pscp clush taktuk}
DATA=${DATA:-/dev/shm}
NAME=sshfan$$
if [ "$(id -u)" != 0 ]; then echo "ssh-fanout.sh needs root (the lab): run it with sudo" >&2; exit 1; fi

need=()
for pair in pdcp:pdsh parallel-scp:pssh clush:clustershell taktuk:taktuk /usr/sbin/sshd:openssh-server; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "${pair%%:*}" ] || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cargo build --release -q -p haul
HAUL=$PWD/target/release/haul
W=$(mktemp -d "$DATA/haul-sshfan.XXXXXX")
SSHDS=()
cleanup() {
  for p in "${SSHDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$HAUL" lab down --name "$NAME" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
"$HAUL" lab up --hosts 9 --link "rate $RATE delay 5ms" --seed 1 --name "$NAME" >/dev/null
inh() { local h=$1; shift; ip netns exec "hl-$NAME-h$h" "$@"; }

mkdir -p /run/sshd "$W/dest"
ssh-keygen -q -t ed25519 -N '' -f "$W/host" && ssh-keygen -q -t ed25519 -N '' -f "$W/client"
cp "$W/client.pub" "$W/authorized_keys"
for h in $(seq 2 9); do
  echo "198.18.0.$h $(cut -d' ' -f1,2 "$W/host.pub")" >>"$W/known_hosts"
  mkdir -p "$W/n$h"
  cat >"$W/sshd$h" <<EOF
ListenAddress 198.18.0.$h
Port 22
HostKey $W/host
PidFile $W/sshd$h.pid
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
  # Its own view of DEST: this host's directory.
  inh "$h" unshare -m sh -c "mount --bind '$W/n$h' '$W/dest' && exec /usr/sbin/sshd -D -e -f '$W/sshd$h'" \
    2>"$W/sshd$h.log" &
  SSHDS+=($!)
done
SSHOPTS="-i $W/client -o IdentitiesOnly=yes -o UserKnownHostsFile=$W/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes"
for h in $(seq 2 9); do
  for _ in $(seq 100); do inh 1 ssh $SSHOPTS root@198.18.0.$h true 2>/dev/null && break; sleep 0.1; done
done
head -c $((MIB << 20)) /dev/urandom >"$W/data.bin"
head -c 1024 /dev/urandom >"$W/tiny.bin"

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
hosts() { for h in $(seq 2 $((1 + $1))); do printf '198.18.0.%s ' "$h"; done; }

# One copy of FILE to the first PEERS hosts with TOOL.
copy() {
  local tool=$1 peers=$2 file=$3 list
  list=$(hosts "$peers")
  case $tool in
    haul)
      local dests=()
      for a in $list; do dests+=("root@$a:$W/dest/"); done
      inh 1 env HAUL_CONFIG_DIR="$W/config" "$HAUL" -q push "$file" "${dests[@]}" \
        -e "ssh $SSHOPTS" --remote-haul "$HAUL" ${HAUL_ARGS:-} ;;
    pdcp) inh 1 env PDSH_SSH_ARGS_APPEND="$SSHOPTS" pdcp -R ssh -l root -w "$(echo $list | tr ' ' ,)" "$file" "$W/dest/" ;;
    pscp) inh 1 parallel-scp -l root -p 32 -x "$SSHOPTS" -H "$list" -e "$W/pscp-err" "$file" "$W/dest/" >"$W/pscp-out" || { cat "$W/pscp-out" "$W"/pscp-err/* >&2; return 1; } ;;
    clush) inh 1 clush -q -l root -f 32 -o "$SSHOPTS" -w "$(echo $list | tr ' ' ,)" --copy "$file" --dest "$W/dest/" ;;
    taktuk)
      local ms=()
      for a in $list; do ms+=(-m "$a"); done
      inh 1 taktuk -l root -c "ssh $SSHOPTS" "${ms[@]}" broadcast put [ "$file" ] [ "$W/dest/" ] >/dev/null ;;
  esac
}
check() { # every peer holds FILE whole
  local peers=$1 file=$2 name
  name=$(basename "$file")
  for h in $(seq 2 $((1 + peers))); do
    cmp -s "$file" "$W/n$h/$name" || { echo "$TOOL: h$h does not hold $name" >&2; exit 1; }
  done
}
clear() { for h in $(seq 2 9); do rm -rf "$W/n$h"/* "$W/n$h/.haul" 2>/dev/null || true; done; }

declare -A T
for TOOL in $TOOLS; do
  for peers in 1 8; do
    times=()
    for _ in $(seq "$RUNS"); do
      clear
      t0=$(now)
      copy "$TOOL" "$peers" "$W/data.bin"
      t1=$(now)
      check "$peers" "$W/data.bin"
      times+=("$(echo "$t1 - $t0" | bc -l)")
    done
    T[$TOOL/$peers]=$(printf '%s\n' "${times[@]}" | median)
    printf '%-7s T(%s) %7.2f s   (runs: %s)\n' "$TOOL" "$peers" "${T[$TOOL/$peers]}" "$(printf '%.2f ' "${times[@]}")"
  done
done
echo "== $MIB MiB to 8 lab hosts over ssh, rate $RATE delay 5ms: T(8)/T(1)"
for TOOL in $TOOLS; do
  printf '  %-7s %5.2f   (T(1) %.2f s, T(8) %.2f s)\n' "$TOOL" \
    "$(echo "${T[$TOOL/8]} / ${T[$TOOL/1]}" | bc -l)" "${T[$TOOL/1]}" "${T[$TOOL/8]}"
done
if [[ " $TOOLS " == *" haul "* ]]; then
  times=()
  for _ in $(seq "$RUNS"); do
    clear
    t0=$(now); copy haul 8 "$W/tiny.bin"; t1=$(now)
    check 8 "$W/tiny.bin"
    times+=("$(echo "$t1 - $t0" | bc -l)")
  done
  printf '  haul setup: 1 KiB to 8 nodes over ssh, end to end: median %.2f s (runs: %s)\n' \
    "$(printf '%s\n' "${times[@]}" | median)" "$(printf '%.2f ' "${times[@]}")"
fi
