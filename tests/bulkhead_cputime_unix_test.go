//go:build unix

package tests

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) this process has used. On
// a shared host, CPU per request is steadier than wall-clock throughput.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
