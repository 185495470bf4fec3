package admission

import (
	"strings"
	"testing"
	"time"
)

// newEngine builds an engine from DefaultConfig edited by mod, with a manual
// clock, and closes it when the test ends.
func newEngine(tb testing.TB, mod func(*Config)) (*Engine, *Clock) {
	tb.Helper()
	clk := NewManualClock()
	cfg := DefaultConfig()
	cfg.Clock = clk
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(e.Close)
	return e, clk
}

func mustAdmit(tb testing.TB, e *Engine, account string, cost int64) Permit {
	tb.Helper()
	p, o := e.Admit(account, cost)
	if o != Admitted {
		tb.Fatalf("Admit(%q, %d) = %v, want admitted", account, cost, o)
	}
	return p
}

// admitOnce admits and releases at once.
func admitOnce(tb testing.TB, e *Engine, account string, cost int64) {
	tb.Helper()
	p := mustAdmit(tb, e, account, cost)
	p.Release()
}

func mustLine(tb testing.TB, e *Engine, account string) LineReport {
	tb.Helper()
	r, ok := e.Line(account)
	if !ok {
		tb.Fatalf("Line(%q): account not held", account)
	}
	return r
}

func TestValidateNamesField(t *testing.T) {
	cases := []struct {
		field string
		mod   func(*Config)
	}{
		{"Shards", func(c *Config) { c.Shards = 3 }},
		{"Shards", func(c *Config) { c.Shards = 0 }},
		{"Shards", func(c *Config) { c.Shards = 2 * MaxShards }},
		{"Rate", func(c *Config) { c.Rate = -1 }},
		{"Burst", func(c *Config) { c.Rate = 10; c.Burst = 0 }},
		{"Burst", func(c *Config) { c.Rate = 1e-9; c.Burst = 1 << 40 }},
		{"MaxConcurrent", func(c *Config) { c.MaxConcurrent = -1 }},
		{"LeaseSize", func(c *Config) { c.LeaseSize = 0 }},
		{"OverageAllowance", func(c *Config) { c.OverageAllowance = -1 }},
		{"Funding", func(c *Config) { c.Funding = -5 }},
		{"IdleAfter", func(c *Config) { c.IdleAfter = 0 }},
		{"MaxAccounts", func(c *Config) { c.MaxAccounts = 0 }},
	}
	for _, tc := range cases {
		cfg := DefaultConfig()
		tc.mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "Config."+tc.field+":") {
			t.Errorf("%s: Validate() = %v, want an error naming Config.%s", tc.field, err, tc.field)
		}
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted an invalid config", tc.field)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig invalid: %v", err)
	}
}

func TestShardsFor(t *testing.T) {
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 4, 8: 8, 9: 16, 5000: MaxShards} {
		if got := ShardsFor(n); got != want {
			t.Errorf("ShardsFor(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestOutcomeStrings(t *testing.T) {
	seen := map[string]bool{}
	for _, o := range Outcomes() {
		s := o.String()
		if s == "unknown" || seen[s] {
			t.Errorf("outcome %d has name %q", o, s)
		}
		seen[s] = true
	}
	if Outcome(0).String() != "unknown" || Outcome(200).String() != "unknown" {
		t.Error("out-of-range outcomes must be unknown")
	}
	if !Admitted.OK() || RejectedRate.OK() {
		t.Error("OK() wrong")
	}
}

func TestLayoutReport(t *testing.T) {
	e, _ := newEngine(t, nil)
	l := e.Layout()
	if l.Shards != 1 || l.String() != "SINGLE" {
		t.Errorf("default layout %+v %s, want SINGLE", l, l)
	}
	if l.TallyPartitions < AvailableParallelism() || l.TallyPartitions&(l.TallyPartitions-1) != 0 {
		t.Errorf("tally partitions %d: want a power of two >= GOMAXPROCS %d", l.TallyPartitions, AvailableParallelism())
	}
	e8, _ := newEngine(t, func(c *Config) { c.Shards = 8 })
	if l := e8.Layout(); l.Shards != 8 || l.String() != "SHARDED(8)" || l.TallyPartitions < 8 {
		t.Errorf("layout %+v %s", l, l)
	}
	if e8.Report().Layout != e8.Layout() {
		t.Error("Report().Layout differs from Layout()")
	}
}

var _ = time.Second
