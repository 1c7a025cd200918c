package http_test

import (
	"strings"
	"testing"
	"time"
)

// A velocity limit with "requests": true counts every request on the key,
// reads included: the "60 requests per minute per key". The
// refusal is a 429 with Retry-After, and the window frees up.
func TestGuards_VelocityCountsRequests(t *testing.T) {
	e := MustOpen(t)
	cus := mustCustomer(t, e)
	_, secret := e.CreateKey(t, `{"guards":{"velocity":[{"name":"rpm","per":"key","limit":3,"window_seconds":60,"requests":true}]}}`)
	get := func() (int, string, string) {
		resp, out := e.Do(t, "GET", "/v1/customers/"+cus, "", map[string]string{"Authorization": "Bearer " + secret})
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(out)
	}
	for i := range 2 {
		if code, _, out := get(); code != 200 {
			t.Fatalf("read %d: %d %s", i, code, out)
		}
	}
	if resp, out := guardedCharge(e, t, secret, "c1", "amount=100&currency=usd&source=tok_visa", nil); resp.StatusCode != 200 {
		t.Fatalf("charge, the third request: %d %s", resp.StatusCode, out)
	}
	code, retry, out := get()
	if code != 429 || retry == "" || !strings.Contains(out, `velocity limit \"rpm\"`) || !strings.Contains(out, "keybrake_velocity_limit") {
		t.Fatalf("fourth request: %d Retry-After %q %s", code, retry, out)
	}
	if resp, _ := guardedCharge(e, t, secret, "c2", "amount=100&currency=usd&source=tok_visa", nil); resp.StatusCode != 429 {
		t.Fatalf("a charge over the request limit: %d", resp.StatusCode)
	}
	e.Clock.Advance(61 * time.Second)
	if code, _, out := get(); code != 200 {
		t.Fatalf("after the window: %d %s", code, out)
	}
}
