// Package local is the in-memory job backend: jobs live in the process and
// are lost with it. It implements tenant isolation (jobs.Config.Tenants):
//
//   - Fair order. Each queue keeps, per lane, a round-robin ring of the
//     tenants that have a ready job (and a free slot). A worker takes the head
//     tenant's oldest job and moves that tenant to the back of the ring. Jobs
//     without a tenant form one more member of every ring. Rings are intrusive
//     circular doubly linked lists and a tenant's line is a ring buffer, so
//     joining, leaving and rotating are O(1), taking a job O(1) amortised,
//     and a claim costs O(queues) whatever the number of tenants or the
//     backlog.
//   - Slots. A tenant with MaxConcurrent running jobs leaves every ring until
//     one of its jobs finishes.
//   - Lanes. Worker i serves lane i % Lanes; a tenant is a member of the rings
//     of its jobs.ShuffleShard(tenant, Lanes, LanesPerTenant) lanes only.
//
// With isolation off every job goes to the shared member, so each queue is
// FIFO; the code path is the same, which keeps the fair/FIFO benchmark honest.
//
// A kind's Concurrency cap is enforced at claim: a job whose kind is at its
// cap is parked on the kind, and a finishing job of the kind hands its capacity
// to the oldest parked job by putting it back at the front of its tenant's
// line with the capacity reserved (a fresh job of the kind does not take
// reserved capacity). A job is thus parked at most once, and a claim that
// parks jobs on its way is still O(1) amortised. The price: capacity
// reserved for a job whose tenant is out of slots waits for that tenant.
//
// Concurrency: every method is safe for concurrent use. One mutex guards the
// scheduling state, held for O(queues + lanes) steps per operation. Producers
// and finishing workers mostly stay off it: a plain Insert (not unique, not
// delayed) and a Complete push the job on a lock-free stack, and whoever next
// holds the mutex applies the stacks (a Claim always does, before choosing).
// A push takes the mutex itself only when a worker is parked, or when the
// inbox holds inboxBatch inserts, which bounds every critical section. Insert
// also looks up, without the mutex, what the drain would otherwise look up
// while holding it (the tenant, the queue, the kind's cap). Idle workers park
// on their own channel, and a push wakes only a worker whose lane can serve
// the job. Clock.AfterFunc is called with the mutex held and must not call
// back synchronously.
//
// Memory layout: with many tenants taking turns, a tenant's records and a
// job's record are cold by the time they are used again, and the cache
// misses on them, most of them under the mutex, are what a claim costs. The
// records are therefore sized to aligned size classes with the fields used
// together in the same cache line (see job, tenant, tq, queue and Backend;
// TestRecordSizes pins the sizes).
//
// Jobs live in memory: Close (and the end of the process) drops every waiting
// job, and a running job abandoned at shutdown is not run again.
package local

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// Backend is the in-memory jobs.Backend. The zero value is not usable; call New.
type Backend struct {
	// Lock-free hand-offs, so producers and finishing workers rarely touch
	// mu: a plain Insert and a Complete push the job on a stack, and
	// whoever next holds mu applies them (drain). idleN counts parked
	// workers; a push takes mu itself only when one is parked, since
	// otherwise a busy worker's next Claim drains the stacks.
	//
	// These take the first cache line of the Backend (a large object, so
	// page-aligned), and mu with the fields every locked operation writes
	// the second: lock-free pushes on other cores then do not take the
	// lock's line away from its holder.
	inbox  stack // inserted jobs, not yet in their lines
	inboxN atomic.Int32
	done   stack // completed jobs, not yet released
	idleN  atomic.Int32
	status atomic.Int32 // statusNew, statusOpen, statusClosed
	nextID atomic.Int64
	_      [24]byte

	mu     sync.Mutex
	steps  uint64 // ring heads inspected by next; the O(1) test reads it
	queues []*queue
	freed  *job    // dropped records, for unlock to pool
	shared *tenant // jobs without a tenant, and every job when not isolated
	_      [8]byte

	// sysClock: clock is the system clock, and now reads it through
	// wallBase (see now).
	sysClock bool
	wallBase atomic.Pointer[time.Time]

	clock    jobs.Clock
	isolated bool
	maxConc  int // per-tenant slots, 0 = none
	nLanes   int // ≥ 1
	lpt      int // lanes per tenant (isolated with lanes on)

	ws      []*worker
	idle    [][]*worker // parked workers per lane
	byName  map[string]*queue
	tenants map[string]*tenant
	// tenantCache lets Insert find a job's tenant without the lock, so
	// that the drain holding it does not hash tenant ids: a cache of
	// tenants (see tenantSlots), written under mu (tenant, makeIdle) and
	// read by Insert. tenants stays the truth; an evicted tenant is
	// marked, and admit checks the mark, so a hint that went stale between
	// Insert and the drain is not used.
	tenantCache [tenantSlots]atomic.Pointer[tenant]
	tenantSeed  maphash.Seed
	// queueSnap is a copy of queues for Insert, replaced under mu when a
	// queue is added, so that admit need not read the queue's name from
	// the job (a cache line the drain would otherwise not touch).
	queueSnap atomic.Pointer[[]*queue]
	// idle tenants (no jobs), oldest first; see maxIdleTenants.
	idleHead, idleTail *tenant
	idleTenants        int
	kinds              map[string]*kind
	unique             map[string]*job

	sched    schedHeap
	timer    jobs.Timer
	timerAt  time.Time
	timerGen uint64
}

