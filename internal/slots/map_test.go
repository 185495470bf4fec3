package slots

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// mustBuild builds owners or fails the test.
func mustBuild(tb testing.TB, owners ...Owner) *Map {
	tb.Helper()
	m, err := Build(owners)
	if err != nil {
		tb.Fatalf("Build: %v", err)
	}
	return m
}

// wantErr asserts that Build fails with a message containing every part.
func wantErr(tb testing.TB, owners []Owner, parts ...string) error {
	tb.Helper()
	m, err := Build(owners)
	if err == nil {
		tb.Fatalf("Build succeeded (%d owners), want error containing %q", m.Len(), parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			tb.Fatalf("Build error %q, want it to contain %q", err, p)
		}
	}
	return err
}

func own(name string, specs ...string) Owner { return Owner{Name: name, Slots: specs} }

func TestBuildTwoHalves(t *testing.T) {
	m := mustBuild(t, own("cell-1", "0-8191"), own("cell-2", "8192-16383"))
	if m.Len() != 2 || m.Name(0) != "cell-1" || m.Name(1) != "cell-2" {
		t.Fatalf("Len/Name = %d %q %q", m.Len(), m.Name(0), m.Name(1))
	}
	for s, want := range map[int]int{0: 0, 8191: 0, 8192: 1, 16383: 1, -1: -1, 16384: -1} {
		if got := m.Owner(s); got != want {
			t.Errorf("Owner(%d) = %d, want %d", s, got, want)
		}
	}
	for _, v := range vectors {
		want := 0
		if v.slot >= 8192 {
			want = 1
		}
		if got, err := m.OwnerOf(v.key); err != nil || got != want {
			t.Errorf("OwnerOf(%q) = %d, %v; want %d", v.key, got, err, want)
		}
	}
	if got, err := m.OwnerOf(""); got != -1 || !errors.Is(err, ErrEmptyKey) {
		t.Errorf("OwnerOf(\"\") = %d, %v; want -1, ErrEmptyKey", got, err)
	}
}

func TestBuildNormalizesRanges(t *testing.T) {
	// Out of order, split into pieces, single slots touching ranges.
	m := mustBuild(t,
		own("a", "100-199", "0-49", "50-99", "300", "16000-16383"),
		own("b", "200-299", "301-15999"),
	)
	if got, want := m.Ranges(0), []Range{{0, 199}, {300, 300}, {16000, 16383}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Ranges(0) = %v, want %v", got, want)
	}
	if got, want := m.Specs(0), []string{"0-199", "300", "16000-16383"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Specs(0) = %q, want %q", got, want)
	}
	if got, want := m.Specs(1), []string{"200-299", "301-15999"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Specs(1) = %q, want %q", got, want)
	}
	if m.SlotCount(0)+m.SlotCount(1) != Count || m.SlotCount(0) != 200+1+384 {
		t.Errorf("SlotCount = %d, %d", m.SlotCount(0), m.SlotCount(1))
	}
	// Returned slices are copies: scribbling on them changes nothing.
	r := m.Ranges(0)
	r[0].Hi = 5
	if m.Ranges(0)[0].Hi != 199 {
		t.Error("Ranges returned the map's own slice")
	}
	// Specs feed back into Build and give the same map.
	m2 := mustBuild(t, own("a", m.Specs(0)...), own("b", m.Specs(1)...))
	if m2.owner != m.owner {
		t.Error("rebuilding from Specs gave a different map")
	}
}

func TestBuildGap(t *testing.T) {
	err := wantErr(t, []Owner{own("shard-0", "0-8191"), own("shard-1", "8201-16383")},
		"slots: slot 8192 has no owner (gap 8192-8200)")
	var ge *GapError
	if !errors.As(err, &ge) || ge.Gap != (Range{8192, 8200}) {
		t.Errorf("error %#v, want *GapError{8192-8200}", err)
	}
	// The first gap is reported, not a later one, and a gap at the ends.
	wantErr(t, []Owner{own("a", "1-10", "20-16382")}, "slot 0 has no owner (gap 0-0)")
	wantErr(t, []Owner{own("a", "0-10", "20-16382")}, "slot 11 has no owner (gap 11-19)")
	wantErr(t, []Owner{own("a", "0-16382")}, "slot 16383 has no owner (gap 16383-16383)")
}

