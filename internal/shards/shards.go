// Package shards owns a cell's PostgreSQL pools: the control database and
// one pgxpool per shard, with the slot map that sends each tenant to its
// shard (the same slot function the cell router uses), and the embedded
// migrations applied to each.
//
// Concurrency: a Set is built once at boot; its pools are safe for
// concurrent use. Its shard map starts as database.shards and may be
// replaced while it serves (Install, fed by internal/shardmap from the
// control database): each lookup reads the map in force with one atomic
// load, no lock. Close once, after the server has drained.
package shards

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/drain"
	"github.com/cellgate/cellgate/internal/slots"
)

// Shard is one shard database.
type Shard struct {
	// Name is the spec's shard name.
	Name string
	// Index is the shard's position in the spec.
	Index int
	// Pool is the shard's connection pool.
	Pool *pgxpool.Pool
	// DSN is the shard's connection string (from the environment).
	DSN string
}

// Set is a cell's databases: control plus the shards the cell owns.
type Set struct {
	control    *pgxpool.Pool
	controlDSN string
	shards     []*Shard // the cell's shards, in spec order
	byIndex    []*Shard // spec index → shard; nil for another cell's shard
	slots      *slots.Map
	names      []string // database.shards' names, in spec order
	routing    atomic.Pointer[Routing]
	cell       string
	retired    drain.Retired // replaced routings' in-flight counts
}

// Getenv reads an environment variable; tests pass a map's lookup.
type Getenv func(string) string

// Open builds the slot map and one pool per database. Pools connect
// lazily, so Open succeeds while a database is down; Ping says whether
// they answer. An unset DSN variable is an error naming the variable.
func Open(ctx context.Context, db config.Database, getenv Getenv) (*Set, error) {
	return OpenCell(ctx, db, nil, "", getenv)
}

// OpenCell is Open for one cell of a multi-cell deployment: it opens only
// the shards whose slots lie inside the named cell's slots (a cell owns
// whole shards), so the other cells' DSN variables need not be set.
// ForTenant then answers ErrOtherCell for a tenant of another cell. An
// empty cell name opens every shard.
func OpenCell(ctx context.Context, db config.Database, cells []config.Cell, cell string, getenv Getenv) (*Set, error) {
	return OpenCellWith(ctx, db, cells, cell, getenv, OpenOptions{})
}

// OpenOptions are what OpenCellWith adds to OpenCell.
type OpenOptions struct {
	// Tracer, when set, traces every pool's queries (NewQueryTracer) with
	// their database's name.
	Tracer trace.TracerProvider
}

// OpenCellWith is OpenCell with options.
func OpenCellWith(ctx context.Context, db config.Database, cells []config.Cell, cell string, getenv Getenv, o OpenOptions) (*Set, error) {
	owners := make([]slots.Owner, len(db.Shards))
	for i, s := range db.Shards {
		owners[i] = slots.Owner{Name: s.Name, Slots: s.Slots}
	}
	m, err := slots.Build(owners)
	if err != nil {
		return nil, fmt.Errorf("database.shards: %w", err)
	}
	inCell, err := cellShards(m, cells, cell)
	if err != nil {
		return nil, err
	}
	set := &Set{slots: m, cell: cell, byIndex: make([]*Shard, len(db.Shards))}
	for _, s := range db.Shards {
		set.names = append(set.names, s.Name)
	}
	set.routing.Store(routingOf(m))
	set.controlDSN, set.control, err = open(ctx, "database.control", db.Control.DSNEnv, db.Control.MaxConns, getenv, o)
	if err != nil {
		return nil, err
	}
	for i, s := range db.Shards {
		if !inCell[i] {
			continue
		}
		dsn, pool, err := open(ctx, fmt.Sprintf("database.shards[%d] (%s)", i, s.Name), s.DSNEnv, s.MaxConns, getenv, o)
		if err != nil {
			set.Close()
			return nil, err
		}
		sh := &Shard{Name: s.Name, Index: i, Pool: pool, DSN: dsn}
		set.shards = append(set.shards, sh)
		set.byIndex[i] = sh
	}
	return set, nil
}

func open(ctx context.Context, what, env string, maxConns int, getenv Getenv, o OpenOptions) (string, *pgxpool.Pool, error) {
	dsn := strings.TrimSpace(getenv(env))
	if dsn == "" {
		return "", nil, fmt.Errorf("%s: environment variable %s is not set; set it to a PostgreSQL URL (postgres://user@host:5432/db)", what, env)
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %s does not hold a valid PostgreSQL DSN: %w", what, env, err)
	}
	if maxConns > 0 {
		pc.MaxConns = int32(maxConns)
	}
	if o.Tracer != nil {
		pc.ConnConfig.Tracer = NewQueryTracer(o.Tracer, pc.ConnConfig.Database)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", what, err)
	}
	return dsn, pool, nil
}

