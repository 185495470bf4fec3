package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func migrationsDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, sql := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(sql), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestReadMigrationTables replays DDL in version order, through comments,
// literals and function bodies.
func TestReadMigrationTables(t *testing.T) {
	dir := migrationsDir(t, map[string]string{
		"000001_a.up.sql": `-- accounts; (a comment with a semicolon)
CREATE TABLE accounts (tenant_id text NOT NULL, id bigint, slot integer NOT NULL CHECK (slot BETWEEN 0 AND 16383), note text DEFAULT 'a;b', PRIMARY KEY (tenant_id, id));
CREATE TABLE IF NOT EXISTS "Public".x (id int);
CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN CREATE TABLE nope (tenant_id text, slot int); END $fn$;
/* block; comment */
CREATE TABLE orders (tenant_id text, slot int, account_id bigint, FOREIGN KEY (tenant_id, account_id) REFERENCES accounts (tenant_id, id));`,
		"000010_later.up.sql": `ALTER TABLE orders RENAME TO purchases; DROP TABLE IF EXISTS public.x;
ALTER TABLE accounts ADD COLUMN IF NOT EXISTS nickname text, DROP COLUMN note, ADD CONSTRAINT c CHECK (true);`,
		"000002_b.up.sql":   `ALTER TABLE orders RENAME COLUMN account_id TO acct; ALTER TABLE accounts ADD note2 text;`,
		"000002_b.down.sql": `DROP TABLE accounts;`,
	})
	tables, _, err := readMigrationTables(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 2 || tables["nope"] != nil || tables["x"] != nil {
		t.Fatalf("tables = %v", tables)
	}
	a, p := tables["accounts"], tables["purchases"]
	if !a.cols["tenant_id"] || !a.cols["slot"] || !a.cols["nickname"] || !a.cols["note2"] || a.cols["note"] || a.cols["primary"] || a.cols["c"] {
		t.Fatalf("accounts columns = %v", a.cols)
	}
	if p == nil || !p.cols["acct"] || p.cols["account_id"] || len(p.refs) != 1 || p.refs[0] != "accounts" {
		t.Fatalf("purchases = %+v", p)
	}
}

func TestCheckTenantTables(t *testing.T) {
	dir := migrationsDir(t, map[string]string{
		"000001_a.up.sql": `CREATE TABLE accounts (tenant_id text, slot int, id bigint, PRIMARY KEY (tenant_id, slot, id));
CREATE TABLE orders (tenant_id text, slot int, account_id bigint REFERENCES accounts (id));
CREATE UNIQUE INDEX orders_ri ON orders (tenant_id, account_id, slot);
ALTER TABLE orders REPLICA IDENTITY USING INDEX orders_ri;
CREATE TABLE invoices (tenant_id text, slot int);
ALTER TABLE invoices REPLICA IDENTITY FULL;
CREATE TABLE audit (tenant_id text);
CREATE TABLE settings (key text);`,
	})
	warns, err := checkTenantTables(dir, []string{"accounts", "orders", "invoices"})
	if err != nil {
		t.Fatalf("a right list: %v", err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "table audit has tenant_id but no slot") {
		t.Fatalf("warns = %q", warns)
	}
	_, err = checkTenantTables(dir, []string{"orders", "accounts", "settings", "gone", "orders"})
	for _, want := range []string{
		"database.tenant_tables[0]: orders references accounts, which must come before it (parents first)",
		"database.tenant_tables[2]: settings has no tenant_id column",
		"database.tenant_tables[2]: settings has no slot column",
		"database.tenant_tables[3]: gone is not a table of " + dir,
		"database.tenant_tables[4]: orders is already database.tenant_tables[0]",
		"table invoices has tenant_id and slot columns but is not in database.tenant_tables",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestCheckTenantTablesReplicaIdentity: a tenant table whose replica
// identity does not cover slot is refused with the DDL that fixes it.
func TestCheckTenantTablesReplicaIdentity(t *testing.T) {
	dir := migrationsDir(t, map[string]string{
		"000001_a.up.sql": `CREATE TABLE notes (tenant_id text, id bigint, slot int, PRIMARY KEY (tenant_id, id));
CREATE TABLE tags (tenant_id text, slot int, name text);
CREATE UNIQUE INDEX tags_ri ON tags (tenant_id, name, slot);
ALTER TABLE tags REPLICA IDENTITY USING INDEX tags_ri;
CREATE TABLE pins (tenant_id text, slot int, id bigint PRIMARY KEY);
CREATE UNIQUE INDEX pins_ri ON pins (tenant_id, id);
ALTER TABLE pins REPLICA IDENTITY USING INDEX pins_ri;`,
		"000002_b.up.sql": `DROP INDEX tags_ri;`,
	})
	_, err := checkTenantTables(dir, []string{"notes", "tags", "pins"})
	for _, want := range []string{
		"database.tenant_tables[0]: notes has no replica identity covering slot in " + dir,
		"CREATE UNIQUE INDEX notes_replica_identity ON notes (tenant_id, id, slot); ALTER TABLE notes REPLICA IDENTITY USING INDEX notes_replica_identity;",
		"database.tenant_tables[1]: tags has no replica identity covering slot",
		"database.tenant_tables[2]: pins has no replica identity covering slot",
		"CREATE UNIQUE INDEX pins_replica_identity ON pins (id, slot)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestRepositoryTenantTables: the example spec's list matches sql/migrations.
func TestRepositoryTenantTables(t *testing.T) {
	if _, err := checkTenantTables(filepath.Join("..", "..", "sql", "migrations"), []string{"accounts", "orders"}); err != nil {
		t.Fatal(err)
	}
	if _, err := checkTenantTables(filepath.Join("..", "..", "sql", "migrations"), []string{"accounts"}); err == nil || !strings.Contains(err.Error(), "table orders has tenant_id and slot") {
		t.Fatalf("a missing table: %v", err)
	}
}
