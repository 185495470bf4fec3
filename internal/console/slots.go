package console

import (
	"fmt"
	"slices"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/slots"
)

// SlotReport is the slot map: which shard holds which slots and which cell
// serves each shard.
type SlotReport struct {
	// Cell is this process's cell ("" = the only cell).
	Cell string `json:"cell"`
	// Version is the version of the cell's shard map in force (its control
	// database's record, docs/cells.md); 0 is the spec's database.shards.
	Version int64 `json:"version"`
	// Frozen lists the ranges being moved between the cell's shards: their
	// tenants' requests are refused until the move switches (empty when
	// none).
	Frozen []string `json:"frozen"`
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

// ShardMap is the shard map a cell has in force (Config.ShardMap).
type ShardMap struct {
	// Version is the record's version; 0 is the spec's map, before the
	// control database's record was read.
	Version int64
	// Owner returns the database.shards index of the shard that holds
	// slot, for every slot 0..slots.MaxSlot.
	Owner func(slot int) int
	// Frozen are the ranges being moved.
	Frozen []slots.Range
}

// placement finds a tenant's slot, shard and cell.
type placement struct {
	owner  func(slot int) int // nil without shards
	names  []string           // database.shards' names, by index
	cellOf []string           // by shard index; nil without cells
}

// of returns the tenant's slot, shard and cell ("" when unknown).
func (p placement) of(tenant string) (slot int, shard, cell string) {
	slot, err := slots.Slot(tenant)
	if err != nil || p.owner == nil {
		return slot, "", ""
	}
	i := p.owner(slot)
	if i < 0 || i >= len(p.names) {
		return slot, "", ""
	}
	if p.cellOf != nil {
		cell = p.cellOf[i]
	}
	return slot, p.names[i], cell
}

// shardMap returns the shard map in force; false while the spec's is
// (no Config.ShardMap, no shards, or nothing installed yet).
func (c *Console) shardMap() (ShardMap, bool) {
	if c.cfg.ShardMap == nil || c.place.owner == nil {
		return ShardMap{}, false
	}
	m := c.cfg.ShardMap()
	return m, m.Owner != nil
}

// placeNow is the placement under the shard map in force.
func (c *Console) placeNow() placement {
	place := c.place
	if m, ok := c.shardMap(); ok {
		place.owner = m.Owner
	}
	return place
}

// liveReport is the slot report under the shard map in force: the spec's
// until a move between the cell's shards changes it.
func (c *Console) liveReport() SlotReport {
	rep := c.slots
	m, ok := c.shardMap()
	if !ok {
		return rep
	}
	rep.Version = m.Version
	rep.Frozen = make([]string, len(m.Frozen))
	for i, r := range m.Frozen {
		rep.Frozen[i] = r.String()
	}
	ranges := make([][]slots.Range, len(c.place.names))
	for s := range slots.Count {
		i := m.Owner(s)
		if i < 0 || i >= len(ranges) {
			continue
		}
		if rs := ranges[i]; len(rs) > 0 && rs[len(rs)-1].Hi == s-1 {
			rs[len(rs)-1].Hi = s
			continue
		}
		ranges[i] = append(ranges[i], slots.Range{Lo: s, Hi: s})
	}
	rep.Shards = slices.Clone(rep.Shards)
	for i := range rep.Shards {
		sh := &rep.Shards[i]
		sh.Slots, sh.Count = make([]string, len(ranges[i])), 0
		for k, r := range ranges[i] {
			sh.Slots[k] = r.String()
			sh.Count += r.Len()
		}
	}
	return rep
}

// slotReport builds the slot map from the spec as internal/shards does.
func slotReport(cfg config.Config) (SlotReport, placement, error) {
	rep := SlotReport{Cell: cfg.Server.Cell, Frozen: []string{}}
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
	place := placement{owner: sm.Owner}
	for i := range cfg.Database.Shards {
		s := ShardSlots{Shard: sm.Name(i), Slots: sm.Specs(i), Count: sm.SlotCount(i), Here: cfg.Server.Cell == ""}
		if cellOf != nil {
			s.Cell = cfg.Cells[cellOf[i]].Name
			s.Here = s.Here || s.Cell == cfg.Server.Cell
			place.cellOf = append(place.cellOf, s.Cell)
		}
		rep.Shards = append(rep.Shards, s)
		place.names = append(place.names, s.Shard)
	}
	return rep, place, nil
}
