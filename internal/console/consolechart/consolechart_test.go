package consolechart

import (
	"encoding/json"
	"encoding/xml"
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 5, 13, 0, 0, 0, time.UTC)

func TestRingKeepsTheNewestInOrder(t *testing.T) {
	r := NewRing(3)
	if _, ok := r.Last(); ok || r.Len() != 0 || r.Cap() != 3 {
		t.Fatalf("new ring: len %d cap %d", r.Len(), r.Cap())
	}
	for i := range 5 {
		r.Add(t0.Add(time.Duration(i)*time.Second), float64(i))
	}
	if r.Len() != 3 {
		t.Fatalf("len = %d, want 3 (bounded)", r.Len())
	}
	got := r.Points(nil)
	for i, want := range []float64{2, 3, 4} {
		if got[i].V != want || !got[i].T.Equal(t0.Add(time.Duration(want)*time.Second)) {
			t.Fatalf("points = %v, want values 2, 3, 4 oldest first", got)
		}
	}
	if last, _ := r.Last(); last.V != 4 {
		t.Fatalf("last = %v, want 4", last)
	}
	r.Gap(t0)
	if last, _ := r.Last(); !math.IsNaN(last.V) {
		t.Fatalf("gap stored as %v, want NaN", last.V)
	}
	r.Reset()
	if r.Len() != 0 || len(r.Points(nil)) != 0 {
		t.Fatal("reset ring still holds samples")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("At past Len did not panic")
		}
	}()
	r.At(0)
}

// TestRateAndJSONPoints: a rate over a counter's step, gaps where none can
// be told, and gaps written as null.
func TestRateAndJSONPoints(t *testing.T) {
	if v := Rate(30, 10, 4); v != 5 {
		t.Errorf("Rate(30, 10, 4) = %v", v)
	}
	for _, c := range [][3]float64{{10, 30, 4}, {30, 10, 0}, {30, 10, -1}} {
		if v := Rate(uint64(c[0]), uint64(c[1]), c[2]); !math.IsNaN(v) {
			t.Errorf("Rate%v = %v; want a gap", c, v)
		}
	}
	ps := JSONPoints([]Point{{t0, 1.5}, {t0.Add(time.Second), math.NaN()}})
	raw, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"t":"2026-12-05T13:00:00Z","v":1.5},{"t":"2026-12-05T13:00:01Z","v":null}]`; string(raw) != want {
		t.Errorf("got %s\nwant %s", raw, want)
	}
}

func TestRingAddDoesNotAllocate(t *testing.T) {
	r := NewRing(360)
	i := 0
	if n := testing.AllocsPerRun(10000, func() {
		r.Add(t0.Add(time.Duration(i)*time.Second), float64(i))
		i++
	}); n != 0 {
		t.Fatalf("Add allocates %.1f times per sample, want 0", n)
	}
	dst := make([]Point, 0, r.Cap())
	if n := testing.AllocsPerRun(100, func() { dst = r.Points(dst[:0]) }); n != 0 {
		t.Fatalf("Points into a big enough slice allocates %.1f times, want 0", n)
	}
}

func BenchmarkRingAdd(b *testing.B) {
	r := NewRing(360)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.Add(t0, float64(i))
	}
}

// wellFormed parses the SVG as XML: an unescaped label would break it.
func wellFormed(t testing.TB, svg string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err != nil {
			if err.Error() == "EOF" {
				return
			}
			t.Fatalf("SVG is not well formed: %v\n%s", err, svg)
		}
	}
}

func TestTimeDrawsLinesGapsAndEscapes(t *testing.T) {
	pts := []Point{{t0, 1}, {t0.Add(10 * time.Second), 3}, {t0.Add(20 * time.Second), math.NaN()},
		{t0.Add(30 * time.Second), 2}, {t0.Add(40 * time.Second), 5}, {t0.Add(50 * time.Second), math.NaN()},
		{t0.Add(60 * time.Second), 4}}
	svg := string(Time(TimeOptions{ID: `c"1`, Title: "<jobs>", Unit: "jobs/s"},
		Series{Label: `<script>alert(1)</script>`, Points: pts},
		Series{Label: "b&b", Color: `red" onload="x`, Points: pts[:2]}))
	wellFormed(t, svg)
	for _, bad := range []string{"<script>", `red" onload`, `c"1`, "<jobs>"} {
		if strings.Contains(svg, bad) {
			t.Fatalf("SVG holds %q unescaped:\n%s", bad, svg)
		}
	}
	for _, want := range []string{"&lt;script&gt;", "b&amp;b", `aria-label="&lt;jobs&gt;"`, "13:00:00", "13:01:00 UTC", "5 jobs/s"} {
		if !strings.Contains(svg, want) {
			t.Fatalf("SVG lacks %q:\n%s", want, svg)
		}
	}
	// Series 1: two runs of two points and one lone point; series 2: one run.
	if n := strings.Count(svg, "<polyline"); n != 3 {
		t.Fatalf("%d polylines, want 3 (gaps break the line):\n%s", n, svg)
	}
	if n := strings.Count(svg, "<circle"); n != 1 {
		t.Fatalf("%d dots, want 1 (the lone point after the last gap)", n)
	}
	if strings.Contains(svg, "no samples yet") {
		t.Fatal("a chart with samples says it has none")
	}
}

func TestTimeScalesToTheLargestValue(t *testing.T) {
	svg := string(Time(TimeOptions{Width: 300, Height: 120},
		Series{Label: "a", Points: []Point{{t0, 0}, {t0.Add(time.Minute), 7}}}))
	wellFormed(t, svg)
	// 7 rounds up to 10: the top label is 10, the quarter 2.5.
	for _, want := range []string{">10</text>", ">2.5</text>", ">0</text>"} {
		if !strings.Contains(svg, want) {
			t.Fatalf("SVG lacks %q:\n%s", want, svg)
		}
	}
}

func TestTimeWithoutSamples(t *testing.T) {
	svg := string(Time(TimeOptions{ID: "empty"}, Series{Label: "a"}))
	wellFormed(t, svg)
	if !strings.Contains(svg, "no samples yet") || strings.Contains(svg, "<polyline") {
		t.Fatalf("empty chart:\n%s", svg)
	}
}

func TestNumber(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 12: "12", 1.0 / 3: "0.33", 2.5: "2.5", 0.999: "1", 1234.5678: "1234.57"} {
		if got := Number(v); got != want {
			t.Errorf("Number(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestBarsEscapesAndScales(t *testing.T) {
	svg := string(Bars("chart", "jobs by state", []Key{{"a<", "#111"}, {"b", "#222"}},
		[]Bar{{Label: "<x>", Values: []int64{3, 1}}, {Label: "down", Missing: "no answer"}, {Label: "half", Values: []int64{2, 0}}}))
	wellFormed(t, svg)
	if strings.Contains(svg, "<x>") || !strings.Contains(svg, "&lt;x&gt;") || !strings.Contains(svg, "a&lt;: 3") {
		t.Fatalf("labels not escaped:\n%s", svg)
	}
	// The largest total (4) fills 560 px: 3 of it is 420, the half row's 2 is 280.
	for _, want := range []string{`width="420.0"`, `width="140.0"`, `width="280.0"`, ">no answer<", ">4</text>"} {
		if !strings.Contains(svg, want) {
			t.Fatalf("SVG lacks %q:\n%s", want, svg)
		}
	}
}
