package cells

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cellgate/cellgate/internal/slots"
)

// SlotMap is the router's slot map file: the cells with their URLs and
// slots, plus the slots being moved. Every router copy reads the same file;
// the slot-move tool rewrites it atomically.
//
//	{
//	  "cells": [
//	    {"name": "cell-1", "url": "http://10.0.0.1:8080", "slots": ["0-8191"]},
//	    {"name": "cell-2", "url": "http://10.0.0.2:8080", "slots": ["8192-16383"]}
//	  ],
//	  "frozen": ["100-199"]
//	}
type SlotMap struct {
	// Cells are the cells in order; see CellSpec.
	Cells []CellSpec `json:"cells"`
	// Frozen lists slot specs whose tenants are being moved to another cell:
	// the router answers them 503 with Retry-After: 1 so that no write
	// lands on the old cell between the final copy and the map switch.
	// Omitted when empty.
	Frozen []string `json:"frozen,omitempty"`
}

// ParseSlotMap decodes a slot map file strictly (unknown fields are an
// error) and builds it, so a map that parses is a map the router can use.
func ParseSlotMap(raw []byte) (SlotMap, *CellRouter, error) {
	var m SlotMap
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return SlotMap{}, nil, fmt.Errorf("cells: slot map: %w", err)
	}
	if dec.More() {
		return SlotMap{}, nil, fmt.Errorf("cells: slot map: trailing data after the JSON object")
	}
	r, err := m.Build()
	if err != nil {
		return SlotMap{}, nil, err
	}
	return m, r, nil
}

// ReadSlotMap reads and builds a slot map file.
func ReadSlotMap(path string) (SlotMap, *CellRouter, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return SlotMap{}, nil, fmt.Errorf("cells: slot map: %w", err)
	}
	m, r, err := ParseSlotMap(raw)
	if err != nil {
		return SlotMap{}, nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return m, r, nil
}

// Build checks the map (see New) and its frozen specs.
func (m SlotMap) Build() (*CellRouter, error) {
	return build(m.Cells, m.Frozen)
}

// Normalize returns m with explicit, merged slot specs on every cell and
// merged frozen specs: the canonical form the tools write.
func (m SlotMap) Normalize() (SlotMap, error) {
	r, err := m.Build()
	if err != nil {
		return SlotMap{}, err
	}
	return r.SlotMap(), nil
}

// SlotMap returns the router's map in canonical form.
func (r *CellRouter) SlotMap() SlotMap {
	out := SlotMap{Cells: make([]CellSpec, len(r.cells))}
	for i, c := range r.cells {
		out.Cells[i] = CellSpec{Name: c.Name, URL: c.URL, Slots: append([]string(nil), c.Slots...)}
	}
	if r.frozen != nil {
		for s := 0; s < slots.Count; {
			if !r.frozen.has(s) {
				s++
				continue
			}
			e := s
			for e < slots.MaxSlot && r.frozen.has(e+1) {
				e++
			}
			out.Frozen = append(out.Frozen, slots.Range{Lo: s, Hi: e}.String())
			s = e + 1
		}
	}
	return out
}

// Digest is the hex SHA-256 of the map's canonical form (SlotMap
// Marshal): two routers with equal digests route every slot alike, and a
// slot move compares the digest a router reports with the map it wrote.
func (r *CellRouter) Digest() string {
	sum := sha256.Sum256(r.SlotMap().Marshal())
	return hex.EncodeToString(sum[:])
}

// Marshal returns the map as indented JSON with a trailing newline. Equal
// maps give equal bytes.
func (m SlotMap) Marshal() []byte {
	if m.Cells == nil {
		m.Cells = []CellSpec{}
	}
	for i := range m.Cells {
		if m.Cells[i].Slots == nil {
			m.Cells[i].Slots = []string{}
		}
	}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("cells: marshal slot map: %v", err)) // only strings inside
	}
	return append(raw, '\n')
}

// Reassign returns m (normalized) with the slots of rg moved from cell
// from to cell to. Every slot of rg must belong to from now; the error
// names the first that does not.
func (m SlotMap) Reassign(rg slots.Range, from, to string) (SlotMap, error) {
	r, err := m.Build()
	if err != nil {
		return SlotMap{}, err
	}
	fi, ti := r.Index(from), r.Index(to)
	if fi < 0 {
		return SlotMap{}, fmt.Errorf("cells: no cell named %q", from)
	}
	if ti < 0 {
		return SlotMap{}, fmt.Errorf("cells: no cell named %q", to)
	}
	owner := make([]int, slots.Count)
	for s := range owner {
		owner[s] = r.m.Owner(s)
	}
	for s := rg.Lo; s <= rg.Hi; s++ {
		if owner[s] != fi {
			return SlotMap{}, fmt.Errorf("cells: slot %d belongs to %q, not %q", s, r.cells[owner[s]].Name, from)
		}
		owner[s] = ti
	}
	out := r.SlotMap()
	for i := range out.Cells {
		out.Cells[i].Slots = specsOf(owner, i)
	}
	if len(out.Cells[fi].Slots) == 0 {
		return SlotMap{}, fmt.Errorf("cells: moving %s would leave cell %q without slots; remove the cell from the map instead", rg, from)
	}
	return out.Normalize()
}

// WithFrozen returns m (normalized) with rg added to (freeze true) or
// removed from (false) the frozen slots.
func (m SlotMap) WithFrozen(rg slots.Range, freeze bool) (SlotMap, error) {
	r, err := m.Build()
	if err != nil {
		return SlotMap{}, err
	}
	var bm slotBitmap
	if r.frozen != nil {
		bm = *r.frozen
	}
	for s := rg.Lo; s <= rg.Hi; s++ {
		if freeze {
			bm[s>>6] |= 1 << (uint(s) & 63)
		} else {
			bm[s>>6] &^= 1 << (uint(s) & 63)
		}
	}
	r2 := *r
	r2.frozen = &bm
	return r2.SlotMap(), nil
}

// specsOf returns the canonical specs of the slots whose owner is i.
func specsOf(owner []int, i int) []string {
	var out []string
	for s := 0; s < len(owner); {
		if owner[s] != i {
			s++
			continue
		}
		e := s
		for e+1 < len(owner) && owner[e+1] == i {
			e++
		}
		out = append(out, slots.Range{Lo: s, Hi: e}.String())
		s = e + 1
	}
	return out
}

// WriteFileAtomic writes data to path so that a reader sees either the old
// or the new content, never a torn file: a temporary file in the same
// directory, synced, then renamed over path, then the directory synced.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: not every file system supports it
		d.Close()
	}
	return nil
}

// WriteSlotMap validates m and writes it to path atomically in canonical
// form. A map that does not build is never written.
func WriteSlotMap(path string, m SlotMap) error {
	n, err := m.Normalize()
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, n.Marshal(), 0o644)
}
