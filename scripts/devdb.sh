#!/usr/bin/env bash
# devdb.sh BIN — find a PostgreSQL for `make run`, create the spec's
# databases on it and print `export VAR=DSN` lines for them.
#
# Order: $DATABASE_URL; else the server at 127.0.0.1:5432; else, where
# PostgreSQL's binaries are installed, a private cluster in .devdb/
# (git-ignored) on port 54329. With none of these it says what to do.
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)

reachable() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

if [ -n "${DATABASE_URL:-}" ]; then
  base=$DATABASE_URL
elif reachable 127.0.0.1 5432; then
  base="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
else
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
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
  data="$root/.devdb/data"
  as=()
  if [ "$(id -u)" = 0 ]; then as=(runuser -u postgres --); fi
  mkdir -p "$root/.devdb"
  [ "$(id -u)" = 0 ] && chown postgres "$root/.devdb"
  if [ ! -f "$data/PG_VERSION" ]; then
    "${as[@]}" "$pgbin/initdb" -D "$data" -U postgres --auth=trust >/dev/null
  fi
  if ! reachable 127.0.0.1 54329; then
    "${as[@]}" "$pgbin/pg_ctl" -D "$data" -l "$root/.devdb/postgres.log" -w \
      -o "-p 54329 -c listen_addresses=127.0.0.1 -k $root/.devdb" start >/dev/null
  fi
  base="postgres://postgres@127.0.0.1:54329/postgres?sslmode=disable"
fi
"$bin" devdb -base "$base"
