package console

import (
	"testing"
	"time"
)

// TestParseRange: the accepted forms; a date alone as to ends that day.
func TestParseRange(t *testing.T) {
	day := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		from, to         string
		wantFrom, wantTo time.Time
	}{
		{"2026-12-05", "2026-12-05", day, day.AddDate(0, 0, 1)},
		{"2026-12-05T13:00", "2026-12-05T13:00:30", day.Add(13 * time.Hour), day.Add(13*time.Hour + 30*time.Second)},
		{"2026-12-05T14:00:00+01:00", "", day.Add(13 * time.Hour), time.Time{}},
		{"", "2026-12-05 13:00", time.Time{}, day.Add(13 * time.Hour)},
	} {
		f, to, err := parseRange(tc.from, tc.to)
		if err != nil || !f.Equal(tc.wantFrom) || !to.Equal(tc.wantTo) {
			t.Errorf("parseRange(%q, %q) = %v, %v, %v; want %v, %v", tc.from, tc.to, f, to, err, tc.wantFrom, tc.wantTo)
		}
	}
	if v := rangeValue(day.Add(13 * time.Hour)); v != "2026-12-05T13:00" {
		t.Errorf("rangeValue = %q, want the datetime-local form", v)
	}
	if v := rangeValue(day.Add(time.Second)); v != "2026-12-05T00:00:01" {
		t.Errorf("rangeValue with seconds = %q", v)
	}
}
