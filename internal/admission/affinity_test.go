package admission

import (
	"runtime"
	"sync"
	"testing"
)

func TestClaimAffinityNeverRecycles(t *testing.T) {
	prev := ClaimAffinity()
	for range 100 {
		a := ClaimAffinity()
		if a <= prev {
			t.Fatalf("affinity %d issued after %d", a, prev)
		}
		prev = a
	}
	if AffinitiesAssigned() <= int(prev) {
		t.Fatalf("AffinitiesAssigned %d, but %d was issued", AffinitiesAssigned(), prev)
	}
}

// TestCrowding claims more explicit affinities than a sharded engine has
// shards and checks the occupancy report against a direct count of how
// many issued affinities land on each shard.
func TestCrowding(t *testing.T) {
	const shards = 4
	e, _ := newEngine(t, func(c *Config) { c.Shards = shards })
	var affs []Affinity
	for range shards + 3 {
		affs = append(affs, ClaimAffinity())
	}
	occ := e.Occupancy()
	if occ.Shards != shards || occ.AffinitiesAssigned != AffinitiesAssigned() {
		t.Fatalf("occupancy %+v", occ)
	}
	perShard := make([]int, shards)
	for a := 0; a < occ.AffinitiesAssigned; a++ {
		perShard[a%shards]++
	}
	crowded := 0
	for _, n := range perShard {
		if n > 1 {
			crowded++
		}
	}
	if !occ.IsCrowded() || occ.CrowdedShards() != crowded {
		t.Fatalf("IsCrowded %v, CrowdedShards %d; want true, %d (per shard %v)", occ.IsCrowded(), occ.CrowdedShards(), crowded, perShard)
	}
	if r := e.Report().Sharding; r != occ {
		t.Fatalf("Report().Sharding %+v != Occupancy() %+v", r, occ)
	}
	// Each explicit affinity admits on shard affinity mod shards.
	want := make([]uint64, shards)
	for _, a := range affs {
		p, o := e.AdmitAt(a, "acct", 1)
		if o != Admitted {
			t.Fatalf("outcome %v", o)
		}
		p.Release()
		want[uint64(a)%shards]++
	}
	l := mustLine(t, e, "acct")
	for i := range want {
		if got := l.Shards[i].Tallies.Admitted; got != want[i] {
			t.Errorf("shard %d admitted %d, want %d", i, got, want[i])
		}
	}
}

func TestOccupancyArithmetic(t *testing.T) {
	cases := []struct {
		shards, assigned, crowded int
	}{
		{1, 50, 0}, // SINGLE is never crowded
		{4, 0, 0},
		{4, 4, 0},
		{4, 5, 1},
		{4, 7, 3},
		{4, 8, 4},
		{4, 100, 4},
		{16, 17, 1},
	}
	for _, c := range cases {
		o := Occupancy{Shards: c.shards, AffinitiesAssigned: c.assigned}
		if o.CrowdedShards() != c.crowded || o.IsCrowded() != (c.crowded > 0) {
			t.Errorf("%+v: crowded %d (IsCrowded %v), want %d", o, o.CrowdedShards(), o.IsCrowded(), c.crowded)
		}
	}
	// A layout with more shards than affinities issued is not crowded.
	e, _ := newEngine(t, func(c *Config) { c.Shards = MaxShards })
	if AffinitiesAssigned() <= MaxShards && e.Occupancy().IsCrowded() {
		t.Fatalf("%+v reported crowded", e.Occupancy())
	}
}

// TestPAffinityIsPerP checks that the default locality issues affinities
// per P, not per goroutine: once every P has one, any number of new
// goroutines admitting adds none.
func TestPAffinityIsPerP(t *testing.T) {
	for p := 0; p < procBound(); p++ {
		issueP(p)
	}
	before := AffinitiesAssigned()
	e, _ := newEngine(t, func(c *Config) { c.Shards = 2 })
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				p, _ := e.Admit("t", 1)
				p.Release()
			}
		}()
	}
	wg.Wait()
	if after := AffinitiesAssigned(); after != before {
		t.Fatalf("64 goroutines on %d Ps issued %d new affinities", procBound(), after-before)
	}
}

// TestControlPlaneClaimsNothing runs every control-plane call from fresh
// goroutines and checks no affinity was issued for them.
func TestControlPlaneClaimsNothing(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.Shards = 4 })
	// Snapshot the P table: a P seen for the first time by a control-plane
	// call would get an entry.
	registered := func() int {
		n := 0
		t := *pAffinity.Load()
		for i := range t {
			if t[i].Load() != 0 {
				n++
			}
		}
		return n
	}
	beforeP, before := registered(), AffinitiesAssigned()
	var wg sync.WaitGroup
	for i := range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acct := string(rune('a' + i%26))
			if _, err := e.Fund(acct, 10); err != nil {
				t.Error(err)
			}
			e.Line(acct)
			e.Report()
			e.Occupancy()
			e.Tallies()
			e.InFlight()
			e.Sweep()
			e.Forget(acct)
		}()
	}
	wg.Wait()
	if registered() != beforeP || AffinitiesAssigned() != before {
		t.Fatalf("control plane issued affinities: P entries %d→%d, assigned %d→%d", beforeP, registered(), before, AffinitiesAssigned())
	}
	// Observer admits without claiming either.
	p, o := e.AdmitAt(Observer, "z", 1)
	if o != Admitted {
		t.Fatalf("observer admission %v", o)
	}
	p.Release()
	if AffinitiesAssigned() != before {
		t.Fatal("AdmitAt(Observer) issued an affinity")
	}
}

func TestProcIndexInRange(t *testing.T) {
	for range 1000 {
		if p := procIndex(); p < 0 || p >= procBound() {
			t.Fatalf("procIndex %d outside [0, %d)", p, procBound())
		}
	}
	if procLinked {
		t.Log("locality: runtime.procPin")
	} else {
		t.Log("locality: fallback (cellgate_nolinkname)")
	}
}
