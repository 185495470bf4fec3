// Package console is a cell's operator console: a JSON API under
// /admin/api/ and server-rendered HTML pages under /admin/, over the jobs
// of every database of the cell (control and shards), their queues, the
// admission report, the slot map and the job lanes.
//
// Two tokens guard it: the admin token (server.admin_token_env) reads, the
// operator token (server.operator_token_env) also acts on jobs, pauses
// and resumes queues (where the backend can: jobs.QueuePauser) and changes
// tenants' plans and overrides through the tenant table's store
// (Config.Plans). Scripts
// send "Authorization: Bearer <token>"; a browser trades the token for a
// session at /admin/login (consoleauth), kept in the cell's control
// database (PGSessions, with its own migrations), so a logout ends it in
// every process of the cell at once; every form that acts carries the
// session's own CSRF secret. Wrong tokens are throttled per source, the
// client address comes from trusted proxies only, and every answer is
// marked no-store, nosniff and no-referrer. A bulk action first answers
// the count it would touch and a confirmation its second call presents.
// Each action writes one audit log line naming the token or the session
// (a tenant change also its row before and after).
//
// Reads fan out to the databases at once, each under its own timeout
// (Config.DatabaseTimeout): a database that is down or slow makes the
// answer partial, naming it and its error, and never delays the others
// past that timeout. The queue counts (overview, queues API) come from a
// per-database cache at most CountsMaxAge old, kept warm while it is read
// (counts.go), so a page at a million jobs does not count them per request.
// Those counts run in the background; Console.Close ends them and waits.
//
// Its charts over time come from a sampler its owner runs
// (Console.RunSampler, stopped by cancelling its context): every
// Config.SampleEvery it fills fixed rings for the cell and the most refused
// tenants, so its memory does not grow with time or tenants.
//
// Concurrency: a Console is safe for concurrent use; its configuration is
// fixed after New, every request works on its own values, the count cache
// and the bulk actions guard their own state, and the series the sampler
// writes are under a lock the pages take to copy them; TopK and
// LimitCounts guard their own maps, and the plans store is safe for
// concurrent use. The databases' methods must be safe for concurrent use
// (a *pgjobs.DB is).
package console
