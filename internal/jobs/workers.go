package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
)

// Workers is the registry of job handlers, one per kind. Fill it before
// NewClient (it is not safe for concurrent use); NewClient takes a snapshot,
// and registering afterwards panics so a late registration is not silently
// ignored.
type Workers struct {
	kinds map[string]*registered
	used  bool
}

// registered is one kind as the Client runs it.
type registered struct {
	spec KindSpec
	run  handlerFunc
	// check decodes args as the kind's args type, strictly (unknown
	// fields refused): a periodic entry's args are checked at start-up.
	check func(args []byte) error
	// plain: the args type survives a JSON round trip unchanged, so an
	// in-process backend may hand the enqueued value over (see plain.go).
	plain bool
	// idx is the kind's index in the Client's per-worker counts (see
	// folder); set per Client.
	idx int
}

// NewWorkers returns an empty registry.
func NewWorkers() *Workers {
	return &Workers{kinds: make(map[string]*registered)}
}

// Register makes fn the handler of the kind of T, whose spec comes from the
// zero value of T (so T must be the generated struct type, not a pointer). It
// panics on a duplicate kind, an invalid spec, a nil fn, a registry already
// given to a Client, or a spec with UniqueBy whose T does not implement
// UniqueArgs: all programming errors caught at start-up.
//
// fn's context carries the job's tenant (tenant.From) and is cancelled at the
// kind's timeout and at a hard shutdown. An error (or a panic) fails the
// attempt; wrap an error with Permanent to stop retrying.
func Register[T Args](w *Workers, fn func(ctx context.Context, job *Job[T]) error) {
	var zero T
	spec := zero.JobSpec()
	if err := spec.Validate(); err != nil {
		panic(err)
	}
	switch {
	case fn == nil:
		panic(fmt.Sprintf("jobs: Register(%q): nil handler", spec.Name))
	case w.used:
		panic(fmt.Sprintf("jobs: Register(%q): the Workers registry is already used by a Client", spec.Name))
	case w.kinds[spec.Name] != nil:
		panic(fmt.Sprintf("jobs: Register(%q): kind registered twice", spec.Name))
	}
	if len(spec.UniqueBy) > 0 {
		if _, ok := any(zero).(UniqueArgs); !ok {
			panic(fmt.Sprintf("jobs: Register(%q): spec has unique_by but %T does not implement UniqueArgs", spec.Name, zero))
		}
	}
	spec = spec.withDefaults()
	w.kinds[spec.Name] = &registered{
		spec:  spec,
		plain: plainArgs(reflect.TypeFor[T]()),
		check: func(args []byte) error {
			var v T
			d := json.NewDecoder(bytes.NewReader(args))
			d.DisallowUnknownFields()
			return d.Decode(&v)
		},
		run: func(ctx context.Context, row *JobRow) error {
			job := &Job[T]{
				ID:          row.ID,
				Kind:        row.Kind,
				Queue:       row.Queue,
				Tenant:      row.Tenant,
				Attempt:     row.Attempt,
				MaxAttempts: row.MaxAttempts,
				EnqueuedAt:  row.EnqueuedAt,
			}
			if v, ok := row.Args.(T); ok {
				job.Args = v
			} else if err := json.Unmarshal(row.EncodedArgs, &job.Args); err != nil {
				// The bytes will not decode better next time.
				return Permanent(fmt.Errorf("decode args of %s: %w", row.Kind, err))
			}
			return fn(ctx, job)
		},
	}
}

// Kinds returns the specs of the registered kinds, with defaults applied,
// sorted by name.
func (w *Workers) Kinds() []KindSpec {
	out := make([]KindSpec, 0, len(w.kinds))
	for _, r := range w.kinds {
		out = append(out, r.spec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
