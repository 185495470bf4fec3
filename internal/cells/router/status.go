package router

import (
	"net/url"
	"strings"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
)

// CellStatus is one cell of the map in use as the router sees it now: what
// the router's console shows. The counters are the ones /metrics exports,
// since the router started (a cell kept across a reload keeps them).
type CellStatus struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// Console is the cell's own console (its URL + /admin/).
	Console string   `json:"console"`
	Slots   []string `json:"slots"`
	Up      bool     `json:"up"`
	// DownSince is when the cell was last marked down; zero while up.
	DownSince time.Time `json:"down_since,omitzero"`
	// LastError is the last failed health check or transport error, and
	// LastErrorAt when it happened (kept after the cell is back).
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	InFlight    int64     `json:"in_flight"`
	// Responses counts the answers by status class 1xx..5xx, the router's
	// own refusals included.
	Responses [5]uint64 `json:"responses"`
	// ClientGone counts the requests whose client went away before the
	// answer (499): no answer was sent, and none is a 5xx.
	ClientGone uint64 `json:"client_gone"`
	// Requests is the sum of Responses and ClientGone.
	Requests uint64 `json:"requests"`
	// Refusals are the router's own 503s for this cell's tenants.
	Refusals Refusals `json:"refusals"`
	// Ejections count the times the cell was marked down: by a health
	// check (Active) or by request errors (Passive).
	Ejections Ejections `json:"ejections"`
	// Errors are transport errors talking to the cell; ClientErrors the
	// forwarded requests that failed by the client's doing.
	Errors       UpstreamErrors `json:"errors"`
	ClientErrors uint64         `json:"client_errors"`
}

// Refusals are the router's own 503s, by reason.
type Refusals struct {
	Down      uint64 `json:"down"`
	CellCap   uint64 `json:"cell_cap"`
	TenantCap uint64 `json:"tenant_cap"`
	Frozen    uint64 `json:"frozen"`
}

// Total is the sum of the refusals.
func (r Refusals) Total() uint64 { return r.Down + r.CellCap + r.TenantCap + r.Frozen }

// Ejections count the times a cell was marked down, by cause.
type Ejections struct {
	Active  uint64 `json:"active"`
	Passive uint64 `json:"passive"`
}

// UpstreamErrors count transport errors, by kind.
type UpstreamErrors struct {
	Dial    uint64 `json:"dial"`
	Timeout uint64 `json:"timeout"`
	Other   uint64 `json:"other"`
}

// Cells reports every cell of the map in use, in map order. It takes each
// cell's mutex briefly (never held by a request that succeeds).
func (p *Proxy) Cells() []CellStatus {
	t := p.table.Load()
	out := make([]CellStatus, len(t.backends))
	specs := t.r.Cells()
	for i, b := range t.backends {
		s := CellStatus{
			Name:         b.name,
			URL:          b.url,
			Console:      consoleURL(b.target),
			Slots:        specs[i].Slots,
			Up:           b.up.Load(),
			InFlight:     b.inflight.Load(),
			ClientErrors: b.clientFaults.Load(),
			Refusals: Refusals{
				Down: b.rejectDown.Load(), CellCap: b.rejectBusy.Load(),
				TenantCap: b.rejectTenant.Load(), Frozen: b.rejectFrozen.Load(),
			},
			Ejections: Ejections{Active: b.ejectActive.Load(), Passive: b.ejectPassive.Load()},
			Errors:    UpstreamErrors{Dial: b.errDial.Load(), Timeout: b.errTimeout.Load(), Other: b.errOther.Load()},
		}
		for j := range b.codes {
			s.Responses[j] = b.codes[j].Load()
			s.Requests += s.Responses[j]
		}
		s.ClientGone = b.clientGone.Load()
		s.Requests += s.ClientGone
		b.mu.Lock()
		s.DownSince, s.LastError, s.LastErrorAt = b.downSince, b.lastErr, b.lastErrAt
		b.mu.Unlock()
		if s.Up {
			s.DownSince = time.Time{}
		}
		out[i] = s
	}
	return out
}

