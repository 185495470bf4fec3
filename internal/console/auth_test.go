package console

import (
	cryptotls "crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestSessions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a := newAuthenticator("admin", "op", []byte("key-1"), time.Hour, clock)
	if a.Token("admin") != RoleReader || a.Token("op") != RoleOperator || a.Token("") != RoleNone || a.Token("adm") != RoleNone {
		t.Fatal("token roles wrong")
	}
	s := a.Session(RoleOperator)
	if a.Cookie(s) != RoleOperator {
		t.Fatal("fresh operator session not accepted")
	}
	// Tampering with the role byte breaks the MAC.
	raw := []byte(s)
	raw[1] ^= 1
	if a.Cookie(string(raw)) != RoleNone {
		t.Error("tampered session accepted")
	}
	if newAuthenticator("admin", "op", []byte("key-2"), time.Hour, clock).Cookie(s) != RoleNone {
		t.Error("session accepted under another key (a restarted process)")
	}
	if newAuthenticator("admin", "op2", []byte("key-1"), time.Hour, clock).Cookie(s) != RoleNone {
		t.Error("operator session survived a change of the operator token")
	}
	if newAuthenticator("admin", "", []byte("key-1"), time.Hour, clock).Cookie(s) != RoleNone {
		t.Error("operator session accepted with no operator token configured")
	}
	now = now.Add(time.Hour)
	if a.Cookie(s) != RoleNone {
		t.Error("expired session accepted")
	}
	first, again := a.CSRF(s), a.CSRF(s)
	if first == a.CSRF(a.Session(RoleReader)) || first != again {
		t.Error("CSRF tokens must be per session and stable")
	}
}

func TestCookieFlags(t *testing.T) {
	for _, tls := range []bool{false, true} {
		req := httptest.NewRequest(http.MethodPost, "/admin/login", nil)
		// A forwarded-proto header from an untrusted peer changes nothing.
		req.Header.Set("X-Forwarded-Proto", "https")
		if tls {
			req.TLS = &cryptotls.ConnectionState{}
		}
		ck := newAuthenticator("admin", "", nil, time.Hour, nil).SessionCookie(req, "v", time.Hour)
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != tls || ck.Path != "/admin" || ck.MaxAge != 3600 {
			t.Errorf("cookie (tls %v) = %+v", tls, ck)
		}
	}
}

func TestChartEscapes(t *testing.T) {
	svg := string(stateChart(QueuesReport{Databases: []DatabaseQueues{{DatabaseStatus: DatabaseStatus{Database: "<x>"}}}}))
	if strings.Contains(svg, "<x>") || !strings.Contains(svg, "&lt;x&gt;") {
		t.Errorf("database name not escaped: %s", svg)
	}
}
