package console

import (
	"context"
	"embed"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/dbmigrate"
)

// migrations are the console's own golang-migrate files: its sessions
// table belongs to the console, applied under its own migrations table.
//
//go:embed migrations/*.sql
var migrations embed.FS

// MigrationsTable records the version of the console's schema in the
// control database.
const MigrationsTable = "cellgate_console_schema_migrations"

// Files are the console's migrations as dbmigrate applies them.
var Files = dbmigrate.Files{FS: migrations, Dir: "migrations", Table: MigrationsTable}

// PGSessions keeps the console's sessions in the cell's control database
// (table cellgate_console_sessions), so every process of the cell sees a
// login and a logout at once. Its migrations run on first use (and again
// on the next use after a failure), so a cell whose control database is
// late still boots. Expired sessions are swept at each login. Safe for
// concurrent use.
type PGSessions struct {
	pool *pgxpool.Pool
	dsn  string
	idle time.Duration

	mu       sync.Mutex
	migrated bool
}

// NewPGSessions keeps sessions through pool, migrating the database at dsn
// (the same database); sessions idle for idle are swept with the expired.
func NewPGSessions(pool *pgxpool.Pool, dsn string, idle time.Duration) *PGSessions {
	return &PGSessions{pool: pool, dsn: dsn, idle: idle}
}

func (p *PGSessions) ready(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.migrated {
		return nil
	}
	if err := Files.Up(ctx, p.dsn); err != nil {
		return err
	}
	p.migrated = true
	return nil
}

// Put implements consoleauth.Store; it also deletes the sessions that have
// ended by time.
func (p *PGSessions) Put(ctx context.Context, id string, s consoleauth.Session) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	_, err := p.pool.Exec(ctx, `WITH swept AS (DELETE FROM cellgate_console_sessions WHERE expires_at <= $7 OR seen_at <= $7 - $8::interval)
INSERT INTO cellgate_console_sessions (id, role, csrf, token, created_at, seen_at, expires_at, subject, email) VALUES ($1, $2, $3, $4, $5, $6, $9, $10, $11)`,
		id, int16(s.Role), s.CSRF, s.Token, s.Created, s.Seen, s.Created, p.idle, s.Expires, s.Subject, s.Email)
	return err
}

// Get implements consoleauth.Store.
func (p *PGSessions) Get(ctx context.Context, id string) (consoleauth.Session, bool, error) {
	if err := p.ready(ctx); err != nil {
		return consoleauth.Session{}, false, err
	}
	var s consoleauth.Session
	var role int16
	err := p.pool.QueryRow(ctx, `SELECT role, csrf, token, created_at, seen_at, expires_at, subject, email FROM cellgate_console_sessions WHERE id = $1`, id).
		Scan(&role, &s.CSRF, &s.Token, &s.Created, &s.Seen, &s.Expires, &s.Subject, &s.Email)
	if errors.Is(err, pgx.ErrNoRows) {
		return consoleauth.Session{}, false, nil
	}
	if err != nil {
		return consoleauth.Session{}, false, err
	}
	s.Role = consoleauth.Role(role)
	return s, true, nil
}

// Touch implements consoleauth.Store.
func (p *PGSessions) Touch(ctx context.Context, id string, t time.Time) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	_, err := p.pool.Exec(ctx, `UPDATE cellgate_console_sessions SET seen_at = $2 WHERE id = $1 AND seen_at < $2`, id, t)
	return err
}

// Delete implements consoleauth.Store.
func (p *PGSessions) Delete(ctx context.Context, id string) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	_, err := p.pool.Exec(ctx, `DELETE FROM cellgate_console_sessions WHERE id = $1`, id)
	return err
}
