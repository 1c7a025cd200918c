// Package report writes the self-contained HTML reports of keybrake's
// harnesses (keybrake chaos, keybrake bench): one page style, and bar
// charts as inline SVG, so a report is one file that opens anywhere.
package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// style is the CSS of every report page.
const style = "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}" +
	"td:first-child,td:nth-child(2),th:first-child,th:nth-child(2){text-align:left}.bad{color:#d62728;font-weight:bold}.good{color:#2ca02c}code{background:#f4f4f4;padding:1px 3px}"

// Head returns the start of a report page, up to and including <body>.
func Head(title string) string {
	return "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>" + html.EscapeString(title) + "</title><style>" + style + "</style></head><body>\n"
}

// Foot returns the end of a report page.
func Foot() string { return "</body></html>\n" }

// Colors are the series colours of a chart, in order (d3's category10).
var Colors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// Bar is one bar: its height and, when Max > Min, a whisker from Min to Max
// (the spread across runs).
type Bar struct {
	Value, Min, Max float64
	Missing         bool
}

// Chart is a grouped bar chart: for every group, one bar per series.
type Chart struct {
	Title  string
	Unit   string   // of the axis, e.g. "requests/s"
	Groups []string // labels under the groups
	Series []string // legend, one colour each
	Bars   [][]Bar  // [group][series]
	// Log draws the axis on a log10 scale, for values spanning decades
	// (latency percentiles).
	Log bool
}

// SVG returns the chart as a self-contained <svg> element.
func (c Chart) SVG() string {
	const (
		left, top, plotH = 70, 56, 240
		barW, gap        = 16, 28
	)
	groupW := max(len(c.Series)*barW+gap, 60)
	width := max(left+len(c.Groups)*groupW+20, 480)
	height := top + plotH + 70
	maxV, minV := 0.0, math.Inf(1)
	for _, g := range c.Bars {
		for _, b := range g {
			if b.Missing {
				continue
			}
			maxV = math.Max(maxV, math.Max(b.Value, b.Max))
			if v := math.Min(b.Value, b.Min); v > 0 {
				minV = math.Min(minV, v)
			} else if b.Value > 0 {
				minV = math.Min(minV, b.Value)
			}
		}
	}
	if maxV <= 0 {
		maxV = 1
	}
	grid := linearGrid(maxV)
	scale := func(v float64) float64 { return plotH * v / grid[len(grid)-1] }
	if c.Log {
		lo := math.Pow(10, math.Floor(math.Log10(math.Max(minV, 1e-9))))
		if math.IsInf(minV, 1) {
			lo = 1
		}
		hi := math.Pow(10, math.Ceil(math.Log10(maxV)))
		if hi <= lo {
			hi = lo * 10
		}
		grid = nil
		for v := lo; v <= hi*1.0001; v *= 10 {
			grid = append(grid, v)
		}
		scale = func(v float64) float64 {
			if v <= lo {
				return 0
			}
			return plotH * math.Log10(v/lo) / math.Log10(hi/lo)
		}
	}
	var b strings.Builder
	svgHead(&b, c.Title, c.Series, width, height, left)
	base := float64(top + plotH)
	for _, v := range grid {
		y := base - scale(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, y, width-20, y, left-8, y+4, short(v))
	}
	fmt.Fprintf(&b, `<text transform="translate(14,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+plotH/2, html.EscapeString(c.Unit))
	fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#000"/>`+"\n", left-4, base, width-20, base)
	for gi, g := range c.Groups {
		gx := left + gi*groupW + gap/2
		for si := range c.Series {
			if gi >= len(c.Bars) || si >= len(c.Bars[gi]) || c.Bars[gi][si].Missing {
				continue
			}
			v := c.Bars[gi][si]
			bx := gx + si*barW
			h := scale(v.Value)
			fmt.Fprintf(&b, `<g><title>%s</title>`, html.EscapeString(fmt.Sprintf("%s, %s: %s %s (min %s, max %s)", g, c.Series[si], short(v.Value), c.Unit, short(v.Min), short(v.Max))))
			fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"/>`, bx, base-h, barW-2, h, color(si))
			if v.Max > v.Min {
				cx := float64(bx) + float64(barW-2)/2
				y1, y2 := base-scale(v.Min), base-scale(v.Max)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`,
					cx, y1, cx, y2, cx-3, y1, cx+3, y1, cx-3, y2, cx+3, y2)
			}
			b.WriteString("</g>\n")
		}
		cx := gx + len(c.Series)*barW/2
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="middle">%s</text>`+"\n", cx, base+16, html.EscapeString(g))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func color(i int) string { return Colors[i%len(Colors)] }

// svgHead opens an <svg> element of width × height on a white ground and
// writes the title and a legend, one colour per name, from x = left: the
// top 56 pixels of every chart.
func svgHead(b *strings.Builder, title string, names []string, width, height, left int) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	x := left
	for i, name := range names {
		fmt.Fprintf(b, `<rect x="%d" y="30" width="10" height="10" fill="%s"/><text x="%d" y="39">%s</text>`+"\n", x, color(i), x+14, html.EscapeString(name))
		x += 14 + 7*len([]rune(name)) + 16
	}
}

// linearGrid returns 0 and round steps up to at least maxV.
func linearGrid(maxV float64) []float64 {
	step := math.Pow(10, math.Floor(math.Log10(maxV)))
	for _, m := range []float64{1, 2, 5, 10} {
		if maxV/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var out []float64
	for v := 0.0; ; v += step {
		out = append(out, v)
		if v >= maxV {
			return out
		}
	}
}

// short formats v with a k or M suffix and at most 3 significant digits.
func short(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	case a >= 100 || a == 0:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