// Control is the control database's pool.
func (s *Set) Control() *pgxpool.Pool { return s.control }

// ControlDSN is the control database's connection string.
func (s *Set) ControlDSN() string { return s.controlDSN }

// Shards lists the shards in spec order.
func (s *Set) Shards() []*Shard { return s.shards }

// Slots is the shard slot map of the config (database.shards), as at
// boot; Routing is the map in force.
func (s *Set) Slots() *slots.Map { return s.slots }

// ShardNames lists database.shards' names in spec order, the other cells'
// shards included: a Routing's shard indexes point into it.
func (s *Set) ShardNames() []string { return s.names }

// Routing returns the shard map in force: one atomic load.
func (s *Set) Routing() *Routing { return s.routing.Load() }

// Install makes r the shard map in force for every lookup that starts
// after it returns; lookups under way finish on the map they loaded. A
// shard index outside database.shards is an error naming the slot, and the
// map in force stays.
func (s *Set) Install(r *Routing) error {
	for slot := 0; slot < slots.Count; slot++ {
		if i := r.Shard(slot); i >= len(s.byIndex) {
			return fmt.Errorf("shards: routing version %d: slot %d goes to shard index %d, but database.shards has %d", r.Version(), slot, i, len(s.byIndex))
		}
	}
	if old := s.routing.Swap(r); old != nil {
		s.retired.Add(&old.inflight)
	}
	return nil
}

// OlderInFlight returns how many requests that started on a replaced
// routing (Routing.Enter) are still in flight, and forgets the replaced
// routings that have none. No request starts on a routing once it is
// replaced, bar one that loaded it an instant before the swap and has not
// counted itself yet, which a move's fence at the source covers.
func (s *Set) OlderInFlight() int64 { return s.retired.InFlight() }

// Frozen reports whether tenant's slot is frozen for a move between shards
// in the map in force (false for an empty or invalid tenant id). It takes
// no lock and allocates nothing.
func (s *Set) Frozen(tenant string) bool {
	return s.routing.Load().FrozenTenant(tenant)
}

// ErrNoTenant is returned when a shard is asked for without a tenant.
var ErrNoTenant = errors.New("shards: no tenant; shard access needs a tenant route, or a job with a tenant")

// ErrOtherCell is returned for a tenant whose slot another cell owns: the
// router sent it to the wrong cell (or the slot map is being changed).
var ErrOtherCell = errors.New("shards: the tenant's slot belongs to another cell")

// ForTenant returns the tenant's shard and slot in the map in force.
func (s *Set) ForTenant(tenant string) (*Shard, int, error) {
	slot, err := slots.Slot(tenant)
	if err != nil {
		return nil, 0, ErrNoTenant
	}
	sh := s.byIndex[s.routing.Load().Shard(slot)]
	if sh == nil {
		return nil, slot, ErrOtherCell
	}
	return sh, slot, nil
}

// Cell is the cell this set serves ("" for the only cell).
func (s *Set) Cell() string { return s.cell }

// cellShards marks the shards inside the named cell. A shard that
// straddles cells is an error: a cell owns whole shards.
func cellShards(m *slots.Map, cells []config.Cell, cell string) ([]bool, error) {
	in := make([]bool, m.Len())
	if cell == "" {
		for i := range in {
			in[i] = true
		}
		return in, nil
	}
	owners := make([]slots.Owner, len(cells))
	for i, c := range cells {
		owners[i] = slots.Owner{Name: c.Name, Slots: c.Slots}
	}
	cm, err := slots.Build(owners)
	if err != nil {
		return nil, fmt.Errorf("cells: %w", err)
	}
	ci := slices.IndexFunc(cells, func(c config.Cell) bool { return c.Name == cell })
	if ci < 0 {
		return nil, fmt.Errorf("server.cell: %q is not one of the spec's cells", cell)
	}
	of, err := slots.Nest(m, cm)
	if err != nil {
		return nil, fmt.Errorf("database.shards: %w; a cell must own whole shards", err)
	}
	for i, c := range of {
		in[i] = c == ci
	}
	return in, nil
}

// Ping checks every database answers; the error names the ones that don't.
func (s *Set) Ping(ctx context.Context) error {
	var errs []error
	if err := s.control.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("control: %w", err))
	}
	for _, sh := range s.shards {
		if err := sh.Pool.Ping(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sh.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes every pool.
func (s *Set) Close() {
	if s.control != nil {
		s.control.Close()
	}
	for _, sh := range s.shards {
		sh.Pool.Close()
	}
}
