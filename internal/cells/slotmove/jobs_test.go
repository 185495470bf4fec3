package slotmove

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/slots"
)

// invoicesSQL is a user's table the example does not have: a child of
// accounts with an identity id.
const invoicesSQL = `CREATE TABLE invoices (
    tenant_id  text   NOT NULL,
    id         bigint GENERATED ALWAYS AS IDENTITY,
    slot       integer NOT NULL,
    account_id bigint NOT NULL,
    total      numeric(12,2) NOT NULL,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, account_id) REFERENCES accounts (tenant_id, id) ON DELETE CASCADE
)`

// TestMoveUserTableAndJobs moves a slot range whose tenants have rows in a
// table the example did not have and waiting, scheduled and running jobs
// in the shard-local jobs tables: the rows and the waiting and scheduled
// jobs move, verified; the running job and the other tenants' jobs stay;
// a job the target already holds by uniqueness key is not doubled; a
// re-run after the move changes nothing.
func TestMoveUserTableAndJobs(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for name, c := range w.conns {
		for _, q := range []string{invoicesSQL,
			// What a user's table needs for the move's row filter.
			`CREATE UNIQUE INDEX invoices_replica_identity ON invoices (tenant_id, id, slot)`,
			`ALTER TABLE invoices REPLICA IDENTITY USING INDEX invoices_replica_identity`,
		} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		for _, sh := range append(append([]Shard(nil), w.src...), w.dst...) {
			if sh.Name == name {
				if err := pgjobs.Migrate(ctx, sh.DSN); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	in := tenantsIn(moveRange, 4)
	out := tenantsIn(slots.Range{Lo: 0, Hi: 8000}, 2)
	w.seed(t, in, 2)
	w.seed(t, out, 1)
	shardOf := func(tenant string) string {
		if s, _ := slots.Slot(tenant); s >= 8192 {
			return "c1s1"
		}
		return "c1s0"
	}
	job := func(conn, tenant, state, runAt string, key any) {
		t.Helper()
		_, err := w.conns[conn].Exec(ctx, `INSERT INTO cellgate_jobs (kind, queue, tenant, args, state, attempt, max_attempts, run_at, unique_key, errors, created_at,
				priority, trace_context)
			VALUES ('send_invoice', 'default', $1, $2, $3, 1, 5, now() + $4::interval, $5, '[{"attempt":1,"error":"smtp down"}]', now(),
				3, jsonb_build_object('traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'tenant', $1::text))`,
			tenant, fmt.Sprintf(`{"tenant":%q}`, tenant), state, runAt, key)
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tn := range append(in, out...) {
		c := shardOf(tn)
		if _, err := w.conns[c].Exec(ctx, `INSERT INTO invoices (tenant_id, slot, account_id, total) SELECT tenant_id, slot, id, 12.5 FROM accounts WHERE tenant_id = $1`, tn); err != nil {
			t.Fatal(err)
		}
		job(c, tn, "available", "0s", nil)     // waiting
		job(c, tn, "available", "1 hour", nil) // scheduled
	}
	job(shardOf(in[0]), in[0], "running", "0s", nil)
	job(shardOf(in[1]), in[1], "available", "0s", "inv-7")
	job("c2s0", in[1], "available", "0s", "inv-7") // enqueued on the target already

	cfg := w.config(t, moveRange)
	cfg.Tables = []string{"accounts", "orders", "invoices"}
	rep, err := Move(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Copied["invoices"] != 8 || rep.Verified["invoices"] != 8 || rep.Deleted["invoices"] != 8 {
		t.Errorf("invoices: report %+v", rep)
	}
	if rep.JobsMoved != 8 || rep.JobsDuplicate != 1 || rep.JobsLeftRunning != 1 || rep.Verified["cellgate_jobs"] != 8 {
		t.Errorf("jobs: moved %d, duplicate %d, left running %d, verified %d; want 8, 1, 1, 8",
			rep.JobsMoved, rep.JobsDuplicate, rep.JobsLeftRunning, rep.Verified["cellgate_jobs"])
	}
	dst := w.conns["c2s0"]
	if n := count(t, dst, "invoices", moveRange); n != 8 {
		t.Errorf("target has %d invoices of the range, want 8", n)
	}
	var waiting, scheduled, keyed int
	var sameContent bool
	if err := dst.QueryRow(ctx, `SELECT count(*) FILTER (WHERE run_at <= now()), count(*) FILTER (WHERE run_at > now()), count(*) FILTER (WHERE unique_key = 'inv-7'),
		bool_and(attempt = 1 AND max_attempts = 5 AND errors = '[{"attempt":1,"error":"smtp down"}]' AND args->>'tenant' = tenant AND vtime IS NULL
			AND priority = 3 AND trace_context->>'tenant' = tenant
			AND trace_context->>'traceparent' = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
			OR unique_key IS NOT NULL)
		FROM cellgate_jobs WHERE state = 'available'`).Scan(&waiting, &scheduled, &keyed, &sameContent); err != nil {
		t.Fatal(err)
	}
	if waiting != 5 || scheduled != 4 || keyed != 1 || !sameContent {
		t.Errorf("target jobs: %d waiting (want 4 moved + 1 keyed), %d scheduled (want 4), %d with the key (want 1), content kept %v", waiting, scheduled, keyed, sameContent)
	}
	for _, sh := range []string{"c1s0", "c1s1"} {
		var left, running, others int
		if err := w.conns[sh].QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant = ANY($1) AND state = 'available'), count(*) FILTER (WHERE tenant = ANY($1) AND state = 'running'),
			count(*) FILTER (WHERE tenant = ANY($2)) FROM cellgate_jobs`, in, out).Scan(&left, &running, &others); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Errorf("%s keeps %d waiting jobs of moved tenants", sh, left)
		}
		wantRunning, wantOthers := 0, 0
		if sh == shardOf(in[0]) {
			wantRunning = 1
		}
		for _, tn := range out {
			if shardOf(tn) == sh {
				wantOthers += 2
			}
		}
		if running != wantRunning || others != wantOthers {
			t.Errorf("%s: %d running jobs of moved tenants (want %d), %d jobs of other tenants (want %d)", sh, running, wantRunning, others, wantOthers)
		}
	}
	again, err := Move(ctx, cfg)
	if err != nil || again.JobsMoved != 0 || again.Resumed != "done" {
		t.Errorf("re-run: %+v, %v", again, err)
	}
}

// TestMoveJobsResumesWithoutDoubling: jobs already copied to the target by
// a run that crashed before deleting them at the source are recognised by
// their marker and not copied again.
func TestMoveJobsResumesWithoutDoubling(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for _, sh := range append(append([]Shard(nil), w.src...), w.dst...) {
		if err := pgjobs.Migrate(ctx, sh.DSN); err != nil {
			t.Fatal(err)
		}
	}
	tn := tenantsIn(slots.Range{Lo: 8192, Hi: 8300}, 1)[0]
	w.seed(t, []string{tn}, 1)
	src := w.conns["c1s1"]
	var id int64
	if err := src.QueryRow(ctx, `INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at)
		VALUES ('k', 'default', $1, '{}', 3, now(), now()) RETURNING id`, tn).Scan(&id); err != nil {
		t.Fatal(err)
	}
	// The earlier run's copy, marked with its source row.
	var kind, queue, args string
	var runAt, createdAt any
	if err := src.QueryRow(ctx, `SELECT kind, queue, args::text, run_at, created_at FROM cellgate_jobs WHERE id = $1`, id).Scan(&kind, &queue, &args, &runAt, &createdAt); err != nil {
		t.Fatal(err)
	}
	if _, err := w.conns["c2s0"].Exec(ctx, `INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at, claimed_by)
		VALUES ($1, $2, $3, $4, 3, $5, $6, $7)`, kind, queue, tn, args, runAt, createdAt, fmt.Sprintf("slotmove c1s1 %d", id)); err != nil {
		t.Fatal(err)
	}
	rep, err := Move(ctx, w.config(t, moveRange))
	if err != nil {
		t.Fatal(err)
	}
	var onTarget, onSource int
	_ = w.conns["c2s0"].QueryRow(ctx, `SELECT count(*) FROM cellgate_jobs WHERE tenant = $1`, tn).Scan(&onTarget)
	_ = src.QueryRow(ctx, `SELECT count(*) FROM cellgate_jobs WHERE tenant = $1`, tn).Scan(&onSource)
	if onTarget != 1 || onSource != 0 || rep.JobsMoved != 0 || rep.Verified["cellgate_jobs"] != 1 {
		t.Errorf("target %d, source %d jobs; report moved %d verified %d; want 1, 0, 0, 1", onTarget, onSource, rep.JobsMoved, rep.Verified["cellgate_jobs"])
	}
}

// TestMoveControlJobs: with the two cells' control databases given, the
// moved tenants' waiting and scheduled plain-enqueued jobs move from the
// source's control database to the target's; their running job and the
// other tenants' jobs stay.
func TestMoveControlJobs(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	srcCtl, dstCtl, src, dst := controlPair(t, pgjobs.Migrate)
	in := tenantsIn(moveRange, 3)
	out := tenantsIn(slots.Range{Lo: 0, Hi: 8000}, 2)
	w.seed(t, in, 1)
	w.seed(t, out, 1)
	job := func(tenant, state, runAt string) {
		t.Helper()
		if _, err := src.Exec(ctx, `INSERT INTO cellgate_jobs (kind, queue, tenant, args, state, max_attempts, run_at, created_at)
			VALUES ('send_welcome', 'default', $1, '{}', $2, 5, now() + $3::interval, now())`, tenant, state, runAt); err != nil {
			t.Fatal(err)
		}
	}
	for _, tn := range append(in, out...) {
		job(tn, "available", "0s")
		job(tn, "available", "1 hour")
	}
	job(in[0], "running", "0s")
	cfg := w.config(t, moveRange)
	cfg.SourceControl, cfg.TargetControl = srcCtl, dstCtl
	rep, err := Move(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.JobsMoved != 6 || rep.JobsLeftRunning != 1 {
		t.Errorf("report: moved %d, left running %d; want 6, 1", rep.JobsMoved, rep.JobsLeftRunning)
	}
	var moved, others int
	if err := dst.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant = ANY($1) AND state = 'available'), count(*) FILTER (WHERE NOT tenant = ANY($1)) FROM cellgate_jobs`, in).Scan(&moved, &others); err != nil {
		t.Fatal(err)
	}
	if moved != 6 || others != 0 {
		t.Errorf("target control database: %d waiting jobs of moved tenants (want 6), %d others (want 0)", moved, others)
	}
	var left, running, stay int
	if err := src.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant = ANY($1) AND state = 'available'), count(*) FILTER (WHERE tenant = ANY($1) AND state = 'running'), count(*) FILTER (WHERE tenant = ANY($2)) FROM cellgate_jobs`, in, out).Scan(&left, &running, &stay); err != nil {
		t.Fatal(err)
	}
	if left != 0 || running != 1 || stay != 4 {
		t.Errorf("source control database: %d waiting jobs of moved tenants (want 0), %d running (want 1), %d of other tenants (want 4)", left, running, stay)
	}
}

// controlPair is two cells' control databases (cell-1's the source),
// each migrated by migrate, and a connection to each, closed at the end
// of the test.
func controlPair(t *testing.T, migrate func(ctx context.Context, dsn string) error) (srcCtl, dstCtl Shard, src, dst *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	srcCtl = Shard{Name: "cell-1/control", DSN: cluster.CreateDB(t, "c1ctl")}
	dstCtl = Shard{Name: "cell-2/control", DSN: cluster.CreateDB(t, "c2ctl")}
	conns := make([]*pgx.Conn, 2)
	for i, sh := range []Shard{srcCtl, dstCtl} {
		if err := migrate(ctx, sh.DSN); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, sh.DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		conns[i] = c
	}
	return srcCtl, dstCtl, conns[0], conns[1]
}
