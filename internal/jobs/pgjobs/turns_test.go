package pgjobs

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/jobs"
)

// noCaps is roomOf for tenants without caps.
func noCaps(string) int { return -1 }

// picked counts the turns each tenant got in rounds of pick(n).
func picked(t *tenantTurns, rounds, n int, roomOf func(string) int) map[string]int {
	got := map[string]int{}
	for range rounds {
		for _, s := range t.pick(n, time.Time{}, roomOf) {
			got[s]++
		}
	}
	return got
}

// TestTurnsFollowWeights: while both have ready jobs, a tenant of weight
// 4 gets four turns for each turn of a tenant of weight 1, in claims of
// any size, and a claim lists each tenant once, in the order of its first
// turn.
func TestTurnsFollowWeights(t *testing.T) {
	for _, n := range []int{1, 3, 32} {
		var tt tenantTurns
		tt.activate("heavy", 4)
		tt.activate("light", 1)
		got := picked(&tt, 100, n, noCaps)
		if got["heavy"] != 4*got["light"] || got["heavy"]+got["light"] != 100*n {
			t.Errorf("claims of %d: %v, want 4:1 of %d", n, got, 100*n)
		}
	}
	var tt tenantTurns
	for _, s := range []string{"a", "b", "c"} {
		tt.activate(s, 1)
	}
	turns := tt.pick(7, time.Time{}, noCaps)
	if !slices.Equal(turns, []string{"a", "b", "c", "a", "b", "c", "a"}) {
		t.Errorf("pick(7) of three equal tenants = %v, want a b c in turn", turns)
	}
	if tenants, counts := tally(turns); !slices.Equal(tenants, []string{"a", "b", "c"}) || !slices.Equal(counts, []int32{3, 2, 2}) {
		t.Errorf("tally = %v %v, want [a b c] [3 2 2]", tenants, counts)
	}
}

// TestTurnsPassOverFullTenants: a tenant with no room under its cap gets
// no turn, one with room k at most k turns in a claim, and the others'
// turns go on as if it were not there; once it has room again it gets no
// burst for the turns it missed.
func TestTurnsPassOverFullTenants(t *testing.T) {
	var tt tenantTurns
	tt.activate("capped", 1)
	tt.activate("a", 1)
	tt.activate("b", 1)
	room := map[string]int{"capped": 0, "a": -1, "b": -1}
	roomOf := func(s string) int { return room[s] }
	got := picked(&tt, 10, 6, roomOf)
	if got["capped"] != 0 || got["a"] != 30 || got["b"] != 30 {
		t.Fatalf("with capped full: %v, want a and b 30 each", got)
	}
	room["capped"] = 2
	turns := tt.pick(6, time.Time{}, roomOf)
	if tenants, counts := tally(turns); slices.Index(tenants, "capped") < 0 || counts[slices.Index(tenants, "capped")] != 2 {
		t.Fatalf("with room 2: %v, want capped to get its 2", turns)
	}
	room["capped"] = -1
	got = picked(&tt, 10, 3, roomOf)
	if got["capped"] < 9 || got["capped"] > 11 {
		t.Errorf("after its cap: %v, want capped near a third of 30, no burst", got)
	}
}

