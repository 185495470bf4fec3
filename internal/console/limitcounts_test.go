package console_test

import (
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/console"
)

// TestLimitCounts: per-resource counts per tenant in at most k places; a
// newcomer takes the least counted tenant's place and inherits its count
// as its error; an unknown resource counts nothing.
func TestLimitCounts(t *testing.T) {
	l := console.NewLimitCounts(2)
	for range 3 {
		l.Add("acme", console.ResourceRate, false)
	}
	l.Add("acme", console.ResourceDB, true)
	l.Add("globex", console.ResourceQuota, false)
	l.Add("globex", "bandwidth", false)
	if got, _ := l.Of("acme"); got != (console.LimitTally{Refused: console.ResourceCounts{Rate: 3}, Shadow: console.ResourceCounts{DB: 1}}) {
		t.Errorf("acme = %+v", got)
	}
	if got, _ := l.Of("globex"); got != (console.LimitTally{Refused: console.ResourceCounts{Quota: 1}}) {
		t.Errorf("globex = %+v", got)
	}
	l.Add("initech", console.ResourceRequest, false)
	if _, held := l.Of("globex"); held {
		t.Error("globex, the least counted, was not displaced")
	}
	if got, _ := l.Of("initech"); got != (console.LimitTally{Refused: console.ResourceCounts{Request: 1}, Error: 1}) {
		t.Errorf("initech = %+v, want one request refusal with error 1", got)
	}
	if top := strings.Join(l.Top(5), ","); top != "acme,initech" {
		t.Errorf("top = %s", top)
	}
}

// BenchmarkLimitCountsAdd: a refusal of a held tenant allocates nothing.
func BenchmarkLimitCountsAdd(b *testing.B) {
	l := console.NewLimitCounts(256)
	l.Add("acme", console.ResourceRate, false)
	b.ReportAllocs()
	for b.Loop() {
		l.Add("acme", console.ResourceRate, false)
	}
}
