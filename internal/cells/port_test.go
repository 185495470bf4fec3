package cells

import "testing"

func TestPort(t *testing.T) {
	for raw, want := range map[string]int{
		"http://127.0.0.1:8081":     8081,
		"http://cell-1":             80,
		"https://cell-1.example/p/": 443,
	} {
		if got, err := Port(raw); err != nil || got != want {
			t.Errorf("Port(%q) = %d, %v; want %d", raw, got, err, want)
		}
	}
	for _, raw := range []string{"http://cell-1:", "http://cell-1:99999", "ftp://cell-1", "not a url"} {
		if got, err := Port(raw); err == nil {
			t.Errorf("Port(%q) = %d, want an error", raw, got)
		}
	}
}
