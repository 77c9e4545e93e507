#!/usr/bin/env bash
# CI's package check (root, a Debian machine with no haul of its own): builds
# the .deb (scripts/deb.sh, the tests' build profile unless PROFILE says
# otherwise), installs it, checks what it put where, verifies the units with
# systemd-analyze, runs the daemon and a node as their units would (with
# systemctl where systemd runs, else their ExecStart as the unit's user),
# checks /healthz and a push into the node, stops them with one SIGTERM,
# purges the package and checks what is left. Only 127.0.0.1 is a target.
# It refuses to run where haul is installed or its user or directories exist:
# it must never touch a real installation.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "deb-check: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (it installs a package)"
if dpkg-query -W haul >/dev/null 2>&1 || getent passwd haul >/dev/null || getent group haul >/dev/null; then
  fail "haul is installed here, or a haul user or group exists: this check runs only where it is not"
fi
for d in /etc/haul /var/lib/haul /srv/haul /var/log/haul; do
  [ ! -e "$d" ] || fail "$d exists: this check runs only where haul never was"
done
need=()
for pair in curl:curl python3:python3 adduser:adduser setpriv:util-linux \
  systemd-analyze:systemd zcat:gzip; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

export PROFILE=${PROFILE:-dev}
deb=$(bash scripts/deb.sh | tail -1)
echo "== package: $deb ($(du -h "$deb" | cut -f1))"
work=$(mktemp -d)
pids=()
installed=false
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ -d /run/systemd/system ]; then
    systemctl stop haul-daemon.service haul-serve@ci.service >/dev/null 2>&1 || true
  fi
  if $installed; then
    # Only what this check made: its processes (the haul user did not
    # exist before it), the package, its files, its user.
    pkill -KILL -u haul 2>/dev/null || true
    wait 2>/dev/null || true
    sleep 0.5
    rm -rf /srv/haul /var/lib/haul /etc/haul /var/log/haul
    dpkg --purge haul >/dev/null 2>&1 || true
    userdel haul >/dev/null 2>&1 || true
    groupdel haul >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

installed=true
DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" >/dev/null || fail "dpkg -i failed"
test -x /usr/bin/haul || fail "no /usr/bin/haul"
/usr/bin/haul --version
getent passwd haul >/dev/null || fail "no haul user"
for d in /etc/haul /var/lib/haul /srv/haul; do test -d $d || fail "no $d"; done
page=$(zcat /usr/share/man/man1/haul.1.gz)
grep -q "HAUL_TOKEN" <<<"$page" || fail "the man page is not there"
test -s /usr/share/bash-completion/completions/haul || fail "no bash completions"
test -s /etc/logrotate.d/haul || fail "no /etc/logrotate.d/haul"
systemd-analyze verify /usr/lib/systemd/system/haul-daemon.service 'haul-serve@ci.service' \
  || fail "systemd-analyze verify refused the units"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ok() { # URL: waits up to 20 s for 200
  for _ in $(seq 1 100); do curl -sf -o /dev/null "$1" && return 0; sleep 0.2; done
  fail "no answer from $1"
}
# A unit's ExecStart line, with the instance and LISTEN filled in.
exec_start() {
  sed -n 's/^ExecStart=//p' "/usr/lib/systemd/system/$1" | sed "s/%i/$2/g; s/\${LISTEN}/$3/g"
}
# A unit's command runs as its user through setpriv, started directly in
# the background (not through a function: a function would run in a
# subshell, and $! would be that shell, not haul).
as_haul=(setpriv --reuid=haul --regid=haul --init-groups)

# The daemon: one source on a port where nothing listens (it is down, the
# daemon runs on); its status answers; its transfer log goes where the
# unit lets it write (LogsDirectory).
status_port=$(port)
install -d -o haul -g haul /srv/haul/sst /var/log/haul
cat >/etc/haul/haul.toml <<TOML
catalog = "sqlite:/var/lib/haul/catalog.db"
status = "127.0.0.1:$status_port"
log_file = "/var/log/haul/transfers.log"

[[source]]
name = "sst"
url = "http://127.0.0.1:9/sst/"
dest = "/srv/haul/sst"
schedule = "every 1m"
TOML
/usr/bin/haul daemon --check --config /etc/haul/haul.toml >/dev/null || fail "daemon --check refused the config"
if [ -d /run/systemd/system ]; then
  systemctl start haul-daemon.service || fail "the daemon unit did not start: $(journalctl -u haul-daemon -n 20 -o cat)"
