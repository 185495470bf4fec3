package configload

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
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
	cfg.Tenancy.JWT.KeyEnv = "CELLGATE_JWT_KEY"
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

// TestDeployFilesExampleSpec: the generated per-cell file of the example
// spec passes the boot check and gives the cell its port and shards.
func TestDeployFilesExampleSpec(t *testing.T) {
	files, err := cells.DeployFiles(spec.Config())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "deploy/cell-1.json deploy/slotmap.json" {
		t.Fatalf("files %v", names)
	}
	// The overlay must be accepted by the cells' strict loader and give
	// the cell its port and both shards with explicit slots.
	cfg, err := config.OverlayJSON(spec.Config(), files["deploy/cell-1.json"], "cell-1.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check(context.Background(), cfg); err != nil {
		t.Fatalf("the example cell's overlay does not pass the boot check: %v", err)
	}
	if cfg.Server.Address != ":8080" || cfg.Server.Cell != "cell-1" {
		t.Errorf("address %q cell %q", cfg.Server.Address, cfg.Server.Cell)
	}
	shards, err := cells.ShardsOf(spec.Config(), "cell-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) != 2 || strings.Join(shards[0].Slots, ",") != "0-8191" || shards[1].DSNEnv != "CELLGATE_SHARD_1_DSN" {
		t.Errorf("shards %+v", shards)
	}
	m, r, err := cells.ParseSlotMap(files["deploy/slotmap.json"])
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 1 || strings.Join(m.Cells[0].Slots, ",") != "0-16383" || m.Cells[0].URL != "http://127.0.0.1:8080" {
		t.Errorf("slot map %+v", m)
	}
}

// TestLoadAppSettings: a per-cell file's settings reach the loaded config
// (objects merge field by field), and the boot check holds them to the
// service's #Settings (schema/settings.cue) and rules (policy/app/): an
// unknown setting, one out of range and one the service's rule denies
// are each refused, naming the setting.
func TestLoadAppSettings(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	load := func(body string) (config.Config, error) {
		path := filepath.Join(t.TempDir(), "cell.json")
		if err := os.WriteFile(path, []byte(`{"settings": `+body+`}`), 0o644); err != nil {
			t.Fatal(err)
		}
		// Mode Spec: the rules of every mode, without a cell's own.
		return LoadMode(ctx, Spec, spec.Config(), path, func(string) string { return "" }, log)
	}
	cfg, err := load(`{"orders_page_max": 100}`)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Settings["orders_page_max"] != float64(100) || cfg.Settings["orders_page_default"] != float64(50) {
		t.Errorf("settings after the per-cell file: %v; want orders_page_max 100 and the spec's orders_page_default 50", cfg.Settings)
	}
	for body, want := range map[string]string{
		`{"bogus": 1}`:           "settings.bogus",
		`{"orders_page_max": 0}`: "settings.orders_page_max",
		`{"orders_page_default": 600, "orders_page_max": 500}`: "settings.orders_page_default: 600 is over settings.orders_page_max",
	} {
		if _, err := load(body); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("settings %s: %v; want a refusal naming %q", body, err, want)
		}
	}
}
