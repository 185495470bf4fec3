package plans

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/pgfollow"
	"github.com/cellgate/cellgate/internal/slots"
)

// Options tune a Store; zero values take the defaults.
type Options struct {
	// Resync is the version-check period (default pgfollow.DefaultResync).
	Resync time.Duration
	// Retry is the wait before reconnecting after an error (default
	// pgfollow.DefaultRetry).
	Retry time.Duration
	// Log receives load errors and rows naming unknown plans (default
	// slog.Default()).
	Log *slog.Logger
	// OnChange, when set, is called after each new snapshot is published
	// (engines refresh their accounts' limits from it).
	OnChange func(*Snapshot)
}

// Store keeps the cell's tenant table in memory and writes it.
type Store struct {
	pool *pgxpool.Pool
	cat  *Catalog
	opt  Options
	cur  atomic.Pointer[Snapshot]

	mu       sync.Mutex // guards claims and publishing
	claims   map[string]int
	base     *Snapshot // the last snapshot read from the table, without claims
	watchers []func(*Snapshot)

	loaded atomic.Bool

	// loadMu serializes each read of the table with its install, so a
	// read that started before a write never installs over the snapshot a
	// later read took after it (Apply's reload racing Run's resync).
	loadMu sync.Mutex
}

// NewStore returns a store over the control database's pool. It holds only
// the default plan until Load or Run reads the table.
func NewStore(pool *pgxpool.Pool, cat *Catalog, o Options) *Store {
	o.Resync, o.Retry, o.Log = pgfollow.Defaults(o.Resync, o.Retry, o.Log)
	s := &Store{pool: pool, cat: cat, opt: o}
	empty, _ := NewSnapshot(cat, nil, -1)
	s.base = empty
	s.cur.Store(empty)
	return s
}

// Catalog returns the store's catalog.
func (s *Store) Catalog() *Catalog { return s.cat }

// Snapshot returns the snapshot in force: one atomic load.
func (s *Store) Snapshot() *Snapshot { return s.cur.Load() }

// Resolve is Snapshot().Resolve.
func (s *Store) Resolve(tenant, claim string) Effective { return s.cur.Load().Resolve(tenant, claim) }

// Loaded reports whether the table has been read at least once.
func (s *Store) Loaded() bool { return s.loaded.Load() }

// JobLimits returns tenant's running-job cap (0 = none) and claim weight,
// from its effective plan and overrides: the job backends' view.
func (s *Store) JobLimits(tenant string) (maxRunning, weight int) {
	l := s.cur.Load().Resolve(tenant, "").Limits
	return l.JobsMaxConcurrent, max(l.JobsWeight, 1)
}

// ObserveClaim records the plan an authenticated token gave tenant, so
// that job claims (which carry no token) resolve the tenant on that plan
// too. A claim the store already knows costs one atomic load and two map
// lookups; a new one republishes the snapshot.
func (s *Store) ObserveClaim(tenant, plan string) {
	i, ok := s.cat.byName[plan]
	if !ok {
		return
	}
	if j, seen := s.cur.Load().claims[tenant]; seen && j == i {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, seen := s.claims[tenant]; seen && j == i {
		return
	}
	claims := make(map[string]int, len(s.claims)+1)
	for k, v := range s.claims {
		claims[k] = v
	}
	claims[tenant] = i
	s.claims = claims
	s.publishLocked(s.base)
}

func (s *Store) publishLocked(base *Snapshot) {
	s.base = base
	snap := base
	if len(s.claims) > 0 {
		snap = base.withClaims(s.claims)
	}
	s.cur.Store(snap)
	if s.opt.OnChange != nil {
		s.opt.OnChange(snap)
	}
	for _, f := range s.watchers {
		f(snap)
	}
}

// Watch adds f to the functions called after each new snapshot is
// published (the admission engines refresh their accounts' limits). f runs
// under the store's lock: it must be quick and must not call the store.
func (s *Store) Watch(f func(*Snapshot)) {
	s.mu.Lock()
	s.watchers = append(s.watchers, f)
	s.mu.Unlock()
}

// Load reads the whole table and publishes it. On error the snapshot in
// force stays.
func (s *Store) Load(ctx context.Context) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	version, rows, err := readTable(ctx, s.pool)
	if err != nil {
		return err
	}
	s.install(version, rows)
	return nil
}

