//go:build cellgate_nolinkname

package admission

import (
	"math/rand/v2"
	"runtime"
)

// Build with -tags cellgate_nolinkname if runtime.procPin ever stops being a
// linkname target. The engine then spreads admissions over pseudo-P indexes
// drawn from the runtime's per-M random source (no lock, no allocation):
// contention is spread statistically instead of avoided, every correctness
// property is unchanged, and GOMAXPROCS changes after start-up are not seen.

var fallbackProcs = uint32(runtime.GOMAXPROCS(0))

func procIndex() int {
	return int(rand.Uint32N(fallbackProcs))
}

// procLinked reports whether procIndex reads the real P index.
const procLinked = false

// procBound returns an exclusive upper bound on procIndex's results.
func procBound() int { return int(fallbackProcs) }
