package consolechart

import (
	"fmt"
	"html/template"
	"strings"
)

// Key is one part of a stacked bar: its name in the legend and its color.
type Key struct {
	Name, Color string
}

// Bar is one row of a stacked bar chart: a label and one value per key.
// A bar with Missing set draws that text instead of values (a database that
// did not answer, say).
type Bar struct {
	Label   string
	Values  []int64
	Missing string
}

// Bars draws rows as horizontal stacked bars scaled to the largest total,
// with each row's total after its bar and the keys' legend under them.
// id is the <svg> element's id and title its accessible name.
func Bars(id, title string, keys []Key, rows []Bar) template.HTML {
	const rowH, labelW, barW = 28, 110, 560
	var maxTotal int64 = 1
	for _, r := range rows {
		var t int64
		for _, v := range r.Values {
			t += v
		}
		maxTotal = max(maxTotal, t)
	}
	h := rowH*len(rows) + 30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="%s" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img" aria-label="%s">`, esc(id), labelW+barW+120, h, esc(title))
	for i, r := range rows {
		y := i * rowH
		fmt.Fprintf(&b, `<text x="0" y="%d">%s</text>`, y+18, esc(r.Label))
		if r.Missing != "" {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#b42318">%s</text>`, labelW, y+18, esc(r.Missing))
			continue
		}
		x := float64(labelW)
		var total int64
		for k, n := range r.Values {
			w := float64(barW) * float64(n) / float64(maxTotal)
			if w > 0 && k < len(keys) {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="20" fill="%s"><title>%s: %d</title></rect>`, x, y+4, w, esc(keys[k].Color), esc(keys[k].Name), n)
			}
			x += w
			total += n
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%d</text>`, x+6, y+18, total)
	}
	for k, key := range keys {
		lx := labelW + 100*k
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`, lx, h-16, esc(key.Color), lx+14, h-7, esc(key.Name))
	}
	b.WriteString(`</svg>`)
	// Safe: built from escaped labels, numbers and escaped keys.
	return template.HTML(b.String())
}