const (
	statusNew int32 = iota
	statusOpen
	statusClosed
)

// New returns an unopened backend.
func New() *Backend { return &Backend{} }

type worker struct {
	lane  int
	qnext int // the queue this worker looks at first, rotating
	idle  bool
	wake  chan struct{} // capacity 1
}

// job is the backend's record of a job: a 256-byte object, so 256-byte
// aligned. In a long backlog a job is cold when it is claimed, and every
// cache line of it that a job's life touches is a miss, so the layout keeps
// them to three: the fields the backend uses come first, in the first line,
// and the 40 bytes of them put the row's Handle in the third line with the
// fields the Client reads; the fourth line holds what only unique and
// scheduled jobs use. A claim without kind caps reads none of them under
// the lock: tenant lines hold pointers to their jobs.
type job struct {
	// next links the job in at most one list: its kind's parking list,
	// or the inbox or done stack.
	next *job
	tq   *tq
	kind *kind // nil: no concurrency cap
	// ten and qHint are Insert's lock-free look-ups of the job's tenant
	// (see Backend.tenantCache) and queue (1 + its index, see
	// Backend.queueSnap), for admit; nil and 0 when not found there.
	ten      *tenant
	reserved bool // handed kind capacity while parked
	hasUniq  bool // uniq is set (saves reading it on every drop)
	qHint    uint8
	ending   atomic.Bool
	row      jobs.JobRow
	uniq     string
	runAt    time.Time
	_        [24]byte // to 256 bytes, a size class whose objects are aligned
}

// stack is a lock-free LIFO of jobs (a Treiber stack) linked through next;
// the consumer takes all of it at once, so there is no ABA problem. A job is
// on a stack only when it is in no line (just inserted, or just finished).
type stack struct{ head atomic.Pointer[job] }

func (s *stack) push(j *job) {
	for {
		h := s.head.Load()
		j.next = h
		if s.head.CompareAndSwap(h, j) {
			return
		}
	}
}

func (s *stack) takeAll() *job { return s.head.Swap(nil) }

func (s *stack) empty() bool { return s.head.Load() == nil }

// tenant is a tenant (or the shared member) across queues. With 1,000
// tenants taking turns, a tenant's records are cold when its turn comes, so
// they are laid out for few cache misses: what claims and drains use is in
// the first cache line of a 128-byte (so 128-byte aligned) object.
type tenant struct {
	running int32 // jobs running, at most Backend.maxConc
	jobs    int32 // jobs of the tenant in any state; at 0 it goes idle
	shared  bool
	// idle: on the backend's idle list (no jobs), evicted beyond
	// maxIdleTenants; evicted: no longer in Backend.tenants, so a hint
	// pointing to it is stale.
	idle, evicted bool
	// id is in the first line with the counters: Insert reads it to check
	// a cache hit, mostly from a job of the same tenant that the same
	// worker just claimed, so the line is already in that core's cache.
	id   string
	tqs0 [2]*tq // lines in the queues of index 0 and 1
	_    [16]byte

	tqsMore            []*tq // lines in the queues of index 2 and up
	lanes              []int
	idlePrev, idleNext *tenant
}

func newTenant(id string, lanes []int) *tenant { return &tenant{id: id, lanes: lanes} }

// lineIn returns the tenant's line in the queue of index qi, or nil.
func (t *tenant) lineIn(qi int) *tq {
	if qi < len(t.tqs0) {
		return t.tqs0[qi]
	}
	if qi -= len(t.tqs0); qi < len(t.tqsMore) {
		return t.tqsMore[qi]
	}
	return nil
}

// tq is a tenant's line of ready jobs in one queue and its ring
// memberships: a 128-byte object (so aligned), two adjacent cache lines
// (for a tenant with 1 or 2 lanes; more lanes have their nodes apart).
//
// The line is a ring buffer of pointers to its jobs rather than a list
// linked through them: appending a job then does not write to the previous
// one, and taking one does not read it, which for a tenant whose jobs went
// cold in a long backlog are cache misses under the lock.
type tq struct {
	inline [2]ringNode // nodes of a tenant with 1 or 2 lanes
	ten    *tenant
	head   uint32 // index in buf of the oldest ready job
	n      uint32 // ready jobs
	buf    []*job // ring buffer; its length is 0 or a power of two
	q      *queue
	nodes  []ringNode // node i is in the ring of lane ten.lanes[i]
	linked bool       // the nodes are in their rings
	_      [7]byte    // to 128 bytes
}

// minLineBuf is the smallest length of a line's buffer.
const minLineBuf = 4

