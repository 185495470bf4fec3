package configload

import (
	"context"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
)

// TestCheckConfigWarnsOnClientChosenTenantWithCaps: the boot check (which
// cmd/server logs line by line) warns when per-tenant caps are on with a
// tenant source the client chooses, and not with an authenticated one.
func TestCheckConfigWarnsOnClientChosenTenantWithCaps(t *testing.T) {
	ctx := context.Background()
	warnsAbout := func(warns []string) bool {
		for _, w := range warns {
			if strings.HasPrefix(w, "tenancy.source:") && strings.Contains(w, "max_concurrent_requests") {
				return true
			}
		}
		return false
	}

	cfg := spec.Config()
	cfg.Server.MaxConcurrentRequests = 64
	cfg.Tenancy.MaxConcurrentRequests = 16
	cfg.Tenancy.MaxDBConnections = 4
	for _, src := range []string{"header", "subdomain"} {
		cfg.Tenancy.Source = src
		warns, err := Check(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if !warnsAbout(warns) {
			t.Errorf("source %s with caps on: no client-chosen-tenant warning in %q", src, warns)
		}
	}

	cfg.Tenancy.Source = "jwt"
	warns, err := Check(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if warnsAbout(warns) {
		t.Errorf("jwt source warned as client-chosen: %q", warns)
	}

	off := spec.Config() // header source, caps off
	warns, err = Check(ctx, off)
	if err != nil {
		t.Fatal(err)
	}
	if warnsAbout(warns) {
		t.Errorf("caps off warned: %q", warns)
	}
}

// TestCheckConfigDeniesTenantCapAtServerCap: the policy refuses a tenant
// cap that is not below the server cap (one tenant could fill the server).
func TestCheckConfigDeniesTenantCapAtServerCap(t *testing.T) {
	cfg := spec.Config()
	cfg.Server.MaxConcurrentRequests = 16
	cfg.Tenancy.MaxConcurrentRequests = 16
	_, err := Check(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "tenancy.max_concurrent_requests") {
		t.Fatalf("err = %v", err)
	}
}
