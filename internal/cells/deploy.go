package cells

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/slots"
)

// DeployDir is the directory, relative to the output root, that DeployFiles
// names its files in.
const DeployDir = "deploy"

// SlotMapFile is the name of the router's slot map inside DeployDir.
const SlotMapFile = "slotmap.json"

// cellOverlay is the per-cell config file: only what differs between cells.
// It is applied over the spec's defaults by cmd/server (-config).
type cellOverlay struct {
	Server overlayServer `json:"server"`
}

type overlayServer struct {
	Address string `json:"address"`
	Cell    string `json:"cell"`
}

// DeployFiles renders the deploy output of a spec: for each cell,
// deploy/<cell>.json, the cell's config overlay for cmd/server -config
// (server.address, ":<port>" of the cell URL, and server.cell, the cell's
// name, with which the cell opens only the shards inside its slots, see
// ShardsOf); and deploy/slotmap.json, the router's slot map with
// normalized slot specs.
//
// A cell owns whole shards: a shard whose slots straddle two cells is an
// error naming it. The function is pure and deterministic: the same config
// gives the same bytes.
func DeployFiles(cfg config.Config) (map[string][]byte, error) {
	// cellShards proves that every cell owns whole shards; the cells
	// themselves pick their shards with ShardsOf.
	cr, _, err := cellShards(cfg)
	if err != nil {
		return nil, err
	}
	files := make(map[string][]byte, cr.Len()+1)
	for i, c := range cr.cells {
		if c.Name+".json" == SlotMapFile {
			return nil, fmt.Errorf("cells: a cell named %q would overwrite %s/%s; rename it", c.Name, DeployDir, SlotMapFile)
		}
		addr, err := listenAddress(cr.urls[i])
		if err != nil {
			return nil, fmt.Errorf("cells[%d] (%s).url: %w", i, c.Name, err)
		}
		raw, err := json.MarshalIndent(cellOverlay{Server: overlayServer{Address: addr, Cell: c.Name}}, "", "  ")
		if err != nil {
			return nil, err
		}
		files[DeployDir+"/"+c.Name+".json"] = append(raw, '\n')
	}
	files[DeployDir+"/"+SlotMapFile] = cr.SlotMap().Marshal()
	return files, nil
}

// ShardsOf returns the shards of cfg that lie in the named cell's slots, in
// spec order, with explicit slot specs (an even split written out) and the
// spec's DSN variables: the databases that cell opens. It fails when a
// shard straddles two cells (a cell owns whole shards) or no cell has the
// name.
func ShardsOf(cfg config.Config, cell string) ([]config.Shard, error) {
	cr, perCell, err := cellShards(cfg)
	if err != nil {
		return nil, err
	}
	i := cr.Index(cell)
	if i < 0 {
		return nil, fmt.Errorf("cells: no cell named %q in cells", cell)
	}
	return perCell[i], nil
}

// cellShards assigns every shard to the one cell that holds all its slots.
func cellShards(cfg config.Config) (*CellRouter, [][]config.Shard, error) {
	cr, err := New(SpecsFromConfig(cfg.Cells))
	if err != nil {
		return nil, nil, err
	}
	owners := make([]slots.Owner, len(cfg.Database.Shards))
	for i, s := range cfg.Database.Shards {
		owners[i] = slots.Owner{Name: s.Name, Slots: s.Slots}
	}
	sm, err := slots.Build(owners)
	if err != nil {
		return nil, nil, fmt.Errorf("database.shards: %w", err)
	}
	of, err := slots.Nest(sm, cr.m)
	if err != nil {
		if se, ok := errors.AsType[*slots.StraddleError](err); ok {
			return nil, nil, fmt.Errorf("database.shards[%d] (%s): slots %s straddle cells (%s owns slot %d but not all of them); a cell must own whole shards, so move the cell boundary to a shard boundary",
				se.Index, se.Inner, se.Range, se.Outer, se.Range.Lo)
		}
		return nil, nil, err
	}
	perCell := make([][]config.Shard, cr.Len())
	for i, s := range cfg.Database.Shards {
		sh := s
		sh.Slots = sm.Specs(i)
		perCell[of[i]] = append(perCell[of[i]], sh)
	}
	return cr, perCell, nil
}

// listenAddress is ":<port>" of a cell URL, with the scheme's default port
// when the URL names none: a cell listens on every interface at the port
// the router dials.
func listenAddress(u *url.URL) (string, error) {
	port, err := urlPort(u)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("", port), nil
}

// Port is the port of a cell URL, the scheme's default (80, 443) when the
// URL names none: the port the cell listens on and the router dials.
func Port(rawURL string) (int, error) {
	u, err := parseCellURL(rawURL)
	if err != nil {
		return 0, err
	}
	p, err := urlPort(u)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q has no valid port", rawURL)
	}
	return n, nil
}

func urlPort(u *url.URL) (string, error) {
	port := u.Port()
	if port == "" {
		if strings.HasSuffix(u.Host, ":") {
			return "", fmt.Errorf("%q has an empty port", u.String())
		}
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return port, nil
}
