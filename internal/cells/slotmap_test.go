package cells

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/slots"
)

func TestParseSlotMapStrict(t *testing.T) {
	good := `{"cells":[{"name":"a","url":"http://a","slots":[]},{"name":"b","url":"http://b","slots":[]}],"frozen":["5-6"]}`
	m, r, err := ParseSlotMap([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Cells) != 2 || !r.Frozen(5) || !r.Frozen(6) || r.Frozen(4) || r.Frozen(7) {
		t.Fatalf("parsed %+v, frozen 4..7 = %v %v %v %v", m, r.Frozen(4), r.Frozen(5), r.Frozen(6), r.Frozen(7))
	}
	for _, tc := range []struct{ raw, want string }{
		{`{"cells":[{"name":"a","url":"http://a","slot":["0-16383"]}]}`, "unknown field"},
		{`{"cells":[{"name":"a","url":"http://a","slots":["0-100"]}]}`, "slot 101 has no owner"},
		{`{"cells":[{"name":"a","url":"http://a"}],"frozen":["x"]}`, "frozen"},
		{`{"cells":[{"name":"a","url":"http://a"}]} {}`, "trailing"},
		{`not json`, "slot map"},
	} {
		if _, _, err := ParseSlotMap([]byte(tc.raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSlotMap(%s) = %v; want %q", tc.raw, err, tc.want)
		}
	}
}

func TestSlotMapRoundTripIsCanonical(t *testing.T) {
	in := SlotMap{Cells: []CellSpec{
		{Name: "a", URL: "http://a", Slots: []string{"100-200", "0-99", "201-8191"}},
		{Name: "b", URL: "http://b", Slots: []string{"8192-16383"}},
	}, Frozen: []string{"10", "11-20"}}
	n, err := in.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(n.Cells[0].Slots, ","); got != "0-8191" {
		t.Errorf("normalized slots %s", got)
	}
	if got := strings.Join(n.Frozen, ","); got != "10-20" {
		t.Errorf("normalized frozen %s", got)
	}
	raw := n.Marshal()
	m2, _, err := ParseSlotMap(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m2.Marshal(), raw) {
		t.Errorf("marshal is not stable:\n%s\n%s", raw, m2.Marshal())
	}
}

func TestReassignAndFreeze(t *testing.T) {
	m := twoCells(t).SlotMap()
	rg := slots.Range{Lo: 100, Hi: 199}
	f, err := m.WithFrozen(rg, true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.Frozen, ",") != "100-199" {
		t.Fatalf("frozen %v", f.Frozen)
	}
	moved, err := f.Reassign(rg, "cell-1", "cell-2")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(moved.Cells[0].Slots, ","); got != "0-99,200-8191" {
		t.Errorf("cell-1 after move: %s", got)
	}
	if got := strings.Join(moved.Cells[1].Slots, ","); got != "100-199,8192-16383" {
		t.Errorf("cell-2 after move: %s", got)
	}
	un, err := moved.WithFrozen(rg, false)
	if err != nil {
		t.Fatal(err)
	}
	if un.Frozen != nil {
		t.Errorf("still frozen: %v", un.Frozen)
	}
	r, err := un.Build()
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := r.ForSlot(150); c.Name != "cell-2" {
		t.Errorf("slot 150 on %s", c.Name)
	}
	// Moving slots the source does not own, or all of its slots, fails.
	if _, err := m.Reassign(slots.Range{Lo: 8000, Hi: 8300}, "cell-1", "cell-2"); err == nil || !strings.Contains(err.Error(), "slot 8192 belongs to \"cell-2\"") {
		t.Errorf("reassign across owners: %v", err)
	}
	if _, err := m.Reassign(slots.Range{Lo: 0, Hi: 8191}, "cell-1", "cell-2"); err == nil {
		t.Error("emptying a cell: no error")
	}
	if _, err := m.Reassign(rg, "cell-1", "nope"); err == nil {
		t.Error("unknown target: no error")
	}
}

func TestWriteSlotMapAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "slotmap.json")
	m := twoCells(t).SlotMap()
	if err := WriteSlotMap(path, m); err != nil {
		t.Fatal(err)
	}
	got, _, err := ReadSlotMap(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Marshal(), m.Marshal()) {
		t.Fatal("read back a different map")
	}
	// An invalid map is never written: the old file stays.
	bad := SlotMap{Cells: []CellSpec{{Name: "a", URL: "http://a", Slots: []string{"0-5"}}}}
	if err := WriteSlotMap(path, bad); err == nil {
		t.Fatal("wrote an invalid map")
	}
	raw, _ := os.ReadFile(path)
	if !bytes.Equal(raw, m.Marshal()) {
		t.Fatal("file changed by a refused write")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}
