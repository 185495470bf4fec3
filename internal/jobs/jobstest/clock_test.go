package jobstest

import (
	"slices"
	"testing"
	"time"
)

func TestFakeClock(t *testing.T) {
	start := time.Unix(1_000, 0)
	c := NewFakeClock(start)
	var fired []string
	c.AfterFunc(2*time.Second, func() { fired = append(fired, "b") })
	c.AfterFunc(time.Second, func() {
		fired = append(fired, "a")
		// Registered while firing, and due within the same Advance.
		c.AfterFunc(500*time.Millisecond, func() { fired = append(fired, "a2") })
	})
	stopped := c.AfterFunc(time.Second, func() { fired = append(fired, "stopped") })
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop must report true once, then false")
	}
	c.Advance(999 * time.Millisecond)
	if len(fired) != 0 {
		t.Fatalf("fired early: %v", fired)
	}
	c.Advance(time.Second)
	if want := []string{"a", "a2"}; !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	if got := c.Now(); !got.Equal(start.Add(1999 * time.Millisecond)) {
		t.Fatalf("Now = %v", got)
	}
	c.Advance(time.Second)
	if want := []string{"a", "a2", "b"}; !slices.Equal(fired, want) || c.Pending() != 0 {
		t.Fatalf("fired %v (pending %d), want %v", fired, c.Pending(), want)
	}
}
