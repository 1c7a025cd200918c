package chaos

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"

	"github.com/keybrake/keybrake/internal/report"
)

// Row is the outcome of one mode under one strategy, counted from the
// simulator's ground truth (every charge created, including those whose
// answer a crash lost).
type Row struct {
	Mode      string   `json:"mode"`
	Transport string   `json:"transport"`
	Strategy  Strategy `json:"strategy"`
	Events    int      `json:"events"`
	// Deliveries counts the deliveries workers handled, redeliveries
	// included.
	Deliveries int64 `json:"deliveries"`
	// Charges counts the succeeded charges of the run's events.
	Charges int `json:"charges"`
	// Duplicates counts the charges beyond the first of each event;
	// DuplicatedEvents the events charged more than once.
	Duplicates       int `json:"duplicates"`
	DuplicatedEvents int `json:"duplicated_events"`
	// Lost counts the events that should have been charged and were not.
	Lost int `json:"lost"`
	// Declined counts the events paid with a declining card, which are
	// neither charged nor lost.
	Declined int `json:"declined"`
	// OverCapRefused counts the charges keybrake refused with 429 over the
	// vault key's cap (UnsafeCapped and Full).
	OverCapRefused int64 `json:"over_cap_refused"`
	// OverchargedCents is the sum of the duplicate charges, in US cents.
	OverchargedCents int64 `json:"overcharged_cents"`
	// ExpectedCents is what the run's events should charge in all: the
	// vault key's cap is 110 % of it.
	ExpectedCents int64 `json:"expected_cents"`
	// ChargedCents is what the run's charges took in all.
	ChargedCents int64   `json:"charged_cents"`
	Seconds      float64 `json:"seconds"`
}

// OverchargedUSD formats the overcharge as dollars: "1,234.56".
func (r Row) OverchargedUSD() string { return usd(r.OverchargedCents) }

// Report is the result of Run.
type Report struct {
	Seed     uint64     `json:"seed"`
	Events   int        `json:"events"`
	Fraction float64    `json:"fraction"`
	Started  time.Time  `json:"started"`
	Seconds  float64    `json:"seconds"`
	Modes    []ModeInfo `json:"modes"`
	Rows     []Row      `json:"rows"`
}

// Failures returns what contradicts the harness's claims: a mode whose
// Unsafe row shows none of the seed's failure, or a Full row with a
// duplicate or a lost charge. Empty means the report proves its point.
func (rep *Report) Failures() []string {
	expect := map[string]string{}
	for _, m := range rep.Modes {
		expect[m.Name] = m.Expect
	}
	var out []string
	for _, r := range rep.Rows {
		switch r.Strategy {
		case Unsafe:
			if expect[r.Mode] == "lost" && r.Lost == 0 {
				out = append(out, fmt.Sprintf("%s: the unsafe strategy lost no charge", r.Mode))
			}
			if expect[r.Mode] != "lost" && r.Duplicates == 0 {
				out = append(out, fmt.Sprintf("%s: the unsafe strategy made no duplicate", r.Mode))
			}
		case UnsafeCapped:
			if r.ChargedCents*100 > r.ExpectedCents*110 {
				out = append(out, fmt.Sprintf("%s: $%s charged through a vault key capped at 110%% of $%s", r.Mode, usd(r.ChargedCents), usd(r.ExpectedCents)))
			}
		case UnsafeGuarded:
			if r.Duplicates != 0 || r.OverchargedCents != 0 {
				out = append(out, fmt.Sprintf("%s: %d duplicates through a vault key with the duplicate guard", r.Mode, r.Duplicates))
			}
		case Full:
			if r.Duplicates != 0 || r.Lost != 0 {
				out = append(out, fmt.Sprintf("%s: keybrake made %d duplicates and lost %d charges", r.Mode, r.Duplicates, r.Lost))
			}
		}
	}
	return out
}

