package drain

import (
	"sync"
	"testing"
)

func TestRetiredCountsAndForgets(t *testing.T) {
	var r Retired
	var a, b Counter
	a.Enter()
	a.Enter()
	b.Enter()
	r.Add(&a)
	r.Add(nil)
	r.Add(&b)
	if n := r.InFlight(); n != 3 || r.Len() != 2 {
		t.Fatalf("InFlight = %d with %d held, want 3 with 2", n, r.Len())
	}
	b.Leave()
	if n := r.InFlight(); n != 2 || r.Len() != 1 {
		t.Fatalf("after b drained: InFlight = %d with %d held, want 2 with 1", n, r.Len())
	}
	a.Leave()
	a.Leave()
	if n := r.InFlight(); n != 0 || r.Len() != 0 {
		t.Fatalf("after all drained: InFlight = %d with %d held, want 0 with 0", n, r.Len())
	}
}

func TestCounterConcurrent(t *testing.T) {
	var c Counter
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Enter()
				c.Leave()
			}
		})
	}
	wg.Wait()
	if n := c.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d after balanced Enter/Leave, want 0", n)
	}
}

func BenchmarkCounterEnterLeave(b *testing.B) {
	var c Counter
	b.ReportAllocs()
	for b.Loop() {
		c.Enter()
		c.Leave()
	}
}
