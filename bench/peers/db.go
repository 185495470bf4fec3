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

// openPools opens a side's two pools on dsn: the job system's (conns
// connections) and the application's, for the tx shape's transactions
// (appConns), and creates the signups table.
func openPools(ctx context.Context, dsn string, conns, appConns int32) (pool, app *pgxpool.Pool, err error) {
	open := func(n int32) (*pgxpool.Pool, error) {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = n
		return pgxpool.NewWithConfig(ctx, cfg)
	}
	if pool, err = open(conns); err != nil {
		return nil, nil, err
	}
	if app, err = open(appConns); err != nil {
		pool.Close()
		return nil, nil, err
	}
	if _, err = pool.Exec(ctx, signupsDDL); err != nil {
		pool.Close()
		app.Close()
		return nil, nil, fmt.Errorf("create signups: %w", err)
	}
	return pool, app, nil
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

// releaseConns closes the pools' connections (they reopen on demand), so a
// side between its phases holds none on the shared server: with its idle
// connections kept, the two sides' pools alone would hold 80.
func releaseConns(pools ...*pgxpool.Pool) {
	for _, p := range pools {
		p.Reset()
	}
}
