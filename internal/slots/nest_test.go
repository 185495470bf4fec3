package slots

import (
	"errors"
	"testing"
)

func TestNest(t *testing.T) {
	cells := mustBuild(t, Owner{Name: "c1", Slots: []string{"0-8191"}}, Owner{Name: "c2", Slots: []string{"8192-16383"}})
	shards := mustBuild(t,
		Owner{Name: "s0", Slots: []string{"0-4095"}}, Owner{Name: "s1", Slots: []string{"4096-8191"}},
		Owner{Name: "s2", Slots: []string{"8192-12287", "12288-16383"}})
	got, err := Nest(shards, cells)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 0, 1}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("Nest = %v, want %v", got, want)
	}
	split := mustBuild(t, Owner{Name: "s0", Slots: []string{"0-100", "9000-16383"}}, Owner{Name: "s1", Slots: []string{"101-8999"}})
	var se *StraddleError
	if _, err := Nest(split, cells); !errors.As(err, &se) || se.Inner != "s0" {
		t.Fatalf("shard in two cells: %v", err)
	}
	cross := mustBuild(t, Owner{Name: "s0", Slots: []string{"0-9000"}}, Owner{Name: "s1", Slots: []string{"9001-16383"}})
	if _, err := Nest(cross, cells); !errors.As(err, &se) || se.Inner != "s0" || se.Outer != "c1" {
		t.Fatalf("range across a boundary: %v", err)
	}
}
