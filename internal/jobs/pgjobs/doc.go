// Package pgjobs is the PostgreSQL job backend: Backend, the jobs.Backend
// of a cell, serves the cellgate_jobs table of the control database and,
// with shard_local, of every shard (one DB each) to one jobs.Client. The
// package owns its schema: migrations/ holds its golang-migrate files,
// which Migrate applies under their own migrations table
// (cellgate_jobs_schema_migrations), apart from the app's.
//
// What one DB does, and where (docs/jobs-postgres.md has the SQL):
//
//   - Insert: plain enqueues are coalesced, so concurrent callers share one
//     multi-row INSERT (one commit, one WAL flush) and each still waits for
//     its own commit; an enqueue carried in a caller's transaction
//     (jobs.Client.EnqueueTx, which Backend.InsertTx sends to the
//     transaction's database) is one statement in that transaction.
//     Uniqueness is a partial unique index over active jobs. On the control
//     database plain enqueues pass a circuit breaker.
//   - Claim: one goroutine per DB (the fetcher) claims, in one round
//     trip, a job for every worker waiting in Claim plus a prefetch sized
//     to what the workers asked for during the previous round trip
//     (FOR UPDATE SKIP LOCKED; per-kind caps under an advisory lock); see
//     fetch.go. A claim waits for its WAL flush, so a database crash cannot
//     put a job a worker runs back in the queue; the jobs of a claim whose
//     answer the connection lost are handed back before the next claim.
//     FIFO claims (cellgate_jobs_claim) read the oldest ready jobs from one
//     index. Fair claims (cellgate_jobs_claim_turns) name the tenants whose
//     turn it is: the fetcher keeps the turns between tenants by their
//     weights (turns.go), and the claim takes each named tenant's best
//     ready jobs by priority within its room under its cap. Idle, the
//     fetcher waits for a NOTIFY, a local insert, a scheduled time, a
//     capped tenant's freed room or the poll interval.
//   - Pause: PauseQueue stores a paused queue in cellgate_jobs_paused
//     (jobs.QueuePauser; pause.go); every claim reads that table once and
//     skips the queue's jobs until ResumeQueue, which NOTIFYs.
//   - Complete is buffered and written in batches (piggybacked on the next
//     claim, or after CompleteFlush) without waiting for the WAL flush;
//     every CompleteConfirm the completions written since are written again
//     durably (retried with backoff while the database is down), so a
//     database crash does not make a finished job run again. A completion
//     lost with this process is: the job is rescued and runs again.
//   - One dedicated connection per DB listens for notifications, sends
//     the heartbeats of the jobs this process runs, and, when it holds the
//     table's advisory lock (one leader per table), rescues jobs whose
//     heartbeats stopped and deletes finished jobs past their retention.
//
// Concurrency: every exported method of Backend and DB is safe for
// concurrent use. A Backend follows the jobs.Backend life cycle (Open once,
// Close once, the rest concurrently); its goroutines and those of its DBs
// stop in Close.
package pgjobs
