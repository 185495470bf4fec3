package consolechart

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
)

// Palette is the colors series take when they name none, in order.
var Palette = []string{"#175cd3", "#b42318", "#2e8540", "#b54708", "#6941c6", "#0e7090", "#c11574", "#4e5ba6", "#667085"}

// Series is one line of a time chart.
type Series struct {
	// Label names it in the legend (escaped).
	Label string
	// Color is a CSS color (escaped); "" takes the next of Palette.
	Color string
	// Points are its samples, oldest first; NaN values are gaps.
	Points []Point
}

// TimeOptions shape a time chart.
type TimeOptions struct {
	// ID is the <svg> element's id (escaped); "" gives none.
	ID string
	// Title is its accessible name (aria-label, escaped).
	Title string
	// Width and Height are its size in pixels; 0 means 640 × 200.
	Width, Height int
	// From and To bound the time axis; zero values take the samples' first
	// and last times.
	From, To time.Time
	// Unit follows the largest value on the y axis ("jobs/s").
	Unit string
}

// Time draws series as lines over time, the y axis from 0 to the largest
// value (rounded up to a readable step), with the axis' times in UTC and a
// legend. With no sample it draws the frame and says so.
func Time(o TimeOptions, series ...Series) template.HTML {
	if o.Width <= 0 {
		o.Width = 640
	}
	if o.Height <= 0 {
		o.Height = 200
	}
	// left holds the widest y label the charts draw ("400 req/s", "3.75 /s")
	// right-aligned against the plot.
	const left, right, top, bottom, legendRow = 72, 12, 10, 22, 18
	legendRows := (len(series) + 3) / 4
	plotW := float64(o.Width - left - right)
	plotH := float64(o.Height - top - bottom - legendRows*legendRow)
	if plotW < 10 || plotH < 10 {
		plotW, plotH = max(plotW, 10), max(plotH, 10)
	}

	from, to, ymax, seen := o.From, o.To, 0.0, false
	for _, s := range series {
		for _, p := range s.Points {
			if o.From.IsZero() && (from.IsZero() || p.T.Before(from)) {
				from = p.T
			}
			if o.To.IsZero() && (to.IsZero() || p.T.After(to)) {
				to = p.T
			}
			if !math.IsNaN(p.V) && !math.IsInf(p.V, 0) {
				ymax, seen = max(ymax, p.V), true
			}
		}
	}
	ymax = niceCeil(ymax)
	span := to.Sub(from)
	if span <= 0 {
		span = time.Second
	}
	x := func(t time.Time) float64 { return left + plotW*float64(t.Sub(from))/float64(span) }
	y := func(v float64) float64 { return top + plotH - plotH*min(max(v, 0), ymax)/ymax }

	var b strings.Builder
	b.WriteString(`<svg`)
	if o.ID != "" {
		fmt.Fprintf(&b, ` id="%s"`, esc(o.ID))
	}
	fmt.Fprintf(&b, ` class="timechart" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		o.Width, o.Height, o.Width, o.Height, esc(o.Title))
	// Grid and y labels: 0, ¼, ½, ¾ and all of ymax.
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		yy := y(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d9dee7"/>`, left, yy, left+plotW, yy)
		label := Number(v)
		if i == 4 && o.Unit != "" {
			label += " " + o.Unit
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, left-4, yy+4, esc(label))
	}
	base := top + plotH + 15
	if seen || !o.From.IsZero() {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%s</text>`, left, base, from.UTC().Format("15:04:05"))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s UTC</text>`, left+plotW, base, to.UTC().Format("15:04:05"))
	}
	if !seen {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" class="hint">no samples yet</text>`, left+plotW/2, top+plotH/2)
	}
	for i, s := range series {
		color := s.Color
		if color == "" {
			color = Palette[i%len(Palette)]
		}
		fmt.Fprintf(&b, `<g class="series" stroke="%s" fill="none"><title>%s</title>`, esc(color), esc(s.Label))
		run := 0 // points in the current polyline
		for j, p := range s.Points {
			if math.IsNaN(p.V) || math.IsInf(p.V, 0) {
				if run > 0 {
					b.WriteString(`"/>`)
				}
				run = 0
				continue
			}
			if run == 0 {
				// A lone point between gaps still shows, as a dot.
				if j+1 == len(s.Points) || math.IsNaN(s.Points[j+1].V) {
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s"/>`, x(p.T), y(p.V), esc(color))
					continue
				}
				b.WriteString(`<polyline stroke-width="1.5" points="`)
			} else {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", x(p.T), y(p.V))
			run++
		}
		if run > 0 {
			b.WriteString(`"/>`)
		}
		b.WriteString(`</g>`)
		// Legend: four per row under the axis.
		lx := left + (i%4)*int(plotW/4)
		ly := base + 6 + float64(i/4*legendRow)
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="10" height="10" fill="%s"/><text x="%d" y="%.1f">%s</text>`,
			lx, ly, esc(color), lx+14, ly+9, esc(s.Label))
	}
	b.WriteString(`</svg>`)
	// Safe: every text and attribute above is escaped or a number.
	return template.HTML(b.String())
}

// Number formats a chart value: whole numbers as they are, others rounded
// to two decimals without trailing zeros (a rate of 1/3 reads 0.33).
func Number(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	s := strconv.FormatFloat(math.Round(v*100)/100, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// niceCeil rounds v up to 1, 2, 4 or 5 times a power of ten (at least 1), so
// the axis' quarter marks read as round numbers more often than not.
func niceCeil(v float64) float64 {
	if v <= 1 || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 4, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string { return template.HTMLEscapeString(s) }