// TestTurnsSettle: a tenant that had fewer ready jobs than it had room
// for and asked leaves the turns until it is found again, keeping its
// pass; one the database found less room for than this process counted
// rests for restFor; turns a claim took no job for go back.
func TestTurnsSettle(t *testing.T) {
	var tt tenantTurns
	at := time.Unix(1000, 0)
	tt.activate("a", 1)
	tt.activate("b", 1)
	tt.settle("a", 0, true, false, -1, at)
	if turns := tt.pick(4, at, noCaps); !slices.Equal(turns, []string{"b", "b", "b", "b"}) {
		t.Fatalf("after a ran dry: %v, want only b", turns)
	}
	tt.activate("a", 1)
	tt.settle("b", 0, false, true, -1, at)
	if turns := tt.pick(4, at, noCaps); !slices.Equal(turns, []string{"a", "a", "a", "a"}) {
		t.Fatalf("with b resting: %v, want only a", turns)
	}
	if turns := tt.pick(4, at.Add(restFor), noCaps); !slices.Contains(turns, "b") {
		t.Fatalf("after b's rest: %v, want b back", turns)
	}
	tt.settle("b", 0, false, false, -1, at)
	if _, ok := tt.resting["b"]; ok {
		t.Error("b still rests after a claim found it room for what it asked")
	}
	if end, ok := tt.restEnd(noCaps); ok {
		t.Errorf("no tenant rests, but restEnd = %v", end)
	}
	// x and y alternate; a claim takes none of y's 3 turns: they go back,
	// and y gets the next 3 turns before x gets another.
	var ty tenantTurns
	ty.activate("x", 1)
	ty.activate("y", 1)
	if turns := ty.pick(6, at, noCaps); !slices.Equal(turns, []string{"x", "y", "x", "y", "x", "y"}) {
		t.Fatalf("pick(6) of x and y = %v", turns)
	}
	ty.settle("y", 3, false, false, -1, at)
	ty.settled()
	if turns := ty.pick(3, at, noCaps); !slices.Equal(turns, []string{"y", "y", "y"}) {
		t.Errorf("after y's 3 turns went back, pick(3) = %v, want y's 3", turns)
	}
	tt.deactivate("b")
	tt.deactivate("a")
	tt.now += 10 * turnStride
	tt.forget()
	if len(tt.known) != 0 {
		t.Errorf("forget kept %d inactive tenants whose pass now passed", len(tt.known))
	}
}

// TestClaimTurnsSQL: the fair claim takes each named tenant's best ready
// jobs by priority, then id, within its room under its cap (none while
// another claim holds the tenant's lock) and the claim's limit, never a
// paused queue's, a job not due, or another tenant's; it reports the
// named tenants' rooms, the tenant of each ready job found, and the
// tenants of the due jobs it made ready.
func TestClaimTurnsSQL(t *testing.T) {
	// Without kinds' caps, and with one (of a kind at its cap, with no job
	// here).
	for _, capKinds := range [][]string{{}, {"other"}} {
		t.Run(fmt.Sprintf("kind-caps=%d", len(capKinds)), func(t *testing.T) { claimTurnsSQL(t, capKinds) })
	}
}

