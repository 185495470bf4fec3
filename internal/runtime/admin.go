package runtime

import (
	"crypto/sha256"
	"crypto/subtle"
	"github.com/cellgate/cellgate/internal/httpguard"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/admission"
)

// AdmissionPath serves the admission report (JSON) to holders of the admin
// token. It is registered only when the variable named by
// server.admin_token_env is set; otherwise it answers 404 like any unknown
// path.
const AdmissionPath = "/admin/admission"

// adminAuth guards an admin handler with "Authorization: Bearer <token>".
// Both sides are hashed before the constant-time compare, so neither the
// content nor the length of the token leaks through timing.
func adminAuth(token string, h echo.HandlerFunc) echo.HandlerFunc {
	want := sha256.Sum256([]byte(token))
	return func(c echo.Context) error {
		got, ok := strings.CutPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="cellgate-admin"`)
			return c.Blob(http.StatusUnauthorized, httpguard.ContentType, errAdminUnauthorized)
		}
		return h(c)
	}
}

var errAdminUnauthorized = httpguard.Encode(http.StatusUnauthorized, "admin_unauthorized", "admin token required")

// AdmissionReport is the JSON body of GET /admin/admission.
type AdmissionReport struct {
	// Server is the server-wide limit.
	Server ServerReport `json:"server"`
	// Requests is the per-tenant request engine; null when off.
	Requests *EngineReport `json:"requests"`
	// DB is the per-tenant database-permit engine; null when off.
	DB *EngineReport `json:"db"`
}

// ServerReport describes the server-wide admission limit.
type ServerReport struct {
	// MaxConcurrentRequests is the cap (0 = none).
	MaxConcurrentRequests int64 `json:"max_concurrent_requests"`
	// InFlight is the requests holding a server permit now.
	InFlight int64 `json:"in_flight"`
}

// EngineReport is an admission.Report in the endpoint's snake_case form.
type EngineReport struct {
	// Layout is "SINGLE" or "SHARDED(n)".
	Layout string `json:"layout"`
	// TallyPartitions is the number of outcome-tally partitions.
	TallyPartitions int `json:"tally_partitions"`
	// MaxConcurrent is the per-tenant cap (0 = none).
	MaxConcurrent int64 `json:"max_concurrent"`
	// Accounts is the tenants held.
	Accounts int `json:"accounts"`
	// Evictions is the tenants removed since start.
	Evictions uint64 `json:"evictions"`
	// InFlight is the permits held now.
	InFlight int64 `json:"in_flight"`
	// Outcomes counts admissions by outcome name.
	Outcomes map[string]uint64 `json:"outcomes"`
	// Contention is the contention report.
	Contention ContentionReport `json:"contention"`
	// Sharding is the occupancy report.
	Sharding OccupancyReport `json:"sharding"`
}

// ContentionReport is admission.Contention in JSON form.
type ContentionReport struct {
	// ContendedExchanges is the lost compare-exchanges since start.
	ContendedExchanges uint64 `json:"contended_exchanges"`
	// Hottest lists up to 8 tenants by contended exchanges.
	Hottest []HotAccount `json:"hottest"`
}

// HotAccount is one entry of ContentionReport.Hottest.
type HotAccount struct {
	// Account is the tenant id.
	Account string `json:"account"`
	// ContendedExchanges is its lost compare-exchanges.
	ContendedExchanges uint64 `json:"contended_exchanges"`
}

// OccupancyReport is admission.Occupancy in JSON form.
type OccupancyReport struct {
	// Shards is the shards per account.
	Shards int `json:"shards"`
	// AffinitiesAssigned is the affinities the process has issued.
	AffinitiesAssigned int `json:"affinities_assigned"`
	// CrowdedShards is the shards carrying more than one affinity.
	CrowdedShards int `json:"crowded_shards"`
	// Crowded is true when any shard is crowded.
	Crowded bool `json:"crowded"`
}

func engineReport(e *admission.Engine) *EngineReport {
	if e == nil {
		return nil
	}
	r := e.Report()
	out := &EngineReport{
		Layout:          r.Layout.String(),
		TallyPartitions: r.Layout.TallyPartitions,
		MaxConcurrent:   e.Config().MaxConcurrent,
		Accounts:        r.Accounts,
		Evictions:       r.Evictions,
		InFlight:        r.InFlight,
		Outcomes:        make(map[string]uint64, len(admission.Outcomes())),
		Contention: ContentionReport{
			ContendedExchanges: r.Contention.ContendedExchanges,
			Hottest:            make([]HotAccount, 0, len(r.Contention.Hottest)),
		},
		Sharding: OccupancyReport{
			Shards:             r.Sharding.Shards,
			AffinitiesAssigned: r.Sharding.AffinitiesAssigned,
			CrowdedShards:      r.Sharding.CrowdedShards(),
			Crowded:            r.Sharding.IsCrowded(),
		},
	}
	for _, o := range admission.Outcomes() {
		out.Outcomes[o.String()] = r.Tallies.Of(o)
	}
	for _, h := range r.Contention.Hottest {
		out.Contention.Hottest = append(out.Contention.Hottest, HotAccount{h.Account, h.ContendedExchanges})
	}
	return out
}

// Report builds the admission report the admin endpoint serves.
func (b Bulkheads) Report() AdmissionReport {
	return AdmissionReport{
		Server:   ServerReport{MaxConcurrentRequests: b.Server.Max(), InFlight: b.Server.InFlight()},
		Requests: engineReport(b.Requests),
		DB:       engineReport(b.DB),
	}
}
