package plans

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/slots"
	"github.com/cellgate/cellgate/internal/testpg"
)

// controlDB creates a migrated control database and returns its URL and a
// pool on it.
func controlDB(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	dsn := testpg.CreateDB(t, "plans")
	ctx := context.Background()
	if err := Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "plans_store_test"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return dsn, pool
}

// runStore starts s.Run until the test ends.
func runStore(t testing.TB, s *Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitFor polls cond every 10ms and returns how long it took; it fails
// the test after limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// quiet drops the store's warnings, which these tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

func ptr(s string) *string { return &s }

func TestStoreSeesChangesOfAnotherProcess(t *testing.T) {
	_, pool := controlDB(t)
	cat := catalog(t)
	// Two stores stand for two processes of the cell.
	a, b := NewStore(pool, cat, Options{Log: quiet}), NewStore(pool, cat, Options{Log: quiet})
	runStore(t, a)
	runStore(t, b)
	waitFor(t, 5*time.Second, "first load", func() bool { return a.Loaded() && b.Loaded() })
	if got := a.Resolve("acme", "").Plan; got != "free" {
		t.Fatalf("before: plan %s, want the default free", got)
	}
	ctx := context.Background()
	_, after, err := Apply(ctx, pool, cat, "acme", "test", Change{Plan: ptr("pro"), Set: map[Field]Override{MaxConcurrentRequests: {Value: 2, Enforce: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if after.Plan != "pro" || after.Overrides[MaxConcurrentRequests].Value != 2 {
		t.Fatalf("after = %+v", after)
	}
	for _, s := range []*Store{a, b} {
		d := waitFor(t, 2*time.Second, "change seen", func() bool {
			e := s.Resolve("acme", "")
			return e.Plan == "pro" && e.Limits.MaxConcurrentRequests == 2
		})
		t.Logf("seen after %v", d)
	}
	if mr, w := b.JobLimits("acme"); mr != 4 || w != 4 {
		t.Fatalf("JobLimits = %d, %d, want pro's 4, 4", mr, w)
	}
	// Unsetting the last field and the plan deletes the row.
	if _, _, err := Apply(ctx, pool, cat, "acme", "test", Change{Plan: ptr(""), Unset: []Field{MaxConcurrentRequests}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "row deleted", func() bool { _, ok := a.Snapshot().Row("acme"); return !ok })
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM cellgate_tenants").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows = %d, %v", n, err)
	}
}

func TestApplyRefusesBadInput(t *testing.T) {
	_, pool := controlDB(t)
	cat := catalog(t)
	ctx := context.Background()
	for _, c := range []struct {
		change Change
		want   string
	}{
		{Change{Plan: ptr("gold")}, `plan "gold" is not in the spec; one of free, pro, enterprise`},
		{Change{Set: map[Field]Override{JobsWeight: {Value: 0, Enforce: true}}}, "jobs.weight: must be from 1 to 1000, got 0"},
		{Change{Shadow: map[Field]bool{Burst: true}}, `tenant "acme": tenant "acme": burst has no override to put in or out of shadow mode; set one first`},
	} {
		if _, _, err := Apply(ctx, pool, cat, "acme", "test", c.change); err == nil || err.Error() != c.want {
			t.Errorf("err = %v, want %s", err, c.want)
		}
	}
}

func TestStoreResyncsWithoutNotification(t *testing.T) {
	_, pool := controlDB(t)
	cat := catalog(t)
	s := NewStore(pool, cat, Options{Resync: 200 * time.Millisecond, Log: quiet})
	runStore(t, s)
	waitFor(t, 5*time.Second, "first load", s.Loaded)
	// A write that bumps the version but sends no notification (a lost
	// one) is found by the version check.
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO cellgate_tenants (tenant, slot, plan, updated_by) VALUES ('quiet', 1, 'enterprise', 'sql');
		UPDATE cellgate_tenants_version SET version = version + 1`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "resync", func() bool { return s.Resolve("quiet", "").Plan == "enterprise" })
}

// TestStoreControlDatabaseDownAndBack cuts the store off its database: the
// last map stays in force, and a change made while it was away arrives
// within 2 s of the database's return.
func TestStoreControlDatabaseDownAndBack(t *testing.T) {
	dsn, pool := controlDB(t)
	cat := catalog(t)
	ctx := context.Background()
	if _, _, err := Apply(ctx, pool, cat, "acme", "test", Change{Plan: ptr("pro")}); err != nil {
		t.Fatal(err)
	}
	s := NewStore(pool, cat, Options{Retry: 100 * time.Millisecond, Log: quiet})
	runStore(t, s)
	waitFor(t, 5*time.Second, "first load", func() bool { return s.Resolve("acme", "").Plan == "pro" })

	// The writer keeps a connection of its own across the outage.
	admin, err := pgx.Connect(ctx, testpg.Server())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	writer, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(ctx)
	var db string
	if err := writer.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	down := func() {
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS false", pgx.Identifier{db}.Sanitize())); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'plans_store_test'", db); err != nil {
			t.Fatal(err)
		}
	}
	up := func() {
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS true", pgx.Identifier{db}.Sanitize())); err != nil {
			t.Fatal(err)
		}
	}
	down()
	// Down: the last map stays.
	time.Sleep(500 * time.Millisecond)
	if got := s.Resolve("acme", "").Plan; got != "pro" {
		t.Fatalf("while down: plan %s, want the last known pro", got)
	}
	if _, _, err := Apply(ctx, writer, cat, "acme", "incident", Change{Set: map[Field]Override{MaxConcurrentRequests: {Value: 1, Enforce: true}}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if got := s.Resolve("acme", "").Limits.MaxConcurrentRequests; got != 32 {
		t.Fatalf("while down: cap %d, want the last known 32", got)
	}
	up()
	d := waitFor(t, 2*time.Second, "change made while down", func() bool { return s.Resolve("acme", "").Limits.MaxConcurrentRequests == 1 })
	t.Logf("arrived %v after the database returned", d)
}

// TestSlotColumnMatchesSlotOf keeps the slot column what a slot move
// selects a range by.
func TestSlotColumnMatchesSlotOf(t *testing.T) {
	_, pool := controlDB(t)
	cat := catalog(t)
	ctx := context.Background()
	if _, _, err := Apply(ctx, pool, cat, "{acme}.eu", "test", Change{Plan: ptr("pro")}); err != nil {
		t.Fatal(err)
	}
	var slot int
	if err := pool.QueryRow(ctx, "SELECT slot FROM cellgate_tenants WHERE tenant = '{acme}.eu'").Scan(&slot); err != nil {
		t.Fatal(err)
	}
	// "{acme}.eu" hashes its tag only, like every slot of the module.
	if got, _ := slotOf("acme"); slot != got {
		t.Fatalf("slot %d, want %d", slot, got)
	}
}

func slotOf(key string) (int, error) { return slots.Slot(key) }

// TestStoreApplyAndPlanSource: Store.Apply writes like Apply and the store
// serves the change at once, without Run; PlanSource names the default,
// the table, then an observed claim.
func TestStoreApplyAndPlanSource(t *testing.T) {
	_, pool := controlDB(t)
	s := NewStore(pool, catalog(t), Options{Log: quiet})
	if got := s.Snapshot().PlanSource("acme"); got != SourceDefault {
		t.Fatalf("no row: source %s, want default", got)
	}
	before, after, err := s.Apply(context.Background(), "acme", "test", Change{Plan: ptr("pro")})
	if err != nil {
		t.Fatal(err)
	}
	if before.Plan != "" || after.Plan != "pro" || after.UpdatedBy != "test" {
		t.Fatalf("before %+v after %+v", before, after)
	}
	if e := s.Resolve("acme", ""); e.Plan != "pro" || s.Snapshot().PlanSource("acme") != SourceTable {
		t.Fatalf("right after Apply: plan %s from %s, want pro from the table", e.Plan, s.Snapshot().PlanSource("acme"))
	}
	if _, _, err := s.Apply(context.Background(), "acme", "test", Change{Plan: ptr("gold")}); err == nil {
		t.Fatal("Apply took an unknown plan")
	}
	s.ObserveClaim("acme", "enterprise")
	if got := s.Snapshot().PlanSource("acme"); got != SourceClaim {
		t.Fatalf("after a claim: source %s, want claim", got)
	}
}
