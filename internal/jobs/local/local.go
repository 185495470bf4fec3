// Package local is the in-memory job backend: jobs live in the process and
// are lost with it. It implements tenant isolation (jobs.Config.Tenants):
//
//   - Fair order. Each queue keeps, per lane, a round-robin ring of the
//     tenants that have a ready job (and a free slot). A worker takes the head
//     tenant's oldest job and moves that tenant to the back of the ring. Jobs
//     without a tenant form one more member of every ring. Rings are intrusive
//     doubly linked lists, so joining, leaving and rotating are O(1) and a
//     claim costs O(queues) whatever the number of tenants or the backlog.
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
// inbox holds inboxBatch inserts, which bounds every critical section. Idle
// workers park on their own channel, and a push wakes only a worker whose lane
// can serve the job. Clock.AfterFunc is called with the mutex held and must
// not call back synchronously.
//
// Jobs live in memory: Close (and the end of the process) drops every waiting
// job, and a running job abandoned at shutdown is not run again.
package local

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
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
	inbox  stack // inserted jobs, not yet in their lines
	inboxN atomic.Int32
	done   stack // completed jobs, not yet released
	idleN  atomic.Int32
	status atomic.Int32 // statusNew, statusOpen, statusClosed
	nextID atomic.Int64

	mu       sync.Mutex
	clock    jobs.Clock
	isolated bool
	maxConc  int // per-tenant slots, 0 = none
	nLanes   int // ≥ 1
	lpt      int // lanes per tenant (isolated with lanes on)

	ws      []*worker
	idle    [][]*worker // parked workers per lane
	queues  []*queue
	byName  map[string]*queue
	tenants map[string]*tenant
	// idle tenants (no jobs), oldest first; see maxIdleTenants.
	idleHead, idleTail *tenant
	idleTenants        int
	shared             *tenant // jobs without a tenant, and every job when not isolated
	kinds              map[string]*kind
	unique             map[string]*job

	sched    schedHeap
	timer    jobs.Timer
	timerAt  time.Time
	timerGen uint64

	steps uint64 // ring heads inspected by next; the O(1) test reads it
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

type jobState uint8

const (
	stateWaiting   jobState = iota // in its tenant's line
	stateScheduled                 // in the heap, waiting for runAt
	stateParked                    // held by its kind's concurrency cap
	stateRunning
	stateDone
)

type job struct {
	row      jobs.JobRow
	next     *job // tenant line or kind parking list
	link     *job // inbox or done stack
	ending   atomic.Bool
	tq       *tq
	kind     *kind // nil: no concurrency cap
	uniq     string
	runAt    time.Time
	heapIdx  int
	state    jobState
	reserved bool // handed kind capacity while parked
}

// stack is a lock-free LIFO of jobs (a Treiber stack); the consumer takes
// all of it at once, so there is no ABA problem.
type stack struct{ head atomic.Pointer[job] }

func (s *stack) push(j *job) {
	for {
		h := s.head.Load()
		j.link = h
		if s.head.CompareAndSwap(h, j) {
			return
		}
	}
}

func (s *stack) takeAll() *job { return s.head.Swap(nil) }

func (s *stack) empty() bool { return s.head.Load() == nil }

// tenant is a tenant (or the shared member) across queues.
type tenant struct {
	id      string
	lanes   []int
	running int
	jobs    int   // jobs of the tenant in any state; at 0 it goes idle
	tqs     []*tq // by queue index
	shared  bool
	// idle: on the backend's idle list (no jobs), evicted beyond
	// maxIdleTenants.
	idle               bool
	idlePrev, idleNext *tenant
}

// tq is a tenant's line of ready jobs in one queue and its ring memberships.
type tq struct {
	ten        *tenant
	q          *queue
	head, tail *job
	n          int
	linked     bool
	nodes      []ringNode // one per lane of the tenant; inline when they fit
	inline     [2]ringNode
}

type ringNode struct {
	prev, next *ringNode
	tq         *tq
	lane       int
}

type ring struct{ head, tail *ringNode }