// WriteText writes the table: one line per mode and strategy, a blank
// line between modes.
func (rep *Report) WriteText(w io.Writer) error {
	mw := len("mode")
	for _, r := range rep.Rows {
		mw = max(mw, len(r.Mode))
	}
	var b strings.Builder
	line := func(mode, st, events, deliveries, charges, dups, lost, refused, usd string) {
		fmt.Fprintf(&b, "%-*s  %-11s  %6s  %10s  %7s  %10s  %5s  %16s  %15s\n", mw, mode, st, events, deliveries, charges, dups, lost, refused, usd)
	}
	line("mode", "strategy", "events", "deliveries", "charges", "duplicates", "lost", "over-cap refused", "USD overcharged")
	last := ""
	for _, r := range rep.Rows {
		mode := r.Mode
		if mode == last {
			mode = ""
		} else if last != "" {
			b.WriteString("\n")
		}
		last = r.Mode
		line(mode, string(r.Strategy), fmt.Sprint(r.Events), fmt.Sprint(r.Deliveries), fmt.Sprint(r.Charges), fmt.Sprint(r.Duplicates),
			fmt.Sprint(r.Lost), fmt.Sprint(r.OverCapRefused), r.OverchargedUSD())
	}
	fmt.Fprintf(&b, "\nseed %d, %d events per row, %.0f%% of them faulted; %.0fs\n", rep.Seed, rep.Events, rep.Fraction*100, rep.Seconds)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// strategyColors are the bar colours of the chart, from red (no layer) to
// green (all three).
var strategyColors = map[Strategy]string{Unsafe: "#d62728", UnsafeCapped: "#9467bd", UnsafeGuarded: "#17becf", ContentKey: "#ff7f0e", KeyLedger: "#bcbd22", Full: "#2ca02c"}

// WriteSVG writes a self-contained bar chart: for every mode, one bar per
// strategy, as tall as the duplicate and lost charges (lost hatched), on a
// square-root scale so a handful still shows beside a thousand.
func (rep *Report) WriteSVG(w io.Writer) error {
	modes := rep.modeOrder()
	strategies := rep.strategyOrder()
	const (
		left, top, plotH = 60, 50, 260
		barW, gap        = 14, 26
	)
	groupW := len(strategies)*barW + gap
	width := left + len(modes)*groupW + 20
	height := top + plotH + 150
	maxV := 1
	for _, r := range rep.Rows {
		maxV = max(maxV, r.Duplicates+r.Lost)
	}
	scale := func(v int) float64 { return float64(plotH) * math.Sqrt(float64(v)) / math.Sqrt(float64(maxV)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	b.WriteString(`<defs><pattern id="lost" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/><line x1="0" y1="0" x2="0" y2="6" stroke="#000" stroke-width="3"/></pattern></defs>` + "\n")
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">Duplicate and lost charges per failure mode (%d events each, seed %d)</text>`+"\n", left, rep.Events, rep.Seed)
	// Legend.
	x := left
	for _, st := range strategies {
		fmt.Fprintf(&b, `<rect x="%d" y="30" width="10" height="10" fill="%s"/><text x="%d" y="39">%s</text>`+"\n", x, strategyColors[st], x+14, html.EscapeString(string(st)))
		x += 14 + 8*len(st) + 16
	}
	fmt.Fprintf(&b, `<rect x="%d" y="30" width="10" height="10" fill="url(#lost)" stroke="#000"/><text x="%d" y="39">lost (hatched)</text>`+"\n", x, x+14)
	// Axis and grid on the square-root scale.
	base := top + plotH
	for _, v := range gridValues(maxV) {
		y := float64(base) - scale(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", left-4, y, width-20, y, left-8, y+4, v)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000"/>`+"\n", left-4, base, width-20, base)
	for i, m := range modes {
		gx := left + i*groupW + gap/2
		for j, st := range strategies {
			r, ok := rep.row(m, st)
			if !ok {
				continue
			}
			bx := gx + j*barW
			dh, lh := scale(r.Duplicates+r.Lost)-scale(r.Lost), scale(r.Lost)
			title := fmt.Sprintf("%s / %s: %d duplicates, %d lost, $%s overcharged", m, st, r.Duplicates, r.Lost, r.OverchargedUSD())
			fmt.Fprintf(&b, `<g><title>%s</title>`, html.EscapeString(title))
			if lh > 0 {
				fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="url(#lost)" stroke="%s"/>`, bx, float64(base)-lh, barW-2, lh, strategyColors[st])
			}
			if dh > 0 {
				fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"/>`, bx, float64(base)-lh-dh, barW-2, dh, strategyColors[st])
			}
			if r.Duplicates+r.Lost == 0 {
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-size="9" fill="%s">0</text>`, bx+(barW-2)/2, base-3, strategyColors[st])
			}
			b.WriteString("</g>\n")
		}
		cx := gx + len(strategies)*barW/2
		fmt.Fprintf(&b, `<text transform="translate(%d,%d) rotate(-40)" text-anchor="end">%s</text>`+"\n", cx, base+14, html.EscapeString(m))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteHTML writes a self-contained page: the chart, the table, and what
// each mode injects.
func (rep *Report) WriteHTML(w io.Writer) error {
	var svg strings.Builder
	rep.WriteSVG(&svg)
	var b strings.Builder
	b.WriteString(report.Head("keybrake chaos"))
	fmt.Fprintf(&b, "<h1>keybrake chaos: the seeds' failure modes, side by side</h1>\n<p>Seed %d, %d events per row, %.0f%% of them faulted, %.0f s. Counted from the Stripe simulator's ground truth.</p>\n",
		rep.Seed, rep.Events, rep.Fraction*100, rep.Seconds)
	b.WriteString(svg.String())
	b.WriteString("<h2>Table</h2>\n<table><tr><th>mode</th><th>strategy</th><th>events</th><th>deliveries</th><th>charges</th><th>duplicates</th><th>lost</th><th>over-cap refused</th><th>USD overcharged</th></tr>\n")
	for _, r := range rep.Rows {
		cls := "good"
		if r.Duplicates+r.Lost > 0 {
			cls = "bad"
		}
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td class=%q>%d</td><td class=%q>%d</td><td>%d</td><td>%s</td></tr>\n",
			html.EscapeString(r.Mode), html.EscapeString(string(r.Strategy)), r.Events, r.Deliveries, r.Charges, cls, r.Duplicates, cls, r.Lost, r.OverCapRefused, r.OverchargedUSD())
	}
	b.WriteString("</table>\n<h2>Modes</h2>\n<dl>\n")
	for _, m := range rep.Modes {
		fmt.Fprintf(&b, "<dt><b>%s</b> (%s)</dt><dd>%s.<br>Unsafe key: <code>%s</code>.<br>Injected: %s.</dd>\n",
			html.EscapeString(m.Name), html.EscapeString(m.Transport), html.EscapeString(m.Failure), html.EscapeString(m.UnsafeKey), html.EscapeString(m.Injection))
	}
	b.WriteString("</dl>\n" + report.Foot())
	_, err := io.WriteString(w, b.String())
	return err
}

func (rep *Report) modeOrder() []string {
	var out []string
	for _, r := range rep.Rows {
		if len(out) == 0 || out[len(out)-1] != r.Mode {
			out = append(out, r.Mode)
		}
	}
	return out
}

func (rep *Report) strategyOrder() []Strategy {
	seen := map[Strategy]bool{}
	for _, r := range rep.Rows {
		seen[r.Strategy] = true
	}
	var out []Strategy
	for _, st := range Strategies {
		if seen[st] {
			out = append(out, st)
		}
	}
	return out
}

func (rep *Report) row(mode string, st Strategy) (Row, bool) {
	for _, r := range rep.Rows {
		if r.Mode == mode && r.Strategy == st {
			return r, true
		}
	}
	return Row{}, false
}

// gridValues returns round values up to max for the chart's grid lines.
func gridValues(maxV int) []int {
	out := []int{0}
	for _, v := range []int{1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000} {
		if v <= maxV {
			out = append(out, v)
		}
	}
	return out
}

// usd formats cents as dollars with thousands separators.
func usd(cents int64) string {
	s := fmt.Sprintf("%d", cents/100)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return fmt.Sprintf("%s.%02d", b.String(), cents%100)
}
