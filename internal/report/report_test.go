package report_test

import (
	"encoding/xml"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/internal/report"
)

func TestChartSVG(t *testing.T) {
	for _, log := range []bool{false, true} {
		c := report.Chart{Title: "p99 <latency> & more", Unit: "µs", Groups: []string{"1 clients", "64 clients"}, Series: []string{"direct", "keybrake"},
			Bars: [][]report.Bar{{{Value: 120, Min: 100, Max: 150}, {Missing: true}}, {{Value: 0}, {Value: 200000, Min: 1500, Max: 900000}}}, Log: log}
		svg := c.SVG()
		if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
			t.Fatalf("log %v: not well-formed XML: %v\n%s", log, err, svg)
		}
		if !strings.Contains(svg, "p99 &lt;latency&gt; &amp; more") {
			t.Fatalf("title not escaped:\n%s", svg)
		}
		if n := strings.Count(svg, "<rect x="); n != 2+3 { // legend + the three present bars
			t.Fatalf("log %v: %d rects:\n%s", log, n, svg)
		}
	}
}

func TestChartEmpty(t *testing.T) {
	svg := report.Chart{Title: "nothing"}.SVG()
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatal(err)
	}
}

func TestHead(t *testing.T) {
	if h := report.Head("a <b>"); !strings.Contains(h, "<title>a &lt;b&gt;</title>") || !strings.HasSuffix(h, "<body>\n") {
		t.Fatal(h)
	}
}

func TestLineChartSVG(t *testing.T) {
	c := report.LineChart{Title: "rss <serve> & sim", XUnit: "seconds", YUnit: "MiB", Lines: []report.Line{
		{Name: "serve", Points: []report.Point{{X: 0, Y: 90}, {X: 1, Y: 101.5}, {X: 2, Y: 100}}},
		{Name: "empty"},
		{Name: "stripesim", Points: []report.Point{{X: 0.5, Y: 30}}},
	}}
	svg := c.SVG()
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed XML: %v\n%s", err, svg)
	}
	if !strings.Contains(svg, "rss &lt;serve&gt; &amp; sim") || strings.Count(svg, "<polyline") != 2 {
		t.Fatalf("title or lines:\n%s", svg)
	}
	if empty := (report.LineChart{Title: "none"}).SVG(); xml.Unmarshal([]byte(empty), new(struct{})) != nil {
		t.Fatal(empty)
	}
}
