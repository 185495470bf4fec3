package cells

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/config"
)

func fourShardsTwoCells() config.Config {
	cfg := spec.Config()
	cfg.Database.Shards = []config.Shard{
		{Name: "s0", DSNEnv: "S0_DSN", MaxConns: 5},
		{Name: "s1", DSNEnv: "S1_DSN", MaxConns: 5},
		{Name: "s2", DSNEnv: "S2_DSN", MaxConns: 5},
		{Name: "s3", DSNEnv: "S3_DSN", MaxConns: 5},
	}
	cfg.Cells = []config.Cell{
		{Name: "east", URL: "http://east.internal:9001"},
		{Name: "west", URL: "https://west.internal"},
	}
	return cfg
}

func TestDeployFilesTwoCellsOwnWholeShards(t *testing.T) {
	cfg := fourShardsTwoCells()
	files, err := DeployFiles(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var east, west cellOverlay
	if err := json.Unmarshal(files["deploy/east.json"], &east); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(files["deploy/west.json"], &west); err != nil {
		t.Fatal(err)
	}
	if east.Server != (overlayServer{Address: ":9001", Cell: "east"}) || west.Server != (overlayServer{Address: ":443", Cell: "west"}) {
		t.Errorf("overlays %+v %+v", east.Server, west.Server)
	}
	shardNames := func(cell string) string {
		shards, err := ShardsOf(cfg, cell)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, sh := range shards {
			s = append(s, sh.Name+"="+strings.Join(sh.Slots, ",")+"@"+sh.DSNEnv)
		}
		return strings.Join(s, " ")
	}
	if got := shardNames("east"); got != "s0=0-4095@S0_DSN s1=4096-8191@S1_DSN" {
		t.Errorf("east shards %s", got)
	}
	if got := shardNames("west"); got != "s2=8192-12287@S2_DSN s3=12288-16383@S3_DSN" {
		t.Errorf("west shards %s", got)
	}
	if _, err := ShardsOf(cfg, "north"); err == nil {
		t.Error("unknown cell accepted")
	}
	// Deterministic bytes.
	again, err := DeployFiles(fourShardsTwoCells())
	if err != nil {
		t.Fatal(err)
	}
	for n, b := range files {
		if !bytes.Equal(again[n], b) {
			t.Errorf("%s differs between two runs", n)
		}
	}
}

func TestDeployFilesRefusesStraddlingShard(t *testing.T) {
	cfg := fourShardsTwoCells()
	cfg.Cells[0].Slots = []string{"0-5000"}
	cfg.Cells[1].Slots = []string{"5001-16383"}
	_, err := DeployFiles(cfg)
	if err == nil || !strings.Contains(err.Error(), "database.shards[1] (s1)") {
		t.Fatalf("err = %v; want it to name shard s1", err)
	}
	// A shard whose ends lie in one cell but whose middle is another's.
	cfg = fourShardsTwoCells()
	cfg.Database.Shards = cfg.Database.Shards[:1]
	cfg.Cells[0].Slots = []string{"0-99", "200-16383"}
	cfg.Cells[1].Slots = []string{"100-199"}
	if _, err := DeployFiles(cfg); err == nil || !strings.Contains(err.Error(), "straddle") {
		t.Fatalf("err = %v; want a straddle error", err)
	}
	cfg = fourShardsTwoCells()
	cfg.Cells[1].Name = "slotmap"
	if _, err := DeployFiles(cfg); err == nil {
		t.Fatal("a cell named slotmap was accepted")
	}
	// One cell, one shard.
	cfg = fourShardsTwoCells()
	cfg.Database.Shards = cfg.Database.Shards[:1]
	cfg.Cells[0].Slots = []string{"0-16383"}
	cfg.Cells = cfg.Cells[:1]
	if _, err := DeployFiles(cfg); err != nil {
		t.Fatalf("one cell, one shard: %v", err)
	}
}
