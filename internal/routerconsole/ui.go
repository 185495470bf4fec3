package routerconsole

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/cellgate/cellgate/internal/cells/router"
	"github.com/cellgate/cellgate/internal/console/consoleauth"
)

// parseTemplates parses every page once per process (layout + page).
func parseTemplates() error {
	pagesOnce.Do(func() {
		funcs := template.FuncMap{
			"when": func(t time.Time) string {
				if t.IsZero() {
					return "—"
				}
				return t.UTC().Format("2006-01-02 15:04:05 UTC")
			},
			"ago": func(now, t time.Time) string {
				if t.IsZero() {
					return ""
				}
				return now.Sub(t).Round(time.Second).String() + " ago"
			},
			"short": func(digest string) string { return digest[:min(12, len(digest))] },
			"join":  func(s []string) string { return strings.Join(s, ", ") },
			"class": func(i int) string { return [5]string{"1xx", "2xx", "3xx", "4xx", "5xx"}[i] },
		}
		pages = map[string]*template.Template{}
		for _, p := range []string{"login", "overview", "slotmap", "failure"} {
			t, err := template.New(p).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
			if err != nil {
				pagesErr = fmt.Errorf("routerconsole: template %s: %w", p, err)
				return
			}
			pages[p] = t
		}
	})
	return pagesErr
}

// view is what every page template gets.
type view struct {
	Title, Nav string
	LoggedIn   bool
	CSRF       string
	Failure    string
	Refresh    int  // seconds; 0 = no auto-refresh
	OIDC       bool // the login page offers the OpenID provider
	Now        time.Time
	Data       any
	status     int
	page       string
}

// loginBodyLimit bounds the login form (a token, a few hundred bytes).
const loginBodyLimit = 64 << 10

func (c *Console) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET "+Prefix+"static/", staticFiles())
	mux.HandleFunc("GET "+router.AdminPath, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
	})
	mux.HandleFunc("GET "+Prefix+"login", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, c.loginView("", 0))
	})
	mux.HandleFunc("POST "+Prefix+"login", c.login)
	if c.auth.OIDCEnabled() {
		mux.HandleFunc("GET "+Prefix+"oidc/login", c.oidcLogin)
		mux.HandleFunc("GET "+Prefix+"oidc/callback", c.oidcCallback)
	}
	mux.HandleFunc("POST "+Prefix+"logout", c.page(func(w http.ResponseWriter, r *http.Request, who consoleauth.Who) {
		_ = c.auth.Logout(r.Context(), who) // a MemoryStore never fails
		http.SetCookie(w, c.auth.SessionCookie(r, ""))
		http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
	}))
	mux.HandleFunc("GET "+Prefix+"{$}", c.page(c.overviewPage))
	mux.HandleFunc("GET "+Prefix+"slotmap", c.page(c.slotMapPage))
	mux.HandleFunc("GET "+APIPrefix+"cells", c.api(func() any { return c.cfg.Source.Cells() }))
	mux.HandleFunc("GET "+APIPrefix+"slotmap", c.api(func() any { return c.slotMap() }))
	mux.HandleFunc("GET "+APIPrefix+"traffic", c.api(func() any { return c.trafficNow(c.cfg.Source.Cells()) }))
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		// Anything else below /admin/: nothing here, and nothing to tell
		// whether the caller holds a token.
		http.NotFound(w, r)
	})
	return mux
}

// SlotMap is the slot map page's and /admin/api/slotmap's data.
type SlotMap struct {
	router.SlotMapStatus
	// File is the slot map file the router reloads ("" = the spec's cells).
	File string `json:"file"`
}

func (c *Console) slotMap() SlotMap {
	return SlotMap{SlotMapStatus: c.cfg.Source.SlotMapStatus(), File: c.cfg.SlotMapFile}
}

// apiError is the body of every API refusal: no data.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// api guards a JSON read: 401 without a valid token or session, 429 for a
// source in backoff.
func (c *Console) api(data func() any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, ref, _ := c.auth.Identify(r) // a MemoryStore never fails
		if ref != nil && ref.Status == http.StatusTooManyRequests {
			ref.SetRetryAfter(w.Header())
			writeJSON(w, http.StatusTooManyRequests, apiError{"too many wrong tokens from this address; retry later", "console_throttled"})
			return
		}
		if ref != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cellgate-router-console"`)
			writeJSON(w, http.StatusUnauthorized, apiError{"console token required", "console_unauthorized"})
			return
		}
		writeJSON(w, http.StatusOK, data())
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(raw, '\n'))
}