// consoleURL is a cell's console: its base URL + /admin/.
func consoleURL(u *url.URL) string {
	c := *u
	c.Path = strings.TrimSuffix(c.Path, "/") + "/admin/"
	c.RawPath, c.RawQuery, c.Fragment = "", "", ""
	return c.String()
}

// SlotMapStatus is the slot map in use and its recent reloads.
type SlotMapStatus struct {
	// Generation counts the maps this router has used since it started (1
	// = the map it started with); a reload that swaps a map in adds one.
	Generation uint64 `json:"generation"`
	// Digest is the hex SHA-256 of the map's canonical form (cells.SlotMap
	// Marshal): two routers with equal digests route every slot alike.
	Digest string `json:"digest"`
	// Since is when this map was swapped in.
	Since time.Time `json:"since"`
	// Current is false while the slot map file is bad (unreadable or
	// invalid) and the last good map is kept.
	Current bool `json:"current"`
	// Map is the map in use, in canonical form.
	Map cells.SlotMap `json:"map"`
	// Reloads are the last ReloadHistory reloads, newest first.
	Reloads []Reload `json:"reloads"`
	// ReloadsOK, ReloadsInvalid and ReloadsUnreadable count every reload
	// since the router started.
	ReloadsOK         uint64 `json:"reloads_ok"`
	ReloadsInvalid    uint64 `json:"reloads_invalid"`
	ReloadsUnreadable uint64 `json:"reloads_unreadable"`
}

// Reload is one attempt to load a changed slot map file.
type Reload struct {
	At time.Time `json:"at"`
	// Result is "ok" (the new map is in use), "invalid" (rejected, the last
	// good map kept) or "unreadable" (the file could not be read: one
	// entry for a run of failed polls, the counter counts each).
	Result string `json:"result"`
	// Generation and Digest are the map in use after the attempt.
	Generation uint64 `json:"generation"`
	Digest     string `json:"digest"`
	Cells      int    `json:"cells"`
	Error      string `json:"error,omitempty"`
}

// ReloadHistory is how many reloads SlotMapStatus keeps.
const ReloadHistory = 16

// reloadRing keeps the last ReloadHistory reloads.
type reloadRing struct {
	buf [ReloadHistory]Reload
	n   int // how many were ever written
}

func (r *reloadRing) add(x Reload) {
	r.buf[r.n%ReloadHistory] = x
	r.n++
}

// newestFirst returns the kept reloads, newest first.
func (r *reloadRing) newestFirst() []Reload {
	k := min(r.n, ReloadHistory)
	out := make([]Reload, k)
	for i := range k {
		out[i] = r.buf[(r.n-1-i)%ReloadHistory]
	}
	return out
}

// noteReload records a reload attempt with the map in use after it.
func (p *Proxy) noteReload(result string, err error) {
	t := p.table.Load()
	x := Reload{At: p.cfg.Now(), Result: result, Generation: t.gen, Digest: t.digest, Cells: len(t.backends)}
	if err != nil {
		x.Error = err.Error()
	}
	p.reloadMu.Lock()
	p.reloads.add(x)
	p.reloadMu.Unlock()
}

// SlotMapStatus reports the map in use and its recent reloads.
func (p *Proxy) SlotMapStatus() SlotMapStatus {
	t := p.table.Load()
	p.reloadMu.Lock()
	reloads := p.reloads.newestFirst()
	p.reloadMu.Unlock()
	return SlotMapStatus{
		Generation:        t.gen,
		Digest:            t.digest,
		Since:             t.since,
		Current:           p.m.slotMapCurrent.Load(),
		Map:               t.r.SlotMap(),
		Reloads:           reloads,
		ReloadsOK:         p.m.reloadOK.Load(),
		ReloadsInvalid:    p.m.reloadInvalid.Load(),
		ReloadsUnreadable: p.m.reloadFailed.Load(),
	}
}

// mapDigest is the hex SHA-256 of r's canonical form.
func mapDigest(r *cells.CellRouter) string { return r.Digest() }