// pushBack appends j to the line.
func (l *tq) pushBack(j *job) {
	if int(l.n) == len(l.buf) {
		l.resize(max(minLineBuf, 2*len(l.buf)))
	}
	l.buf[(l.head+l.n)&uint32(len(l.buf)-1)] = j
	l.n++
}

// pushFront puts j first in the line.
func (l *tq) pushFront(j *job) {
	if int(l.n) == len(l.buf) {
		l.resize(max(minLineBuf, 2*len(l.buf)))
	}
	l.head = (l.head - 1) & uint32(len(l.buf)-1)
	l.buf[l.head] = j
	l.n++
}

// pop takes the oldest job of a line that has one. The buffer halves when a
// quarter of it is in use, so a burst does not pin its memory; growing and
// shrinking copy at most as many jobs as were pushed or popped since the
// last resize, so each costs O(1) amortised.
func (l *tq) pop() *job {
	j := l.buf[l.head]
	l.buf[l.head] = nil // no stale pointer for the collector to follow
	l.head = (l.head + 1) & uint32(len(l.buf)-1)
	l.n--
	if len(l.buf) > minLineBuf && int(l.n) < len(l.buf)/4 {
		l.resize(len(l.buf) / 2)
	}
	return j
}

// resize moves the line's jobs to a buffer of length c (a power of two, at
// least l.n).
func (l *tq) resize(c int) {
	buf := make([]*job, c)
	mask := uint32(len(l.buf) - 1)
	for i := range l.n {
		buf[i] = l.buf[(l.head+i)&mask]
	}
	l.buf, l.head = buf, 0
}

type ringNode struct {
	prev, next *ringNode
	tq         *tq
}

// ring is a circular doubly linked list of ring nodes; head is the member
// served next and head.prev the last. Serving the head and moving it to the
// back is then one step, head = head.next, which writes no other node.
type ring struct{ head *ringNode }

// queue is one queue's scheduling state: its counters and the head of each
// lane's ring, which every claim writes, share a cache line (a 128-byte
// object, so aligned) for up to len(ring0) lanes.
type queue struct {
	waiting   int
	running   int
	ring0     [4]ring // rings of lanes 0-3
	idx       int
	_         [8]byte
	name      string
	ringsMore []ring // rings of lanes 4 and up
	_         [24]byte
}

// ring returns the ring of lane.
func (q *queue) ring(lane int) *ring {
	if lane < len(q.ring0) {
		return &q.ring0[lane]
	}
	return &q.ringsMore[lane-len(q.ring0)]
}

type kind struct {
	limit    int
	running  int
	reserved int
	bhead    *job
	btail    *job
}

// Capabilities reports tenant isolation.
func (b *Backend) Capabilities() jobs.Capabilities {
	return jobs.Capabilities{TenantIsolation: true}
}

// Open sets the backend up for p. It may be called once.
func (b *Backend) Open(_ context.Context, p jobs.OpenParams) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status.Load() != statusNew {
		return errors.New("local: Open called twice or after Close")
	}
	if p.Workers < 1 {
		return fmt.Errorf("local: Open: workers must be >= 1, got %d", p.Workers)
	}
	t := p.Tenants
	if t.Lanes > p.Workers || t.Lanes > jobs.MaxLanes || (t.Lanes > 0 && (t.LanesPerTenant < 1 || t.LanesPerTenant > t.Lanes)) {
		return fmt.Errorf("local: Open: invalid lanes %d / lanes per tenant %d for %d workers (pass the effective config)",
			t.Lanes, t.LanesPerTenant, p.Workers)
	}
	b.clock = p.Clock
	if b.clock == nil {
		b.clock = jobs.SystemClock{}
	}
	if _, ok := b.clock.(jobs.SystemClock); ok {
		b.sysClock = true
		t := time.Now()
		b.wallBase.Store(&t)
	}
	b.isolated = t.Isolated()
	if b.isolated {
		b.maxConc = t.MaxConcurrent
	}
	b.nLanes = 1
	if b.isolated && t.Lanes > 0 {
		b.nLanes, b.lpt = t.Lanes, t.LanesPerTenant
	}
	b.ws = make([]*worker, p.Workers)
	for i := range b.ws {
		b.ws[i] = &worker{lane: i % b.nLanes, wake: make(chan struct{}, 1)}
	}
	b.idle = make([][]*worker, b.nLanes)
	b.byName = make(map[string]*queue)
	b.tenants = make(map[string]*tenant)
	b.unique = make(map[string]*job)
	b.kinds = make(map[string]*kind)
	all := make([]int, b.nLanes)
	for i := range all {
		all[i] = i
	}
	b.shared = newTenant("", all)
	b.shared.shared = true
	b.tenantSeed = maphash.MakeSeed()
	for _, k := range p.Kinds {
		if k.Concurrency > 0 {
			b.kinds[k.Name] = &kind{limit: k.Concurrency}
		}
		b.queue(k.Queue)
	}
	b.status.Store(statusOpen)
	return nil
}

func (b *Backend) usable() error {
	switch b.status.Load() {
	case statusNew:
		return errors.New("local: backend not opened")
	case statusClosed:
		return jobs.ErrClosed
	}
	return nil
}