type queue struct {
	name    string
	idx     int
	rings   []ring // by lane
	waiting int
	running int
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
	b.shared = &tenant{lanes: all, shared: true}
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
	now := b.clock.Now()
	j := jobPool.Get().(*job)
	*j = job{row: jobs.JobRow{
		Kind:        p.Kind,
		Queue:       p.Queue,
		Tenant:      p.Tenant,
		EncodedArgs: p.EncodedArgs,
		Args:        p.Args,
		MaxAttempts: p.MaxAttempts,
		EnqueuedAt:  now,
	}, heapIdx: -1}
	j.row.Handle = j
	if p.UniqueKey == "" && !p.RunAt.After(now) {
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
			b.mu.Unlock()
		} else {
			b.kick()
		}
		return jobs.EnqueueResult{ID: id}, nil
	}
	if p.UniqueKey != "" {
		j.uniq = p.Kind + "\x00" + p.Tenant + "\x00" + p.UniqueKey
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return jobs.EnqueueResult{}, err
	}
	b.drain() // a completion on the done stack may free the unique key
	if j.uniq != "" {
		if dup := b.unique[j.uniq]; dup != nil {
			return jobs.EnqueueResult{ID: dup.row.ID, Duplicate: true}, nil
		}
		b.unique[j.uniq] = j
	}
	j.row.ID = jobs.JobID(b.nextID.Add(1))
	b.admit(j, p.RunAt, now)
	return jobs.EnqueueResult{ID: j.row.ID}, nil
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
		b.mu.Unlock()
	}
}

// drain applies the done stack (releasing slots and capacity first), then the
// inbox in insertion order. Callers hold mu.
func (b *Backend) drain() {
	for j := b.done.takeAll(); j != nil; {
		nx := j.link
		j.link = nil
		b.finish(j)
		b.drop(j)
		j = nx
	}
	var fifo *job
	n := int32(0)
	for j := b.inbox.takeAll(); j != nil; {
		nx := j.link
		j.link = fifo
		fifo = j
		j = nx
		n++
	}
	if n > 0 {
		b.inboxN.Add(-n)
	}
	for j := fifo; j != nil; {
		nx := j.link
		j.link = nil
		if b.status.Load() == statusOpen {
			b.admit(j, time.Time{}, time.Time{})
		}
		j = nx
	}
}

