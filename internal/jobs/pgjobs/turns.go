package pgjobs

import (
	"container/heap"
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fair order between tenants (docs/jobs-postgres.md, "Claims"):
// each fetcher gives the tenants with ready jobs turns by stride
// scheduling on their weights, and a claim asks PostgreSQL for each
// picked tenant's best ready jobs, by priority and then id, within the
// tenant's room under its cap. The order between tenants costs the
// database nothing; the order within a tenant is one index descent per
// picked tenant, and a cap one count per picked capped tenant.

// turnStride is the pass a weight-1 tenant's turn advances it by; a
// tenant of weight w advances by turnStride/w (720720 is divisible by
// every weight up to 16, and close enough for the others up to
// jobs.MaxWeight).
const turnStride = 720720

// Discovery: a tenant gets turns once a fetcher knows it has ready jobs.
// A NOTIFY names the tenants of the jobs an enqueue made ready, in every
// process, and a claim names those of the due jobs it made ready; besides
// those, a fetcher looks for tenants with ready jobs (one index descent
// per tenant) whenever its turns hold none, when a NOTIFY carries no
// list (an older release's, a resumed queue's, or one with too many to
// name), and every findEvery, for what a lost notification missed.
const (
	// findEvery is the interval between two looks when nothing asks for
	// one sooner.
	findEvery = 200 * time.Millisecond
	// findMin is the shortest interval between two looks asked for by
	// notifications.
	findMin = 20 * time.Millisecond
	// findShare bounds the share of the fetcher's time spent looking: a
	// look that took d waits at least findShare·d for the next, so with
	// many tenants (one index descent each) looks grow rarer instead of
	// crowding out claims.
	findShare = 20
	// minTurns is the fewest turns a fair claim names (see claimBatch).
	minTurns = 16
	// restFor is how long a tenant whose whole room other processes hold
	// (the database counted less room than this process) is first passed
	// over. Each claim that finds it so again doubles the rest, up to
	// restMax: the processes holding its room claim its next jobs as
	// theirs end, and an idle fetcher that wakes when a rest ends (see
	// fetchLoop) must not poll the database every restFor for a tenant
	// that stays busy elsewhere.
	restFor = 10 * time.Millisecond
	restMax = 640 * time.Millisecond
)

// rest is how long a tenant is passed over: until, after a rest of
// length, or until its room as this process counts it grows past room,
// what it was when the rest began: one of its jobs here ended, and the
// database has that room too.
type rest struct {
	until  time.Time
	length time.Duration
	room   int
}

// passes reports whether the rest still holds at at, for a tenant with
// room as this process counts it.
func (r rest) passes(at time.Time, room int) bool {
	return at.Before(r.until) && room <= r.room
}

// turn is one tenant's place in the turns.
type turn struct {
	tenant string
	// pass is the virtual time of the tenant's next turn.
	pass int64
	step int64
	// index is the turn's position in the heap, -1 while the tenant has
	// no ready job as far as this fetcher knows.
	index int
}

// turnHeap orders the active turns by pass, ties by tenant.
type turnHeap []*turn

func (h turnHeap) Len() int { return len(h) }
func (h turnHeap) Less(i, j int) bool {
	if h[i].pass != h[j].pass {
		return h[i].pass < h[j].pass
	}
	return h[i].tenant < h[j].tenant
}
func (h turnHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *turnHeap) Push(x any) {
	t := x.(*turn)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *turnHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// tenantTurns is one fetcher's fair order between tenants. Only the
// fetch loop uses it.
type tenantTurns struct {
	// now is the virtual time: the pass of the last turn given. A tenant
	// that becomes active starts no earlier, so time spent idle (or at
	// its cap) is not credit for a burst later.
	now    int64
	active turnHeap
	// known holds the active tenants and the inactive ones whose pass is
	// still ahead of now (anything else starts at now anyway).
	known map[string]*turn
	// resting are tenants the database last counted less room for than
	// this process did.
	resting map[string]rest
	// found is when the fetcher last looked for tenants and took how
	// long; asked is whether a notification asked for a look since.
	found time.Time
	took  time.Duration
	asked bool
	// ranDry is whether the last claim took tenants out of the turns: if
	// it claimed nothing, the next claim names others.
	ranDry bool
}

// activate gives tenant turns from now on, at weight.
func (t *tenantTurns) activate(tenant string, weight int32) {
	if t.known == nil {
		t.known = make(map[string]*turn)
		t.resting = make(map[string]rest)
	}
	e := t.known[tenant]
	if e == nil {
		e = &turn{tenant: tenant, index: -1}
		t.known[tenant] = e
	}
	e.step = turnStride / int64(max(weight, 1))
	if e.index < 0 {
		e.pass = max(e.pass, t.now)
		heap.Push(&t.active, e)
	}
}

// deactivate takes tenant out of the turns until it has ready jobs again.
func (t *tenantTurns) deactivate(tenant string) {
	if e := t.known[tenant]; e != nil && e.index >= 0 {
		heap.Remove(&t.active, e.index)
	}
}

// pick gives out up to n turns, in order: the tenant of each. roomOf is
// a tenant's room under its cap as this process counts it (its own
// running jobs), negative for no cap: a tenant without room, or resting,
// is passed over and its pass moved up to now.
func (t *tenantTurns) pick(n int, at time.Time, roomOf func(string) int) []string {
	var turns []string
	var aside []*turn
	given := map[string]int{}
	for n > 0 && t.active.Len() > 0 {
		e := t.active[0]
		room := roomOf(e.tenant)
		if room >= 0 {
			room -= given[e.tenant]
		}
		if room == 0 || t.resting[e.tenant].passes(at, room) {
			aside = append(aside, heap.Pop(&t.active).(*turn))
			continue
		}
		t.now = e.pass
		turns = append(turns, e.tenant)
		given[e.tenant]++
		e.pass += e.step
		heap.Fix(&t.active, 0)
		n--
	}
	for _, e := range aside {
		e.pass = max(e.pass, t.now)
		heap.Push(&t.active, e)
	}
	return turns
}

// tally is turns as the tenants in the order of their first turn, and
// how many turns each got.
func tally(turns []string) (tenants []string, counts []int32) {
	at := make(map[string]int, len(turns))
	for _, s := range turns {
		if i, ok := at[s]; ok {
			counts[i]++
			continue
		}
		at[s] = len(tenants)
		tenants, counts = append(tenants, s), append(counts, 1)
	}
	return tenants, counts
}

// settle records what a claim did with a tenant's turns (see
// DB.settleClaim): giveBack turns go back; ranDry says it has no other
// ready job, so it leaves the turns until it is found again; full says
// the database counted less room than it asked for (other processes run
// its jobs), so it rests (restFor, doubling while it stays so) while its
// room here, as the claim leaves it, does not grow.
func (t *tenantTurns) settle(tenant string, giveBack int, ranDry, full bool, room int, at time.Time) {
	e := t.known[tenant]
	if e == nil {
		return
	}
	e.pass -= int64(giveBack) * e.step
	if ranDry {
		t.ranDry = t.ranDry || e.index >= 0
		t.deactivate(tenant)
	} else if e.index >= 0 {
		heap.Fix(&t.active, e.index)
	}
	if full {
		r := t.resting[tenant]
		r.length = min(max(2*r.length, restFor), restMax)
		r.until, r.room = at.Add(r.length), room
		t.resting[tenant] = r
	} else {
		delete(t.resting, tenant)
	}
}

// restEnd is when the first rest of an active tenant with room in this
// process ends, if one rests: a fetcher that claimed nothing claims again
// then, for no news comes when other processes' jobs of the tenant end.
// A rest that ended before the claim named the tenant ends at once. A
// tenant without room here needs no rest to end: its own jobs' ends wake
// the fetcher (see DB.dropLocked).
func (t *tenantTurns) restEnd(roomOf func(string) int) (time.Time, bool) {
	var end time.Time
	for tenant, r := range t.resting {
		e := t.known[tenant]
		if e == nil || e.index < 0 || roomOf(tenant) == 0 {
			continue
		}
		if end.IsZero() || r.until.Before(end) {
			end = r.until
		}
	}
	return end, !end.IsZero()
}

// again reports whether the claim just settled took tenants out of the
// turns while others remain: a claim that found nothing should be
// followed by another at once, not by a wait for news.
func (t *tenantTurns) again() bool {
	again := t.ranDry && t.active.Len() > 0
	t.ranDry = false
	return again
}

// settled ends a claim's settling: the turns given back are before now,
// so now goes back to the first of them, where a tenant that becomes
// active starts.
func (t *tenantTurns) settled() {
	if t.active.Len() > 0 {
		t.now = min(t.now, t.active[0].pass)
	}
}

// forget drops the inactive tenants whose pass now has caught up with:
// they would start at now anyway.
func (t *tenantTurns) forget() {
	for k, e := range t.known {
		if e.index < 0 && e.pass <= t.now {
			delete(t.known, k)
			delete(t.resting, k)
		}
	}
}

// sqlReadyTenants lists the tenants with ready jobs, one index descent
// each (cellgate_jobs_ready_tenants, migration 000013).
const sqlReadyTenants = `SELECT t FROM cellgate_jobs_ready_tenants() AS t`

// findTenants gives turns to the tenants the news names, and looks for
// every tenant with ready jobs when the turns hold none, when the news
// asks for a look and the last is findMin old, or when it is findEvery
// old; a look that took d waits at least findShare·d for the next.
func (b *DB) findTenants(ctx context.Context, at time.Time) error {
	t := &b.turns
	named, look := b.takeNews()
	for _, s := range named {
		t.activate(s, b.limitsOf(s).weight)
	}
	t.asked = t.asked || look
	since := at.Sub(t.found)
	every := max(findEvery, findShare*t.took)
	if t.asked {
		every = max(findMin, findShare*t.took)
	}
	if t.active.Len() > 0 && since < every {
		return nil
	}
	start := time.Now()
	rows, err := b.pool.Query(ctx, sqlReadyTenants)
	if err != nil {
		return err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	t.forget()
	for _, s := range found {
		t.activate(s, b.limitsOf(s).weight)
	}
	t.found, t.took, t.asked = at, time.Since(start), false
	return nil
}

// roomOfLocked is tenant's room under its cap as this process counts
// it: its cap less this process's running jobs of the tenant; -1 without
// a cap. b.mu must be held.
func (b *DB) roomOfLocked(tenant string) int {
	c := int(b.limitsOf(tenant).maxRunning)
	if c == 0 {
		return -1
	}
	return max(c-b.runningOf[tenant], 0)
}
