//go:build !linux

package policy

import "time"

// threadCPU is unavailable here; eval timing then relies on wall time alone.
func threadCPU() (time.Duration, bool) { return 0, false }

func lockThread() func() { return func() {} }
