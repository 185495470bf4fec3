package local

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// job is the backend's record of a job: a 256-byte object, so 256-byte
// aligned. In a long backlog a job is cold when it is claimed, and every
// cache line of it that a job's life touches is a miss, so the layout keeps
// them to three: the fields the backend uses come first, in the first line,
// and the 40 bytes of them put the row's Handle in the third line with the
// fields the Client reads; the fourth line holds what only unique and
// delayed jobs use. A claim without kind caps reads none of them under
// the lock: tenant lines hold pointers to their jobs.
//
// Records are pooled (jobPool): row.Handle points back to the record, so a
// recycled record keeps it, and newJob resets only what it must.
type job struct {
	// next links the job in at most one list: its kind's parking list,
	// the inbox or finished stack, or the freed records.
	next *job
	line *tenantLine
	kind *cappedKind // nil: no concurrency cap
	// tenantHint and queueHint are Insert's lock-free look-ups of the
	// job's tenant (see Backend.tenantCache) and queue (1 + its index, see
	// Backend.queuesSnapshot), for admit; nil and 0 when not found there.
	tenantHint   *tenant
	reserved     bool // handed kind capacity while parked
	hasUniqueKey bool // uniqueKey is set (saves reading it on every drop)
	queueHint    uint8
	prio         uint8       // priority, 1..4 (see tenantLine)
	ending       atomic.Bool // the attempt was completed, retried or failed
	row          jobs.JobRow
	uniqueKey    string    // kind, tenant and unique key: the key of Backend.byUniqueKey
	runAt        time.Time // when a delayed job is due
	_            [16]byte  // to 256 bytes, a size class whose objects are aligned
}

// newJob returns a record for a job inserted at now, from the pool. It sets
// the fields one by one rather than assigning a whole record: that skips
// clearing the record and the write barrier's pass over all of it, and the
// fields it leaves are set before they are read (line by admit, runAt by
// delayUntil, ending by Claim; drop cleared uniqueKey).
func (b *Backend) newJob(p *jobs.InsertParams, now time.Time) *job {
	j := jobPool.Get().(*job)
	j.next = nil
	j.kind = nil
	j.tenantHint = nil
	j.queueHint = 0
	j.reserved = false
	j.hasUniqueKey = false
	j.prio = uint8(min(max(p.Priority, jobs.PriorityHighest), jobs.PriorityLowest))
	r := &j.row
	r.Kind = p.Kind
	r.Queue = p.Queue
	r.Tenant = p.Tenant
	r.EncodedArgs = p.EncodedArgs
	r.Args = p.Args
	r.Attempt = 0
	r.MaxAttempts = p.MaxAttempts
	r.EnqueuedAt = now
	r.TraceContext = p.TraceContext
	if r.Handle == nil { // a recycled record already points to itself
		r.Handle = j
	}
	return j
}

// drop forgets a job that completed or failed for good: it frees its unique
// key, lets its tenant go idle when this was its last job, and queues the
// record for recycling.
func (b *Backend) drop(j *job) {
	if j.hasUniqueKey {
		delete(b.byUniqueKey, j.uniqueKey)
		j.uniqueKey = ""
	}
	t := j.line.tenant
	t.jobs--
	if t.jobs == 0 && !t.shared {
		b.addIdleTenant(t)
	}
	// Nothing refers to j any more: the Client gave up its row with
	// Complete or Fail (the Backend contract), and j has left every list,
	// map and the heap. It goes back to the pool after the lock is
	// released (see unlockAndRecycle).
	j.next = b.freedRecords
	b.freedRecords = j
}

// unlockAndRecycle releases mu, then returns the records drop freed to the
// pool, so that the pool's work is not done while other workers wait for the
// lock. Paths that release mu otherwise (plain mu.Unlock) leave them to the
// next unlockAndRecycle; making every draining path (Insert, a Claim that
// parks, Retry, ...) return them at once measured about 3 % slower in
// BenchmarkLocalThroughput.
func (b *Backend) unlockAndRecycle() {
	f := b.freedRecords
	b.freedRecords = nil
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
