// Package jobs is cellgate's background job runtime: the API the app and the
// generated code use (kinds, args, workers, Client), the configuration, and the
// Backend boundary that storage engines implement.
//
// The split follows one rule: everything that is the same whatever stores the
// jobs lives here (argument encoding, tenant capture, uniqueness keys, running
// a handler with its timeout, turning a panic into a failure, retry backoff,
// graceful shutdown, metrics); everything about where jobs wait and in which
// order they are handed out lives in a Backend (internal/jobs/local keeps them
// in memory with fair order, slots and lanes; a PostgreSQL backend keeps them in
// a table). internal/jobs/jobstest holds the conformance suite every backend's
// tests run.
//
// Concurrency: a Client is safe for concurrent use once NewClient returns;
// Enqueue may be called from any goroutine, before Start and while workers run.
// Workers is a plain registry: fill it from one goroutine before NewClient.
// ShuffleShard and Config methods are pure functions.
package jobs