// page guards a page: a browser without a session goes to the login page;
// every POST needs its CSRF token.
func (c *Console) page(h func(http.ResponseWriter, *http.Request, consoleauth.Who)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, ref, _ := c.auth.Identify(r) // a MemoryStore never fails
		if ref != nil && ref.Status == http.StatusTooManyRequests {
			ref.SetRetryAfter(w.Header())
			c.render(w, c.loginView(throttledText(ref), ref.Status))
			return
		}
		if ref != nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
				return
			}
			c.render(w, c.loginView("Your session has ended; log in again.", http.StatusUnauthorized))
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, loginBodyLimit)
			if !c.auth.CSRFOK(r, who) {
				v := c.view(who, "failure", "Forbidden", nil)
				v.Failure, v.status = "The form's CSRF token is missing or wrong; reload the page and try again.", http.StatusForbidden
				c.render(w, v)
				return
			}
		}
		h(w, r, who)
	}
}

func (c *Console) view(who consoleauth.Who, page, title string, data any) view {
	return view{Title: title, Nav: page, LoggedIn: true, CSRF: who.CSRF, Now: c.cfg.Now(), Data: data, page: page}
}

func (c *Console) render(w http.ResponseWriter, v view) {
	var buf bytes.Buffer
	if err := pages[v.page].ExecuteTemplate(&buf, "layout", v); err != nil {
		c.log.Error("router console: render", "page", v.page, "error", err.Error())
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	v.status = cmp.Or(v.status, http.StatusOK)
	h := w.Header()
	consoleauth.SetPageHeaders(h)
	h.Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(v.status)
	_, _ = w.Write(buf.Bytes())
}

// loginView is the login page, with a failure and its status.
func (c *Console) loginView(failure string, status int) view {
	return view{Title: "Log in", page: "login", Failure: failure, status: status, OIDC: c.auth.OIDCEnabled()}
}

// oidcLogin sends the browser to the OpenID provider.
func (c *Console) oidcLogin(w http.ResponseWriter, r *http.Request) {
	ck, to, err := c.auth.OIDCStart(r)
	if err != nil {
		c.render(w, c.loginView("The OpenID provider does not answer; try again shortly, or log in with the token.", http.StatusServiceUnavailable))
		return
	}
	http.SetCookie(w, ck)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// oidcCallback trades the provider's code for a fresh session in this
// router's memory (a MemoryStore never fails).
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	_, cookie, clear, ref, err := c.auth.OIDCCallback(r)
	if clear != nil {
		http.SetCookie(w, clear)
	}
	switch {
	case err != nil:
		c.render(w, c.loginView("The OpenID provider does not answer; try again shortly, or log in with the token.", http.StatusServiceUnavailable))
		return
	case ref != nil && ref.Status == http.StatusForbidden:
		c.render(w, c.loginView("The OpenID provider names you, but your groups give you no role in this console.", ref.Status))
		return
	case ref != nil:
		c.render(w, c.loginView("The OpenID login failed or expired; try again.", ref.Status))
		return
	}
	http.SetCookie(w, c.auth.SessionCookie(r, cookie))
	consoleauth.WriteContinue(w, Prefix)
}

// login trades the token (the form's body only) for a fresh session in
// this router's memory.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, loginBodyLimit)
	_, cookie, ref, _ := c.auth.Login(r) // a MemoryStore never fails
	switch {
	case ref != nil && ref.Status == http.StatusTooManyRequests:
		ref.SetRetryAfter(w.Header())
		c.render(w, c.loginView(throttledText(ref), ref.Status))
		return
	case ref != nil:
		c.render(w, c.loginView("That token is not the router's admin token.", http.StatusUnauthorized))
		return
	}
	http.SetCookie(w, c.auth.SessionCookie(r, cookie))
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// throttledText says how long a throttled source waits.
func throttledText(ref *consoleauth.Refusal) string {
	return fmt.Sprintf("Too many wrong tokens from your address; try again in %s.", max(time.Second, ref.RetryAfter.Round(time.Second)))
}

// Overview is the overview page's data.
type overview struct {
	Cells             []router.CellStatus
	Up, Down          int
	SlotMap           SlotMap
	Traffic, Refusals template.HTML
	Interval          time.Duration
	Samples           int
}

func (c *Console) overviewPage(w http.ResponseWriter, r *http.Request, who consoleauth.Who) {
	cells := c.cfg.Source.Cells()
	o := overview{Cells: cells, SlotMap: c.slotMap(), Interval: c.cfg.SampleEvery, Samples: c.cfg.Samples}
	for _, s := range cells {
		if s.Up {
			o.Up++
		} else {
			o.Down++
		}
	}
	o.Traffic, o.Refusals = c.charts(c.trafficNow(cells))
	v := c.view(who, "overview", "Cells", o)
	// Reload with the samples, but never more often than every 5 s (a
	// sampler tuned faster in a test must not keep reloading the page).
	v.Refresh = int(max(c.cfg.SampleEvery, 5*time.Second) / time.Second)
	c.render(w, v)
}

func (c *Console) slotMapPage(w http.ResponseWriter, r *http.Request, who consoleauth.Who) {
	c.render(w, c.view(who, "slotmap", "Slot map", c.slotMap()))
}
