package probe

import "testing"

func TestPathsAreFreshAndRecognised(t *testing.T) {
	ps := Paths()
	if len(ps) != 3 || ps[0] != Health || ps[1] != Ready || ps[2] != Metrics {
		t.Fatalf("Paths() = %v", ps)
	}
	ps[0] = "/x" // a caller's copy: the next call is not affected
	if Paths()[0] != Health {
		t.Fatal("Paths shares its slice between calls")
	}
	for _, p := range Paths() {
		if !Is(p) {
			t.Errorf("Is(%q) = false", p)
		}
	}
	for _, p := range []string{"", "/", "/healthz/", "/HEALTHZ", "/readyz?x", "/metricsx"} {
		if Is(p) {
			t.Errorf("Is(%q) = true", p)
		}
	}
}
