#!/usr/bin/env bash
# cells.sh — `make cells`: two cells of the example service and the cell
# router, on loopback, each cell on its own control and shard databases.
#
#   cell-1  http://127.0.0.1:8081   slots 0-8191
#   cell-2  http://127.0.0.1:8082   slots 8192-16383
#   router  http://127.0.0.1:8090   (override: CELLS_ROUTER_PORT, CELLS_CELL1_PORT, CELLS_CELL2_PORT)
#
# The slot map and a slotmove layout go to a temporary directory (printed).
# Ctrl-C or SIGTERM stops all three processes cleanly.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

router_port=${CELLS_ROUTER_PORT:-8090}
ports=("${CELLS_CELL1_PORT:-8081}" "${CELLS_CELL2_PORT:-8082}")
names=(cell-1 cell-2)
slots=("0-8191" "8192-16383")

echo "building bin/server and bin/router ..." >&2
go build -o bin/server ./cmd/server
go build -o bin/router ./cmd/router
go build -o bin/slotmove ./cmd/slotmove

work=$(mktemp -d "${TMPDIR:-/tmp}/cellgate-cells.XXXXXX")
pids=()
stop() {
  trap - INT TERM EXIT
  if [ ${#pids[@]} -gt 0 ]; then
    echo "stopping ${#pids[@]} processes ..." >&2
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  echo "stopped; the slot map and layout are kept in $work" >&2
}
trap stop INT TERM EXIT

# Each cell's databases: `server devdb` names them <prefix>_<service>_<db>,
# so a devdb-only overlay with a per-cell service name keeps the two cells'
# databases apart (<prefix>_example_cell_1_control, ...).
declare -A dsn
for i in 0 1; do
  n=${names[$i]}
  printf '{"service":{"name":"example-%s"}}\n' "$n" >"$work/$n.devdb.json"
  exports=$(CELLGATE_CONFIG="$work/$n.devdb.json" scripts/devdb.sh bin/server)
  for var in CELLGATE_CONTROL_DSN CELLGATE_SHARD_0_DSN CELLGATE_SHARD_1_DSN; do
    val=$(sed -n "s/^export $var='\(.*\)'$/\1/p" <<<"$exports")
    [ -n "$val" ] || { echo "devdb printed no $var for $n" >&2; exit 1; }
    dsn[$n.$var]=$val
  done
done

cat >"$work/slotmap.json" <<JSON
{
  "cells": [
    {"name": "cell-1", "url": "http://127.0.0.1:${ports[0]}", "slots": ["${slots[0]}"]},
    {"name": "cell-2", "url": "http://127.0.0.1:${ports[1]}", "slots": ["${slots[1]}"]}
  ]
}
JSON
cat >"$work/layout.json" <<JSON
{"cells": {
  "cell-1": [{"name": "shard-0", "dsn_env": "CELL_1_SHARD_0_DSN"}, {"name": "shard-1", "dsn_env": "CELL_1_SHARD_1_DSN"}],
  "cell-2": [{"name": "shard-0", "dsn_env": "CELL_2_SHARD_0_DSN"}, {"name": "shard-1", "dsn_env": "CELL_2_SHARD_1_DSN"}]
 },
 "control": {"cell-1": "CELL_1_CONTROL_DSN", "cell-2": "CELL_2_CONTROL_DSN"},
 "routers": ["http://127.0.0.1:$router_port"]}
JSON

for i in 0 1; do
  n=${names[$i]}
  CELLGATE_ADDRESS=127.0.0.1:${ports[$i]} \
  CELLGATE_CONTROL_DSN=${dsn[$n.CELLGATE_CONTROL_DSN]} \
  CELLGATE_SHARD_0_DSN=${dsn[$n.CELLGATE_SHARD_0_DSN]} \
  CELLGATE_SHARD_1_DSN=${dsn[$n.CELLGATE_SHARD_1_DSN]} \
    bin/server serve > >(sed -u "s/^/[$n] /") 2>&1 &
  pids+=($!)
done
CELLGATE_ROUTER_ADDRESS=127.0.0.1:$router_port \
  bin/router -slotmap "$work/slotmap.json" > >(sed -u 's/^/[router] /') 2>&1 &
pids+=($!)

wait_ready() {
  local url=$1
  for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null "$url" 2>/dev/null; then return 0; fi
    for p in "${pids[@]}"; do
      kill -0 "$p" 2>/dev/null || { echo "a process exited; see its log above" >&2; exit 1; }
    done
    sleep 0.1
  done
  echo "$url not ready after 30s" >&2
  exit 1
}
wait_ready "http://127.0.0.1:${ports[0]}/readyz"
wait_ready "http://127.0.0.1:${ports[1]}/readyz"
wait_ready "http://127.0.0.1:$router_port/readyz"

cat >&2 <<EOF

cells are up (files in $work):
  router  http://127.0.0.1:$router_port   (slot map: $work/slotmap.json, reloaded on change)
  cell-1  http://127.0.0.1:${ports[0]}   slots ${slots[0]}
  cell-2  http://127.0.0.1:${ports[1]}   slots ${slots[1]}

try:
  curl -si -H 'X-Tenant-ID: umbrella' -d '{"email":"a@umbrella.test"}' -H 'Content-Type: application/json' \\
       http://127.0.0.1:$router_port/signup | grep -i x-cellgate-cell     # cell-1
  curl -si -H 'X-Tenant-ID: acme' -d '{"email":"a@acme.test"}' -H 'Content-Type: application/json' \\
       http://127.0.0.1:$router_port/signup | grep -i x-cellgate-cell     # cell-2
move slots 4096-8191 to cell-2 (docs/cells.md):
  CELL_1_SHARD_0_DSN='${dsn[cell-1.CELLGATE_SHARD_0_DSN]}' CELL_1_SHARD_1_DSN='${dsn[cell-1.CELLGATE_SHARD_1_DSN]}' \\
  CELL_2_SHARD_0_DSN='${dsn[cell-2.CELLGATE_SHARD_0_DSN]}' CELL_2_SHARD_1_DSN='${dsn[cell-2.CELLGATE_SHARD_1_DSN]}' \\
  CELL_1_CONTROL_DSN='${dsn[cell-1.CELLGATE_CONTROL_DSN]}' CELL_2_CONTROL_DSN='${dsn[cell-2.CELLGATE_CONTROL_DSN]}' \\
  bin/slotmove -map $work/slotmap.json -layout $work/layout.json -slots 4096-8191 -from cell-1 -to cell-2

Ctrl-C stops everything.
EOF
wait "${pids[@]}"
