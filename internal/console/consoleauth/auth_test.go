package consoleauth

import (
	"bytes"
	cryptotls "crypto/tls"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func newAuth(admin, operator, key string, clock func() time.Time) Authenticator {
	return New(Config{AdminToken: admin, OperatorToken: operator, Key: []byte(key), TTL: time.Hour, Now: clock, Cookie: "c", Path: "/admin"})
}

func TestSessions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a := newAuth("admin", "op", "key-1", clock)
	if a.Token("admin") != RoleReader || a.Token("op") != RoleOperator || a.Token("") != RoleNone || a.Token("adm") != RoleNone {
		t.Fatal("token roles wrong")
	}
	if newAuth("admin", "", "k", clock).Token("") != RoleNone {
		t.Fatal("an empty token matched an unset operator token")
	}
	s := a.Session(RoleOperator)
	if a.Cookie(s) != RoleOperator {
		t.Fatal("fresh operator session not accepted")
	}
	raw := []byte(s)
	raw[1] ^= 1
	if a.Cookie(string(raw)) != RoleNone {
		t.Error("tampered session accepted")
	}
	if newAuth("admin", "op", "key-2", clock).Cookie(s) != RoleNone {
		t.Error("session accepted under another key (a restarted process)")
	}
	if newAuth("admin", "op2", "key-1", clock).Cookie(s) != RoleNone {
		t.Error("operator session survived a change of the operator token")
	}
	if newAuth("admin", "", "key-1", clock).Cookie(s) != RoleNone {
		t.Error("operator session accepted with no operator token configured")
	}
	r := a.Session(RoleReader)
	if newAuth("admin2", "op", "key-1", clock).Cookie(r) != RoleNone {
		t.Error("reader session survived a change of the admin token")
	}
	now = now.Add(time.Hour)
	if a.Cookie(s) != RoleNone {
		t.Error("expired session accepted")
	}
	first, again := a.CSRF(s), a.CSRF(s)
	if first == a.CSRF(r) || first != again {
		t.Error("CSRF tokens must be per session and stable")
	}
}

func TestIdentifyAndCSRF(t *testing.T) {
	a := newAuth("admin", "", "key", nil)
	sess := a.Session(RoleReader)
	req := func(h, cookie string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/admin/logout", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: "c", Value: cookie})
		}
		return r
	}
	cases := []struct {
		name, auth, cookie string
		want               Who
	}{
		{"bearer", "Bearer admin", "", Who{Role: RoleReader}},
		{"wrong bearer", "Bearer nope", "", Who{}},
		{"basic is nobody, even with a cookie", "Basic YWRtaW4=", sess, Who{}},
		{"cookie", "", sess, Who{Role: RoleReader, Session: sess}},
		{"bad cookie", "", sess + "x", Who{}},
		{"nothing", "", "", Who{}},
	}
	for _, tc := range cases {
		if got := a.Identify(req(tc.auth, tc.cookie)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	w := Who{Role: RoleReader, Session: sess}
	if a.CSRFOK(req("", sess), w) {
		t.Error("a session's POST without a CSRF token passed")
	}
	r := req("", sess)
	r.Header.Set(CSRFHeader, a.CSRF(sess))
	if !a.CSRFOK(r, w) {
		t.Error("the CSRF header was refused")
	}
	form := httptest.NewRequest(http.MethodPost, "/admin/logout", strings.NewReader(url.Values{CSRFField: {a.CSRF(sess)}}.Encode()))
	form.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if !a.CSRFOK(form, w) {
		t.Error("the CSRF form field was refused")
	}
	if !a.CSRFOK(req("Bearer admin", ""), Who{Role: RoleReader}) {
		t.Error("a bearer request needs no CSRF token")
	}
}

func TestCookieFlags(t *testing.T) {
	a := newAuth("admin", "", "key", nil)
	for _, tls := range []bool{false, true} {
		req := httptest.NewRequest(http.MethodPost, "/admin/login", nil)
		req.Header.Set("X-Forwarded-Proto", "https") // from any peer: changes nothing
		if tls {
			req.TLS = &cryptotls.ConnectionState{}
		}
		ck := a.SessionCookie(req, "v", time.Hour)
		if ck.Name != "c" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != tls || ck.Path != "/admin" || ck.MaxAge != 3600 {
			t.Errorf("cookie (tls %v) = %+v", tls, ck)
		}
	}
	if ck := a.SessionCookie(httptest.NewRequest(http.MethodPost, "/", nil), "", 0); ck.MaxAge != -1 {
		t.Errorf("clearing cookie MaxAge %d", ck.MaxAge)
	}
}

func TestAuditAndHeaders(t *testing.T) {
	var buf bytes.Buffer
	Audit(slog.New(slog.NewTextHandler(&buf, nil)), slog.LevelWarn, RoleNone, "login", "wrong token", "remote", "1.2.3.4")
	for _, want := range []string{"level=WARN", `msg="console audit"`, "role=none", "action=login", `outcome="wrong token"`, "remote=1.2.3.4"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("audit line %q lacks %q", buf.String(), want)
		}
	}
	h := http.Header{}
	SetPageHeaders(h)
	if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" {
		t.Errorf("page headers %v", h)
	}
}