// Insert adds a job; see jobs.Backend. A job that is neither unique nor
// delayed is pushed on the inbox without taking the lock.
func (b *Backend) Insert(_ context.Context, p jobs.InsertParams) (jobs.EnqueueResult, error) {
	if err := b.usable(); err != nil {
		return jobs.EnqueueResult{}, err
	}
	now := b.now()
	j := b.newJob(&p, now)
	b.lookUp(j, &p)
	if p.UniqueKey == "" && (p.RunAt.IsZero() || !p.RunAt.After(now)) {
		id := jobs.JobID(b.nextID.Add(1))
		j.row.ID = id
		// From the push on, j may run, finish and be recycled at any time:
		// do not touch it again.
		b.inbox.push(j)
		if b.inboxN.Add(1) >= inboxBatch {
			// Apply a full batch now, so no later drain holds the lock
			// for a backlog's worth of inserts.
			b.mu.Lock()
			b.drain()
			b.unlock()
		} else {
			b.kick()
		}
		return jobs.EnqueueResult{ID: id}, nil
	}
	if p.UniqueKey != "" {
		j.uniq = p.Kind + "\x00" + p.Tenant + "\x00" + p.UniqueKey
		j.hasUniq = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return jobs.EnqueueResult{}, err
	}
	b.drain() // a completion on the done stack may free the unique key
	if j.hasUniq {
		if dup := b.unique[j.uniq]; dup != nil {
			return jobs.EnqueueResult{ID: dup.row.ID, Duplicate: true}, nil
		}
		b.unique[j.uniq] = j
	}
	j.row.ID = jobs.JobID(b.nextID.Add(1))
	b.admit(j, p.RunAt, now)
	return jobs.EnqueueResult{ID: j.row.ID}, nil
}

// wallResync bounds how long now extrapolates the wall clock from one
// reading of it.
const wallResync = 100 * time.Millisecond

// now returns the clock's time, for EnqueuedAt and RunAt. time.Now reads the
// wall clock and the monotonic clock, two clock_gettime calls that cost some
// 80ns in a VM, a visible part of a no-op job; with the system clock, now
// reads the monotonic clock only and adds the time elapsed to the last full
// reading, taken at most wallResync ago. The result is what time.Now would
// return except when the wall clock was stepped or slewed since that
// reading: a step shows within wallResync, a slew differs by at most its
// rate × wallResync (50µs at NTP's maximum).
func (b *Backend) now() time.Time {
	if !b.sysClock {
		return b.clock.Now()
	}
	base := b.wallBase.Load()
	if d := time.Since(*base); d >= 0 && d < wallResync {
		return base.Add(d)
	}
	t := time.Now()
	b.wallBase.Store(&t)
	return t
}

// newJob returns a record for a job inserted at now, from the pool. It sets
// the fields one by one rather than assigning a whole record: that skips
// clearing the record and the write barrier's pass over all of it, and the
// fields it leaves are set before they are read (tq by admit,
// runAt by schedule, ending by Claim; drop cleared uniq).
func (b *Backend) newJob(p *jobs.InsertParams, now time.Time) *job {
	j := jobPool.Get().(*job)
	j.next = nil
	j.kind = nil
	j.ten = nil
	j.qHint = 0
	j.reserved = false
	j.hasUniq = false
	r := &j.row
	r.Kind = p.Kind
	r.Queue = p.Queue
	r.Tenant = p.Tenant
	r.EncodedArgs = p.EncodedArgs
	r.Args = p.Args
	r.Attempt = 0
	r.MaxAttempts = p.MaxAttempts
	r.EnqueuedAt = now
	if r.Handle == nil { // a recycled record already points to itself
		r.Handle = j
	}
	return j
}

// lookUp finds, without the lock, what admit would otherwise look up while
// holding it: the job's tenant and queue when the caches have them, and its
// kind's concurrency cap.
func (b *Backend) lookUp(j *job, p *jobs.InsertParams) {
	if b.isolated && p.Tenant != "" {
		j.ten = b.cachedTenant(p.Tenant)
	}
	if qs := b.queueSnap.Load(); qs != nil && len(*qs) <= scanQueues {
		for i, q := range *qs {
			if q.name == p.Queue {
				j.qHint = uint8(i + 1)
				break
			}
		}
	}
	if len(b.kinds) > 0 { // read-only after Open
		j.kind = b.kinds[p.Kind]
	}
}

// inboxBatch caps the inserts waiting on the inbox: the insert that fills a
// batch applies it. It bounds how long any drain holds the lock (workers
// busy with long jobs do not drain) while keeping the lock off the insert
// path for all but one insert in inboxBatch.
const inboxBatch = 64

// kick applies the stacks at once when a worker is parked, since no busy
// worker may come to drain them. See Claim for why this cannot miss one.
func (b *Backend) kick() {
	if b.idleN.Load() > 0 {
		b.mu.Lock()
		b.drain()
		b.unlock()
	}
}