func claimTurnsSQL(t *testing.T, capKinds []string) {
	dsn := newMigratedDB(t)
	pool := newPool(t, dsn, "", 4)
	ctx := context.Background()
	now := time.Now()
	mustExec(t, pool, `INSERT INTO cellgate_jobs_tenant_limits (tenant, max_running, weight, updated_at)
VALUES ('capped', 2, 1, now()), ('full', 1, 1, now()), ('locked', 3, 1, now())`)
	mustExec(t, pool, `INSERT INTO cellgate_jobs_paused (queue, paused_at) VALUES ('stopped', now())`)
	insert := func(tenant, queue string, prio int16, runAt time.Time) int64 {
		t.Helper()
		var id int64
		if err := pool.QueryRow(ctx, sqlInsertPlaced, "k", queue, tenant, []byte(`{}`), int32(5), runAt, now, prio).Scan(&id, new(bool)); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a4 := insert("a", "default", 4, now)
	a1 := insert("a", "default", 1, now)
	aLast := insert("a", "default", 4, now)
	insert("a", "stopped", 1, now)
	insert("a", "default", 1, now.Add(time.Hour))
	c1 := insert("capped", "default", 3, now)
	insert("capped", "default", 2, now)
	c3 := insert("capped", "default", 1, now)
	running := insert("full", "default", 1, now)
	insert("full", "default", 1, now)
	b1, b2 := insert("b", "default", 1, now), insert("b", "default", 1, now)
	l1 := insert("locked", "default", 1, now)
	mustExec(t, pool, `UPDATE cellgate_jobs SET state = 'running', attempt = 1 WHERE id = $1`, running)
	mustExec(t, pool, `UPDATE cellgate_jobs SET state = 'running', attempt = 1 WHERE id = $1`, c1)
	// A job scheduled for later that has come due: it has no place yet.
	due := insert("later", "default", 1, now.Add(time.Hour))
	mustExec(t, pool, `UPDATE cellgate_jobs SET run_at = $2 WHERE id = $1`, due, now.Add(-time.Second))

	// claim claims at most limit jobs on turns; it returns the jobs
	// claimed and the turns' row: the named tenants' rooms, the tenants of
	// the ready jobs found, the tenants with jobs made ready.
	claim := func(limit int32, turns []string) (ids []int64, rooms []int32, found, readied []string) {
		t.Helper()
		rows, err := pool.Query(ctx, sqlClaimTurns, now, limit, turns,
			capKinds, make([]int32, len(capKinds)), "test", []int64{}, []int32{}, int32(64))
		if err != nil {
			t.Fatal(err)
		}
		turnsRows := 0
		for rows.Next() {
			var id *int64
			var r []int32
			var f, rd []string
			var skip any
			if err := rows.Scan(&id, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &r, &f, &rd); err != nil {
				t.Fatal(err)
			}
			if id != nil {
				ids = append(ids, *id)
			} else {
				rooms, found, readied = r, f, rd
				turnsRows++
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if turnsRows != 1 {
			t.Fatalf("%d rows without a job, want the one that settles the turns", turnsRows)
		}
		slices.Sort(ids)
		return ids, rooms, found, readied
	}

	// a: its priority-1 job, then the older of its priority-4 ones (not
	// the paused queue's, not the one due in an hour); capped: room 1
	// (c1 runs), its best by priority; full: no room; none: nothing.
	ids, rooms, found, readied := claim(8, []string{"a", "capped", "full", "none", "a", "capped", "capped"})
	want := []int64{a4, a1, c3}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("claimed %v, want %v", ids, want)
	}
	if want := []int32{-1, 1, 0, -1}; !slices.Equal(rooms, want) {
		t.Errorf("rooms %v, want %v", rooms, want)
	}
	if want := []string{"a", "a", "capped"}; !slices.Equal(found, want) {
		t.Errorf("found jobs of %v, want %v", found, want)
	}
	// The due job was made ready, and its tenant named for the turns.
	if !slices.Equal(readied, []string{"later"}) {
		t.Errorf("tenants with jobs made ready: %v, want [later]", readied)
	}

	// At most limit jobs, in the order of the tenants' first turns: b's
	// two; a's job was found, not claimed.
	ids, _, found, _ = claim(2, []string{"b", "a", "b", "a"})
	if want := []int64{b1, b2}; !slices.Equal(ids, want) {
		t.Errorf("claimed %v with a limit of 2, want b's %v (a's %d next)", ids, want, aLast)
	}
	if want := []string{"b", "b", "a"}; !slices.Equal(found, want) {
		t.Errorf("found jobs of %v with a limit of 2, want %v", found, want)
	}

	// A capped tenant whose lock another claim holds gets no room in this
	// one, however much room its cap leaves, and the others' jobs are
	// claimed as ever; once the lock is free its room is its cap less its
	// running jobs again. (1667723884 is the class of the tenants' claim
	// locks, whose second key is hashtext(tenant).)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(1667723884, hashtext('locked'))`); err != nil {
		t.Fatal(err)
	}
	ids, rooms, found, _ = claim(8, []string{"locked", "a"})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []int64{aLast}; !slices.Equal(ids, want) {
		t.Errorf("claimed %v while locked's lock was held, want a's %v", ids, want)
	}
	if want := []int32{0, -1}; !slices.Equal(rooms, want) {
		t.Errorf("rooms %v while locked's lock was held, want %v", rooms, want)
	}
	if want := []string{"a"}; !slices.Equal(found, want) {
		t.Errorf("found jobs of %v while locked's lock was held, want %v", found, want)
	}
	ids, rooms, _, _ = claim(8, []string{"locked"})
	if want := []int64{l1}; !slices.Equal(ids, want) {
		t.Errorf("claimed %v once locked's lock was free, want %v", ids, want)
	}
	if want := []int32{3}; !slices.Equal(rooms, want) {
		t.Errorf("rooms %v once locked's lock was free, want %v", rooms, want)
	}
}

// mustExec runs sql on pool, failing t on an error.
func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestRestsDouble: a tenant found without room claim after claim rests
// twice as long each time, up to restMax, and from the start again once
// a claim finds it room; restEnd is the end of the first rest of an
// active tenant with room in this process.
func TestRestsDouble(t *testing.T) {
	var tt tenantTurns
	at := time.Unix(1000, 0)
	tt.activate("a", 1)
	tt.activate("b", 1)
	var lengths []time.Duration
	for range 8 {
		tt.settle("a", 0, false, true, -1, at)
		lengths = append(lengths, tt.resting["a"].length)
	}
	want := []time.Duration{restFor, 2 * restFor, 4 * restFor, 8 * restFor, 16 * restFor, 32 * restFor, restMax, restMax}
	if !slices.Equal(lengths, want) {
		t.Fatalf("rests of a tenant full claim after claim: %v, want %v", lengths, want)
	}
	if end, ok := tt.restEnd(noCaps); !ok || !end.Equal(at.Add(restMax)) {
		t.Errorf("restEnd = %v, %v, want a's rest to end at %v", end, ok, at.Add(restMax))
	}
	tt.settle("b", 0, false, true, -1, at.Add(time.Millisecond))
	if end, _ := tt.restEnd(noCaps); !end.Equal(at.Add(time.Millisecond + restFor)) {
		t.Errorf("restEnd = %v, want b's, the first to end, %v", end, at.Add(time.Millisecond+restFor))
	}
	noRoomForB := func(s string) int {
		if s == "b" {
			return 0
		}
		return -1
	}
	if end, _ := tt.restEnd(noRoomForB); !end.Equal(at.Add(restMax)) {
		t.Errorf("restEnd = %v, want a's: b has no room here, its own jobs' ends wake the fetcher", end)
	}
	tt.settle("b", 0, true, true, -1, at)
	if end, _ := tt.restEnd(noCaps); !end.Equal(at.Add(restMax)) {
		t.Errorf("restEnd = %v, want a's: b left the turns", end)
	}
	tt.settle("a", 0, false, false, -1, at)
	tt.settle("a", 0, false, true, -1, at)
	if got := tt.resting["a"].length; got != restFor {
		t.Errorf("rest after a claim found room: %v, want restFor again", got)
	}

	// A rest ends early when the tenant's room here grows: one of its
	// jobs in this process ended.
	var tc tenantTurns
	tc.activate("c", 1)
	room := 0
	roomOfC := func(string) int { return room }
	tc.settle("c", 0, false, true, 0, at)
	room = 1
	if turns := tc.pick(1, at, roomOfC); !slices.Equal(turns, []string{"c"}) {
		t.Errorf("pick after one of c's jobs here ended = %v, want c: its rest is over", turns)
	}
	tc.settle("c", 0, false, true, 1, at)
	if turns := tc.pick(1, at, roomOfC); len(turns) != 0 {
		t.Errorf("pick while c rests with the room it had = %v, want none", turns)
	}
}

// TestFreedRoomWakesAfterOutcome: a completion that frees its tenant's
// room wakes the fetcher only once the completion is buffered, so the
// claim the wake-up starts writes it first and counts the room. Woken
// before, the claim would find the job still running and pass the tenant
// over.
func TestFreedRoomWakesAfterOutcome(t *testing.T) {
	b := &DB{
		fair:      true,
		limits:    staticLimits{"capped": {1, 1}},
		running:   map[jobs.JobID]heldJob{},
		runningOf: map[string]int{},
		wake:      make(chan struct{}, 1),
		flushKick: make(chan struct{}, 1),
		flushFull: make(chan struct{}, 1),
	}
	b.cfg.CompleteBatch = 100
	row := &jobs.JobRow{ID: 7, Attempt: 1, Kind: "plain", Tenant: "capped", Handle: b}
	b.holdLocked(row)
	b.cmu.Lock() // the buffer cannot take the completion yet
	done := make(chan error, 1)
	go func() { done <- b.complete(context.Background(), row) }()
	select {
	case <-b.wake:
		t.Fatal("the fetcher was woken before the completion was buffered")
	case <-time.After(100 * time.Millisecond):
	}
	b.cmu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.wake:
	default:
		t.Fatal("completing the job that held its tenant at its cap did not wake the fetcher")
	}
	if len(b.done) != 1 {
		t.Fatalf("buffered completions: %d, want 1", len(b.done))
	}
}

