package shards

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/testpg"
)

// TestAccessorTakesDBPermits runs checkouts through the accessor on a real
// database with a cap of 2 per tenant: a third concurrent checkout fails at
// once with the refusal; every permit comes back with its connection,
// on return, error and panic; once the request has ended the accessor
// stops counting.
func TestAccessorTakesDBPermits(t *testing.T) {
	dsn := testpg.CreateDB(t, "accessor")
	db := config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "DSN", MaxConns: 2},
		Shards:  []config.Shard{{Name: "shard-0", DSNEnv: "DSN", MaxConns: 4}},
	}
	set, err := Open(context.Background(), db, func(string) string { return dsn })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()

	cfg := admission.DefaultConfig()
	cfg.MaxConcurrent = 2
	eng, err := admission.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := set.Accessor("", nil).Conn(context.Background(), func(*pgxpool.Conn) error { return nil }); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("no tenant: %v", err)
	}
	var none *Set
	if err := none.Accessor("acme", nil).Err(); !errors.Is(err, ErrNoDatabases) {
		t.Fatalf("no databases: %v", err)
	}
	binding := &testPermits{eng: eng, tenant: "acme"}
	binding.live.Store(true)
	ctx := context.Background()
	acc := set.Accessor("acme", binding)
	if acc.Err() != nil {
		t.Fatal(acc.Err())
	}
	if acc.Tenant() != "acme" || acc.Shard().Name != "shard-0" {
		t.Fatalf("accessor: %s on %s", acc.Tenant(), acc.Shard().Name)
	}

	var third error
	var inside int64
	err = acc.Conn(ctx, func(c1 *pgxpool.Conn) error {
		return acc.Tx(ctx, func(tx Tx) error {
			inside = eng.InFlightOf("acme")
			third = acc.Conn(ctx, func(*pgxpool.Conn) error { return nil })
			var one int
			return tx.QueryRow(ctx, "SELECT 1").Scan(&one)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if inside != 2 {
		t.Fatalf("permits held by two checkouts: %d", inside)
	}
	if !errors.Is(third, errTestRefused) {
		t.Fatalf("third checkout: %v", third)
	}
	if n := eng.InFlight(); n != 0 {
		t.Fatalf("after the checkouts: %d permits held", n)
	}

	boom := errors.New("boom")
	if err := acc.Tx(ctx, func(Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("tx error: %v", err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = acc.Conn(ctx, func(*pgxpool.Conn) error { panic("handler panic") })
	}()
	if n := eng.InFlight(); n != 0 {
		t.Fatalf("after an error and a panic: %d permits held", n)
	}
	if s := set.Shards()[0].Pool.Stat(); s.AcquiredConns() != 0 {
		t.Fatalf("connections still checked out: %d", s.AcquiredConns())
	}

	binding.live.Store(false) // the request is over: a goroutine that kept acc is not counted
	err = acc.Conn(ctx, func(*pgxpool.Conn) error {
		inside = eng.InFlight()
		return nil
	})
	if err != nil || inside != 0 {
		t.Fatalf("after the request: err %v, permits %d", err, inside)
	}

	// Without a binding (db cap off) the accessor counts nothing.
	plain := set.Accessor("acme", nil)
	if err := plain.Conn(ctx, func(*pgxpool.Conn) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// testPermits stands in for the runtime's per-request binding: permits of
// one tenant from an engine while the request is live, refused at the cap.
type testPermits struct {
	eng    *admission.Engine
	tenant string
	live   atomic.Bool
}

var errTestRefused = errors.New("test: tenant at its database cap")

func (p *testPermits) Acquire() (admission.Permit, error) {
	if !p.live.Load() {
		return admission.Permit{}, nil
	}
	pm, o := p.eng.Admit(p.tenant, 1)
	if o != admission.Admitted {
		return admission.Permit{}, errTestRefused
	}
	return pm, nil
}
