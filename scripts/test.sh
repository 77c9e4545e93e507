#!/usr/bin/env bash
# Installs what haul's tests need on a fresh Debian machine, then runs every
# test in the workspace. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
# command:package — `ip` for the network-lab tests, `nft` for a firewall on
# loopback (the ssh tests' blocked direct port), the real servers the
# remote-source tests start on 127.0.0.1 (vsftpd, OpenSSH's sshd, nginx),
# openssl to make their test certificates, python3 with pip for moto, man-db
# to check `haul man` (man -l), script(1) to run haul under a pty, and
# promtool to check the daemon's /metrics, and rsync, whose results on the
# same trees are the reference for type changes, and chattr, which makes a
# removal fail even for root, and getfattr/setfacl, which make and read
# back the xattrs and ACLs that -X and -A keep, and setcap, which gives a
# file the capability `chown` clears, and systemd-analyze, which
# checks the systemd units in packaging/, and Debian's chromium with
# chromium-driver, the real browser the console's tests drive, and
# logrotate, which the package's check runs on its rule, and strace, which
# counts the bytes a second `check` reads (the hash cache's tests).
for pair in ip:iproute2 nft:nftables \
  /usr/sbin/vsftpd:vsftpd /usr/sbin/sshd:openssh-server /usr/sbin/nginx:nginx-light \
  ssh-keygen:openssh-client openssl:openssl python3:python3 \
  man:man-db script:bsdutils promtool:prometheus rsync:rsync chattr:e2fsprogs \
  getfattr:attr setfacl:acl setcap:libcap2-bin systemd-analyze:systemd \
  chromium:chromium chromedriver:chromium-driver logrotate:logrotate strace:strace; do
  cmd=${pair%%:*} pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || [ -x "$cmd" ] || need+=("$pkg")
done
# PostgreSQL's server binaries (initdb, postgres) for the daemon's catalog
# tests: the tests start their own server in a temp dir, not the system one.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
# A font for the browser tests' pages and screenshots.
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "note: missing ${need[*]} (the lab and remote-source tests need them; run as root to install)" >&2
  fi
fi

# moto: a real S3-compatible server (`moto_server`) for the S3 tests.
if ! command -v moto_server >/dev/null 2>&1; then
  echo "installing: moto[server] (pip)"
  if ! python3 -m pip --version >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  fi
  # A distribution's own Python refuses system-wide installs (PEP 668).
  python3 -m pip install -q 'moto[server]' >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages 'moto[server]' >/dev/null
  # pyenv puts new commands on PATH through shims made by `rehash`.
  command -v pyenv >/dev/null 2>&1 && pyenv rehash
  command -v moto_server >/dev/null 2>&1 || {
    echo "moto_server is not on PATH after pip install (add pip's script dir to PATH)" >&2
    exit 1
  }
fi
# sshd refuses to start without its privilege-separation directory.
[ "$(id -u)" = 0 ] && mkdir -p /run/sshd

# As root (CI), the tests that need it too (network namespaces, TUN, mounts,
# chattr): without the feature they are listed as ignored.
features=()
[ "$(id -u)" = 0 ] && features=(--features haul/root-tests,haul-lab/root-tests)

cargo test --workspace --locked "${features[@]}" "$@"

# The end-to-end suites that talk to a node, again over QUIC (issue 14: every
# push and pull without --plaintext or --transport goes over QUIC; see
# `with_test_transport` in crates/haul/tests/it/harness.rs).
if [ $# -eq 0 ]; then
  echo "== the node end-to-end suites again, over QUIC =="
  # `--workspace --test it` (not `-p haul`): the same feature resolution as
  # the pass above, so nothing is built again (with `-p haul` cargo rebuilt
  # tokio and a dozen other crates, about 4 minutes); the other crates' `it`
  # binaries have no test under these names and run none.
  HAUL_TEST_TRANSPORT=quic cargo test --locked --workspace "${features[@]}" --test it -- \
    transfer:: resume:: beneath:: security:: rate:: fanout:: fanout_silent:: fanout_lying:: changing:: type_changes:: one_file:: \
    --skip remote::
fi

# The patch haul carries in quinn-proto (vendor/quinn-proto/HAUL-PATCH.md):
# its own unit tests, outside the workspace (their dev-dependencies resolve
# from the crate's own Cargo.lock).
if [ $# -eq 0 ]; then
  echo "== vendor/quinn-proto: the patch's unit tests =="
  (cd vendor/quinn-proto && cargo test --locked --lib --no-default-features --features rustls-ring -- \
    connection::spaces connection::late_acks connection::assembler)
fi
