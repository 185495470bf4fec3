package cells

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/slots"
)

// CellSpec is one cell: a deployment of the service, where the router
// sends it, and the slots it serves.
type CellSpec struct {
	// Name identifies the cell in logs, metrics (label cell) and the
	// X-Cellgate-Cell response header. Required and unique.
	Name string `json:"name"`
	// URL is the cell's base URL, for example "http://cell-1:3000": http
	// or https, a host, optionally a path prefix; no query, fragment or
	// user info.
	URL string `json:"url"`
	// Slots are slot specs ("0-8191", "42"). Leave Slots empty on every
	// cell to split the slots evenly in order.
	Slots []string `json:"slots"`
}

// SpecsFromConfig converts the spec's cells.
func SpecsFromConfig(cs []config.Cell) []CellSpec {
	out := make([]CellSpec, len(cs))
	for i, c := range cs {
		out[i] = CellSpec{Name: c.Name, URL: c.URL, Slots: append([]string(nil), c.Slots...)}
	}
	return out
}

// ErrEmptyTenant is returned for an empty tenant id: hashing it would pile
// every such request onto slot 0's cell.
var ErrEmptyTenant = errors.New("cells: empty tenant id")

// CellRouter maps tenants, keys and slots to cells. It is immutable.
type CellRouter struct {
	m      *slots.Map
	cells  []CellSpec  // normalized: explicit, merged slot specs
	urls   []*url.URL  // parsed cells[i].URL
	frozen *slotBitmap // slots being moved; nil when none
}

// New checks specs and builds the router: every slot must have exactly one
// cell (the error names the first gap or overlap), names must be unique and
// URLs valid. If no cell lists slots, the slots are split evenly in order.
// The CellSpec values the router returns carry explicit, merged slot specs.
func New(specs []CellSpec) (*CellRouter, error) {
	return build(specs, nil)
}

func build(specs []CellSpec, frozen []string) (*CellRouter, error) {
	owners := make([]slots.Owner, len(specs))
	for i, s := range specs {
		owners[i] = slots.Owner{Name: s.Name, Slots: s.Slots}
	}
	m, err := slots.Build(owners)
	if err != nil {
		return nil, fmt.Errorf("cells: %w", err)
	}
	r := &CellRouter{m: m, cells: make([]CellSpec, len(specs)), urls: make([]*url.URL, len(specs))}
	for i, s := range specs {
		u, err := parseCellURL(s.URL)
		if err != nil {
			return nil, fmt.Errorf("cells: cell %q: url: %w", s.Name, err)
		}
		r.urls[i] = u
		r.cells[i] = CellSpec{Name: s.Name, URL: s.URL, Slots: m.Specs(i)}
	}
	if len(frozen) > 0 {
		r.frozen = new(slotBitmap)
		for _, spec := range frozen {
			rg, err := slots.ParseSpec(spec)
			if err != nil {
				return nil, fmt.Errorf("cells: frozen: %w", err)
			}
			r.frozen.setRange(rg)
		}
	}
	return r, nil
}

// parseCellURL accepts an absolute http(s) URL with a host and nothing
// after the path: anything else would be silently dropped or, for user
// info, leak credentials into logs.
func parseCellURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: scheme must be http or https", raw)
	case u.Host == "":
		return nil, fmt.Errorf("%q: no host", raw)
	case u.User != nil:
		return nil, fmt.Errorf("%q: must not hold user info", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("%q: must not hold a query or fragment", raw)
	}
	return u, nil
}

// Len is the number of cells.
func (r *CellRouter) Len() int { return len(r.cells) }

// Cells returns the cells in input order with normalized slot specs. The
// slice is a fresh copy; the Slots slices are shared and must not be
// modified.
func (r *CellRouter) Cells() []CellSpec { return append([]CellSpec(nil), r.cells...) }

// Ranges returns cell i's slots, sorted and merged (a fresh copy).
func (r *CellRouter) Ranges(i int) []slots.Range { return r.m.Ranges(i) }

