package http_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
)

// staleKeys is a replica that has not heard of any change to a key since
// it first read it: its key lookups return that first copy.
type staleKeys struct {
	keybrake.Store
	mu   sync.Mutex
	seen map[string]*keybrake.Key
}

func (s *staleKeys) FindKeyBySecretHash(ctx context.Context, hash string) (*keybrake.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.seen[hash]; ok {
		return k, nil
	}
	k, err := s.Store.FindKeyBySecretHash(ctx, hash)
	if err == nil {
		s.seen[hash] = k
	}
	return k, err
}

// A suspended key must not confirm or capture an intent it holds: that
// moves money. The proxy reads the key's suspension in the object's lock
// step, so even a replica that still sees the key as it was before the
// suspension refuses, and nothing reaches Stripe.
func TestGuards_SuspendedKeyCannotMoveHeldMoney(t *testing.T) {
	stale := &staleKeys{seen: map[string]*keybrake.Key{}}
	e := MustOpen(t, func(s *khttp.Server) { stale.Store = s.Store; s.Store = stale })
	id, secret := e.CreateKey(t, `{"daily_usd_cap":100,"guards":{"breaker":{"refusal_burst":3,"refusal_window_seconds":60}}}`)
	sc := e.Stripe(secret)
	ctx := context.Background()
	manual := &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(2000), Currency: stripego.String("usd"),
		PaymentMethod: stripego.String("pm_card_visa"), CaptureMethod: stripego.String("manual"), Confirm: stripego.Bool(true)}
	authorized, err := sc.V1PaymentIntents.Create(ctx, manual)
	if err != nil {
		t.Fatal(err)
	}
	unconfirmed, err := sc.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(1500), Currency: stripego.String("usd"), PaymentMethod: stripego.String("pm_card_visa")})
	if err != nil {
		t.Fatal(err)
	}
	// Another replica's breaker suspends the key; this one has not heard.
	if _, err := stale.Store.SuspendKey(ctx, id, "breaker refusal_burst: elsewhere", e.Clock.Now()); err != nil {
		t.Fatal(err)
	}

	_, err = sc.V1PaymentIntents.Confirm(ctx, unconfirmed.ID, nil)
	wantSuspended(t, "confirm", err)
	_, err = sc.V1PaymentIntents.Capture(ctx, authorized.ID, nil)
	wantSuspended(t, "capture", err)

	for _, pi := range []struct{ id, want string }{{unconfirmed.ID, "requires_confirmation"}, {authorized.ID, "requires_capture"}} {
		got, err := e.Direct().V1PaymentIntents.Retrieve(ctx, pi.id, nil)
		if err != nil || string(got.Status) != pi.want {
			t.Fatalf("%s upstream: %v %v, want %s: the request reached Stripe", pi.id, got.Status, err, pi.want)
		}
	}
}

func wantSuspended(t *testing.T, what string, err error) {
	t.Helper()
	var se *stripego.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != 403 || !containsAll(se.Msg, "suspended", "resume") {
		t.Fatalf("%s on a suspended key: %v, want a 403 naming the suspension", what, err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
