package slotmove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
)

// routerView is what a router's /readyz says about its slot map.
type routerView struct {
	Digest string `json:"slot_map_digest"`
	Older  int64  `json:"requests_on_older_maps"`
}

// confirmRouters waits until every router of cfg.Routers reports m as the
// map in use and, with drain, no forwarded request routed by an older map
// still in flight. That is the settle a freeze needs, measured instead of
// guessed: from then on no router sends the range's tenants to the source,
// and no request it sent there earlier is still running. It gives up after
// ConfirmTimeout with an error naming the first router that has not
// confirmed and what it reports.
func (mv *mover) confirmRouters(ctx context.Context, m cells.SlotMap, drain bool) error {
	r, err := m.Build()
	if err != nil {
		return err
	}
	want := r.Digest()
	ctx, cancel := context.WithTimeout(ctx, mv.cfg.ConfirmTimeout)
	defer cancel()
	errs := make([]error, len(mv.cfg.Routers))
	var wg sync.WaitGroup
	for i, base := range mv.cfg.Routers {
		wg.Go(func() { errs[i] = mv.confirmRouter(ctx, base, want, drain) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// confirmRouter polls one router's /readyz every 5 ms until it confirms.
func (mv *mover) confirmRouter(ctx context.Context, base, want string, drain bool) error {
	url := strings.TrimSuffix(base, "/") + "/readyz"
	var last routerView
	var lastErr error
	polled := false
	for {
		v, err := readRouter(ctx, mv.http, url)
		// A read the deadline cut short keeps what the router last
		// answered (a stale digest, a 404 that says it is no router) for
		// the report, not the cut; the select below sees the deadline.
		if cut := err != nil && ctx.Err() != nil && polled; !cut {
			last, lastErr, polled = v, err, true
		}
		if lastErr == nil && last.Digest == want && (!drain || last.Older == 0) {
			return nil
		}
		if errors.Is(lastErr, errNoRouter) {
			// No waiting makes a URL that is no router's into one.
			return fmt.Errorf("slotmove: router %s: %w", base, lastErr)
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			if lastErr != nil {
				return fmt.Errorf("slotmove: router %s did not confirm the slot map within %s: %w", base, mv.cfg.ConfirmTimeout, lastErr)
			}
			if last.Digest != want {
				return fmt.Errorf("slotmove: router %s has not loaded the slot map within %s (it reports digest %.12s, want %.12s): check its -slotmap file and -reload",
					base, mv.cfg.ConfirmTimeout, last.Digest, want)
			}
			return fmt.Errorf("slotmove: router %s still has %d requests routed by the previous slot map in flight after %s", base, last.Older, mv.cfg.ConfirmTimeout)
		case <-t.C:
		}
	}
}

// errNoRouter marks an answer only a URL that is no router's /readyz gives
// (404): polling it longer cannot confirm anything.
var errNoRouter = errors.New("not a router's /readyz (check the router URL)")

func readRouter(ctx context.Context, c *http.Client, url string) (routerView, error) {
	var v routerView
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return v, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return v, fmt.Errorf("GET %s: %s: %w", url, resp.Status, errNoRouter)
	}
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return v, fmt.Errorf("GET %s: %w", url, err)
	}
	if v.Digest == "" {
		return v, fmt.Errorf("GET %s: no slot_map_digest (a router older than this tool, or not a router)", url)
	}
	return v, nil
}