// Index returns the index of the cell named name, or -1.
func (r *CellRouter) Index(name string) int {
	for i, c := range r.cells {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// ForTenant returns the cell of tenant. It does not allocate; the returned
// Slots slice is shared and must not be modified.
func (r *CellRouter) ForTenant(tenant string) (CellSpec, error) {
	if tenant == "" {
		return CellSpec{}, ErrEmptyTenant
	}
	return r.cells[r.m.Owner(mustSlot(tenant))], nil
}

// ForKey returns the cell of key's slot (hash tags honoured, see
// slots.Slot), or slots.ErrEmptyKey.
func (r *CellRouter) ForKey(key string) (CellSpec, error) {
	i, err := r.m.OwnerOf(key)
	if err != nil {
		return CellSpec{}, err
	}
	return r.cells[i], nil
}

// ForSlot returns the cell that owns slot (0..slots.MaxSlot).
func (r *CellRouter) ForSlot(slot int) (CellSpec, error) {
	i := r.m.Owner(slot)
	if i < 0 {
		return CellSpec{}, fmt.Errorf("cells: slot %d is outside 0..%d", slot, slots.MaxSlot)
	}
	return r.cells[i], nil
}

// URL is the parsed URL of the cell at position i of Cells. It is shared:
// callers must not modify it.
func (r *CellRouter) URL(i int) *url.URL { return r.urls[i] }

// IndexForSlot is ForSlot's index form: the cell's position in Cells, or
// -1 for a slot outside 0..slots.MaxSlot.
func (r *CellRouter) IndexForSlot(slot int) int { return r.m.Owner(slot) }

// Frozen reports whether slot is being moved between cells: the router
// answers its tenants 503 with Retry-After until the move switches it.
func (r *CellRouter) Frozen(slot int) bool {
	return r.frozen != nil && uint(slot) < slots.Count && r.frozen.has(slot)
}

// URLFor returns the URL of path on tenant's cell. path is an absolute
// path with optional query and fragment ("/orders?page=2"); its escaping
// is kept as given (an encoded "%2F" stays encoded) and characters that
// need escaping are escaped. A cell URL's path prefix is kept in front.
func (r *CellRouter) URLFor(tenant, path string) (string, error) {
	if tenant == "" {
		return "", ErrEmptyTenant
	}
	i := r.m.Owner(mustSlot(tenant))
	return joinURL(r.urls[i], path)
}

func joinURL(base *url.URL, path string) (string, error) {
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") {
		return "", fmt.Errorf("cells: path %q must be an absolute path starting with a single /", path)
	}
	ref, err := url.Parse(path)
	if err != nil {
		return "", fmt.Errorf("cells: path %q: %w", path, err)
	}
	if ref.Scheme != "" || ref.Host != "" {
		return "", fmt.Errorf("cells: path %q must be a path, not a URL", path)
	}
	var b strings.Builder
	b.WriteString(base.Scheme)
	b.WriteString("://")
	b.WriteString(base.Host)
	b.WriteString(strings.TrimSuffix(base.EscapedPath(), "/"))
	b.WriteString(ref.EscapedPath())
	if ref.ForceQuery || ref.RawQuery != "" {
		b.WriteByte('?')
		writeQuery(&b, ref.RawQuery)
	}
	if ref.Fragment != "" {
		b.WriteByte('#')
		b.WriteString(ref.EscapedFragment())
	}
	return b.String(), nil
}

// writeQuery writes a raw query, percent-encoding the bytes that may not
// appear in one (spaces, controls, non-ASCII, and the few ASCII characters
// RFC 3986 excludes) and keeping existing escapes and delimiters as given.
func writeQuery(b *strings.Builder, q string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(q); i++ {
		c := q[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"<>\\^`{|}", c) >= 0 {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// mustSlot hashes a non-empty key; callers check emptiness first.
func mustSlot(key string) int {
	s, _ := slots.Slot(key)
	return s
}

// slotBitmap is a set of slots, one bit each (2 KiB).
type slotBitmap [slots.Count / 64]uint64

func (b *slotBitmap) has(s int) bool { return b[s>>6]&(1<<(uint(s)&63)) != 0 }

func (b *slotBitmap) setRange(r slots.Range) {
	for s := r.Lo; s <= r.Hi; s++ {
		b[s>>6] |= 1 << (uint(s) & 63)
	}
}

// CheckURL reports whether raw is a URL the cell router accepts for a cell
// (absolute http or https, a host, no user info, query or fragment): the
// config check calls it so `server check` refuses what the router would.
func CheckURL(raw string) error {
	_, err := parseCellURL(raw)
	return err
}
