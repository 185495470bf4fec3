//go:build !unix

package tests

import "time"

// processCPU is unavailable here; CPU-based ratios read 0/0 and are not
// reported.
func processCPU() time.Duration { return 0 }
