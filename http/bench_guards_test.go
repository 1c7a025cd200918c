package http_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
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
