package shardmap

import (
	"context"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
)

// JobMiddleware makes a claimed job whose tenant's slot is frozen in set's
// map snooze for delay (jobs.Snooze: back to waiting, not counted as an
// attempt) instead of running, so no worker of the cell writes to a moving
// range between the freeze and the switch. A job that was already running
// when the freeze came finishes where it runs; the slot-move tool's fence
// at the source shard refuses its writes to the range.
func JobMiddleware(set *shards.Set, delay time.Duration) jobs.Middleware {
	return func(next jobs.WorkFunc) jobs.WorkFunc {
		return func(ctx context.Context, job *jobs.JobRow) error {
			if job.Tenant != "" && set.Frozen(job.Tenant) {
				return jobs.Snooze(delay)
			}
			return next(ctx, job)
		}
	}
}
