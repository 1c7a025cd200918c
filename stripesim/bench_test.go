package stripesim_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestConcurrentSameKey(t *testing.T) {
	e := MustEnv(t)
	const n = 20
	results := make(chan response, n)
	for range n {
		go func() {
			r, err := e.send(context.Background(), "POST", "/v1/charges", visa2000, "Idempotency-Key", "race")
			if err != nil {
				t.Error(err)
			}
			results <- r
		}()
	}
	var body string
	for range n {
		r := <-results
		switch r.status {
		case 200:
			if body != "" && string(r.body) != body {
				t.Fatalf("two different successes for one key:\n%s\n%s", body, r.body)
			}
			body = string(r.body)
		case 409:
		default:
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	if got := len(e.sim.GroundTruth().Charges); got != 1 || body == "" {
		t.Fatalf("%d charges for one Idempotency-Key, want 1", got)
	}
}

// BenchmarkCreateCharge measures the simulator alone, without the network:
// it is the baseline the proxy's overhead is measured against.
func BenchmarkCreateCharge(b *testing.B) {
	e := MustEnv(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(visa2000))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Idempotency-Key", fmt.Sprint(i))
		w := httptest.NewRecorder()
		e.sim.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