else
  # shellcheck disable=SC2046
  "${as_haul[@]}" env HAUL_CONFIG_DIR=/var/lib/haul/daemon $(exec_start haul-daemon.service "" "") \
    >"$work/daemon.log" 2>&1 &
  pids+=($!)
fi
wait_ok "http://127.0.0.1:$status_port/healthz"
# logrotate takes the package's rule, with the daemon's log in place (a
# dry run, its state in the scratch directory).
if ! out=$(logrotate -d -s "$work/logrotate.state" /etc/logrotate.d/haul 2>&1) ||
  grep -qi "error" <<<"$out"; then
  fail "logrotate refuses /etc/logrotate.d/haul: $out"
fi
grep -q "/var/log/haul/" <<<"$out" || fail "logrotate's dry run did not consider /var/log/haul: $out"
status=$(curl -sf "http://127.0.0.1:$status_port/status")
grep -q '"sst"' <<<"$status" || fail "the daemon's /status has no source sst: $status"
console=$(curl -sf "http://127.0.0.1:$status_port/")
grep -q '<h1>haul daemon' <<<"$console" || fail "the daemon's console at / did not answer: $console"
test "$(stat -c %U /var/lib/haul/catalog.db)" = haul || fail "the catalog is not the haul user's"
test "$(stat -c %U /var/log/haul/transfers.log)" = haul || fail "the transfer log is not the haul user's"

# A node instance: its token, its root, a push into it with the installed client.
node_port=$(port)
echo "ci-token-$$" >/etc/haul/ci.token && chown haul:haul /etc/haul/ci.token && chmod 0600 /etc/haul/ci.token
install -d -o haul -g haul /srv/haul/ci
if [ -d /run/systemd/system ]; then
  echo "LISTEN=127.0.0.1:$node_port" >/etc/haul/ci.env
  systemctl start haul-serve@ci.service || fail "the node unit did not start: $(journalctl -u haul-serve@ci -n 20 -o cat)"
  run=$(systemctl show -p InvocationID --value haul-serve@ci.service)
  node_log() { journalctl "_SYSTEMD_INVOCATION_ID=$run" -o cat 2>/dev/null; }
else
  # shellcheck disable=SC2046
  "${as_haul[@]}" env HAUL_CONFIG_DIR=/var/lib/haul/ci $(exec_start 'haul-serve@.service' ci "127.0.0.1:$node_port") \
    >"$work/node.log" 2>&1 &
  pids+=($!)
  node_log() { cat "$work/node.log" 2>/dev/null; }
fi
# The node's key, pinned by the client as this node printed it.
key() { node_log | sed -n 's/^fingerprint //p' | tail -1; }
for _ in $(seq 1 100); do [ -n "$(key)" ] && break; sleep 0.2; done
[ -n "$(key)" ] || fail "the node printed no fingerprint: $(node_log)"
head -c 3000000 /dev/urandom >"$work/data.bin"
HAUL_CONFIG_DIR=$work/client /usr/bin/haul push -q --fingerprint "$(key)" --token-file /etc/haul/ci.token \
  "$work/data.bin" "haul://127.0.0.1:$node_port/in/" || fail "a push into the node failed: $(node_log)"
cmp "$work/data.bin" /srv/haul/ci/in/data.bin || fail "the pushed file differs"
test "$(stat -c %U /srv/haul/ci/in/data.bin)" = haul || fail "the pushed file is not the haul user's"

# Stop both as systemd would: one SIGTERM, then they exit 0 on their own.
if [ -d /run/systemd/system ]; then
  systemctl stop haul-daemon.service haul-serve@ci.service
else
  for p in "${pids[@]}"; do kill -TERM "$p"; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$p" 2>/dev/null && fail "pid $p did not stop within 30 s of SIGTERM"
    wait "$p" || fail "pid $p exited with status $? after SIGTERM"
  done
  pids=()
fi
rm -rf /srv/haul/sst /srv/haul/ci /var/lib/haul/* /etc/haul/* /var/log/haul/*
dpkg --purge haul >/dev/null
test ! -e /usr/bin/haul || fail "/usr/bin/haul left after purge"
test ! -e /usr/lib/systemd/system/haul-daemon.service || fail "a unit left after purge"
for d in /etc/haul /srv/haul /var/lib/haul /var/log/haul; do
  test ! -e $d || fail "$d (empty) left after purge"
done
echo "deb-check: ok (installed, verified, ran the daemon and a node, purged)"
