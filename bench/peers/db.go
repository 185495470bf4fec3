package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// createDB creates a uniquely named database on the server of adminDSN and
// returns its name and DSN.
func createDB(ctx context.Context, adminDSN, prefix string) (name, dsn string, err error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	name = prefix + "_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(adminDSN)
	if err != nil {
		return "", "", err
	}
	u.Path = "/" + name
	return name, u.String(), nil
}

// dropDB drops the database, disconnecting whoever is left.
func dropDB(ctx context.Context, adminDSN, name string) error {
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// pools are a side's two pools on its database: the job system's and the
// application's, for the tx shape's transactions.
type pools struct{ pool, app *pgxpool.Pool }

// Pool is the job system's pool (side.Pool).
func (p pools) Pool() *pgxpool.Pool { return p.pool }

func (p pools) close() {
	p.app.Close()
	p.pool.Close()
}

// release closes both pools' connections (they reopen on demand), so a
// side between its phases holds none on the shared server: with its idle
// connections kept, the two sides' pools alone would hold 80.
func (p pools) release() {
	p.pool.Reset()
	p.app.Reset()
}

// signupTx is the tx shape's unit (side.SignupTx): one transaction that
// writes a signups row and enqueues through enqueue, then commits.
func (p pools) signupTx(ctx context.Context, tenantID string, n int, enqueue func(pgx.Tx) error) error {
	tx, err := p.app.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, insertSignup, tenantID, fmt.Sprintf("user-%d@example.test", n)); err != nil {
		return err
	}
	if err := enqueue(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// openPools opens a side's two pools on dsn: the job system's (conns
// connections) and the application's (appConns), and creates the signups
// table.
func openPools(ctx context.Context, dsn string, conns, appConns int32) (p pools, err error) {
	open := func(n int32) (*pgxpool.Pool, error) {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = n
		return pgxpool.NewWithConfig(ctx, cfg)
	}
	if p.pool, err = open(conns); err != nil {
		return pools{}, err
	}
	if p.app, err = open(appConns); err != nil {
		p.pool.Close()
		return pools{}, err
	}
	if _, err = p.pool.Exec(ctx, signupsDDL); err != nil {
		p.close()
		return pools{}, fmt.Errorf("create signups: %w", err)
	}
	return p, nil
}

// analyzeJobs gathers the planner statistics of the jobs table as it is
// mid-phase. Reset leaves it empty and analyzed as empty, and each side's
// prepared statements would be planned, and after five runs possibly
// cached as generic plans, against those statistics until autovacuum's
// ANALYZE happens to come mid-window: a round would run on plans made for
// an empty table, or change plans halfway, depending on its timing. The
// shapes call it for both sides alike once the table holds jobs. (It does
// not cure River's stalls: see docs/benchmarks.md and pace.)
func analyzeJobs(ctx context.Context, pool *pgxpool.Pool, jobsTable string) error {
	q := "ANALYZE " + pgx.Identifier{jobsTable}.Sanitize()
	if _, err := pool.Exec(ctx, q); err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	return nil
}

// resetTables truncates the jobs table and signups and vacuums them, as
// River's benchmark does before it runs, so each phase starts empty.
func resetTables(ctx context.Context, pool *pgxpool.Pool, jobsTable string) error {
	t := pgx.Identifier{jobsTable}.Sanitize()
	for _, q := range []string{"TRUNCATE " + t + ", signups", "VACUUM FULL " + t, "VACUUM FULL signups", "ANALYZE " + t} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}