// TestRestingTenantClaimedWhenRoomFrees: a tenant whose room another
// process holds rests in this one; once the other process's job ends,
// this process claims the tenant's next job when the rest ends, with no
// news and a poll interval of a minute, and its claims while the tenant
// stays busy elsewhere grow rare as the rests double.
func TestRestingTenantClaimedWhenRoomFrees(t *testing.T) {
	pool := newSchema(t, newDB(t), 4)
	var ran atomic.Int32
	c, b, ids := newCappedClient(t, pool, 2, 2, func() { ran.Add(1) })
	// Another process runs the first job.
	mustExec(t, pool, `UPDATE cellgate_jobs SET state = 'running', attempt = 1, attempted_at = now(), heartbeat_at = now(), claimed_by = 'other/1' WHERE id = $1`, int64(ids[0].ID))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	claims := func() uint64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.claims
	}
	time.Sleep(300 * time.Millisecond) // the fetcher finds the tenant and rests it
	before := claims()
	time.Sleep(1500 * time.Millisecond)
	if n := claims() - before; n > 20 {
		t.Errorf("%d claims in 1.5 s for a tenant whose room another process holds, want rests doubling to %v", n, restMax)
	}
	if ran.Load() != 0 {
		t.Fatal("the second job ran while the first held the tenant's cap of 1")
	}
	mustExec(t, pool, `UPDATE cellgate_jobs SET state = 'completed', finished_at = now() WHERE id = $1`, int64(ids[0].ID))
	eventually(t, 5*time.Second, "the second job ran once the other process's job ended", func() bool { return ran.Load() == 1 })
}

