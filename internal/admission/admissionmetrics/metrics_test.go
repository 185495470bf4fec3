package admissionmetrics

import (
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newEngine(tb testing.TB, mod func(*admission.Config)) *admission.Engine {
	tb.Helper()
	cfg := admission.DefaultConfig()
	cfg.Clock = admission.NewManualClock()
	mod(&cfg)
	e, err := admission.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Close)
	return e
}

func TestCollectorLintsAndCounts(t *testing.T) {
	e := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 1; c.Shards = 2 })
	held, _ := e.Admit("t1", 1)
	if _, o := e.Admit("t1", 1); o != admission.RejectedConcurrency {
		t.Fatalf("outcome %v", o)
	}
	p, _ := e.Admit("t2", 1)
	p.Release()

	c := New(e, "request")
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("lint problems: %+v", problems)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	want := `
# HELP cellgate_admission_outcomes_total Admission decisions by outcome.
# TYPE cellgate_admission_outcomes_total counter
cellgate_admission_outcomes_total{engine="request",outcome="admitted"} 2
cellgate_admission_outcomes_total{engine="request",outcome="rejected_capacity"} 0
cellgate_admission_outcomes_total{engine="request",outcome="rejected_concurrency"} 1
cellgate_admission_outcomes_total{engine="request",outcome="rejected_quota"} 0
cellgate_admission_outcomes_total{engine="request",outcome="rejected_rate"} 0
# HELP cellgate_admission_accounts Accounts held.
# TYPE cellgate_admission_accounts gauge
cellgate_admission_accounts{engine="request"} 2
# HELP cellgate_admission_in_flight_permits Permits admitted and not yet released.
# TYPE cellgate_admission_in_flight_permits gauge
cellgate_admission_in_flight_permits{engine="request"} 1
# HELP cellgate_admission_shards Shards per account (1 = SINGLE).
# TYPE cellgate_admission_shards gauge
cellgate_admission_shards{engine="request"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"cellgate_admission_outcomes_total", "cellgate_admission_accounts",
		"cellgate_admission_in_flight_permits", "cellgate_admission_shards"); err != nil {
		t.Fatal(err)
	}
	held.Release()
	after := `
# HELP cellgate_admission_in_flight_permits Permits admitted and not yet released.
# TYPE cellgate_admission_in_flight_permits gauge
cellgate_admission_in_flight_permits{engine="request"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(after), "cellgate_admission_in_flight_permits"); err != nil {
		t.Fatal(err)
	}
}

func TestTwoEnginesOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(newEngine(t, func(*admission.Config) {}), "request"))
	reg.MustRegister(New(newEngine(t, func(*admission.Config) {}), "db"))
	if n, err := testutil.GatherAndCount(reg, "cellgate_admission_accounts"); err != nil || n != 2 {
		t.Fatalf("gathered %d series (%v), want one per engine", n, err)
	}
}
