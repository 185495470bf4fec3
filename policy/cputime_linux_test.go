//go:build linux

package policy

import (
	"runtime"
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD: the calling thread only.
const rusageThread = 1

// threadCPU returns the CPU time (user + system) of the calling OS thread;
// callers lock their goroutine to the thread. Eval timing uses it beside
// wall time: other processes on a shared CI machine stretch wall time, but
// hardly the CPU an evaluation itself burns on its thread.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// lockThread pins the calling goroutine to its thread for threadCPU.
func lockThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
