//go:build !cellgate_nolinkname

package admission

import (
	"runtime"
	_ "unsafe" // for go:linkname
)

// The runtime's procPin/procUnpin are what sync.Pool uses to find its per-P
// cache. The runtime keeps them as a supported ("push") linkname target — its
// source marks both "Do not remove or change the type signature. See
// go.dev/issue/67401." — so the linker's -checklinkname accepts this pull
// without flags. See the package doc for why calling them is safe here, and
// procpin_fallback.go for the build without them.

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// procIndex returns the index of the P the calling goroutine runs on. Pin and
// unpin bracket a single field read, so nothing can block, allocate or be
// preempted while preemption is disabled.
func procIndex() int {
	p := procPin()
	procUnpin()
	return p
}

// procLinked reports whether procIndex reads the real P index.
const procLinked = true

// procBound returns an exclusive upper bound on procIndex's results.
func procBound() int { return runtime.GOMAXPROCS(0) }