// drain applies the done stack (releasing slots and capacity first), then the
// inbox in insertion order. Callers hold mu.
func (b *Backend) drain() {
	for j := b.done.takeAll(); j != nil; {
		nx := j.next
		j.next = nil
		b.finish(j)
		b.drop(j)
		j = nx
	}
	var fifo *job
	n := int32(0)
	for j := b.inbox.takeAll(); j != nil; {
		nx := j.next
		j.next = fifo
		fifo = j
		j = nx
		n++
	}
	if n > 0 {
		b.inboxN.Add(-n)
	}
	for j := fifo; j != nil; {
		nx := j.next
		j.next = nil
		if b.status.Load() == statusOpen {
			b.admit(j, time.Time{}, time.Time{})
		}
		j = nx
	}
}

// admit files a new job under its queue, tenant and kind, and makes it
// waiting (or scheduled when runAt is after now).
func (b *Backend) admit(j *job, runAt, now time.Time) {
	var q *queue
	if h := j.qHint; h != 0 {
		q = b.queues[h-1] // queues only grow: its index is stable
	} else {
		q = b.queue(j.row.Queue)
	}
	ten := b.shared
	if t := j.ten; t != nil && !t.evicted {
		if t.idle {
			b.unidle(t)
		}
		ten = t
	} else if b.isolated && j.row.Tenant != "" {
		ten = b.tenant(j.row.Tenant)
	}
	j.ten = nil
	j.tq = ten.line(q)
	ten.jobs++
	q.waiting++
	if runAt.After(now) {
		b.schedule(j, runAt)
	} else {
		b.push(j)
	}
}

// Claim blocks until worker can run a job; see jobs.Backend. One goroutine
// per worker index may call it at a time.
func (b *Backend) Claim(ctx context.Context, worker int) (*jobs.JobRow, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	if worker < 0 || worker >= len(b.ws) {
		return nil, fmt.Errorf("local: Claim: worker %d out of range [0, %d)", worker, len(b.ws))
	}
	w := b.ws[worker]
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b.mu.Lock()
		if b.status.Load() == statusClosed {
			b.mu.Unlock()
			return nil, jobs.ErrClosed
		}
		b.drain()
		if j := b.next(w); j != nil {
			b.unlock()
			// The attempt is ours from here on: nothing else reads or
			// writes these until the row comes back, so they are set
			// outside the lock (they sit in the row's cache lines, which
			// the worker is about to read anyway).
			j.ending.Store(false)
			j.row.Attempt++
			return &j.row, nil
		}
		// Announce the park before the last look at the stacks: a pusher
		// either sees idleN > 0 and drains, or pushed before this look.
		b.idleN.Add(1)
		if !b.inbox.empty() || !b.done.empty() {
			b.idleN.Add(-1)
			b.mu.Unlock()
			continue
		}
		w.idle = true
		b.idle[w.lane] = append(b.idle[w.lane], w)
		b.mu.Unlock()
		select {
		case <-w.wake:
		case <-ctx.Done():
			b.mu.Lock()
			if w.idle {
				b.removeIdle(w)
			}
			b.mu.Unlock()
			select { // a wake that raced with ctx is of no use now
			case <-w.wake:
			default:
			}
			return nil, ctx.Err()
		}
	}
}

// Complete records success; see jobs.Backend. It does not take the lock: the
// job goes on the done stack.
func (b *Backend) Complete(_ context.Context, row *jobs.JobRow) error {
	j, err := b.ending(row)
	if err != nil {
		return err
	}
	b.done.push(j)
	b.kick()
	return nil
}

// Fail records a final failure; the job is dropped like a completed one.
func (b *Backend) Fail(ctx context.Context, row *jobs.JobRow, _ string) error {
	return b.Complete(ctx, row)
}

// Retry makes the job available again after delay.
func (b *Backend) Retry(_ context.Context, row *jobs.JobRow, delay time.Duration, _ string) error {
	j, err := b.ending(row)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return err
	}
	b.drain()
	b.finish(j)
	j.tq.q.waiting++
	if delay > 0 {
		b.schedule(j, b.clock.Now().Add(delay))
	} else {
		b.push(j)
	}
	return nil
}

// Stats counts the jobs of each queue, in the order queues were first seen.
func (b *Backend) Stats(context.Context) ([]jobs.QueueStats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status.Load() == statusOpen {
		b.drain()
	}
	out := make([]jobs.QueueStats, len(b.queues))
	for i, q := range b.queues {
		out[i] = jobs.QueueStats{Queue: q.name, Waiting: q.waiting, Running: q.running}
	}
	return out, nil
}

// Close stops the backend: parked Claims return jobs.ErrClosed, and the
// waiting jobs are dropped with the process.
func (b *Backend) Close(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status.Swap(statusClosed) == statusClosed {
		return nil
	}
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	for l, ws := range b.idle {
		for _, w := range ws {
			w.idle = false
			b.idleN.Add(-1)
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
		b.idle[l] = nil
	}
	return nil
}

// ending resolves a row handed out by Claim and marks its attempt as ending,
// so a second Complete, Retry or Fail of the same attempt is an error.
func (b *Backend) ending(row *jobs.JobRow) (*job, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	j, ok := row.Handle.(*job)
	if !ok || j == nil || &j.row != row {
		return nil, errors.New("local: row was not claimed from this backend")
	}
	if !j.ending.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("local: job %d is not running", row.ID)
	}
	return j, nil
}