// TestCappedTenantRunsBackToBack: with fair claims, a tenant at its cap
// gets its next job as soon as one of its jobs ends, not at the next poll:
// the job that frees its room wakes the fetcher.
func TestCappedTenantRunsBackToBack(t *testing.T) {
	pool := newSchema(t, newDB(t), 4)
	var ran atomic.Int32
	c, _, _ := newCappedClient(t, pool, 4, 5, func() {
		time.Sleep(20 * time.Millisecond)
		ran.Add(1)
	})
	start := time.Now()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for ran.Load() < 5 {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("%d of 5 jobs of a tenant capped at 1 ran in 20 s (poll interval: a minute)", ran.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newCappedClient is a client, not started, of a fair backend on pool
// with the given workers, a poll interval of a minute and one tenant,
// "capped", capped at 1, whose n ready jobs it enqueues: each runs run.
// It is stopped when the test ends.
func newCappedClient(t *testing.T, pool *pgxpool.Pool, workers, n int, run func()) (*jobs.Client, *DB, []jobs.EnqueueResult) {
	t.Helper()
	be, err := NewPool(pool, Config{Claim: ClaimFair, PollInterval: time.Minute},
		Options{Logger: quietLogger(), Limits: staticLimits{"capped": {1, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		run()
		return nil
	})
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: workers}, be, w, jobs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Stop(context.Background()) })
	ps := make([]jobs.InsertParams, n)
	for i := range ps {
		ps[i] = jobs.InsertParams{Kind: "plain", Queue: jobs.DefaultQueue, Tenant: "capped", EncodedArgs: []byte(`{"n":1}`), MaxAttempts: 1}
	}
	ids, err := be.Control().insertManyNow(context.Background(), ps)
	if err != nil {
		t.Fatal(err)
	}
	return c, be.Control(), ids
}

// TestNotifyNamesTenants: a NOTIFY names the tenants whose jobs were
// made ready, and a list too long for one is sent as none; a fetcher
// gives the named tenants turns without looking, and a NOTIFY naming
// none asks it to look.
func TestNotifyNamesTenants(t *testing.T) {
	got := notifyPayload([]string{"acme"})
	if got != `["acme"]` {
		t.Errorf("payload of acme = %q", got)
	}
	if got := notifyPayload(nil); got != "[]" {
		t.Errorf("payload of no tenant = %q, want an empty list (no look)", got)
	}
	var many []string
	for i := range 1000 {
		many = append(many, fmt.Sprintf("tenant-%04d", i))
	}
	if got := notifyPayload(many); got != "" {
		t.Errorf("payload of 1,000 tenants is %d bytes, want none", len(got))
	}

	b := &DB{fair: true}
	at := time.Now()
	b.turns.activate("noisy", 1)
	b.turns.found = at // looked just now: no look is due (b has no pool)
	b.heard(`["quiet"]`)
	b.heard(`["quiet"]`)
	if len(b.news.tenants) != 1 {
		t.Errorf("news holds %d entries for one tenant named twice", len(b.news.tenants))
	}
	b.heard(`[]`)
	if b.news.look {
		t.Error("a NOTIFY naming an empty list asked for a look")
	}
	b.heard(`not a list`)
	if err := b.findTenants(context.Background(), at); err != nil {
		t.Fatal(err)
	}
	if e := b.turns.known["quiet"]; e == nil || e.index < 0 {
		t.Error("a tenant named by a NOTIFY has no turns")
	}
	if !b.turns.asked {
		t.Error("a NOTIFY naming no tenant did not ask for a look")
	}
}

// TestNamedTenantServedAtOnce: a tenant whose job another process
// enqueued (and named in its NOTIFY) gets its turn within a claim or two
// while this process works through a noisy backlog, rather than at its
// next look for tenants (findEvery).
func TestNamedTenantServedAtOnce(t *testing.T) {
	pool := newSchema(t, newDB(t), 4)
	be, err := NewPool(pool, Config{Claim: ClaimFair}, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan time.Time, 8)
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		if j.Tenant == "quiet" {
			started <- time.Now()
			return nil
		}
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: 2}, be, w, jobs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Stop(context.Background()) }()
	ctx := context.Background()
	ps := make([]jobs.InsertParams, 20000)
	for i := range ps {
		ps[i] = jobs.InsertParams{Kind: "plain", Queue: jobs.DefaultQueue, Tenant: "noisy", EncodedArgs: []byte(`{"n":1}`), MaxAttempts: 1}
	}
	if _, err := be.Control().insertManyNow(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	var waits []time.Duration
	for range 5 {
		// As another process enqueues: the row, then its NOTIFY.
		now := time.Now()
		mustExec(t, pool, `SELECT job_id FROM cellgate_jobs_insert('plain', 'default', 'quiet', '{"n":1}', 1, NULL, $1, $1, 1::smallint)`, now)
		mustExec(t, pool, `SELECT pg_notify('cellgate_jobs', '["quiet"]')`)
		select {
		case s := <-started:
			waits = append(waits, s.Sub(now))
		case <-time.After(10 * time.Second):
			t.Fatal("the quiet tenant's job did not start in 10 s")
		}
		time.Sleep(time.Duration(37*len(waits)) * time.Millisecond) // land at different points of the looks' cycle
	}
	slices.Sort(waits)
	t.Logf("waits of a named tenant's job: %v", waits)
	if waits[2] > findEvery/4 {
		t.Errorf("a named tenant's job waited %v at the median (waits %v): about a look's interval (%v), not a claim or two",
			waits[2], waits, findEvery)
	}
}

// TestSettleClaim: a fair claim's answer settles the turns: a tenant
// with no ready job for a turn leaves them, paying one turn for it; the
// turns whose job was found but not claimed (past the claim's limit) go
// back; the tenants with jobs made ready join.
func TestSettleClaim(t *testing.T) {
	b := &DB{fair: true, clock: jobs.SystemClock{}}
	for _, s := range []string{"x", "y", "z"} {
		b.turns.activate(s, 1)
	}
	turns := b.turns.pick(6, time.Time{}, noCaps) // x y z x y z
	// Jobs found: x's two, y's one, z's two; a limit of 4 left z's
	// second out.
	claimed := []*jobs.JobRow{{Tenant: "x"}, {Tenant: "y"}, {Tenant: "z"}, {Tenant: "x"}}
	b.settleClaim(turns, []int32{-1, -1, -1}, []string{"x", "y", "z", "x", "z"}, []string{"w"}, claimed)
	if e := b.turns.known["y"]; e.index >= 0 {
		t.Error("y had 1 ready job for 2 turns and still has turns")
	}
	if e := b.turns.known["w"]; e == nil || e.index < 0 {
		t.Error("w, with jobs made ready, has no turns")
	}
	// z's turn 6 went back: z's turn comes before x's next one, at the
	// time w joins.
	next := b.turns.pick(2, time.Time{}, noCaps)
	slices.Sort(next)
	if !slices.Equal(next, []string{"w", "z"}) {
		t.Errorf("next two turns: %v, want w's and z's given back", next)
	}
}
