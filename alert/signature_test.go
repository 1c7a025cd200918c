package alert_test

import (
	"errors"
	"testing"
	"time"

	"github.com/keybrake/keybrake/alert"
)

func TestVerify(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	body := []byte(`{"id":"alt_1"}`)
	good := alert.Sign("whsec_a", t0, body)
	cases := []struct {
		name   string
		secret string
		header string
		body   []byte
		now    time.Time
		want   error
	}{
		{"OK", "whsec_a", good, body, t0, nil},
		{"OKWithinTolerance", "whsec_a", good, body, t0.Add(alert.DefaultTolerance), nil},
		{"OKRotatedSecret", "whsec_a", alert.Sign("whsec_old", t0, body) + "," + good[len("t=1796040000,"):], body, t0, nil},
		{"ErrTooOld", "whsec_a", good, body, t0.Add(alert.DefaultTolerance + time.Second), alert.ErrTooOld},
		{"ErrFromTheFuture", "whsec_a", good, body, t0.Add(-alert.DefaultTolerance - time.Second), alert.ErrTooOld},
		{"ErrWrongSecret", "whsec_b", good, body, t0, alert.ErrNoSignature},
		{"ErrBodyChanged", "whsec_a", good, []byte(`{"id":"alt_2"}`), t0, alert.ErrNoSignature},
		{"ErrNoTimestamp", "whsec_a", good[len("t=1796040000,"):], body, t0, alert.ErrNoSignature},
		{"ErrEmpty", "whsec_a", "", body, t0, alert.ErrNoSignature},
		{"ErrTimestampSwapped", "whsec_a", "t=1796040001," + good[len("t=1796040000,"):], body, t0, alert.ErrNoSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := alert.Verify(c.secret, c.header, c.body, alert.DefaultTolerance, c.now); !errors.Is(got, c.want) {
				t.Fatalf("Verify = %v, want %v", got, c.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	var total time.Duration
	n := 0
	for total < 24*time.Hour {
		n++
		total += alert.Backoff(n)
	}
	if alert.Backoff(1) != 30*time.Second || alert.Backoff(2) != time.Minute || alert.Backoff(20) != time.Hour {
		t.Fatalf("Backoff(1, 2, 20) = %v, %v, %v", alert.Backoff(1), alert.Backoff(2), alert.Backoff(20))
	}
	if n < 25 || n > 35 {
		t.Fatalf("%d attempts fit in 24 h, want about 30", n)
	}
}
