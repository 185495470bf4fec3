package consoleauth

import (
	"bytes"
	"context"
	cryptotls "crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const (
	adminTok = "admin-token-0123456789abcdef0123456789"
	opTok    = "operator-token-0123456789abcdef01234567"
)

// lines is a log sink safe for concurrent use.
type lines struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// audits returns the audit lines written so far, decoded.
func (l *lines) audits(t testing.TB) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if ln == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("log line %q: %v", ln, err)
		}
		if m["msg"] == AuditMessage {
			out = append(out, m)
		}
	}
	return out
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

type env struct {
	a     *Authenticator
	clock *clock
	store Store
	log   *lines
	reg   *prometheus.Registry
}

func newEnv(t testing.TB, store Store, mod func(*Config)) *env {
	t.Helper()
	e := &env{clock: &clock{t: time.Unix(1_800_000_000, 0)}, log: &lines{}, reg: prometheus.NewRegistry()}
	if store == nil {
		store = &MemoryStore{Now: e.clock.now, Idle: 15 * time.Minute}
	}
	e.store = store
	m, err := NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{AdminToken: adminTok, OperatorToken: opTok, Store: store, TTL: 8 * time.Hour, Idle: 15 * time.Minute,
		Now: e.clock.now, Cookie: "c", Path: "/admin", Metrics: m, Console: "test",
		Logger: slog.New(slog.NewJSONHandler(e.log, nil))}
	if mod != nil {
		mod(&cfg)
	}
	if e.a, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// loginReq is a login form from peer (host:port) with the token in the body.
func loginReq(peer, token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/admin/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = peer
	return r
}

func cookieReq(method, cookie string) *http.Request {
	r := httptest.NewRequest(method, "/admin/", nil)
	r.AddCookie(&http.Cookie{Name: "c", Value: cookie})
	return r
}

func (e *env) login(t testing.TB, token string) (Who, string) {
	t.Helper()
	w, ck, ref, err := e.a.Login(loginReq("192.0.2.1:1234", token))
	if err != nil || ref != nil {
		t.Fatalf("login: %+v %v", ref, err)
	}
	return w, ck
}

func TestLogoutEndsSession(t *testing.T) {
	e := newEnv(t, nil, nil)
	w, ck := e.login(t, opTok)
	got, ref, err := e.a.Identify(cookieReq(http.MethodGet, ck))
	if err != nil || ref != nil || got.Role != RoleOperator || got.Session != w.Session || got.CSRF != w.CSRF {
		t.Fatalf("fresh session: %+v %+v %v", got, ref, err)
	}
	if err := e.a.Logout(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	// The cookie saved before the logout is worth nothing after it.
	if got, ref, _ := e.a.Identify(cookieReq(http.MethodGet, ck)); ref == nil || ref.Status != http.StatusUnauthorized || got.Role != RoleNone {
		t.Fatalf("replayed cookie after logout: %+v %+v", got, ref)
	}
}

func TestFreshSessionAndCSRFPerLogin(t *testing.T) {
	e := newEnv(t, nil, nil)
	w1, ck1 := e.login(t, opTok)
	w2, ck2 := e.login(t, opTok)
	if ck1 == ck2 || w1.Session == w2.Session || w1.CSRF == w2.CSRF || len(w1.CSRF) < 40 {
		t.Fatalf("two logins share a session or CSRF secret: %+v %+v", w1, w2)
	}
	if w1.Session == ck1 {
		t.Fatal("the store's id is the cookie itself")
	}
	// One session's CSRF secret does not pass for the other's.
	r := cookieReq(http.MethodPost, ck2)
	r.Header.Set(CSRFHeader, w1.CSRF)
	if e.a.CSRFOK(r, w2) {
		t.Fatal("another session's CSRF token passed")
	}
	r.Header.Set(CSRFHeader, w2.CSRF)
	if !e.a.CSRFOK(r, w2) {
		t.Fatal("the session's own CSRF token was refused")
	}
}

func TestIdleExpiryAndTokenChange(t *testing.T) {
	e := newEnv(t, nil, nil)
	_, ck := e.login(t, adminTok)
	for range 3 { // used every 10 minutes: stays
		e.clock.t = e.clock.t.Add(10 * time.Minute)
		if w, _, _ := e.a.Identify(cookieReq(http.MethodGet, ck)); w.Role != RoleReader {
			t.Fatal("a session in use ended before its idle timeout")
		}
	}
	e.clock.t = e.clock.t.Add(15 * time.Minute)
	if w, _, _ := e.a.Identify(cookieReq(http.MethodGet, ck)); w.Role != RoleNone {
		t.Fatal("a session idle for 15 minutes still works")
	}

	_, ck = e.login(t, adminTok)
	for e.clock.t = e.clock.t.Add(7 * time.Hour); ; e.clock.t = e.clock.t.Add(10 * time.Minute) {
		w, _, _ := e.a.Identify(cookieReq(http.MethodGet, ck))
		if w.Role == RoleNone {
			break
		}
	}

	// A token change ends the sessions traded for the old token, in the
	// store every process shares.
	_, ck = e.login(t, opTok)
	changed, err := New(Config{AdminToken: adminTok, OperatorToken: opTok + "-new", Store: e.store, TTL: time.Hour, Idle: time.Hour, Now: e.clock.now, Cookie: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if w, _, _ := changed.Identify(cookieReq(http.MethodGet, ck)); w.Role != RoleNone {
		t.Fatal("an operator session outlived a change of the operator token")
	}
	if w, _, _ := e.a.Identify(cookieReq(http.MethodGet, ck)); w.Role != RoleNone {
		t.Fatal("the ended session came back")
	}
}

func TestSecretsNotReadFromQuery(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := httptest.NewRequest(http.MethodPost, "/admin/login?token="+url.QueryEscape(adminTok), nil)
	if _, _, ref, _ := e.a.Login(r); ref == nil || ref.Status != http.StatusUnauthorized {
		t.Fatalf("a token in the query string logged in: %+v", ref)
	}
	w, ck := e.login(t, opTok)
	r = httptest.NewRequest(http.MethodPost, "/admin/logout?csrf="+url.QueryEscape(w.CSRF), nil)
	r.AddCookie(&http.Cookie{Name: "c", Value: ck})
	if e.a.CSRFOK(r, w) {
		t.Fatal("a CSRF token in the query string passed")
	}
	form := httptest.NewRequest(http.MethodPost, "/admin/logout", strings.NewReader(url.Values{CSRFField: {w.CSRF}}.Encode()))
	form.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if !e.a.CSRFOK(form, w) {
		t.Fatal("the CSRF form field was refused")
	}
}

func TestIdentify(t *testing.T) {
	e := newEnv(t, nil, nil)
	_, ck := e.login(t, adminTok)
	req := func(h, cookie string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/admin/", nil)
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
		role               Role
		actor              string
	}{
		{"bearer", "Bearer " + adminTok, "", RoleReader, "admin-token"},
		{"operator bearer", "Bearer " + opTok, "", RoleOperator, "operator-token"},
		{"wrong bearer", "Bearer nope", "", RoleNone, "none"},
		{"basic is nobody, even with a cookie", "Basic YWRtaW4=", ck, RoleNone, "none"},
		{"cookie", "", ck, RoleReader, "session:"},
		{"bad cookie", "", ck + "x", RoleNone, "none"},
		{"nothing", "", "", RoleNone, "none"},
	}
	for _, tc := range cases {
		w, _, err := e.a.Identify(req(tc.auth, tc.cookie))
		if err != nil || w.Role != tc.role || !strings.HasPrefix(w.Actor(), tc.actor) {
			t.Errorf("%s: %+v (actor %s) %v, want %s %s", tc.name, w, w.Actor(), err, tc.role, tc.actor)
		}
	}
	if !e.a.CSRFOK(req("Bearer "+adminTok, ""), Who{Role: RoleReader}) {
		t.Error("a bearer request needs no CSRF token")
	}
}

// An attacker who sends 1,000 wrong tokens from one address, each as soon
// as the console lets it, needs at least a minute (on the injected clock),
// and every attempt is audited with the connection's address, not the one
// it claims in X-Forwarded-For.
func TestThousandWrongLoginsMeetBackoff(t *testing.T) {
	e := newEnv(t, nil, nil)
	start := e.clock.t
	refused := 0
	for i := range 1000 {
		r := loginReq("203.0.113.9:4444", "guess-"+string(rune('a'+i%26)))
		r.Header.Set("X-Forwarded-For", "10.9.8.7")
		_, _, ref, err := e.a.Login(r)
		if err != nil || ref == nil {
			t.Fatalf("attempt %d: %+v %v", i, ref, err)
		}
		if ref.Status == http.StatusTooManyRequests {
			refused++
			e.clock.t = e.clock.t.Add(ref.RetryAfter)
		}
	}
	if waited := e.clock.t.Sub(start); waited < time.Minute {
		t.Fatalf("1,000 wrong logins took %s of backoff, want >= 1m", waited)
	}
	audits := e.log.audits(t)
	if len(audits) != 1000 {
		t.Fatalf("%d audit lines for 1,000 attempts", len(audits))
	}
	for _, a := range audits {
		if a["remote"] != "203.0.113.9" || a["level"] != "WARN" {
			t.Fatalf("audit line %v: want remote 203.0.113.9 at WARN", a)
		}
	}
	if got := testutil.ToFloat64(e.a.cfg.Metrics.refusals.WithLabelValues("test", "login", "wrong_token")) +
		testutil.ToFloat64(e.a.cfg.Metrics.refusals.WithLabelValues("test", "login", "backoff")); got != 1000 {
		t.Fatalf("refusals counted %v, want 1000", got)
	}
	if refused == 0 {
		t.Fatal("no attempt was refused with 429")
	}
	if problems, err := testutil.GatherAndLint(e.reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
	}
	// While in backoff even the right token is not compared.
	_, _, ref, _ := e.a.Login(loginReq("203.0.113.9:1", adminTok))
	if ref == nil || ref.Status != http.StatusTooManyRequests {
		t.Fatalf("right token during backoff: %+v", ref)
	}
	// Another address is not affected.
	if _, _, ref, _ := e.a.Login(loginReq("198.51.100.1:1", adminTok)); ref != nil {
		t.Fatalf("another address was refused: %+v", ref)
	}
}

func TestBadBearerTokensThrottled(t *testing.T) {
	e := newEnv(t, nil, nil)
	var last *Refusal
	for range 10 {
		r := httptest.NewRequest(http.MethodGet, "/admin/api/jobs", nil)
		r.RemoteAddr = "203.0.113.7:9"
		r.Header.Set("Authorization", "Bearer wrong")
		_, last, _ = e.a.Identify(r)
	}
	if last == nil || last.Status != http.StatusTooManyRequests || last.RetryAfter <= 0 {
		t.Fatalf("10th wrong bearer token: %+v", last)
	}
	n := 0
	for _, a := range e.log.audits(t) {
		if a["action"] == "bearer" && a["remote"] == "203.0.113.7" {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("%d of 10 wrong bearer tokens audited", n)
	}
}

// The global limit refuses failing sources while it is spent, never one
// that has not failed: guessing from many addresses cannot lock an operator
// out.
func TestGlobalLimitSparesCleanSources(t *testing.T) {
	e := newEnv(t, nil, func(c *Config) {
		c.Limiter = NewLimiter(LimiterConfig{Now: func() time.Time { return time.Unix(1_800_000_000, 0) }, GlobalRate: 1, GlobalBurst: 10})
	})
	for i := range 20 {
		e.a.Login(loginReq(fmt.Sprintf("198.18.0.%d:1", i), "wrong"))
	}
	_, _, ref, _ := e.a.Login(loginReq("198.18.0.0:1", "wrong"))
	if ref == nil || ref.Status != http.StatusTooManyRequests || ref.Reason != "global" {
		t.Fatalf("a failing source under a spent global limit: %+v", ref)
	}
	if _, _, ref, _ := e.a.Login(loginReq("192.0.2.55:1", opTok)); ref != nil {
		t.Fatalf("a clean source was refused by the global limit: %+v", ref)
	}
}

func TestLimiterBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLimiter(LimiterConfig{Now: func() time.Time { return now }, MaxSources: 100})
	for i := range 1000 {
		l.Fail(fmt.Sprintf("2001:db8:%x::1", i))
		l.Fail(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	if n := l.Sources(); n > 100 {
		t.Fatalf("%d sources tracked, bound 100", n)
	}
	// One IPv6 /64 is one source.
	l2 := NewLimiter(LimiterConfig{Now: func() time.Time { return now }})
	for i := range 6 {
		l2.Fail("2001:db8::" + string(rune('1'+i)))
	}
	if _, reason := l2.Allow("2001:db8::ffff"); reason != "backoff" {
		t.Fatalf("addresses of one /64 are separate sources (reason %q)", reason)
	}
}

// A real-time check: the 30th wrong login in a row is refused with 429 or
// delayed at least a second.
func TestThirtiethWrongLoginRealTime(t *testing.T) {
	a, err := New(Config{AdminToken: adminTok, Store: &MemoryStore{}, TTL: time.Hour, Idle: time.Minute, Cookie: "c", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var ref *Refusal
	var took time.Duration
	for range 30 {
		start := time.Now()
		_, _, ref, _ = a.Login(loginReq("203.0.113.30:1", "wrong"))
		took = time.Since(start)
	}
	if !(ref != nil && ref.Status == http.StatusTooManyRequests) && took < time.Second {
		t.Fatalf("30th wrong login: %+v after %s", ref, took)
	}
}

func TestTrustedProxies(t *testing.T) {
	nw, err := NewNetwork([]string{"10.0.0.0/8", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewNetwork([]string{"not-a-cidr"}); err == nil || !strings.Contains(err.Error(), "trusted_proxies") {
		t.Fatalf("a bad CIDR: %v", err)
	}
	cases := []struct {
		name, peer, xff, proto string
		tls                    bool
		wantIP                 string
		wantTLS                bool
	}{
		{"untrusted peer's XFF ignored", "203.0.113.5:1", "10.9.8.7", "https", false, "203.0.113.5", false},
		{"trusted peer's XFF", "10.1.2.3:1", "198.51.100.4", "https", false, "198.51.100.4", true},
		{"rightmost untrusted wins", "10.1.2.3:1", "6.6.6.6, 198.51.100.4, 10.0.0.9", "http", false, "198.51.100.4", false},
		{"trusted peer without XFF", "10.1.2.3:1", "", "", false, "10.1.2.3", false},
		{"direct TLS", "203.0.113.5:1", "", "", true, "203.0.113.5", true},
		{"IPv6 trusted", "[::1]:1", "2001:db8::7", "https", false, "2001:db8::7", true},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(http.MethodGet, "/admin/", nil)
		r.RemoteAddr = tc.peer
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if tc.proto != "" {
			r.Header.Set("X-Forwarded-Proto", tc.proto)
		}
		if tc.tls {
			r.TLS = &cryptotls.ConnectionState{}
		}
		ip, tls := nw.Client(r)
		if ip != tc.wantIP || tls != tc.wantTLS {
			t.Errorf("%s: %s tls=%v, want %s tls=%v", tc.name, ip, tls, tc.wantIP, tc.wantTLS)
		}
	}
	// The zero Network trusts nobody.
	r := httptest.NewRequest(http.MethodGet, "/admin/", nil)
	r.RemoteAddr = "127.0.0.1:5"
	r.Header.Set("X-Forwarded-For", "10.9.8.7")
	r.Header.Set("X-Real-IP", "10.9.8.7")
	if ip, _ := (Network{}).Client(r); ip != "127.0.0.1" {
		t.Fatalf("zero Network: %s", ip)
	}
}

func TestCookieFlags(t *testing.T) {
	trusted, _ := NewNetwork([]string{"10.0.0.0/8"})
	cases := []struct {
		name   string
		nw     Network
		always bool
		peer   string
		tls    bool
		want   bool
	}{
		{"plain", Network{}, false, "203.0.113.1:1", false, false},
		{"forwarded https from an untrusted peer", Network{}, false, "203.0.113.1:1", false, false},
		{"direct TLS", Network{}, false, "203.0.113.1:1", true, true},
		{"forwarded https from a trusted proxy", trusted, false, "10.0.0.1:1", false, true},
		{"always", Network{}, true, "203.0.113.1:1", false, true},
	}
	for _, tc := range cases {
		e := newEnv(t, nil, func(c *Config) { c.Network, c.SecureCookies = tc.nw, tc.always })
		req := httptest.NewRequest(http.MethodPost, "/admin/login", nil)
		req.RemoteAddr = tc.peer
		req.Header.Set("X-Forwarded-Proto", "https")
		if tc.tls {
			req.TLS = &cryptotls.ConnectionState{}
		}
		ck := e.a.SessionCookie(req, "v")
		if ck.Name != "c" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != tc.want || ck.Path != "/admin" || ck.MaxAge != 8*3600 {
			t.Errorf("%s: cookie %+v", tc.name, ck)
		}
		if ck := e.a.SessionCookie(req, ""); ck.MaxAge != -1 {
			t.Errorf("clearing cookie MaxAge %d", ck.MaxAge)
		}
	}
}

func TestCheckToken(t *testing.T) {
	if err := CheckToken("server.admin_token_env (CELLGATE_ADMIN_TOKEN)", "short"); err == nil || !strings.Contains(err.Error(), "CELLGATE_ADMIN_TOKEN") || !strings.Contains(err.Error(), "32") {
		t.Fatalf("short token: %v", err)
	}
	if err := CheckToken("X", strings.Repeat("k", MinTokenLength)); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryStoreBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	m := &MemoryStore{Now: func() time.Time { return now }, Idle: time.Minute, Max: 10}
	for i := range 50 {
		now = now.Add(time.Second)
		if err := m.Put(context.Background(), string(rune('A'+i)), Session{Seen: now, Expires: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() > 10 {
		t.Fatalf("%d sessions kept, bound 10", m.Len())
	}
	if _, ok, _ := m.Get(context.Background(), string(rune('A'+49))); !ok {
		t.Fatal("the newest session was evicted")
	}
}

func TestAuditAndHeaders(t *testing.T) {
	var buf bytes.Buffer
	Audit(slog.New(slog.NewTextHandler(&buf, nil)), slog.LevelWarn, Who{Remote: "1.2.3.4"}, "login", "wrong token")
	for _, want := range []string{"level=WARN", `msg="console audit"`, "role=none", "actor=none", "action=login", `outcome="wrong token"`, "remote=1.2.3.4"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("audit line %q lacks %q", buf.String(), want)
		}
	}
	h := http.Header{}
	SetPageHeaders(h)
	if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") || h.Get("X-Content-Type-Options") != "nosniff" ||
		h.Get("Cache-Control") != "no-store" || h.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("page headers %v", h)
	}
}

// failingStore is a store whose database is down.
type failingStore struct{ MemoryStore }

func (f *failingStore) Get(context.Context, string) (Session, bool, error) {
	return Session{}, false, errors.New("connection refused")
}

// A store that fails is ErrStore (the console answers 503), never "logged
// out"; bearer tokens do not need it.
func TestStoreDown(t *testing.T) {
	e := newEnv(t, &failingStore{}, nil)
	_, ck := e.login(t, adminTok)
	if _, _, err := e.a.Identify(cookieReq(http.MethodGet, ck)); !errors.Is(err, ErrStore) {
		t.Fatalf("session with the store down: %v, want ErrStore", err)
	}
	r := httptest.NewRequest(http.MethodGet, "/admin/api/jobs", nil)
	r.Header.Set("Authorization", "Bearer "+adminTok)
	if w, ref, err := e.a.Identify(r); err != nil || ref != nil || w.Role != RoleReader {
		t.Fatalf("bearer with the store down: %+v %+v %v", w, ref, err)
	}
}
