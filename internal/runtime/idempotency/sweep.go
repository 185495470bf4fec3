package idempotency

import (
	"context"
	"time"

	"github.com/cellgate/cellgate/internal/shards"
)

// sweepBatch is how many rows one sweep statement deletes: small enough
// that a backlog never holds many row locks at once.
const sweepBatch = 1000

// RunSweeper deletes expired keys on every shard of sh every interval
// until ctx ends. Several processes of a cell may sweep at once: a row
// another sweep holds is skipped, and deleting is idempotent.
func (k *Keys) RunSweeper(ctx context.Context, sh []*shards.Shard, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, s := range sh {
			n, err := Sweep(ctx, s, k.now(), sweepBatch)
			switch {
			case err != nil && ctx.Err() == nil:
				k.log.Warn("idempotency: sweeping expired keys failed", "shard", s.Name, "error", err.Error())
			case n > 0:
				k.log.Debug("idempotency: swept expired keys", "shard", s.Name, "deleted", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
