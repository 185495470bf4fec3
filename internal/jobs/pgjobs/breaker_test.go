package pgjobs

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBreaker(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	b := newBreaker(3, 10*time.Second, clock)
	reg := prometheus.NewRegistry()
	if err := b.register(reg); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("connection refused")
	call := func(err error) error {
		if e := b.allow(); e != nil {
			return e
		}
		b.done(err)
		return err
	}
	// Failures that are not consecutive do not open it.
	for _, err := range []error{boom, boom, nil, boom, boom} {
		if call(err) == ErrBreakerOpen {
			t.Fatal("rejected while closed")
		}
	}
	if b.current() != breakerClosed {
		t.Fatal("opened without 3 consecutive failures")
	}
	// A caller giving up says nothing about the database.
	if call(context.Canceled); b.current() != breakerClosed {
		t.Fatal("a cancelled call opened the breaker")
	}
	if call(boom); b.current() != breakerOpen {
		t.Fatalf("state %d after the third consecutive failure, want open", b.current())
	}
	for range 4 {
		if err := call(nil); !errors.Is(err, ErrBreakerOpen) {
			t.Fatalf("open breaker let a call through: %v", err)
		}
	}
	if v := testutil.ToFloat64(b.rejects); v != 4 {
		t.Fatalf("rejections = %v, want 4", v)
	}
	// After the cooldown exactly one probe passes.
	advance(10 * time.Second)
	if err := b.allow(); err != nil {
		t.Fatalf("probe rejected after the cooldown: %v", err)
	}
	if b.current() != breakerHalfOpen || testutil.ToFloat64(b.state) != breakerHalfOpen {
		t.Fatal("not half-open during the probe")
	}
	if err := b.allow(); !errors.Is(err, ErrBreakerOpen) {
		t.Fatal("a second call passed while the probe is in flight")
	}
	b.done(boom) // the probe fails: open for another cooldown
	if b.current() != breakerOpen {
		t.Fatal("a failed probe did not reopen the breaker")
	}
	advance(9 * time.Second)
	if err := call(nil); !errors.Is(err, ErrBreakerOpen) {
		t.Fatal("reopened breaker let a call through before its cooldown")
	}
	advance(time.Second)
	if err := call(nil); err != nil {
		t.Fatalf("probe after the second cooldown: %v", err)
	}
	if b.current() != breakerClosed || testutil.ToFloat64(b.state) != breakerClosed {
		t.Fatal("a good probe did not close the breaker")
	}
	// A cancelled probe lets the next call probe.
	for range 3 {
		call(boom)
	}
	advance(10 * time.Second)
	if b.allow() != nil {
		t.Fatal("probe rejected")
	}
	b.done(context.Canceled)
	if err := b.allow(); err != nil {
		t.Fatalf("after a cancelled probe the next call must probe: %v", err)
	}
	b.done(nil)
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	for _, c := range []prometheus.Collector{b.state, b.rejects} {
		if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
			t.Fatalf("lint: %v %v", problems, err)
		}
	}
}
