package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// DefaultQueue is the queue of a kind whose spec leaves Queue empty.
const DefaultQueue = "default"

// DefaultMaxAttempts is the attempt budget of a kind whose spec leaves
// MaxAttempts at 0.
const DefaultMaxAttempts = 5

// KindSpec is the static description of one job kind. The generator emits one
// per kind of the CUE spec; app code never builds one by hand except in tests.
type KindSpec struct {
	// Name identifies the kind in storage, logs and the kind metric label.
	// Required; it must be unique among the registered kinds.
	Name string
	// Queue is the queue the kind's jobs wait in. Each queue has its own fair
	// order; workers serve all queues. Empty means DefaultQueue.
	Queue string
	// MaxAttempts is how many times a job runs before it fails for good
	// (the first run counts). 0 means DefaultMaxAttempts.
	MaxAttempts int
	// Timeout bounds one attempt: the handler's context is cancelled when it
	// elapses and the attempt counts as failed. 0 means no timeout.
	Timeout time.Duration
	// Concurrency caps the jobs of this kind that run at the same time in one
	// backend (for the local backend: in the process). 0 means no cap.
	Concurrency int
	// UniqueBy lists the JSON names of the arguments that make a job unique.
	// When set, the args type must implement UniqueArgs, and an enqueue is a
	// no-op while a job of the same kind, tenant and UniqueKey is active
	// (waiting, running or waiting for a retry).
	UniqueBy []string
	// Priority orders the kind's jobs among the other waiting jobs of the
	// same tenant, 1 (first) to 4 (last), as River's; WithPriority
	// overrides it per enqueue. 0 means PriorityHighest.
	Priority int
}

// Validate reports the first invalid field, named as in the spec.
func (s KindSpec) Validate() error {
	switch {
	case s.Name == "":
		return errors.New("jobs: kind.name is required")
	case s.MaxAttempts < 0:
		return fmt.Errorf("jobs: kind %q: max_attempts must be >= 0, got %d", s.Name, s.MaxAttempts)
	case s.Timeout < 0:
		return fmt.Errorf("jobs: kind %q: timeout must be >= 0, got %s", s.Name, s.Timeout)
	case s.Concurrency < 0:
		return fmt.Errorf("jobs: kind %q: concurrency must be >= 0, got %d", s.Name, s.Concurrency)
	case s.Priority < 0 || s.Priority > PriorityLowest:
		return fmt.Errorf("jobs: kind %q: priority must be 1..%d (0 for the default, 1), got %d", s.Name, PriorityLowest, s.Priority)
	}
	for i, f := range s.UniqueBy {
		if f == "" {
			return fmt.Errorf("jobs: kind %q: unique_by[%d] is empty", s.Name, i)
		}
	}
	return nil
}

// withDefaults fills the zero values that have defaults. Defaults of a kind
// live here and nowhere else.
func (s KindSpec) withDefaults() KindSpec {
	s.Queue = cmp.Or(s.Queue, DefaultQueue)
	s.Priority = cmp.Or(s.Priority, PriorityHighest)
	s.MaxAttempts = cmp.Or(s.MaxAttempts, DefaultMaxAttempts)
	return s
}

// Args is implemented by the argument struct of every job kind. Generated
// structs implement it with a value receiver returning a package-level spec,
// so Register can read the spec from the zero value of the type.
//
// The struct is encoded with encoding/json on Enqueue and decoded into a fresh
// value before the handler runs, with every backend: a job that works on the
// local backend works on PostgreSQL too.
type Args interface {
	JobSpec() KindSpec
}

// UniqueArgs is implemented by the args of kinds whose spec sets UniqueBy.
// UniqueKey returns the values of the UniqueBy fields, encoded with
// UniqueKeyOf.
type UniqueArgs interface {
	Args
	UniqueKey() string
}

// UniqueKeyOf encodes values as a uniqueness key: a JSON array, so ("a,b")
// and ("a", "b") never collide. Generated UniqueKey methods call it with the
// UniqueBy fields in spec order.
func UniqueKeyOf(values ...any) string {
	b, err := json.Marshal(values)
	if err != nil {
		// Args fields are JSON-encodable by construction (the whole struct is
		// encoded on Enqueue), so this is a programming error.
		panic(fmt.Sprintf("jobs: UniqueKeyOf: %v", err))
	}
	return string(b)
}

// JobID identifies a job within its backend. IDs are positive.
type JobID int64

// Job is what a handler receives: the decoded args and the attempt's facts.
type Job[T Args] struct {
	// ID is the job's id, stable across attempts.
	ID JobID
	// Kind is the kind's name.
	Kind string
	// Queue is the queue the job waited in.
	Queue string
	// Tenant is the tenant that enqueued the job, "" for none. The handler's
	// context carries it too (tenant.From), so jobs enqueued by the handler
	// inherit it.
	Tenant string
	// Attempt is 1 on the first run and grows by one per retry.
	Attempt int
	// MaxAttempts is the attempt budget; Attempt == MaxAttempts is the last try.
	MaxAttempts int
	// EnqueuedAt is when the job was first enqueued.
	EnqueuedAt time.Time
	// Args are the decoded arguments.
	Args T
}

// permanentError marks a failure that must not be retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the job fails for good at once, whatever
// attempts remain (for example: the args name a record that no longer exists).
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err (or an error it wraps) came from Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// snoozeError is a handler's request to run the job again later.
type snoozeError struct{ delay time.Duration }

func (e *snoozeError) Error() string { return "snoozed for " + e.delay.String() }

// Snooze is what a handler returns to put its job back to waiting and run
// it again once d has passed (0 or less: as soon as a worker is free), for
// work that is not ready yet (a rate limit, a resource still being built).
// The attempt is not counted: the next run has the same Job.Attempt, and
// the job's MaxAttempts is not consumed, so a job may snooze any number of
// times. Wrapped in another error, it still snoozes.
func Snooze(d time.Duration) error { return &snoozeError{delay: d} }

// snoozed reports whether err came from Snooze, and its delay.
func snoozed(err error) (time.Duration, bool) {
	if s, ok := errors.AsType[*snoozeError](err); ok {
		return s.delay, true
	}
	return 0, false
}

// EnqueueResult is what Enqueue reports.
type EnqueueResult struct {
	// ID is the new job, or the active job that made this enqueue a duplicate.
	ID JobID
	// Duplicate is true when a unique job with the same key was already active
	// and nothing was inserted.
	Duplicate bool
}

// EnqueueOption adjusts one Enqueue.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct {
	runAt    time.Time
	noTenant bool
	priority int // 0: the kind's
}

// RunAt makes the job wait until t before it can run.
func RunAt(t time.Time) EnqueueOption {
	return func(o *enqueueOptions) { o.runAt = t }
}

// WithoutTenant enqueues a job without a tenant even when the context carries
// one (system work started from a request). Such jobs are not limited by
// tenant slots or lanes.
func WithoutTenant() EnqueueOption {
	return func(o *enqueueOptions) { o.noTenant = true }
}

// handlerFunc runs one attempt of a registered kind: decode, then call the
// app's function. The Client adds timeout, panic recovery and accounting.
type handlerFunc func(ctx context.Context, row *JobRow) error
