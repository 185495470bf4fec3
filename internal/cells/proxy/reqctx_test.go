package proxy

import (
	"context"
	"testing"
)

// TestConnContext: the reused context behaves as a WithCancel context
// with context.AfterFunc hooks within a request, and starts afresh after
// end.
func TestConnContext(t *testing.T) {
	c := newConnContext()
	ran := 0
	stop := c.afterFunc(func() { ran++ })
	if !stop() || ran != 0 || c.Err() != nil {
		t.Fatalf("stop before cancel: ran %d, err %v", ran, c.Err())
	}
	stop = c.afterFunc(func() { ran++ })
	done := c.Done()
	c.cancel()
	c.cancel()
	if ran != 1 || c.Err() != context.Canceled || stop() {
		t.Fatalf("after cancel: ran %d, err %v, stop true", ran, c.Err())
	}
	select {
	case <-done:
	default:
		t.Fatal("Done not closed by cancel")
	}
	if c.afterFunc(func() { ran++ })(); ran != 2 {
		t.Fatal("a hook registered after cancel did not run at once")
	}
	c.end()
	if c.Err() != nil {
		t.Fatal("end did not reset")
	}
	done = c.Done()
	c.end()
	select {
	case <-done:
	default:
		t.Fatal("end did not close a Done handed out")
	}
	if n := testing.AllocsPerRun(100, func() {
		c.afterFunc(func() {})()
		c.end()
	}); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}