func (s *Store) install(version int64, rows []Row) {
	snap, errs := NewSnapshot(s.cat, rows, version)
	for _, err := range errs {
		s.opt.Log.Warn("tenant table", "err", err)
	}
	s.mu.Lock()
	s.publishLocked(snap)
	s.mu.Unlock()
	s.loaded.Store(true)
}

// Run follows the table until ctx ends: it LISTENs on Channel on a
// connection of its own, reloads on every notification and whenever the
// version row changed (checked every Options.Resync), and reconnects after
// Options.Retry when the database goes away, keeping the last snapshot
// meanwhile. It returns ctx's error.
func (s *Store) Run(ctx context.Context) error {
	return pgfollow.Run(ctx, s.pool, pgfollow.Options{
		Channel: Channel,
		Period:  func() time.Duration { return s.opt.Resync },
		Retry:   s.opt.Retry,
		Stopped: func(err error) {
			s.opt.Log.Warn("tenant table: following stopped; the last known limits stay in force", "err", err)
		},
	}, pgfollow.Hooks{
		Start:    s.loadOn,
		Notified: s.Load,
		Tick:     s.loadIfChanged,
	})
}

// loadIfChanged reloads over c when the version row moved since the
// snapshot in force.
func (s *Store) loadIfChanged(ctx context.Context, c *pgx.Conn) error {
	var v int64
	if err := c.QueryRow(ctx, "SELECT version FROM cellgate_tenants_version").Scan(&v); err != nil {
		return err
	}
	if v == s.cur.Load().version {
		return nil
	}
	return s.loadOn(ctx, c)
}

func (s *Store) loadOn(ctx context.Context, c *pgx.Conn) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	version, rows, err := readTable(ctx, c)
	if err != nil {
		return err
	}
	s.install(version, rows)
	return nil
}

