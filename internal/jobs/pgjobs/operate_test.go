package pgjobs

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/tenant"
)

// TestOperatorCalls: detail, keyset pages, depths and the retry, cancel
// and delete actions on one database, each refusing what it must.
func TestOperatorCalls(t *testing.T) {
	c := newCell(t, 1, 3)
	r, err := newRuntime(context.Background(), c.set, Config{}, jobs.Config{Workers: 1}, nil, jobs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.Stop(context.Background()) })
	b := r.Control()
	if _, err := b.Job(context.Background(), 1); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Job before the table is ready = %v, want ErrNotReady", err)
	}
	if err := r.migrate(context.Background(), c.dsns["control"]); err != nil {
		t.Fatal(err)
	}
	b.markReady()
	ctx := tenant.With(context.Background(), "acme")
	var ids []jobs.JobID
	for range 3 {
		res, err := r.Enqueue(ctx, welcomeArgs{Email: "a@x"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	if dbs := r.Databases(); len(dbs) != 1 || dbs[0] != b {
		t.Fatalf("Databases() = %v, want the control backend", dbs)
	}

	page1, err := b.List(ctx, ListFilter{Limit: 2})
	if err != nil || len(page1) != 2 || page1[0].ID != ids[2] || page1[1].ID != ids[1] {
		t.Fatalf("first page = %+v, %v; want jobs %d, %d", page1, err, ids[2], ids[1])
	}
	page2, err := b.List(ctx, ListFilter{Limit: 2, Before: page1[1].ID})
	if err != nil || len(page2) != 1 || page2[0].ID != ids[0] {
		t.Fatalf("second page = %+v, %v; want job %d", page2, err, ids[0])
	}

	// created_at range: from is inclusive, to exclusive, zero is no bound.
	if _, err := b.pool.Exec(ctx, `UPDATE cellgate_jobs SET created_at = '2026-01-01T00:00:00Z'::timestamptz + (id - $1) * interval '1 hour' WHERE id = ANY($2)`,
		int64(ids[0]), []int64{int64(ids[0]), int64(ids[1]), int64(ids[2])}); err != nil {
		t.Fatal(err)
	}
	h := func(n int) time.Time { return time.Date(2026, 1, 1, n, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		from, to time.Time
		want     []jobs.JobID
	}{
		{h(1), time.Time{}, []jobs.JobID{ids[2], ids[1]}},
		{time.Time{}, h(1), []jobs.JobID{ids[0]}},
		{h(1), h(2), []jobs.JobID{ids[1]}},
		{h(3), time.Time{}, nil},
	} {
		got, err := b.List(ctx, ListFilter{CreatedFrom: tc.from, CreatedTo: tc.to})
		var gotIDs []jobs.JobID
		for _, j := range got {
			gotIDs = append(gotIDs, j.ID)
		}
		if err != nil || !slices.Equal(gotIDs, tc.want) {
			t.Errorf("List(created %v..%v) = %v, %v; want %v", tc.from, tc.to, gotIDs, err, tc.want)
		}
	}

	if err := b.CancelJob(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	j, err := b.Job(ctx, ids[0])
	if err != nil || j.State != StateFailed || len(j.Errors) != 1 || j.Errors[0].Error != "cancelled by an operator" || j.Tenant != "acme" {
		t.Fatalf("cancelled job = %+v, %v", j, err)
	}
	if err := b.CancelJob(ctx, ids[0]); !errors.Is(err, ErrJobState) {
		t.Errorf("cancel of a failed job = %v, want ErrJobState", err)
	}
	if err := b.RetryJob(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if j, _ := b.Job(ctx, ids[0]); j.State != StateAvailable || j.FinishedAt != nil || len(j.Errors) != 1 {
		t.Errorf("retried job = %+v, want available, unfinished, its error kept", j)
	}

	// A running job belongs to its worker: no action touches it.
	if _, err := b.pool.Exec(ctx, `UPDATE cellgate_jobs SET state = 'running', attempt = 1 WHERE id = $1`, int64(ids[1])); err != nil {
		t.Fatal(err)
	}
	for name, act := range map[string]func(context.Context, jobs.JobID) error{"retry": b.RetryJob, "cancel": b.CancelJob, "delete": b.DeleteJob} {
		if err := act(ctx, ids[1]); !errors.Is(err, ErrJobState) {
			t.Errorf("%s of a running job = %v, want ErrJobState", name, err)
		}
	}

	ds, err := b.Depths(ctx)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Depths = %+v, %v", ds, err)
	}
	if d := ds[0]; d.Queue != "default" || d.Available != 2 || d.Ready != 2 || d.Running != 1 || d.Failed != 0 || d.OldestReadyAge < 0 {
		t.Errorf("depth = %+v, want 2 available (both ready), 1 running", d)
	}

	if err := b.DeleteJob(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Job(ctx, ids[2]); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("Job after delete = %v, want ErrJobNotFound", err)
	}
	if err := b.DeleteJob(ctx, ids[2]); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("second delete = %v, want ErrJobNotFound", err)
	}
}

// TestOperateBatch: a batch retry that collides on a uniqueness key still
// brings back every job it can.
func TestOperateBatch(t *testing.T) {
	c := newCell(t, 1, 3)
	if err := Migrate(context.Background(), c.dsns["control"]); err != nil {
		t.Fatal(err)
	}
	b, err := NewDB(c.set.Control(), Config{}, Options{Name: "control"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []jobs.JobID
	for _, uk := range []string{"k", "k", "other"} {
		var id int64
		err := b.pool.QueryRow(ctx, `INSERT INTO cellgate_jobs (kind, queue, args, state, attempt, max_attempts, run_at, created_at, unique_key, finished_at)
			VALUES ('send_welcome', 'default', '{}', 'failed', 1, 1, now(), now(), $1, now()) RETURNING id`, uk).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, jobs.JobID(id))
	}
	n, err := b.Operate(ctx, ActRetry, ids)
	if err != nil || n != 2 {
		t.Fatalf("Operate(retry, 3 jobs, 2 sharing a key) = %d, %v; want 2", n, err)
	}
	if n, err := b.Operate(ctx, ActDelete, ids); err != nil || n != 3 {
		t.Fatalf("Operate(delete) = %d, %v; want 3", n, err)
	}
}
