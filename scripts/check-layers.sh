#!/usr/bin/env bash
# API boundary (ARCHITECTURE.md): nothing above haul-transport names a
# socket type. Fails listing the offending lines.
set -euo pipefail
cd "$(dirname "$0")/.."
above=(haul-proto haul-filter haul-run haul-session haul-plan haul-engine haul-root haul-node haul-fetch haul-netsim haul)
pattern='TcpStream|TcpListener|UdpSocket|OwnedWriteHalf|OwnedReadHalf|tokio::net'
found=0
for c in "${above[@]}"; do
  if grep -rnE "$pattern" "crates/$c/src"; then
    found=1
  fi
done
if [ "$found" = 1 ]; then
  echo "check-layers: socket types above haul-transport (see ARCHITECTURE.md, API Boundary)" >&2
  exit 1
fi
echo "check-layers: ok"