// querier is what readTable needs of a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readTable reads the version and every row in one snapshot of the
// database (a repeatable-read read, so the version matches the rows).
func readTable(ctx context.Context, q querier) (int64, []Row, error) {
	rows, err := q.Query(ctx, `
		SELECT v.version, t.tenant, coalesce(t.plan, ''), t.overrides, t.updated_by,
		       to_char(t.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
		FROM cellgate_tenants_version v LEFT JOIN cellgate_tenants t ON true
		ORDER BY t.tenant`)
	if err != nil {
		return 0, nil, fmt.Errorf("tenant table: %w", err)
	}
	defer rows.Close()
	var (
		version int64
		out     []Row
	)
	for rows.Next() {
		var (
			tenant, plan, by, at *string
			raw                  []byte
		)
		if err := rows.Scan(&version, &tenant, &plan, &raw, &by, &at); err != nil {
			return 0, nil, fmt.Errorf("tenant table: %w", err)
		}
		if tenant == nil {
			continue // the version row alone: an empty table
		}
		r := Row{Tenant: *tenant, Plan: *plan, UpdatedBy: *by, UpdatedAt: *at}
		if err := json.Unmarshal(raw, &r.Overrides); err != nil {
			return 0, nil, fmt.Errorf("tenant table: tenant %q: overrides: %w", r.Tenant, err)
		}
		if len(r.Overrides) == 0 {
			r.Overrides = nil
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("tenant table: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return version, out, nil
}

// Apply writes c to tenant's row through the store's pool (the package's
// Apply over the store's catalog), then reloads the table so this process
// serves the change at once; the other processes follow their
// notification. A failed reload is logged, not returned: the write stands
// and Run or the next resync picks it up.
func (s *Store) Apply(ctx context.Context, tenant, by string, c Change) (before, after Row, err error) {
	before, after, err = Apply(ctx, s.pool, s.cat, tenant, by, c)
	if err != nil {
		return before, after, err
	}
	if err := s.Load(ctx); err != nil {
		s.opt.Log.Warn("tenant table: reload after a write", "tenant", tenant, "err", err)
	}
	return before, after, nil
}

// Beginner is a pool or a connection that starts transactions.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Change is one write to a tenant's row; nil fields are left as they are.
type Change struct {
	// Plan sets the tenant's plan; a pointer to "" clears it.
	Plan *string
	// Set adds or replaces overrides.
	Set map[Field]Override
	// Unset removes overrides.
	Unset []Field
	// Shadow turns existing overrides' shadow mode on (true) or off.
	Shadow map[Field]bool
}

// Apply writes c to tenant's row in one transaction, bumps the version and
// notifies every Store of the cell, and returns the row before and after.
// A row left with no plan and no override is deleted. by names who made
// the change (the audit's who).
func Apply(ctx context.Context, db Beginner, cat *Catalog, tenant, by string, c Change) (before, after Row, err error) {
	if tenant == "" {
		return before, after, errors.New("tenant: empty")
	}
	if by == "" {
		return before, after, errors.New("updated_by: empty; name who makes the change")
	}
	slot, err := slots.Slot(tenant)
	if err != nil {
		return before, after, fmt.Errorf("tenant %q: %w", tenant, err)
	}
	if c.Plan != nil && *c.Plan != "" {
		if err := cat.CheckPlan(*c.Plan); err != nil {
			return before, after, err
		}
	}
	for f, o := range c.Set {
		if err := f.Check(o.Value); err != nil {
			return before, after, err
		}
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var (
			plan string
			raw  []byte
		)
		err := tx.QueryRow(ctx, `SELECT coalesce(plan, ''), overrides FROM cellgate_tenants WHERE tenant = $1 FOR UPDATE`, tenant).Scan(&plan, &raw)
		exists := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		before = Row{Tenant: tenant, Plan: plan}
		if exists {
			if err := json.Unmarshal(raw, &before.Overrides); err != nil {
				return fmt.Errorf("tenant %q: overrides: %w", tenant, err)
			}
		}
		after = Row{Tenant: tenant, Plan: plan, Overrides: map[Field]Override{}, UpdatedBy: by}
		for f, o := range before.Overrides {
			after.Overrides[f] = o
		}
		if c.Plan != nil {
			after.Plan = *c.Plan
		}
		for f, o := range c.Set {
			after.Overrides[f] = o
		}
		for _, f := range c.Unset {
			delete(after.Overrides, f)
		}
		for f, shadow := range c.Shadow {
			o, ok := after.Overrides[f]
			if !ok {
				return fmt.Errorf("tenant %q: %s has no override to put in or out of shadow mode; set one first", tenant, f)
			}
			o.Enforce = !shadow
			after.Overrides[f] = o
		}
		if after.Plan == "" && len(after.Overrides) == 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM cellgate_tenants WHERE tenant = $1`, tenant); err != nil {
				return err
			}
		} else {
			ov, err := json.Marshal(after.Overrides)
			if err != nil {
				return err
			}
			var p *string
			if after.Plan != "" {
				p = &after.Plan
			}
			if err := tx.QueryRow(ctx, `
				INSERT INTO cellgate_tenants (tenant, slot, plan, overrides, updated_by, updated_at)
				VALUES ($1, $2, $3, $4, $5, now())
				ON CONFLICT (tenant) DO UPDATE SET plan = EXCLUDED.plan, overrides = EXCLUDED.overrides,
					updated_by = EXCLUDED.updated_by, updated_at = EXCLUDED.updated_at
				RETURNING to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`,
				tenant, slot, p, ov, by).Scan(&after.UpdatedAt); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE cellgate_tenants_version SET version = version + 1`); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, tenant)
		return err
	})
	if len(after.Overrides) == 0 {
		after.Overrides = nil
	}
	if err != nil {
		return before, after, fmt.Errorf("tenant %q: %w", tenant, err)
	}
	return before, after, nil
}
