# Sourced by bench scripts that compare haul with ssh tools across a lab
# link (compress.sh, sparse.sh): two lab hosts joined by "$LINK", a real
# OpenSSH sshd in h2 with keys of its own, clients in h1. Needs HAUL (the
# binary) and LINK; sets W (a scratch directory, removed at exit), ADDR,
# SRV and CLI (command prefixes for h2 and h1), RSH (the ssh command for
# -e) and PORT; cleans up (sshd, the lab, W) at exit. BENCH names the lab;
# SCRATCH (default /dev/shm) is where W is made: a disk's filesystem to
# measure what reading costs there.
W=$(mktemp -d "${SCRATCH:-/dev/shm}/haul-$BENCH.XXXXXX")
export HAUL_LAB=$BENCH
"$HAUL" lab down >/dev/null 2>&1 || true
"$HAUL" lab up --hosts 2 --link "$LINK" >/dev/null
ADDR=198.18.0.2
SRV=("$HAUL" lab exec h2 --)
CLI=("$HAUL" lab exec h1 --)
cleanup() {
  [ -f "$W/sshd.pid" ] && kill "$(cat "$W/sshd.pid")" 2>/dev/null
  [ -n "${SSHD:-}" ] && { kill "$SSHD" 2>/dev/null; wait "$SSHD" 2>/dev/null; }
  "$HAUL" lab down >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$W/host" && ssh-keygen -q -t ed25519 -N '' -f "$W/client"
cp "$W/client.pub" "$W/authorized_keys"
PORT=2222
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
EOF
echo "[$ADDR]:$PORT $(cut -d' ' -f1,2 "$W/host.pub")" >"$W/known_hosts"
"${SRV[@]}" /usr/sbin/sshd -D -e -f "$W/sshd_config" 2>"$W/sshd.log" &
SSHD=$!
RSH="ssh -i $W/client -o IdentitiesOnly=yes -o UserKnownHostsFile=$W/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes -p $PORT"
for _ in $(seq 100); do
  "${CLI[@]}" $RSH root@$ADDR true 2>/dev/null && break
  sleep 0.1
done

