package http_test

import (
	"io"
	"net/http"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"
)

// BenchmarkGETIntent is BenchmarkGET for a payment intent made outside
// keybrake and still confirmable: the answer whose client_secret keybrake
// removes (a parse, a holds lookup and a new encoding).
func BenchmarkGETIntent(b *testing.B) {
	e := MustOpen(b)
	_, secret := e.CreateKey(b, `{"daily_usd_cap":10}`)
	pi, err := e.Direct().V1PaymentIntents.Create(b.Context(), &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(5000), Currency: stripego.String("usd")})
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	run := func(b *testing.B, url, key string) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest("GET", url+"/v1/payment_intents/"+pi.ID, nil)
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
