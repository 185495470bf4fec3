//go:build !testhooks

package idempotency

import (
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/config"
)

// TestNoTestHookWithoutTag: in a build without the testhooks tag (every
// release build), the environment variable the end-to-end kill test uses
// does nothing: no Keys stalls after its commit.
func TestNoTestHookWithoutTag(t *testing.T) {
	t.Setenv("CELLGATE_TESTHOOK_STALL_AFTER_COMMIT", "1")
	if testHookAfterCommit != nil {
		t.Fatal("testHookAfterCommit is set in a build without the testhooks tag")
	}
	k, err := New(Options{Config: config.Idempotency{TTL: config.Duration(time.Hour), Lease: config.Duration(time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	if k.afterCommit != nil {
		t.Fatal("a Keys has an afterCommit hook in a build without the testhooks tag")
	}
}
