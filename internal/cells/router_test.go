package cells

import (
	"errors"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/slots"
)

func twoCells(tb testing.TB) *CellRouter {
	tb.Helper()
	r, err := New([]CellSpec{
		{Name: "cell-1", URL: "http://cell-1:3000", Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: "http://cell-2:3000", Slots: []string{"8192-16383"}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// TestSlotVectors: keys with known Redis Cluster slots land on the cell
// owning that slot in a two-cell map.
func TestSlotVectors(t *testing.T) {
	r := twoCells(t)
	for _, v := range []struct {
		key  string
		slot int
		cell string
	}{
		{"123456789", 12739, "cell-2"},
		{"{user1}.following", 8106, "cell-1"},
		{"user1", 8106, "cell-1"}, // same hash tag content, same cell
		{"acme", 11304, "cell-2"},
		{"umbrella", 5538, "cell-1"},
	} {
		s, err := slots.Slot(v.key)
		if err != nil || s != v.slot {
			t.Fatalf("Slot(%q) = %d, %v; want %d", v.key, s, err, v.slot)
		}
		for name, get := range map[string]func(string) (CellSpec, error){"ForTenant": r.ForTenant, "ForKey": r.ForKey} {
			c, err := get(v.key)
			if err != nil || c.Name != v.cell {
				t.Errorf("%s(%q) = %q, %v; want %s", name, v.key, c.Name, err, v.cell)
			}
		}
		c, err := r.ForSlot(v.slot)
		if err != nil || c.Name != v.cell {
			t.Errorf("ForSlot(%d) = %q, %v; want %s", v.slot, c.Name, err, v.cell)
		}
	}
	for _, s := range []int{0, 8191} {
		if c, _ := r.ForSlot(s); c.Name != "cell-1" {
			t.Errorf("ForSlot(%d) = %s", s, c.Name)
		}
	}
	for _, s := range []int{8192, 16383} {
		if c, _ := r.ForSlot(s); c.Name != "cell-2" {
			t.Errorf("ForSlot(%d) = %s", s, c.Name)
		}
	}
	for _, s := range []int{-1, 16384} {
		if _, err := r.ForSlot(s); err == nil {
			t.Errorf("ForSlot(%d): no error", s)
		}
	}
	if _, err := r.ForTenant(""); !errors.Is(err, ErrEmptyTenant) {
		t.Errorf("ForTenant(\"\") = %v", err)
	}
	if _, err := r.ForKey(""); !errors.Is(err, slots.ErrEmptyKey) {
		t.Errorf("ForKey(\"\") = %v", err)
	}
	if _, err := r.URLFor("", "/x"); !errors.Is(err, ErrEmptyTenant) {
		t.Errorf("URLFor(\"\") = %v", err)
	}
}

func TestNewProvesCoverage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []CellSpec
		want  string
	}{
		{"gap", []CellSpec{{Name: "a", URL: "http://a", Slots: []string{"0-100"}}, {Name: "b", URL: "http://b", Slots: []string{"200-16383"}}}, "slot 101 has no owner"},
		{"overlap", []CellSpec{{Name: "a", URL: "http://a", Slots: []string{"0-8191"}}, {Name: "b", URL: "http://b", Slots: []string{"8000-16383"}}}, "slot 8000 is owned by both"},
		{"some empty", []CellSpec{{Name: "a", URL: "http://a", Slots: []string{"0-16383"}}, {Name: "b", URL: "http://b"}}, `"b" has no slots`},
		{"dup name", []CellSpec{{Name: "a", URL: "http://a"}, {Name: "a", URL: "http://b"}}, "used twice"},
		{"no cells", nil, "no owners"},
		{"bad spec", []CellSpec{{Name: "a", URL: "http://a", Slots: []string{"0 - 16383"}}}, "bad slot spec"},
		{"bad scheme", []CellSpec{{Name: "a", URL: "ftp://a"}}, "scheme"},
		{"no host", []CellSpec{{Name: "a", URL: "http://"}}, "no host"},
		{"query", []CellSpec{{Name: "a", URL: "http://a/?x=1"}}, "query"},
		{"userinfo", []CellSpec{{Name: "a", URL: "http://u:p@a/"}}, "user info"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.specs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestEvenSplitInOrder(t *testing.T) {
	r, err := New([]CellSpec{{Name: "a", URL: "http://a"}, {Name: "b", URL: "http://b"}, {Name: "c", URL: "http://c"}})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"0-5461"}, {"5462-10922"}, {"10923-16383"}}
	for i, c := range r.Cells() {
		if strings.Join(c.Slots, ",") != strings.Join(want[i], ",") {
			t.Errorf("cell %s slots %v, want %v", c.Name, c.Slots, want[i])
		}
	}
}

func TestURLFor(t *testing.T) {
	r, err := New([]CellSpec{
		{Name: "cell-1", URL: "http://cell-1:3000", Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: "https://cell-2.example/base/", Slots: []string{"8192-16383"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tenant, path, want string }{
		{"umbrella", "/orders?page=2", "http://cell-1:3000/orders?page=2"},
		{"acme", "/orders?page=2", "https://cell-2.example/base/orders?page=2"},
		{"umbrella", "/a%2Fb/c?x=%20y&z=1", "http://cell-1:3000/a%2Fb/c?x=%20y&z=1"},
		{"umbrella", "/with space/ü?q=a b&r=ü", "http://cell-1:3000/with%20space/%C3%BC?q=a%20b&r=%C3%BC"},
		{"umbrella", "/x#frag ment", "http://cell-1:3000/x#frag%20ment"},
		{"umbrella", "/", "http://cell-1:3000/"},
		{"umbrella", "/empty?", "http://cell-1:3000/empty?"},
	} {
		got, err := r.URLFor(tc.tenant, tc.path)
		if err != nil || got != tc.want {
			t.Errorf("URLFor(%q, %q) = %q, %v; want %q", tc.tenant, tc.path, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "orders", "//evil.example/x", "http://evil.example/x"} {
		if got, err := r.URLFor("umbrella", bad); err == nil {
			t.Errorf("URLFor(%q) = %q; want an error", bad, got)
		}
	}
}

func TestLookupsDoNotAllocate(t *testing.T) {
	r := twoCells(t)
	if n := testing.AllocsPerRun(100, func() { _, _ = r.ForTenant("tenant-000123") }); n != 0 {
		t.Errorf("ForTenant allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = r.ForSlot(1234) }); n != 0 {
		t.Errorf("ForSlot allocates %v times", n)
	}
}

var sinkCell CellSpec

// BenchmarkForTenant is tenant to cell: hash, table load, copy of the spec.
func BenchmarkForTenant(b *testing.B) {
	r := twoCells(b)
	b.ReportAllocs()
	for b.Loop() {
		sinkCell, _ = r.ForTenant("tenant-000123")
	}
}

// BenchmarkForSlot is the slot-to-cell step alone.
func BenchmarkForSlot(b *testing.B) {
	r := twoCells(b)
	b.ReportAllocs()
	s := 0
	for b.Loop() {
		sinkCell, _ = r.ForSlot(s)
		s = (s + 4099) & slots.MaxSlot
	}
}
