package http_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// benchGuardsJSON are the guards of `keybrake bench --ops guards`' guarded
// key (cmd/keybrake/bench_guards.go): all four kinds, none refusing.
const benchGuardsJSON = `{
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

// BenchmarkChargeGuards measures a capped charge, one at a time, on a key
// without guards and on the same caps with every kind of guard: the
// difference is what the guards add to a charge's latency.
func BenchmarkChargeGuards(b *testing.B) {
	e := MustOpen(b)
	caps := `"total_usd_cap":1000000000,"daily_usd_cap":1000000000,"per_request_usd_cap":100`
	_, plain := e.CreateKey(b, `{`+caps+`}`)
	_, guarded := e.CreateKey(b, `{`+caps+`,"guards":`+benchGuardsJSON+`}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	n := 0
	for _, c := range []struct{ name, key string }{{"Plain", plain}, {"Guarded", guarded}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				n++
				req, _ := http.NewRequest("POST", e.Server.URL()+"/v1/charges", stringsReader(fmt.Sprintf("amount=100&currency=usd&source=tok_visa&metadata[n]=%d", n)))
				req.Header.Set("Authorization", "Bearer "+c.key)
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// BenchmarkGETRequestLimit measures a GET passthrough, one at a time, on a
// key without guards and on a key whose velocity limit counts every
// request (a store write per read), interleaved: the medians and their
// difference are reported.
func BenchmarkGETRequestLimit(b *testing.B) {
	e := MustOpen(b)
	cus := mustCustomer(b, e)
	_, plain := e.CreateKey(b, `{"daily_usd_cap":10}`)
	_, counted := e.CreateKey(b, `{"daily_usd_cap":10,"guards":{"velocity":[{"name":"rps","per":"key","limit":1000000,"window_seconds":60,"requests":true}]}}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	var d [2][]time.Duration
	for b.Loop() {
		for k, key := range []string{plain, counted} {
			req, _ := http.NewRequest("GET", e.Server.URL()+"/v1/customers/"+cus, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			d[k] = append(d[k], time.Since(start))
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	for k := range d {
		slices.Sort(d[k])
	}
	p, c := d[0][len(d[0])/2], d[1][len(d[1])/2]
	b.ReportMetric(float64(p.Microseconds()), "plain-p50-µs")
	b.ReportMetric(float64(c.Microseconds()), "counted-p50-µs")
	b.ReportMetric(float64((c - p).Microseconds()), "added-p50-µs")
}