// admit files a new job under its queue, tenant and kind, and makes it
// waiting (or scheduled when runAt is after now).
func (b *Backend) admit(j *job, runAt, now time.Time) {
	q := b.queue(j.row.Queue)
	ten := b.shared
	if b.isolated && j.row.Tenant != "" {
		ten = b.tenant(j.row.Tenant)
	}
	j.tq = ten.line(q)
	if len(b.kinds) > 0 {
		j.kind = b.kinds[j.row.Kind]
	}
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
			b.mu.Unlock()
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

// queue returns the queue named name, creating it.
func (b *Backend) queue(name string) *queue {
	if q := b.byName[name]; q != nil {
		return q
	}
	q := &queue{name: name, idx: len(b.queues), rings: make([]ring, b.nLanes)}
	b.queues = append(b.queues, q)
	b.byName[name] = q
	return q
}

// tenant returns the state of tenant id, creating it with its lanes.
func (b *Backend) tenant(id string) *tenant {
	if t := b.tenants[id]; t != nil {
		if t.idle {
			b.unidle(t)
		}
		return t
	}
	t := &tenant{id: id}
	if b.lpt > 0 {
		t.lanes = jobs.ShuffleShard(id, b.nLanes, b.lpt)
	} else {
		t.lanes = b.shared.lanes // one lane: lane 0
	}
	b.tenants[id] = t
	return t
}

// line returns the tenant's line in q, creating it.
func (t *tenant) line(q *queue) *tq {
	for len(t.tqs) <= q.idx {
		t.tqs = append(t.tqs, nil)
	}
	if l := t.tqs[q.idx]; l != nil {
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
	for i, lane := range t.lanes {
		l.nodes[i] = ringNode{tq: l, lane: lane}
	}
	t.tqs[q.idx] = l
	return l
}

// hasSlot reports whether the tenant may start another job.
func (b *Backend) hasSlot(t *tenant) bool {
	return t.shared || b.maxConc == 0 || t.running < b.maxConc
}

// push appends a waiting job to its tenant's line and wakes a worker that can
// run it.
func (b *Backend) push(j *job) {
	j.state = stateWaiting
	l := j.tq
	j.next = nil
	if l.tail == nil {
		l.head = j
	} else {
		l.tail.next = j
	}
	l.tail = j
	b.queued(l)
}

// pushFront puts a job that was handed kind capacity back at the head of its
// tenant's line.
func (b *Backend) pushFront(j *job) {
	j.state = stateWaiting
	l := j.tq
	j.next = l.head
	l.head = j
	if l.tail == nil {
		l.tail = j
	}
	b.queued(l)
}

// queued counts a job just put on l and lets a worker see it: an already
// linked line only needs a wake-up, an unlinked one may now be linkable.
func (b *Backend) queued(l *tq) {
	l.n++
	if l.linked {
		b.wakeOne(l)
		return
	}
	b.update(l)
}

// update links l into its rings when it has a ready job and its tenant a free
// slot, and unlinks it otherwise. Linking wakes a worker in each of its lanes.
func (b *Backend) update(l *tq) {
	want := l.n > 0 && b.hasSlot(l.ten)
	if want == l.linked {
		return
	}
	l.linked = want
	rings := l.q.rings
	for i := range l.nodes {
		nd := &l.nodes[i]
		if want {
			rings[nd.lane].pushBack(nd)
			b.wakeLane(nd.lane)
		} else {
			rings[nd.lane].remove(nd)
		}
	}
}

// updateTenant re-evaluates every line of t after its slot count changed.
func (b *Backend) updateTenant(t *tenant) {
	for _, l := range t.tqs {
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
		r := &q.rings[w.lane]
		for r.head != nil {
			b.steps++
			nd := r.head
			l := nd.tq
			j := l.head
			l.head = j.next
			if l.head == nil {
				l.tail = nil
			}
			j.next = nil
			l.n--
			if k := j.kind; k != nil {
				switch {
				case j.reserved:
					j.reserved = false
					k.reserved--
				case k.running+k.reserved >= k.limit:
					k.park(j)
					b.update(l)
					continue
				}
				k.running++
			}
			j.state = stateRunning
			j.ending.Store(false)
			j.row.Attempt++
			t := l.ten
			t.running++
			q.waiting--
			q.running++
			r.moveToBack(nd)
			if b.maxConc > 0 && !t.shared && t.running == b.maxConc {
				b.updateTenant(t) // out of slots: leave every ring
			} else {
				b.update(l)
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
	if b.maxConc > 0 && !t.shared && t.running == b.maxConc-1 {
		b.updateTenant(t) // a slot came free: rejoin the rings
	}
}

// drop forgets a job that completed or failed for good.
func (b *Backend) drop(j *job) {
	j.state = stateDone
	if j.uniq != "" {
		delete(b.unique, j.uniq)
	}
	t := j.tq.ten
	t.jobs--
	if t.jobs == 0 && !t.shared {
		b.makeIdle(t)
	}
	// Nothing refers to j any more: the Client gave up its row with
	// Complete or Fail (the Backend contract), and j has left every list,
	// map and the heap.
	jobPool.Put(j)
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
		delete(b.tenants, old.id)
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
	j.state = stateParked
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

// wakeOne wakes one idle worker that serves one of l's lanes.
func (b *Backend) wakeOne(l *tq) {
	for i := range l.nodes {
		if b.wakeLane(l.nodes[i].lane) {
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
	j.state = stateScheduled
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

func (r *ring) pushBack(n *ringNode) {
	n.next = nil
	n.prev = r.tail
	if r.tail != nil {
		r.tail.next = n
	} else {
		r.head = n
	}
	r.tail = n
}

func (r *ring) remove(n *ringNode) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		r.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		r.tail = n.prev
	}
	n.prev, n.next = nil, nil
}

func (r *ring) moveToBack(n *ringNode) {
	if r.tail != n {
		r.remove(n)
		r.pushBack(n)
	}
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
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *schedHeap) Push(x any) {
	j := x.(*job)
	j.heapIdx = len(*h)
	*h = append(*h, j)
}
func (h *schedHeap) Pop() any {
	old := *h
	n := len(old)
	j := old[n-1]
	old[n-1] = nil
	j.heapIdx = -1
	*h = old[:n-1]
	return j
}

var _ jobs.Backend = (*Backend)(nil)
