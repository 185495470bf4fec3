//go:build testhooks

package idempotency

import (
	"fmt"
	"os"
)

// StallAfterCommitEnv, set to 1 in the environment of a binary built with
// -tags testhooks, stops every idempotent request whose answer has been
// committed before the answer is written: the process prints
// StalledAfterCommit on stderr and the request waits forever, so a test
// can kill -9 the process exactly between the commit and the answer.
const StallAfterCommitEnv = "CELLGATE_TESTHOOK_STALL_AFTER_COMMIT"

// StalledAfterCommit is the line printed when a request stalls.
const StalledAfterCommit = "testhook: idempotent answer committed, not written; stalling"

func init() {
	if os.Getenv(StallAfterCommitEnv) != "1" {
		return
	}
	testHookAfterCommit = func() {
		fmt.Fprintln(os.Stderr, StalledAfterCommit)
		select {}
	}
}