// queue returns the queue named name, creating it. An app has a handful of
// queues, and a job's queue name is its kind's spec string, so a scan whose
// comparisons mostly stop at the string pointers is cheaper than hashing.
func (b *Backend) queue(name string) *queue {
	if len(b.queues) <= scanQueues {
		for _, q := range b.queues {
			if q.name == name {
				return q
			}
		}
	} else if q := b.byName[name]; q != nil {
		return q
	}
	q := &queue{name: name, idx: len(b.queues)}
	if b.nLanes > len(q.ring0) {
		q.ringsMore = make([]ring, b.nLanes-len(q.ring0))
	}
	b.queues = append(b.queues, q)
	b.byName[name] = q
	qs := append([]*queue(nil), b.queues...) // published: never modified
	b.queueSnap.Store(&qs)
	return q
}

// scanQueues is the number of queues up to which queue scans them.
const scanQueues = 8

// tenant returns the state of tenant id, creating it with its lanes.
func (b *Backend) tenant(id string) *tenant {
	t := b.tenants[id]
	if t != nil {
		if t.idle {
			b.unidle(t)
		}
	} else {
		lanes := b.shared.lanes // one lane: lane 0
		if b.lpt > 0 {
			lanes = jobs.ShuffleShard(id, b.nLanes, b.lpt)
		}
		t = newTenant(id, lanes)
		b.tenants[id] = t
	}
	b.cacheTenant(t)
	return t
}

// tenantSlots is the size of tenantCache, a power of two. The cache is
// two-way set-associative: a tenant has two slots, the newest entry of its
// set first.
const tenantSlots = 4096

// tenantSet returns the two slots of id's set in tenantCache.
func (b *Backend) tenantSet(id string) (newest, older *atomic.Pointer[tenant]) {
	i := maphash.String(b.tenantSeed, id) & (tenantSlots - 2)
	return &b.tenantCache[i], &b.tenantCache[i+1]
}

// cachedTenant returns the cached tenant id, or nil. It does not take the
// lock (it reads only the tenant's id, which never changes): the caller must
// check that the tenant was not evicted before using it under the lock
// (admit does).
func (b *Backend) cachedTenant(id string) *tenant {
	newest, older := b.tenantSet(id)
	if t := newest.Load(); t != nil && t.id == id {
		return t
	}
	if t := older.Load(); t != nil && t.id == id {
		return t
	}
	return nil
}

// cacheTenant makes t the newest entry of its set. Callers hold mu.
func (b *Backend) cacheTenant(t *tenant) {
	newest, older := b.tenantSet(t.id)
	if n := newest.Load(); n != t {
		older.Store(n)
		newest.Store(t)
	}
}

// uncacheTenant removes an evicted tenant from tenantCache. Callers hold mu.
func (b *Backend) uncacheTenant(t *tenant) {
	newest, older := b.tenantSet(t.id)
	newest.CompareAndSwap(t, nil)
	older.CompareAndSwap(t, nil)
}

// line returns the tenant's line in q, creating it.
func (t *tenant) line(q *queue) *tq {
	if l := t.lineIn(q.idx); l != nil {
		return l
	}
	l := &tq{ten: t, q: q}
	if len(t.lanes) <= len(l.inline) {
		// Most tenants have 1 or 2 lanes: keep their ring nodes in the
		// line's own allocation, one cache miss fewer per claim.
		l.nodes = l.inline[:len(t.lanes)]
	} else {
		l.nodes = make([]ringNode, len(t.lanes))
	}
	for i := range l.nodes {
		l.nodes[i].tq = l
	}
	if q.idx < len(t.tqs0) {
		t.tqs0[q.idx] = l
	} else {
		for len(t.tqsMore) <= q.idx-len(t.tqs0) {
			t.tqsMore = append(t.tqsMore, nil)
		}
		t.tqsMore[q.idx-len(t.tqs0)] = l
	}
	return l
}

// hasSlot reports whether the tenant may start another job.
func (b *Backend) hasSlot(t *tenant) bool {
	return t.shared || b.maxConc == 0 || int(t.running) < b.maxConc
}

// push appends a waiting job to its tenant's line and wakes a worker that can
// run it.
func (b *Backend) push(j *job) {
	j.tq.pushBack(j)
	b.queued(j.tq)
}

// pushFront puts a job that was handed kind capacity back at the head of its
// tenant's line.
func (b *Backend) pushFront(j *job) {
	j.tq.pushFront(j)
	b.queued(j.tq)
}

// queued lets a worker see a job just put on l: an already linked line only
// needs a wake-up, an unlinked one may now be linkable.
func (b *Backend) queued(l *tq) {
	if l.linked {
		b.wakeOne(l)
		return
	}
	b.update(l)
}