func TestBuildOverlap(t *testing.T) {
	err := wantErr(t, []Owner{own("shard-0", "0-8191", "16000-16383"), own("shard-1", "100-200", "8192-15999")},
		`slots: slot 100 is owned by both "shard-0" and "shard-1"`, `specs "0-8191" and "100-200"`)
	var oe *OverlapError
	if !errors.As(err, &oe) || oe.Slot != 100 || oe.First != "shard-0" || oe.Second != "shard-1" {
		t.Errorf("error %#v, want *OverlapError at 100", err)
	}
}

func TestBuildFirstProblemWins(t *testing.T) {
	cases := []struct {
		name   string
		owners []Owner
		want   string
	}{
		{
			// The later owner's overlap is at a lower slot than the first.
			name:   "lower overlap found later",
			owners: []Owner{own("a", "0-999", "5000-16383"), own("b", "900-4999"), own("c", "10-20")},
			want:   `slot 10 is owned by both "a" and "c"`,
		},
		{
			// Three claims on one slot: the first two in input order.
			name:   "three claims",
			owners: []Owner{own("a", "0-16383"), own("b", "5"), own("c", "5")},
			want:   `slot 5 is owned by both "a" and "b"`,
		},
		{
			name:   "gap below overlap",
			owners: []Owner{own("a", "1-100"), own("b", "50-16383")},
			want:   "slot 0 has no owner (gap 0-0)",
		},
		{
			name:   "overlap below gap",
			owners: []Owner{own("a", "0-100"), own("b", "50-16000")},
			want:   `slot 50 is owned by both "a" and "b"`,
		},
		{
			// The gap run stops at the next claimed slot, even when that
			// slot is also where an overlap sits.
			name:   "gap run ends at an overlap",
			owners: []Owner{own("a", "0-9", "20-16383"), own("b", "20")},
			want:   "slot 10 has no owner (gap 10-19)",
		},
		{
			name:   "same owner twice",
			owners: []Owner{own("a", "0-100", "100-16383")},
			want:   `slot 100 is listed twice by "a" (specs "0-100" and "100-16383")`,
		},
		{
			name:   "every owner claims everything",
			owners: []Owner{own("a", "0-16383"), own("b", "0-16383"), own("c", "0-16383")},
			want:   `slot 0 is owned by both "a" and "b"`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantErr(t, c.owners, c.want) })
	}
}

func TestBuildEvenSplit(t *testing.T) {
	m := mustBuild(t, own("cell-1"), own("cell-2"), own("cell-3"))
	want := [][]Range{{{0, 5461}}, {{5462, 10922}}, {{10923, 16383}}}
	for i := range want {
		if got := m.Ranges(i); !reflect.DeepEqual(got, want[i]) {
			t.Errorf("Ranges(%d) = %v, want %v", i, got, want[i])
		}
	}
	if m.Owner(5461) != 0 || m.Owner(5462) != 1 || m.Owner(16383) != 2 {
		t.Errorf("Owner at boundaries = %d %d %d", m.Owner(5461), m.Owner(5462), m.Owner(16383))
	}

	// Sizes differ by at most one, larger first, contiguous, cover all.
	for _, n := range []int{1, 2, 3, 7, 10, 1000, 16383, Count} {
		rs, err := EvenSplit(n)
		if err != nil {
			t.Fatalf("EvenSplit(%d): %v", n, err)
		}
		next := 0
		for i, r := range rs {
			size := Count / n
			if i < Count%n {
				size++
			}
			if r.Lo != next || r.Len() != size {
				t.Fatalf("EvenSplit(%d)[%d] = %v, want %d slots from %d", n, i, r, size, next)
			}
			next = r.Hi + 1
		}
		if next != Count {
			t.Fatalf("EvenSplit(%d) ends at %d", n, next-1)
		}
	}
	for _, n := range []int{0, -1, Count + 1} {
		if _, err := EvenSplit(n); err == nil {
			t.Errorf("EvenSplit(%d) succeeded", n)
		}
	}
}

