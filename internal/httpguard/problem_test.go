package httpguard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestProblemShape: RFC 9457 members, the code as an extension member,
// the problem media type, and Retry-After when set.
func TestProblemShape(t *testing.T) {
	p := NewRetryProblem(http.StatusServiceUnavailable, 2, "cell_busy", "cell a is at its concurrency limit")
	w := httptest.NewRecorder()
	p.Write(w, false)
	if w.Code != 503 || w.Header().Get("Content-Type") != ContentType || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "about:blank", "title": "Service Unavailable", "status": 503.0,
		"detail": "cell a is at its concurrency limit", "code": "cell_busy"}
	if len(got) != len(want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	w = httptest.NewRecorder()
	p.Write(w, true)
	if w.Code != 503 || w.Body.Len() != 0 {
		t.Errorf("HEAD: %d with %d body bytes", w.Code, w.Body.Len())
	}
	if got := string(Encode(503, "cell_busy", "cell a is at its concurrency limit")); got != string(p.Body()) {
		t.Errorf("Encode %s, Body %s", got, p.Body())
	}
}

func TestNewProblemRefusesNonStandardStatus(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for status 499")
		}
	}()
	NewProblem(499, "x", "y")
}

func TestRulesCheck(t *testing.T) {
	strict, lax := NewRules("X-Tenant-ID", true), NewRules("X-Tenant-ID", false)
	req := func(method string, hdr ...string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Method = method
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		return r
	}
	h2 := req("PRI")
	h2.ProtoMajor = 2
	cases := []struct {
		name        string
		r           *http.Request
		strict, lax *Problem
	}{
		{"GET", req("GET"), nil, nil},
		{"extension method", req("PURGE"), ErrMethodUnknown, nil},
		{"lower-case method", req("get"), ErrMethodUnknown, ErrMethodUnknown},
		{"CONNECT", req("CONNECT"), ErrMethodNotAllowed, ErrMethodNotAllowed},
		{"TRACE", req("TRACE"), ErrMethodNotAllowed, ErrMethodNotAllowed},
		{"HTTP/2 preface", h2, ErrVersion, ErrVersion},
		{"Connection names the tenant header", req("GET", "Connection", "keep-alive, x-tenant-id"), ErrHopByHopIdentity, ErrHopByHopIdentity},
		{"Connection names Cookie", req("GET", "Connection", "close", "Connection", "COOKIE"), ErrHopByHopIdentity, ErrHopByHopIdentity},
		{"Connection names another header", req("GET", "Connection", "X-Secret"), nil, nil},
	}
	for _, tc := range cases {
		if p := strict.Check(tc.r); p != tc.strict {
			t.Errorf("%s, known methods only: %v, want %v", tc.name, p, tc.strict)
		}
		if p := lax.Check(tc.r); p != tc.lax {
			t.Errorf("%s: %v, want %v", tc.name, p, tc.lax)
		}
	}
}
