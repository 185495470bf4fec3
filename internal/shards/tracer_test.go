package shards

import "testing"

func TestStatementName(t *testing.T) {
	for sql, want := range map[string][2]string{
		"-- name: CreateAccount :one\nINSERT INTO accounts (a) VALUES ($1) RETURNING *": {"CreateAccount", "INSERT"},
		"begin": {"BEGIN", "BEGIN"},
		"  -- a comment\n-- name: ListOrders :many\nSELECT 1": {"ListOrders", "SELECT"},
		"SELECT(1)": {"SELECT", "SELECT"},
	} {
		if name, op := StatementName(sql); name != want[0] || op != want[1] {
			t.Errorf("%q: %q %q, want %q", sql, name, op, want)
		}
	}
}