func TestBuildEvenSplitMaxOwners(t *testing.T) {
	owners := make([]Owner, Count)
	for i := range owners {
		owners[i].Name = fmt.Sprint("o", i)
	}
	m := mustBuild(t, owners...)
	for s := range Count {
		if m.Owner(s) != s {
			t.Fatalf("Owner(%d) = %d with one slot per owner", s, m.Owner(s))
		}
	}
	wantErr(t, append(owners, Owner{Name: "extra"}), "16385 owners, want at most 16384")
}

func TestBuildInputErrors(t *testing.T) {
	wantErr(t, nil, "no owners")
	wantErr(t, []Owner{own("a", "0-16383"), own("b")}, `owner "b" has no slots while others do`)
	wantErr(t, []Owner{own("a"), own("b", "0-16383"), own("c")}, `owner "a" has no slots while others do`)
	wantErr(t, []Owner{own("a", "0-8191"), own("", "8192-16383")}, "owner 1 has an empty name")
	wantErr(t, []Owner{own("a", "0-8191"), own("b", "8192-9000"), own("a", "9001-16383")},
		`owner name "a" is used twice (owners 0 and 2)`)
	err := wantErr(t, []Owner{own("a", "0-8191"), own("b", "8192-16384")},
		`slots: owner "b": bad slot spec "8192-16384": range high end 16384 is out of range 0..16383`)
	var se *SpecError
	if !errors.As(err, &se) || se.Owner != "b" || !errors.Is(err, ErrOutOfRange) {
		t.Errorf("error %#v, want *SpecError for owner b wrapping ErrOutOfRange", err)
	}
	wantErr(t, []Owner{own("a", "0-8191"), own("b", "")}, `owner "b": bad slot spec "": empty`)
}

func TestMapConcurrentReads(t *testing.T) {
	// Run with -race: readers share one Map with no locking.
	m := mustBuild(t, own("a"), own("b"), own("c"), own("d"))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for s := g; s < Count; s += 4 {
				i := m.Owner(s)
				if i != s/4096 {
					t.Errorf("Owner(%d) = %d, want %d", s, i, s/4096)
					return
				}
				if r := m.Ranges(i); len(r) != 1 || !r[0].Contains(s) {
					t.Errorf("Ranges(%d) = %v, want one range holding %d", i, r, s)
					return
				}
			}
		})
	}
	wg.Wait()
}

// bruteFirstError computes, the slow and obvious way, the message Build must
// give for owners whose specs all parse ("" if the map is valid), and the
// name of the first claimant of every slot.
func bruteFirstError(owners []Owner) (string, []string) {
	type c struct{ owner, spec string }
	var first, second [Count]c
	var n [Count]int
	for _, o := range owners {
		for _, spec := range o.Slots {
			r, _ := ParseSpec(spec)
			for s := r.Lo; s <= r.Hi; s++ {
				switch n[s] {
				case 0:
					first[s] = c{o.Name, spec}
				case 1:
					second[s] = c{o.Name, spec}
				}
				n[s]++
			}
		}
	}
	names := make([]string, Count)
	for s := range Count {
		names[s] = first[s].owner
		switch {
		case n[s] == 0:
			e := s
			for e < MaxSlot && n[e+1] == 0 {
				e++
			}
			return (&GapError{Gap: Range{s, e}}).Error(), nil
		case n[s] > 1:
			return (&OverlapError{Slot: s, First: first[s].owner, Second: second[s].owner,
				FirstSpec: first[s].spec, SecondSpec: second[s].spec}).Error(), nil
		}
	}
	return "", names
}

func TestBuildMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	randRange := func() string {
		lo := rng.IntN(Count)
		hi := min(lo+rng.IntN(6000), MaxSlot)
		return Range{lo, hi}.String()
	}
	var gaps, overlaps, valid int
	for iter := range 300 {
		// Start from a valid partition, then perturb it: drop, add or
		// widen specs, so gaps and overlaps land anywhere.
		n := 1 + rng.IntN(5)
		split, _ := EvenSplit(n)
		owners := make([]Owner, n)
		for i, r := range split {
			owners[i] = Owner{Name: fmt.Sprint("o", i)}
			for lo := r.Lo; lo <= r.Hi; {
				hi := min(lo+rng.IntN(3000), r.Hi)
				owners[i].Slots = append(owners[i].Slots, Range{lo, hi}.String())
				lo = hi + 1
			}
		}
		for range rng.IntN(4) {
			i := rng.IntN(n)
			switch rng.IntN(3) {
			case 0:
				if k := len(owners[i].Slots); k > 1 {
					j := rng.IntN(k)
					owners[i].Slots = append(owners[i].Slots[:j], owners[i].Slots[j+1:]...)
				}
			default:
				owners[i].Slots = append(owners[i].Slots, randRange())
			}
		}
		want, names := bruteFirstError(owners)
		switch {
		case want == "":
			valid++
		case strings.Contains(want, "no owner"):
			gaps++
		default:
			overlaps++
		}
		m, err := Build(owners)
		switch {
		case want == "" && err != nil:
			t.Fatalf("iter %d: Build(%v): %v; want success", iter, owners, err)
		case want != "" && (err == nil || err.Error() != want):
			t.Fatalf("iter %d: Build(%v) error %v; want %s", iter, owners, err, want)
		case want == "":
			for s := range Count {
				if got := m.Name(m.Owner(s)); got != names[s] {
					t.Fatalf("iter %d: slot %d assigned to %q, want %q", iter, s, got, names[s])
				}
			}
		}
	}
	// The generator must exercise all three outcomes, or this test proves
	// less than it claims.
	if gaps < 20 || overlaps < 20 || valid < 20 {
		t.Fatalf("generator produced %d gaps, %d overlaps, %d valid maps; want at least 20 each", gaps, overlaps, valid)
	}
	t.Logf("%d gaps, %d overlaps, %d valid maps", gaps, overlaps, valid)
}

func TestLookupAllocs(t *testing.T) {
	m := mustBuild(t, own("a"), own("b"))
	if n := testing.AllocsPerRun(100, func() { _ = m.Owner(1234) }); n != 0 {
		t.Errorf("Owner allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = m.OwnerOf("tenant-000123") }); n != 0 {
		t.Errorf("OwnerOf allocates %v times", n)
	}
}

var sinkOwner int

// BenchmarkSlotLookup is the slot-to-owner step alone (the table load).
func BenchmarkSlotLookup(b *testing.B) {
	m := mustBuild(b, own("a"), own("b"), own("c"))
	b.ReportAllocs()
	s := 0
	for b.Loop() {
		sinkOwner += m.Owner(s)
		s = (s + 4099) & MaxSlot // stride across the table
	}
}

// BenchmarkOwnerOf is key to owner: Slot plus the lookup.
func BenchmarkOwnerOf(b *testing.B) {
	m := mustBuild(b, own("a"), own("b"), own("c"))
	for _, k := range benchKeys {
		b.Run(k.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				i, _ := m.OwnerOf(k.key)
				sinkOwner += i
			}
		})
	}
}

func BenchmarkBuild(b *testing.B) {
	owners := []Owner{own("a", "0-8191"), own("b", "8192-16383")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(owners); err != nil {
			b.Fatal(err)
		}
	}
}