// update links l into its rings when it has a ready job and its tenant a free
// slot, and unlinks it otherwise.
func (b *Backend) update(l *tq) {
	want := l.n > 0 && b.hasSlot(l.ten)
	switch {
	case want && !l.linked:
		b.link(l)
	case !want && l.linked:
		b.unlink(l)
	}
}

// link puts l at the back of the ring of each of its lanes, and wakes a
// worker in each.
func (b *Backend) link(l *tq) {
	l.linked = true
	lanes := l.ten.lanes
	for i := range l.nodes {
		l.q.ring(lanes[i]).pushBack(&l.nodes[i])
		b.wakeLane(lanes[i])
	}
}

// unlink takes l out of its rings.
func (b *Backend) unlink(l *tq) {
	l.linked = false
	lanes := l.ten.lanes
	for i := range l.nodes {
		l.q.ring(lanes[i]).remove(&l.nodes[i])
	}
}

// updateTenant re-evaluates every line of t after its slot count changed.
func (b *Backend) updateTenant(t *tenant) {
	for _, l := range t.tqs0 {
		if l != nil {
			b.update(l)
		}
	}
	for _, l := range t.tqsMore {
		if l != nil {
			b.update(l)
		}
	}
}

// next hands worker w the next job of its lane, or nil. Queues are visited
// round-robin from w.qnext; within a queue the lane's ring is round-robin.
func (b *Backend) next(w *worker) *job {
	nq := len(b.queues)
	for i := 0; i < nq; i++ {
		qi := w.qnext + i
		if qi >= nq {
			qi -= nq
		}
		q := b.queues[qi]
		r := q.ring(w.lane)
		for r.head != nil {
			b.steps++
			nd := r.head
			l := nd.tq
			j := l.pop()
			// l is linked, so its tenant has a slot: all that can take
			// it out of the rings is its last ready job leaving, or
			// the job taking the last slot.
			if len(b.kinds) > 0 && j.kind != nil { // read j only with caps
				k := j.kind
				switch {
				case j.reserved:
					j.reserved = false
					k.reserved--
				case k.running+k.reserved >= k.limit:
					k.park(j)
					if l.n == 0 {
						b.unlink(l)
					}
					continue
				}
				k.running++
			}
			t := l.ten
			t.running++
			q.waiting--
			q.running++
			r.head = nd.next // nd to the back of the round
			switch {
			case b.maxConc > 0 && !t.shared && int(t.running) == b.maxConc:
				b.updateTenant(t) // out of slots: leave every ring
			case l.n == 0:
				b.unlink(l)
			}
			w.qnext = qi + 1
			if w.qnext == nq {
				w.qnext = 0
			}
			if r.head != nil {
				b.wakeLane(w.lane) // more work in this lane: pass it on
			}
			return j
		}
	}
	return nil
}

// finish releases what a running job held: its tenant's slot and its kind's
// capacity.
func (b *Backend) finish(j *job) {
	l := j.tq
	t := l.ten
	t.running--
	l.q.running--
	if k := j.kind; k != nil {
		k.running--
		b.unpark(k)
	}
	if b.maxConc > 0 && !t.shared && int(t.running) == b.maxConc-1 {
		b.updateTenant(t) // a slot came free: rejoin the rings
	}
}

// drop forgets a job that completed or failed for good.
func (b *Backend) drop(j *job) {
	if j.hasUniq {
		delete(b.unique, j.uniq)
		j.uniq = ""
	}
	t := j.tq.ten
	t.jobs--
	if t.jobs == 0 && !t.shared {
		b.makeIdle(t)
	}
	// Nothing refers to j any more: the Client gave up its row with
	// Complete or Fail (the Backend contract), and j has left every list,
	// map and the heap. It goes back to the pool after the lock is
	// released (see unlock).
	j.next = b.freed
	b.freed = j
}

// unlock releases mu, then returns the records drop freed to the pool, so
// that the pool's work is not done while other workers wait for the lock.
// Paths that release mu otherwise leave them to the next unlock; making
// every draining path (Insert, a Claim that parks, Retry, ...) return them
// at once measured about 3 % slower in BenchmarkLocalThroughput.
func (b *Backend) unlock() {
	f := b.freed
	b.freed = nil
	b.mu.Unlock()
	for f != nil {
		nx := f.next
		f.next = nil
		jobPool.Put(f)
		f = nx
	}
}

// jobPool recycles job records, which are most of what a job allocates in
// the backend.
var jobPool = sync.Pool{New: func() any { return new(job) }}

// maxIdleTenants bounds the tenants kept without jobs. Keeping a few saves
// rebuilding a tenant (its lanes, lines and ring nodes) each time a tenant
// with short bursts comes back; the bound keeps memory proportional to the
// tenants with jobs.
const maxIdleTenants = 4096

