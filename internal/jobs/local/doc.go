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
// together in the same cache line (see job, tenant, tenantLine, queue and
// Backend; TestRecordSizes pins the sizes).
//
// Jobs live in memory: Close (and the end of the process) drops every waiting
// job, and a running job abandoned at shutdown is not run again.
//
// Where things are: backend.go has the Backend and the jobs.Backend methods;
// handoff.go the lock-free inbox and finished stacks and drain, which
// applies them; records.go the pooled job records; queues.go the queues and
// their lane rings; tenants.go, tenantcache.go and lines.go the tenants, the
// lock-free cache of them and their line in each queue; scheduler.go the
// choice of a worker's next job and the ring membership of lines;
// workers.go the parked workers and their wake-ups; parking.go the kinds
// with a concurrency cap; delayed.go the jobs not yet due; clock.go now.
package local
