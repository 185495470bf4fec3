package jobs_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

func TestConfigDefaults(t *testing.T) {
	c := jobs.Config{}.WithDefaults()
	want := jobs.Config{
		Workers:          jobs.DefaultWorkers,
		RetryBackoffBase: jobs.DefaultRetryBackoffBase,
		RetryBackoffMax:  jobs.DefaultRetryBackoffMax,
		ShutdownTimeout:  jobs.DefaultShutdownTimeout,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults = %+v, want %+v", c, want)
	}
	if c.Tenants.Isolated() {
		t.Fatal("isolation must be off by default")
	}
	if err := (jobs.Config{}).Validate(); err != nil {
		t.Fatalf("zero Config invalid: %v", err)
	}
	lanes := jobs.Config{Tenants: jobs.TenantConfig{Lanes: 8}}.WithDefaults()
	if lanes.Tenants.LanesPerTenant != jobs.DefaultLanesPerTenant {
		t.Errorf("lanes_per_tenant default = %d, want %d", lanes.Tenants.LanesPerTenant, jobs.DefaultLanesPerTenant)
	}
	one := jobs.Config{Tenants: jobs.TenantConfig{Lanes: 1}}.WithDefaults()
	if one.Tenants.LanesPerTenant != 1 {
		t.Errorf("lanes_per_tenant default with 1 lane = %d, want 1", one.Tenants.LanesPerTenant)
	}
	for _, tc := range []jobs.TenantConfig{{MaxConcurrent: 1}, {Lanes: 2}} {
		if !tc.Isolated() {
			t.Errorf("%+v: isolation should be on", tc)
		}
	}
}

func TestConfigValidateNamesFields(t *testing.T) {
	for _, tc := range []struct {
		cfg  jobs.Config
		want string
	}{
		{jobs.Config{Workers: -1}, "jobs.workers"},
		{jobs.Config{Tenants: jobs.TenantConfig{MaxConcurrent: -1}}, "jobs.tenants.max_concurrent"},
		{jobs.Config{Tenants: jobs.TenantConfig{Lanes: -1}}, "jobs.tenants.lanes"},
		{jobs.Config{Workers: 100, Tenants: jobs.TenantConfig{Lanes: jobs.MaxLanes + 1}}, "jobs.tenants.lanes"},
		{jobs.Config{Tenants: jobs.TenantConfig{Lanes: 4, LanesPerTenant: 5}}, "jobs.tenants.lanes_per_tenant"},
		{jobs.Config{Tenants: jobs.TenantConfig{LanesPerTenant: -1}}, "jobs.tenants.lanes_per_tenant"},
		{jobs.Config{RetryBackoffBase: -time.Second}, "jobs.retry_backoff_base"},
		{jobs.Config{RetryBackoffBase: time.Minute, RetryBackoffMax: time.Second}, "jobs.retry_backoff_max"},
		{jobs.Config{ShutdownTimeout: -time.Second}, "jobs.shutdown_timeout"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want+":") {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	// Every invalid field is reported, not just the first.
	err := jobs.Config{Workers: -1, ShutdownTimeout: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "jobs.workers") || !strings.Contains(err.Error(), "jobs.shutdown_timeout") {
		t.Errorf("Validate with two bad fields = %v, want both named", err)
	}
}

func TestConfigEffectiveClampsLanes(t *testing.T) {
	eff, warnings, err := jobs.Config{Workers: 4, Tenants: jobs.TenantConfig{Lanes: 8, LanesPerTenant: 6}}.Effective()
	if err != nil {
		t.Fatal(err)
	}
	if eff.Tenants.Lanes != 4 || eff.Tenants.LanesPerTenant != 4 {
		t.Errorf("effective lanes %d/%d, want 4/4", eff.Tenants.Lanes, eff.Tenants.LanesPerTenant)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "jobs.tenants.lanes (8)") || !strings.Contains(warnings[1], "lanes_per_tenant (6)") {
		t.Errorf("warnings = %q", warnings)
	}
	eff, warnings, err = jobs.Config{Workers: 8, Tenants: jobs.TenantConfig{Lanes: 8, LanesPerTenant: 2}}.Effective()
	if err != nil || len(warnings) != 0 || eff.Tenants.Lanes != 8 {
		t.Errorf("Effective without clamping = %+v, %q, %v", eff, warnings, err)
	}
	if _, _, err := (jobs.Config{Workers: -3}).Effective(); err == nil {
		t.Error("Effective accepted an invalid config")
	}
}

func TestBackoff(t *testing.T) {
	c := jobs.Config{RetryBackoffBase: time.Second, RetryBackoffMax: 10 * time.Second}
	for _, tc := range []struct {
		attempt int
		full    time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{4, 8 * time.Second}, {5, 10 * time.Second}, {40, 10 * time.Second}, {1000, 10 * time.Second},
	} {
		lo, hi := c.Backoff(tc.attempt, 0), c.Backoff(tc.attempt, 0.999999)
		if lo != tc.full/2 {
			t.Errorf("Backoff(%d, 0) = %s, want %s", tc.attempt, lo, tc.full/2)
		}
		if hi >= tc.full || hi < tc.full-tc.full/1000 {
			t.Errorf("Backoff(%d, ~1) = %s, want just under %s", tc.attempt, hi, tc.full)
		}
	}
	if mid := c.Backoff(2, 0.5); mid != 1500*time.Millisecond {
		t.Errorf("Backoff(2, 0.5) = %s, want 1.5s", mid)
	}
}
