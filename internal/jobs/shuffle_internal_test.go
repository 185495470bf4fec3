package jobs

import (
	"slices"
	"testing"
)

// TestUnrankIsLexicographic checks the unranking against a brute-force
// enumeration of the k-subsets in lexicographic order.
func TestUnrankIsLexicographic(t *testing.T) {
	for n := 1; n <= 10; n++ {
		for k := 1; k <= n; k++ {
			var all [][]int
			var rec func(start int, cur []int)
			rec = func(start int, cur []int) {
				if len(cur) == k {
					all = append(all, slices.Clone(cur))
					return
				}
				for x := start; x < n; x++ {
					rec(x+1, append(cur, x))
				}
			}
			rec(0, nil)
			if uint64(len(all)) != binom[n][k] {
				t.Fatalf("C(%d, %d) = %d, enumeration has %d", n, k, binom[n][k], len(all))
			}
			for r, want := range all {
				if got := appendUnrank(nil, uint64(r), n, k); !slices.Equal(got, want) {
					t.Fatalf("unrank(%d, %d, %d) = %v, want %v", r, n, k, got, want)
				}
			}
		}
	}
}

func TestBinomFitsAndIsExact(t *testing.T) {
	if binom[64][32] != 1832624140942590534 {
		t.Fatalf("C(64, 32) = %d", binom[64][32])
	}
}
