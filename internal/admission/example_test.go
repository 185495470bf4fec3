package admission_test

import (
	"fmt"

	"github.com/cellgate/cellgate/internal/admission"
)

// A per-tenant bulkhead: at most two requests in flight per tenant, and a
// funded quota for one tenant.
func Example() {
	cfg := admission.DefaultConfig()
	cfg.MaxConcurrent = 2
	cfg.Shards = admission.ShardsFor(admission.AvailableParallelism())
	e, err := admission.New(cfg)
	if err != nil {
		panic(err)
	}
	defer e.Close()

	a, _ := e.Admit("acme", 1)
	b, _ := e.Admit("acme", 1)
	_, o := e.Admit("acme", 1)
	fmt.Println("third request:", o)
	a.Release()
	b.Release()

	e.Fund("globex", 1)
	p, o := e.Admit("globex", 1)
	fmt.Println("first unit:", o)
	p.Release()
	_, o = e.Admit("globex", 1)
	fmt.Println("second unit:", o)

	fmt.Println("in flight:", e.InFlight())
	// Output:
	// third request: rejected_concurrency
	// first unit: admitted
	// second unit: rejected_quota
	// in flight: 0
}

// An embedder admitting from its own long-lived workers claims one affinity
// per worker, once.
func ExampleClaimAffinity() {
	e, _ := admission.New(admission.DefaultConfig())
	defer e.Close()
	done := make(chan admission.Outcome)
	for range 2 {
		go func() {
			aff := admission.ClaimAffinity() // once per worker, never per job
			p, o := e.AdmitAt(aff, "acme", 1)
			p.Release()
			done <- o
		}()
	}
	fmt.Println(<-done, <-done)
	// Output: admitted admitted
}
