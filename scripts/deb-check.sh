#!/usr/bin/env bash
# CI's package check (root, a Debian machine): builds the .deb
# (scripts/deb.sh, the tests' build profile unless PROFILE says otherwise),
# installs it with dpkg -i, checks what it put where, verifies the units with
# systemd-analyze, runs the daemon and a node as their units would (with
# systemctl where systemd runs, else their ExecStart as the unit's user),
# checks /healthz and a push into the node, then purges the package and checks
# nothing of it is left. Only 127.0.0.1 is ever a target.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "deb-check: needs root (it installs a package)" >&2; exit 2; }
export PROFILE=${PROFILE:-dev}
deb=$(bash scripts/deb.sh | tail -1)
echo "== package: $deb ($(du -h "$deb" | cut -f1))"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  dpkg --purge haul >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "deb-check: $*" >&2; exit 1; }

DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" >/dev/null
test -x /usr/bin/haul || fail "no /usr/bin/haul"
/usr/bin/haul --version
getent passwd haul >/dev/null || fail "no haul user"
for d in /etc/haul /var/lib/haul /srv/haul; do test -d $d || fail "no $d"; done
man -l /usr/share/man/man1/haul.1.gz 2>/dev/null | grep -q "HAUL_TOKEN" || fail "the man page does not render"
test -s /usr/share/bash-completion/completions/haul || fail "no bash completions"
systemd-analyze verify /usr/lib/systemd/system/haul-daemon.service 'haul-serve@ci.service' \
  || fail "systemd-analyze verify refused the units"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ok() { # URL: waits up to 20 s for 200
  for _ in $(seq 1 100); do curl -sf "$1" >/dev/null && return 0; sleep 0.2; done
  fail "no answer from $1"
}
# A unit's ExecStart line, with the instance and LISTEN filled in.
exec_start() {
  sed -n 's/^ExecStart=//p' "/usr/lib/systemd/system/$1" | sed "s/%i/$2/g; s/\${LISTEN}/$3/g"
}

# The daemon: one source on a port where nothing listens (it is down, the
# daemon runs on); its status answers.
status_port=$(port)
mkdir -p /srv/haul/sst && chown haul:haul /srv/haul/sst
cat >/etc/haul/haul.toml <<TOML
catalog = "sqlite:/var/lib/haul/catalog.db"
status = "127.0.0.1:$status_port"
log_file = "/var/lib/haul/transfers.log"

[[source]]
name = "sst"
url = "http://127.0.0.1:9/sst/"
dest = "/srv/haul/sst"
schedule = "every 1m"
TOML
/usr/bin/haul daemon --check --config /etc/haul/haul.toml >/dev/null || fail "daemon --check refused the config"
if [ -d /run/systemd/system ]; then
  systemctl start haul-daemon.service
else
  # shellcheck disable=SC2046
  runuser -u haul -- env HAUL_CONFIG_DIR=/var/lib/haul/daemon $(exec_start haul-daemon.service "" "") \
    >"$work/daemon.log" 2>&1 &
  pids+=($!)
fi
wait_ok "http://127.0.0.1:$status_port/healthz"
curl -sf "http://127.0.0.1:$status_port/status" | grep -q '"sst"' || fail "the daemon's /status has no source sst"
test "$(stat -c %U /var/lib/haul/catalog.db)" = haul || fail "the catalog is not the haul user's"

# A node instance: its token, its root, a push into it with the installed client.
node_port=$(port)
echo "ci-token-$$" >/etc/haul/ci.token && chown haul:haul /etc/haul/ci.token && chmod 0600 /etc/haul/ci.token
mkdir -p /srv/haul/ci && chown haul:haul /srv/haul/ci
if [ -d /run/systemd/system ]; then
  echo "LISTEN=127.0.0.1:$node_port" >/etc/haul/ci.env
  systemctl start haul-serve@ci.service
else
  # shellcheck disable=SC2046
  runuser -u haul -- env HAUL_CONFIG_DIR=/var/lib/haul/ci $(exec_start 'haul-serve@.service' ci "127.0.0.1:$node_port") \
    >"$work/node.log" 2>&1 &
  pids+=($!)
fi
# The node's key, pinned by the client as the node printed it.
if [ -d /run/systemd/system ]; then
  key() { journalctl -u haul-serve@ci.service -o cat 2>/dev/null | sed -n 's/^fingerprint //p' | tail -1; }
else
  key() { sed -n 's/^fingerprint //p' "$work/node.log" | tail -1; }
fi
for _ in $(seq 1 100); do [ -n "$(key)" ] && break; sleep 0.2; done
[ -n "$(key)" ] || fail "the node printed no fingerprint"
head -c 3000000 /dev/urandom >"$work/data.bin"
HAUL_CONFIG_DIR=$work/client /usr/bin/haul push -q --fingerprint "$(key)" --token-file /etc/haul/ci.token \
  "$work/data.bin" "haul://127.0.0.1:$node_port/in/" || fail "a push into the node failed: $(cat "$work/node.log")"
cmp "$work/data.bin" /srv/haul/ci/in/data.bin || fail "the pushed file differs"
test "$(stat -c %U /srv/haul/ci/in/data.bin)" = haul || fail "the pushed file is not the haul user's"

# Stop both as systemd would (SIGTERM), then purge.
if [ -d /run/systemd/system ]; then
  systemctl stop haul-daemon.service haul-serve@ci.service
else
  for p in "${pids[@]}"; do pkill -TERM -P "$p" 2>/dev/null || true; kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
fi
rm -rf /srv/haul/sst /srv/haul/ci /var/lib/haul/* /etc/haul/*
dpkg --purge haul >/dev/null
test ! -e /usr/bin/haul || fail "/usr/bin/haul left after purge"
test ! -e /usr/lib/systemd/system/haul-daemon.service || fail "a unit left after purge"
getent passwd haul >/dev/null && fail "the haul user left after purge"
test ! -e /etc/haul || fail "/etc/haul left after purge"
echo "deb-check: ok (installed, verified, ran the daemon and a node, purged)"
