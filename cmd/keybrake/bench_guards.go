package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// benchGuards is the guards of the bench's guarded key: all four kinds,
// set so that none refuses a bench charge (each has its own
// metadata[n]), so every charge pays for deciding them all.
const benchGuards = `{
	"duplicate": {"window_seconds": 3600, "match_metadata": "n"},
	"velocity": [
		{"name": "per_customer", "per": "customer", "operations": ["charges.create"], "limit": 1000000, "window_seconds": 86400},
		{"name": "per_key", "per": "key", "limit": 1000000, "window_seconds": 60}
	],
	"rules": [
		{"name": "small_usd", "expr": "amount <= 5000 && currency == \"usd\""},
		{"name": "tagged", "expr": "has(metadata.n) && !has(transfer_data)"}
	],
	"breaker": {"refusal_burst": 1000, "refusal_window_seconds": 60, "repeat_body": 1000, "repeat_window_seconds": 60,
		"spend_multiple": 1000000, "spend_window_seconds": 60, "baseline_seconds": 3600}
}`

// GuardCost is what the four guards add to a capped charge: per run, the
// median latency of the same charge on the guarded key minus on the same
// key without guards, measured interleaved in the same run.
type GuardCost struct {
	Runs        int       `json:"runs"`
	Requests    int       `json:"requests_per_run"`
	PlainMedian []float64 `json:"plain_median_us"`
	GuardMedian []float64 `json:"guarded_median_us"`
	AddedMedian []float64 `json:"added_median_us"` // per run, sorted
}

// guardCost measures 3 runs of n charges on each of two keys with the same
// caps, one with benchGuards, alternating request by request so both see
// the same machine.
func (b *bench) guardCost(ctx context.Context, progress io.Writer) (*GuardCost, error) {
	bases := b.proxyURLs
	var keys [2]string
	for i, body := range []string{`{"label":"bench plain",` + benchCaps + `}`, `{"label":"bench guarded",` + benchCaps + `,"guards":` + benchGuards + `}`} {
		_, secret, err := b.createKeyBody(ctx, body)
		if err != nil {
			return nil, fmt.Errorf("create bench key: %w", err)
		}
		keys[i] = secret
	}
	n := b.cfg.Requests
	if n == 0 {
		n = 2000
	}
	gc := &GuardCost{Runs: 3, Requests: n}
	seq := int64(0)
	for run := range gc.Runs {
		fmt.Fprintf(progress, "bench: guards run %d/%d, %d charges on each key…\n", run+1, gc.Runs, n)
		var d [2][]time.Duration
		for i := 0; i < n; i++ {
			for k := range keys {
				seq++
				req, _ := http.NewRequestWithContext(ctx, "POST", bases[i%len(bases)]+"/v1/charges",
					strings.NewReader(fmt.Sprintf("amount=100&currency=usd&source=tok_visa&metadata[n]=%d", seq)))
				req.Header.Set("Authorization", "Bearer "+keys[k])
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				start := time.Now()
				if err := b.send(req); err != nil {
					return nil, fmt.Errorf("guards bench, key %d: %w", k, err)
				}
				d[k] = append(d[k], time.Since(start))
			}
		}
		for k := range d {
			sort.Slice(d[k], func(i, j int) bool { return d[k][i] < d[k][j] })
		}
		p, g := pct(d[0], 0.5), pct(d[1], 0.5)
		gc.PlainMedian, gc.GuardMedian = append(gc.PlainMedian, p), append(gc.GuardMedian, g)
		gc.AddedMedian = append(gc.AddedMedian, g-p)
	}
	sort.Float64s(gc.AddedMedian)
	return gc, nil
}

func (g *GuardCost) print(w io.Writer) {
	fmt.Fprintf(w, "\nguards: a capped charge on a key with all four guards vs the same key without, %d runs × %d charges each, interleaved\n", g.Runs, g.Requests)
	for i := range g.PlainMedian {
		fmt.Fprintf(w, "  run %d: plain p50 %.0f µs, guarded p50 %.0f µs\n", i+1, g.PlainMedian[i], g.GuardMedian[i])
	}
	fmt.Fprintf(w, "  added p50 (µs): min %.0f, median %.0f, max %.0f\n", g.AddedMedian[0], g.AddedMedian[len(g.AddedMedian)/2], g.AddedMedian[len(g.AddedMedian)-1])
}
