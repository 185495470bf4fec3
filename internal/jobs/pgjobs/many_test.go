package pgjobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
)

// TestEnqueueManyFair: a noisy tenant's batch of 300 takes its tenant's
// places in the fair order, so the quiet tenants enqueued after it start
// within the first round; with FIFO claims they wait behind it.
func TestEnqueueManyFair(t *testing.T) {
	dsn := newDB(t)
	for _, mode := range []ClaimMode{ClaimFair, ClaimFIFO} {
		t.Run(string(mode), func(t *testing.T) {
			pool := newSchema(t, dsn, 3)
			var mu sync.Mutex
			var order []string
			w := jobs.NewWorkers()
			jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
				mu.Lock()
				order = append(order, j.Tenant)
				mu.Unlock()
				return nil
			})
			c, _ := newClient(t, pool, Config{Claim: mode, PollInterval: 20 * time.Millisecond}, 1, w)
			ctx := context.Background()
			noisy := make([]jobs.Args, 300)
			for i := range noisy {
				noisy[i] = plainArgs{N: i}
			}
			if _, err := c.EnqueueMany(tenant.With(ctx, "noisy"), noisy); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"quiet-a", "quiet-b"} {
				if _, err := c.EnqueueMany(tenant.With(ctx, q), []jobs.Args{plainArgs{}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "the quiet tenants' jobs", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(order, "quiet-a") && slices.Contains(order, "quiet-b")
			})
			mu.Lock()
			last := max(slices.Index(order, "quiet-a"), slices.Index(order, "quiet-b"))
			mu.Unlock()
			if mode == ClaimFair && last > 4 {
				t.Errorf("fair: the quiet jobs started by position %d, want within the first 5", last)
			}
			if mode == ClaimFIFO && last < 300 {
				t.Errorf("fifo: a quiet job started at position %d, before the noisy batch", last)
			}
		})
	}
}

// TestEnqueueManyAllOrNone: a batch whose last job the database rejects
// inserts none of them, unique or not.
func TestEnqueueManyAllOrNone(t *testing.T) {
	pool := newMigratedPool(t, 4)
	_, b := newClient(t, pool, Config{}, 1, nil)
	ctx := context.Background()
	ps := []jobs.InsertParams{
		{Kind: "plain", Queue: "default", EncodedArgs: []byte(`{}`), MaxAttempts: 3},
		{Kind: "once", Queue: "default", EncodedArgs: []byte(`{}`), MaxAttempts: 3, UniqueKey: "k"},
		{Kind: "plain", Queue: "default", EncodedArgs: []byte(`{}`), MaxAttempts: 0}, // violates max_attempts >= 1
	}
	if _, err := b.insertMany(ctx, ps); err == nil {
		t.Fatal("InsertMany with an invalid job succeeded")
	}
	if n := count(t, pool, `SELECT count(*) FROM cellgate_jobs`); n != 0 {
		t.Fatalf("%d jobs after a failed batch, want 0", n)
	}
	rs, err := b.insertMany(ctx, ps[:2])
	if err != nil || len(rs) != 2 || rs[0].Duplicate || rs[1].Duplicate || rs[0].ID >= rs[1].ID {
		t.Fatalf("InsertMany = %v, %v; want two new jobs in order", rs, err)
	}
}

// TestEnqueueManyTx: the batch is part of the caller's transaction, and a
// unique job in it sees the jobs written before it in that transaction.
func TestEnqueueManyTx(t *testing.T) {
	pool := newMigratedPool(t, 4)
	c, _ := newClient(t, pool, Config{}, 1, nil)
	ctx := tenant.With(context.Background(), "acme")
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stx := shards.WrapTx(tx, nil)
		if _, err := c.EnqueueTx(ctx, stx, onceArgs{Key: "k"}); err != nil {
			t.Fatal(err)
		}
		rs, err := c.EnqueueManyTx(ctx, stx, []jobs.Args{plainArgs{N: 1}, onceArgs{Key: "k"}, plainArgs{N: 2}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 3 || rs[0].Duplicate || !rs[1].Duplicate || rs[2].Duplicate {
			t.Fatalf("EnqueueManyTx = %+v, want new, duplicate, new", rs)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM cellgate_jobs`); n != 3 {
		t.Fatalf("%d jobs after one committed and one rolled-back batch, want 3", n)
	}
}

// BenchmarkEnqueueMany compares enqueueing 100 jobs with 100 Enqueue calls
// (one after the other, so each is its own coalesced insert and commit)
// against one EnqueueMany call, on one backend without workers, in the same
// run: compare the two sub-benchmarks' ns/job. Run with -benchmem.
func BenchmarkEnqueueMany(b *testing.B) {
	const n = 100
	pool := newMigratedPool(b, 4)
	c, _ := newClient(b, pool, Config{}, 1, nil)
	ctx := tenant.With(context.Background(), "acme")
	args := make([]jobs.Args, n)
	for i := range args {
		args[i] = plainArgs{N: i}
	}
	b.Run("single", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, a := range args {
				if _, err := c.Enqueue(ctx, a); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
	})
	b.Run("many", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.EnqueueMany(ctx, args); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
	})
}

// TestRuntimeEnqueueMany: the Runtime's EnqueueManyTx writes to the jobs
// table of the transaction's shard (and says when it does not exist yet),
// its EnqueueMany to the control database's.
func TestRuntimeEnqueueMany(t *testing.T) {
	c := newCell(t, 2, 4)
	r, err := newRuntime(context.Background(), c.set, Config{ShardLocal: true, PollInterval: 50 * time.Millisecond},
		jobs.Config{Workers: 1}, nil, jobs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.Stop(context.Background()) })
	ctx := tenant.With(context.Background(), "acme")
	batch := []jobs.Args{welcomeArgs{Email: "a@x"}, welcomeArgs{Email: "b@x"}, welcomeArgs{Email: "c@x"}}
	sh := c.set.Shards()[1]
	err = sh.Tx(ctx, func(tx shards.Tx) error {
		_, err := r.EnqueueManyTx(ctx, tx, batch)
		return err
	})
	if !errors.Is(err, ErrShardJobsNotReady) {
		t.Fatalf("EnqueueManyTx before the shard is migrated: %v, want ErrShardJobsNotReady", err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r)
	err = sh.Tx(ctx, func(tx shards.Tx) error {
		rs, err := r.EnqueueManyTx(ctx, tx, batch)
		if err == nil && len(rs) != len(batch) {
			err = fmt.Errorf("%d results for %d jobs", len(rs), len(batch))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.EnqueueMany(ctx, batch[:2]); err != nil {
		t.Fatal(err)
	}
	if n := count(t, sh.Pool, `SELECT count(*) FROM cellgate_jobs WHERE tenant = 'acme'`); n != 3 {
		t.Errorf("%s holds %d jobs, want the batch's 3", sh.Name, n)
	}
	if n := count(t, c.set.Shards()[0].Pool, `SELECT count(*) FROM cellgate_jobs`); n != 0 {
		t.Errorf("the other shard holds %d jobs, want 0", n)
	}
	if n := count(t, c.set.Control(), `SELECT count(*) FROM cellgate_jobs`); n != 2 {
		t.Errorf("control holds %d jobs, want EnqueueMany's 2", n)
	}
}
