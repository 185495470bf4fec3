#!/usr/bin/env bash
# coldrun.sh [REPO] — the cold-cache figure of `make run` (docs/template.md).
#
# On a clean clone of REPO (default: this checkout's HEAD), with the module
# cache as it is (warm: `go mod download` runs first, untimed) and an empty
# build cache for each side, it times
#   1. GOCACHE=$(mktemp -d) go build ./cmd/server   (the baseline), then
#   2. GOCACHE=$(mktemp -d) make run                 until /readyz answers 200,
# then the baseline again (the mean of the two is the ratio's divisor, so a
# load that drifts during the run weighs on both sides), and prints the
# times and the ratio; it exits 1 when the ratio is over 1.15
# (make run must build the server and nothing else). The cell listens on
# $COLDRUN_ADDRESS (default 127.0.0.1:18080) with databases under a prefix
# of its own (coldrun_<pid>_*), dropped at the end when psql is at hand.
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
addr=${COLDRUN_ADDRESS:-127.0.0.1:18080}
max=${COLDRUN_MAX_RATIO:-1.15}
work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if command -v psql >/dev/null; then
    base=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
    for db in $(psql "$base" -Atc "select datname from pg_database where datname like 'coldrun\\_$$\\_%'" 2>/dev/null); do
      psql "$base" -qc "drop database if exists \"$db\" with (force)" >/dev/null 2>&1 || true
    done
  fi
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

git clone -q "$repo" "$work/clone"
cd "$work/clone"
echo "coldrun: clean clone of $repo at $(git rev-parse --short HEAD) in $work/clone"
go mod download
now() { date +%s.%N; }

load() { cut -d' ' -f1-3 /proc/loadavg; }
# The baseline is built before and after make run and their mean taken, so
# a load that changes during the run (shared machines) weighs on both sides.
baseline() {
  local t0 t1
  t0=$(now)
  GOCACHE=$(mktemp -d -p "$work") go build -o "$work/server-baseline" ./cmd/server
  t1=$(now)
  echo "$t1 - $t0" | bc
}
build1=$(baseline)
echo "coldrun: GOCACHE=<empty> go build ./cmd/server (before): ${build1}s; load average: $(load)"

export GOCACHE
GOCACHE=$(mktemp -d -p "$work")
t0=$(now)
# make run is a process group of make, the server and its shell: started in
# its own group (setsid) so cleanup ends exactly it.
CELLGATE_ADDRESS=$addr CELLGATE_DEVDB_PREFIX="coldrun_$$" setsid make run >"$work/run.log" 2>&1 &
server_pid=$!
until curl -fsS -o /dev/null "http://$addr/readyz" 2>/dev/null; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "coldrun: make run exited before it was ready:" >&2
    cat "$work/run.log" >&2
    exit 1
  fi
  sleep 0.2
done
t1=$(now)
run=$(echo "$t1 - $t0" | bc)
kill -- -"$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
server_pid=
sed 's/^/  | /' "$work/run.log" | grep '^  | make' || true
echo "coldrun: GOCACHE=<empty> make run until /readyz is 200: ${run}s; load average: $(load)"
build2=$(baseline)
echo "coldrun: GOCACHE=<empty> go build ./cmd/server (after): ${build2}s; load average: $(load)"
build=$(echo "scale=3; ($build1 + $build2) / 2" | bc)
ratio=$(echo "scale=3; $run / $build" | bc)
echo "coldrun: ratio make run / go build ./cmd/server (mean of both) = $ratio (target <= $max)"
if [ "$(echo "$ratio > $max" | bc)" = 1 ]; then
  echo "coldrun: make run took more than $max x the server's build" >&2
  exit 1
fi
