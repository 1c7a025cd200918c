package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Point is one point of a line.
type Point struct{ X, Y float64 }

// Line is one series of a LineChart, its points in increasing X.
type Line struct {
	Name   string
	Points []Point
}

// LineChart is a chart of lines over a shared linear X axis (time), the Y
// axis from 0.
type LineChart struct {
	Title string
	XUnit string // e.g. "seconds"
	YUnit string // e.g. "MiB"
	Lines []Line
}

// SVG returns the chart as a self-contained <svg> element.
func (c LineChart) SVG() string {
	const (
		left, top, plotW, plotH = 70, 56, 860, 240
	)
	width, height := left+plotW+20, top+plotH+50
	maxX, maxY := 0.0, 0.0
	for _, l := range c.Lines {
		for _, p := range l.Points {
			maxX, maxY = math.Max(maxX, p.X), math.Max(maxY, p.Y)
		}
	}
	if maxX <= 0 {
		maxX = 1
	}
	if maxY <= 0 {
		maxY = 1
	}
	xs, ys := linearGrid(maxX), linearGrid(maxY)
	sx := func(v float64) float64 { return left + plotW*v/xs[len(xs)-1] }
	base := float64(top + plotH)
	sy := func(v float64) float64 { return base - plotH*v/ys[len(ys)-1] }
	names := make([]string, len(c.Lines))
	for i, l := range c.Lines {
		names[i] = l.Name
	}
	var b strings.Builder
	svgHead(&b, c.Title, names, width, height, left)
	for _, v := range ys {
		y := sy(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, y, left+plotW, y, left-8, y+4, short(v))
	}
	for _, v := range xs {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", sx(v), base+16, short(v))
	}
	fmt.Fprintf(&b, `<text transform="translate(14,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+plotH/2, html.EscapeString(c.YUnit))
	fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="middle">%s</text>`+"\n", left+plotW/2, base+36, html.EscapeString(c.XUnit))
	fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#000"/>`+"\n", left-4, base, left+plotW, base)
	for i, l := range c.Lines {
		if len(l.Points) == 0 {
			continue
		}
		pts := make([]string, len(l.Points))
		for j, p := range l.Points {
			pts[j] = fmt.Sprintf("%.1f,%.1f", sx(p.X), sy(p.Y))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"><title>%s</title></polyline>`+"\n", color(i), strings.Join(pts, " "), html.EscapeString(l.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
