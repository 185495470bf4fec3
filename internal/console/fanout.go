package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// DatabaseStatus is one database's part of an answer: "" Error when it
// answered.
type DatabaseStatus struct {
	// Database is the database's name.
	Database string `json:"database"`
	// Error says why its part is missing ("" when it answered).
	Error string `json:"error,omitempty"`
}

// part is one database's answer to a fan-out.
type part[T any] struct {
	db  Database
	val T
	err error
}

// fanOut calls fn on every database at once, each under its own timeout,
// and returns their answers in the databases' order. A database that has
// not answered when its timeout (plus a short grace for the driver to give
// up) has passed is reported as timed out and no longer waited for: its
// goroutine finishes on its own, into a buffered channel.
func fanOut[T any](ctx context.Context, dbs []Database, timeout time.Duration, fn func(context.Context, Database) (T, error)) []part[T] {
	type indexed struct {
		i int
		p part[T]
	}
	ch := make(chan indexed, len(dbs))
	for i, db := range dbs {
		go func() {
			if !db.Ready() {
				ch <- indexed{i, part[T]{db: db, err: pgjobs.ErrNotReady}}
				return
			}
			dctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			v, err := fn(dctx, db)
			if err != nil && errors.Is(dctx.Err(), context.DeadlineExceeded) {
				err = fmt.Errorf("no answer within %s: %w", timeout, err)
			}
			ch <- indexed{i, part[T]{db: db, val: v, err: err}}
		}()
	}
	out := make([]part[T], len(dbs))
	got := make([]bool, len(dbs))
	timer := time.NewTimer(timeout + 100*time.Millisecond)
	defer timer.Stop()
	for n := 0; n < len(dbs); n++ {
		select {
		case r := <-ch:
			out[r.i], got[r.i] = r.p, true
		case <-timer.C:
			for i, db := range dbs {
				if !got[i] {
					out[i] = part[T]{db: db, err: fmt.Errorf("no answer within %s", timeout)}
				}
			}
			return out
		}
	}
	return out
}

// statuses names every database of parts and the error of those that
// failed; partial is true when any did.
func statuses[T any](parts []part[T]) (st []DatabaseStatus, partial bool) {
	st = make([]DatabaseStatus, len(parts))
	for i, p := range parts {
		st[i].Database = p.db.Name()
		if p.err != nil {
			st[i].Error, partial = p.err.Error(), true
		}
	}
	return st, partial
}
