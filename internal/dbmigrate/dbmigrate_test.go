package dbmigrate

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	got, err := URL("postgres://u:secret@h:5432/db?sslmode=disable", "t_migrations")
	if err != nil {
		t.Fatal(err)
	}
	if want := "pgx5://u:secret@h:5432/db?sslmode=disable&x-migrations-table=t_migrations"; got != want {
		t.Fatalf("URL = %q, want %q", got, want)
	}
	if _, err := URL("host=localhost dbname=x", "t"); err == nil {
		t.Fatal("a key=value DSN must be refused")
	}
	if _, err := URL("postgres://h/db", ""); err == nil {
		t.Fatal("an empty table name must be refused")
	}
}

func TestRedact(t *testing.T) {
	if got := Redact("postgres://u:secret@h/db"); strings.Contains(got, "secret") {
		t.Fatalf("Redact kept the password: %q", got)
	}
	if got := Redact("postgres://u:sec%zzret@h/db"); strings.Contains(got, "sec") {
		t.Fatalf("Redact kept the password of an unparseable URL: %q", got)
	}
}
