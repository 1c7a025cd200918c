package http_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsCountEveryRequest checks the cached series handles count
// into the series WithLabelValues named: each charge and GET once, by
// operation, decision and status, and the micros reserved.
func TestMetricsCountEveryRequest(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":1000}`)
	cus := mustCustomer(t, e)
	do := func(req *http.Request) {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: status %d", req.Method, req.URL.Path, resp.StatusCode)
		}
	}
	for range 3 {
		do(chargeRequest(e.Server.URL(), secret))
	}
	get, _ := http.NewRequest("GET", e.Server.URL()+"/v1/customers/"+cus, nil)
	get.Header.Set("Authorization", "Bearer "+secret)
	do(get)

	resp, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := string(b)
	for _, want := range []string{
		`keybrake_requests_total{decision="allow",operation="charges.create"} 3`,
		`keybrake_requests_total{decision="allow",operation="customers.retrieve"} 1`,
		`keybrake_upstream_responses_total{operation="charges.create",status="200"} 3`,
		`keybrake_upstream_responses_total{operation="customers.retrieve",status="200"} 1`,
		`keybrake_request_duration_seconds_count{operation="charges.create"} 3`,
		`keybrake_reserved_usd_micros_total{operation="charges.create"} 3e+06`,
		`keybrake_reserve_duration_seconds_count 3`, // the charges, not the GET
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, strings.SplitN(want, "{", 2)[0]))
		}
	}
}
