#!/usr/bin/env bash
# devdb.sh BIN — find a PostgreSQL for `make run`, create this checkout's
# databases on it and print `export VAR=DSN` lines for them.
# devdb.sh --stop — stop the private cluster in .devdb/ (make devdb-stop).
#
# Order: $DATABASE_URL; else the server at 127.0.0.1:5432; else, where
# PostgreSQL's binaries are installed, a private cluster in .devdb/
# (git-ignored) on port 54329, which keeps running after `make run` ends.
# With none of these it says what to do and exits 1.
#
# Database names start with a prefix of this checkout ($CELLGATE_DEVDB_PREFIX,
# else one derived from the checkout's path), so two checkouts on one server
# never share databases.
set -euo pipefail
bin=${1:?usage: devdb.sh BIN | devdb.sh --stop}
root=$(cd "$(dirname "$0")/.." && pwd)
data="$root/.devdb/data"
as=()
if [ "$(id -u)" = 0 ]; then as=(runuser -u postgres --); fi
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)

if [ "$bin" = --stop ]; then
  if [ ! -f "$data/postmaster.pid" ]; then
    echo "devdb: no private cluster is running in $root/.devdb" >&2
    exit 0
  fi
  "${as[@]}" "$pgbin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
  echo "devdb: stopped the private cluster in $root/.devdb (its data stays; rm -rf .devdb to drop it)" >&2
  exit 0
fi

reachable() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

if [ -n "${DATABASE_URL:-}" ]; then
  base=$DATABASE_URL
elif reachable 127.0.0.1 5432; then
  base="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
else
  if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
    cat >&2 <<'MSG'
make run needs PostgreSQL and found none. Do one of:
  - export DATABASE_URL=postgres://user:pass@host:5432/postgres   (any server you can create databases on)
  - start the local server:  pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start
  - install PostgreSQL (Debian: apt-get install -y postgresql) and run make run again;
    it will start a private cluster in .devdb/
MSG
    exit 1
  fi
  mkdir -p "$root/.devdb"
  [ "$(id -u)" = 0 ] && chown postgres "$root/.devdb"
  if [ ! -f "$data/PG_VERSION" ]; then
    "${as[@]}" "$pgbin/initdb" -D "$data" -U postgres --auth=trust >/dev/null
  fi
  # wal_level = logical: slotmove streams a moving range by logical
  # replication (docs/cells.md), so make cells can move slots online.
  if ! reachable 127.0.0.1 54329; then
    "${as[@]}" "$pgbin/pg_ctl" -D "$data" -l "$root/.devdb/postgres.log" -w \
      -o "-p 54329 -c listen_addresses=127.0.0.1 -k $root/.devdb -c wal_level=logical" start >/dev/null
    echo "devdb: started a private PostgreSQL in .devdb/ on port 54329; it keeps running: make devdb-stop stops it" >&2
  fi
  base="postgres://postgres@127.0.0.1:54329/postgres?sslmode=disable"
fi
"$bin" devdb -base "$base" -checkout "$root"