// makeIdle puts a tenant without jobs at the back of the idle list, evicting
// the longest-idle one beyond maxIdleTenants.
func (b *Backend) makeIdle(t *tenant) {
	t.idle = true
	t.idlePrev, t.idleNext = b.idleTail, nil
	if b.idleTail != nil {
		b.idleTail.idleNext = t
	} else {
		b.idleHead = t
	}
	b.idleTail = t
	b.idleTenants++
	if b.idleTenants > maxIdleTenants {
		old := b.idleHead
		b.unidle(old)
		old.evicted = true
		delete(b.tenants, old.id)
		b.uncacheTenant(old)
	}
}

// unidle takes t off the idle list.
func (b *Backend) unidle(t *tenant) {
	if t.idlePrev != nil {
		t.idlePrev.idleNext = t.idleNext
	} else {
		b.idleHead = t.idleNext
	}
	if t.idleNext != nil {
		t.idleNext.idlePrev = t.idlePrev
	} else {
		b.idleTail = t.idlePrev
	}
	t.idlePrev, t.idleNext = nil, nil
	t.idle = false
	b.idleTenants--
}

// park holds j until the kind has capacity.
func (k *kind) park(j *job) {
	j.next = nil
	if k.btail == nil {
		k.bhead = j
	} else {
		k.btail.next = j
	}
	k.btail = j
}

// unpark hands free capacity of k to its oldest parked jobs.
func (b *Backend) unpark(k *kind) {
	for k.bhead != nil && k.running+k.reserved < k.limit {
		j := k.bhead
		k.bhead = j.next
		if k.bhead == nil {
			k.btail = nil
		}
		j.reserved = true
		k.reserved++
		b.pushFront(j)
	}
}

// wakeOne wakes one idle worker that serves one of l's lanes. Callers hold
// mu.
func (b *Backend) wakeOne(l *tq) {
	if b.idleN.Load() == 0 {
		// No worker is parked (idleN counts at least those on the idle
		// lists): skip reading the tenant's lanes, a cache miss when all
		// workers are busy.
		return
	}
	for _, lane := range l.ten.lanes {
		if b.wakeLane(lane) {
			return
		}
	}
}

// wakeLane wakes one idle worker of lane, reporting whether there was one.
func (b *Backend) wakeLane(lane int) bool {
	ws := b.idle[lane]
	n := len(ws)
	if n == 0 {
		return false
	}
	w := ws[n-1]
	ws[n-1] = nil
	b.idle[lane] = ws[:n-1]
	w.idle = false
	b.idleN.Add(-1)
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

func (b *Backend) removeIdle(w *worker) {
	ws := b.idle[w.lane]
	for i, x := range ws {
		if x == w {
			copy(ws[i:], ws[i+1:])
			ws[len(ws)-1] = nil
			b.idle[w.lane] = ws[:len(ws)-1]
			break
		}
	}
	w.idle = false
	b.idleN.Add(-1)
}

// schedule parks j until at, arming the timer if at is the new earliest.
func (b *Backend) schedule(j *job, at time.Time) {
	j.runAt = at
	heap.Push(&b.sched, j)
	if b.timer == nil || at.Before(b.timerAt) {
		b.arm(at)
	}
}

func (b *Backend) arm(at time.Time) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timerGen++
	gen := b.timerGen
	b.timerAt = at
	b.timer = b.clock.AfterFunc(at.Sub(b.clock.Now()), func() { b.fire(gen) })
}

// fire moves the due scheduled jobs to their lines and re-arms the timer. A
// stale timer (one that was replaced) still promotes due jobs, which is
// harmless.
func (b *Backend) fire(gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status.Load() != statusOpen {
		return
	}
	b.drain()
	if gen == b.timerGen {
		b.timer = nil
	}
	now := b.clock.Now()
	for len(b.sched) > 0 && !b.sched[0].runAt.After(now) {
		b.push(heap.Pop(&b.sched).(*job))
	}
	if b.timer == nil && len(b.sched) > 0 {
		b.arm(b.sched[0].runAt)
	}
}

// pushBack makes n the last member of the round.
func (r *ring) pushBack(n *ringNode) {
	h := r.head
	if h == nil {
		n.prev, n.next = n, n
		r.head = n
		return
	}
	last := h.prev
	n.prev, n.next = last, h
	last.next = n
	h.prev = n
}

func (r *ring) remove(n *ringNode) {
	if n.next == n {
		r.head = nil
	} else {
		n.prev.next = n.next
		n.next.prev = n.prev
		if r.head == n {
			r.head = n.next
		}
	}
	n.prev, n.next = nil, nil
}

// schedHeap orders scheduled jobs by runAt, then id.
type schedHeap []*job

func (h schedHeap) Len() int { return len(h) }
func (h schedHeap) Less(i, j int) bool {
	if h[i].runAt.Equal(h[j].runAt) {
		return h[i].row.ID < h[j].row.ID
	}
	return h[i].runAt.Before(h[j].runAt)
}
func (h schedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
}
func (h *schedHeap) Push(x any) {
	*h = append(*h, x.(*job))
}
func (h *schedHeap) Pop() any {
	old := *h
	n := len(old)
	j := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return j
}

var _ jobs.Backend = (*Backend)(nil)
