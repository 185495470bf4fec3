package config

import (
	"strings"
	"testing"
	"time"
)

func base() Config {
	return Config{
		Server:   Server{Address: ":8080", ShutdownTimeout: Duration(15 * time.Second)},
		Database: Database{Shards: []Shard{{Name: "shard-0", DSNEnv: "A"}}},
	}
}

func TestOverlayReplacesNamedFieldsOnly(t *testing.T) {
	b := base()
	got, err := OverlayJSON(b, []byte(`{"server":{"address":":9090"}}`), "cell.json")
	if err != nil {
		t.Fatal(err)
	}
	if got.Server.Address != ":9090" {
		t.Fatalf("address = %q", got.Server.Address)
	}
	if got.Server.ShutdownTimeout.D() != 15*time.Second {
		t.Fatalf("shutdown_timeout lost: %s", got.Server.ShutdownTimeout)
	}
	got.Database.Shards[0].Name = "changed"
	if b.Database.Shards[0].Name != "shard-0" {
		t.Fatal("overlay wrote through to the base config's slice")
	}
}

func TestOverlayRejectsUnknownField(t *testing.T) {
	_, err := OverlayJSON(base(), []byte(`{"server":{"adress":":1"}}`), "cell.json")
	if err == nil || !strings.Contains(err.Error(), "adress") {
		t.Fatalf("err = %v, want one naming the unknown field", err)
	}
}

func TestDurationJSON(t *testing.T) {
	var d Duration
	if err := d.UnmarshalJSON([]byte(`"250ms"`)); err != nil || d.D() != 250*time.Millisecond {
		t.Fatalf("d = %s, err = %v", d, err)
	}
	if err := d.UnmarshalJSON([]byte(`5`)); err == nil {
		t.Fatal("a bare number must be rejected")
	}
	b, _ := Duration(time.Second).MarshalJSON()
	if string(b) != `"1s"` {
		t.Fatalf("marshal = %s", b)
	}
}

func TestAppMigrationTargets(t *testing.T) {
	for _, tc := range []struct {
		v               string
		control, shards bool
	}{{"", false, true}, {AppMigrationsShards, false, true}, {AppMigrationsControl, true, false}, {AppMigrationsBoth, true, true}} {
		d := Database{AppMigrations: tc.v}
		if d.AppMigrationsOnControl() != tc.control || d.AppMigrationsOnShards() != tc.shards {
			t.Errorf("app_migrations %q: control %v shards %v, want %v %v", tc.v, d.AppMigrationsOnControl(), d.AppMigrationsOnShards(), tc.control, tc.shards)
		}
	}
}
