package http_test

import (
	"io"
	"net/http"
	"testing"
)

// BenchmarkGET compares a GET straight to the simulator with the same GET
// through keybrake, in one run.
func BenchmarkGET(b *testing.B) {
	e := MustOpen(b)
	_, secret := e.CreateKey(b, `{"daily_usd_cap":10}`)
	cus := mustCustomer(b, e)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	run := func(b *testing.B, url, key string) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest("GET", url+"/v1/customers/"+cus, nil)
				req.Header.Set("Authorization", "Bearer "+key)
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
	b.Run("Direct", func(b *testing.B) { run(b, e.SimURL, "sk_test_upstream_secret_do_not_leak") })
	b.Run("Proxy", func(b *testing.B) { run(b, e.Server.URL(), secret) })
}

// BenchmarkCharge compares a charge straight to the simulator with a
// capped, reserved charge through keybrake.
func BenchmarkCharge(b *testing.B) {
	e := MustOpen(b)
	_, secret := e.CreateKey(b, `{"daily_usd_cap":100000000}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	run := func(b *testing.B, url, key string) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := client.Do(chargeRequest(url, key))
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
	b.Run("Direct", func(b *testing.B) { run(b, e.SimURL, "sk_test_upstream_secret_do_not_leak") })
	b.Run("Proxy", func(b *testing.B) { run(b, e.Server.URL(), secret) })
}

func chargeRequest(url, key string) *http.Request {
	req, _ := http.NewRequest("POST", url+"/v1/charges", stringsReader("amount=100&currency=usd&source=tok_visa"))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}
