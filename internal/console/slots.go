package console

import (
	"fmt"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/slots"
)

// SlotReport is the slot map: which shard holds which slots and which cell
// serves each shard.
type SlotReport struct {
	// Cell is this process's cell ("" = the only cell).
	Cell string `json:"cell"`
	// Shards in spec order.
	Shards []ShardSlots `json:"shards"`
	// Cells in spec order.
	Cells []CellSlots `json:"cells"`
}

// ShardSlots is one shard of SlotReport.
type ShardSlots struct {
	// Shard is its name; Cell the cell that serves it.
	Shard string `json:"shard"`
	Cell  string `json:"cell"`
	// Slots are its ranges ("0-8191"); Count their size.
	Slots []string `json:"slots"`
	Count int      `json:"count"`
	// Here is true when this cell serves it.
	Here bool `json:"here"`
}

// CellSlots is one cell of SlotReport.
type CellSlots struct {
	// Name and URL are the spec's.
	Name string `json:"name"`
	URL  string `json:"url"`
	// Slots are its ranges; Count their size.
	Slots []string `json:"slots"`
	Count int      `json:"count"`
}

// placement finds a tenant's slot, shard and cell.
type placement struct {
	shards *slots.Map // nil without shards
	cellOf []string   // by shard index; nil without cells
}

// of returns the tenant's slot, shard and cell ("" when unknown).
func (p placement) of(tenant string) (slot int, shard, cell string) {
	slot, err := slots.Slot(tenant)
	if err != nil || p.shards == nil {
		return slot, "", ""
	}
	i := p.shards.Owner(slot)
	if p.cellOf != nil {
		cell = p.cellOf[i]
	}
	return slot, p.shards.Name(i), cell
}

// slotReport builds the slot map from the spec as internal/shards does.
func slotReport(cfg config.Config) (SlotReport, placement, error) {
	rep := SlotReport{Cell: cfg.Server.Cell}
	if len(cfg.Database.Shards) == 0 {
		return rep, placement{}, nil
	}
	owners := make([]slots.Owner, len(cfg.Database.Shards))
	for i, s := range cfg.Database.Shards {
		owners[i] = slots.Owner{Name: s.Name, Slots: s.Slots}
	}
	sm, err := slots.Build(owners)
	if err != nil {
		return rep, placement{}, fmt.Errorf("database.shards: %w", err)
	}
	var cellOf []int
	if len(cfg.Cells) > 0 {
		cowners := make([]slots.Owner, len(cfg.Cells))
		for i, c := range cfg.Cells {
			cowners[i] = slots.Owner{Name: c.Name, Slots: c.Slots}
		}
		cm, err := slots.Build(cowners)
		if err != nil {
			return rep, placement{}, fmt.Errorf("cells: %w", err)
		}
		if cellOf, err = slots.Nest(sm, cm); err != nil {
			return rep, placement{}, fmt.Errorf("database.shards: %w", err)
		}
		for i, c := range cfg.Cells {
			rep.Cells = append(rep.Cells, CellSlots{Name: c.Name, URL: c.URL, Slots: cm.Specs(i), Count: cm.SlotCount(i)})
		}
	}
	place := placement{shards: sm}
	for i := range cfg.Database.Shards {
		s := ShardSlots{Shard: sm.Name(i), Slots: sm.Specs(i), Count: sm.SlotCount(i), Here: cfg.Server.Cell == ""}
		if cellOf != nil {
			s.Cell = cfg.Cells[cellOf[i]].Name
			s.Here = s.Here || s.Cell == cfg.Server.Cell
			place.cellOf = append(place.cellOf, s.Cell)
		}
		rep.Shards = append(rep.Shards, s)
	}
	return rep, place, nil
}
