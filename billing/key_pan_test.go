package billing_test

import (
	"fmt"
	"testing"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/stripe"
)

// The worker tags every charge with its content key; keybrake refuses
// requests carrying what looks like a card number, so no content key may
// look like one. 2 in 1,000 did when hex digits were scanned as card
// numbers (namespace acme, customer cus_868, period 2026-11 among them).
func TestContentKeysNeverLookLikeCardNumbers(t *testing.T) {
	if k := billing.Key("acme", "cus_868", "2026-11"); stripe.LooksLikePAN(k) {
		t.Fatalf("%s looks like a card number", k)
	}
	for i := 0; i < 20000; i++ {
		k := billing.Key("acme", fmt.Sprintf("cus_%d", i), "2026-11")
		if stripe.LooksLikePAN(k) {
			t.Fatalf("%s looks like a card number", k)
		}
	}
}
