package billing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
)

// MetadataKey is the metadata key under which every charge carries its
// idempotency key, so it can be found by search after Stripe forgets the
// Idempotency-Key (24 hours).
const MetadataKey = "keybrake_key"

// StripeCharger is the Charger on the Stripe API through stripe-go, pointed
// at Stripe itself, at keybrake (with a vault key, the spend-cap backstop),
// or at the simulator.
type StripeCharger struct {
	// BaseURL is the API root without a path, e.g. "http://127.0.0.1:8080"
	// for keybrake: stripe-go adds "/v1/…" itself and refuses a base URL
	// with a path. Empty means Stripe (https://api.stripe.com).
	BaseURL string
	// Key is a vault key (vault_key_…) or a Stripe secret key.
	Key string
	// HTTPClient makes the requests; nil means HTTPClient(30 * time.Second).
	// A client on http.DefaultTransport keeps only two idle connections
	// per host, so a worker handling 16 events at once would open a
	// connection for most calls. A timeout is a transient failure: the
	// charge may exist, and the retry with the same key finds it.
	HTTPClient *http.Client

	mu        sync.Mutex
	cached    *stripego.Client // built from the fields in cachedFor
	cachedFor chargerConfig
}

// chargerConfig is what a cached stripe-go client was built from.
type chargerConfig struct {
	baseURL, key string
	hc           *http.Client
}

var _ Charger = (*StripeCharger)(nil)

// defaultTransport carries the requests of a StripeCharger without an
// HTTPClient. http.DefaultTransport keeps two idle connections per host, so
// a worker charging 16 events at once would open, and close, a connection
// for most of its calls (a fifth of its CPU in the issue 16 profile).
var defaultTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256
	return t
}()

// defaultHTTPClient is the HTTPClient of a StripeCharger without one.
var defaultHTTPClient = HTTPClient(30 * time.Second)

// HTTPClient returns a client for a StripeCharger with the given timeout,
// on a transport shared by every such client that keeps enough idle
// connections for a worker's concurrent calls.
func HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: defaultTransport}
}

// client returns a stripe-go client that never retries by itself: the
// Processor owns retries, and each one is claimed in the ledger first. The
// client is built once and kept while BaseURL, Key and HTTPClient stay as
// they are: building one per call costs a set of backends each time.
func (c *StripeCharger) client() *stripego.Client {
	want := chargerConfig{baseURL: c.BaseURL, key: c.Key, hc: c.HTTPClient}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cached == nil || c.cachedFor != want {
		c.cached, c.cachedFor = newStripeClient(want), want
	}
	return c.cached
}

func newStripeClient(cfg chargerConfig) *stripego.Client {
	hc := cfg.hc
	if hc == nil {
		hc = defaultHTTPClient
	}
	bc := &stripego.BackendConfig{
		MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
		HTTPClient:        hc,
	}
	if cfg.baseURL != "" {
		bc.URL = stripego.String(strings.TrimSuffix(cfg.baseURL, "/"))
	}
	return stripego.NewClient(cfg.key, stripego.WithBackends(stripego.NewBackendsWithConfig(bc)))
}

// Charge creates a PaymentIntent confirmed at once when req.PaymentMethod is
// set, else a charge on req.Source or the customer's default source. The
// key is the Idempotency-Key and metadata[keybrake_key].
func (c *StripeCharger) Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error) {
	if req.Key == "" {
		return ChargeResult{}, keybrake.ErrorParam("key", "billing: a charge needs its idempotency key")
	}
	if req.PaymentMethod != "" {
		return c.paymentIntent(ctx, req)
	}
	params := &stripego.ChargeCreateParams{
		Amount:   stripego.Int64(req.Amount),
		Currency: stripego.String(req.Currency),
	}
	if req.StripeCustomer != "" {
		params.Customer = stripego.String(req.StripeCustomer)
	}
	if req.Source != "" {
		params.Source = &stripego.PaymentSourceSourceParams{Token: stripego.String(req.Source)}
	}
	if req.Description != "" {
		params.Description = stripego.String(req.Description)
	}
	setMetadata(&params.Params, req)
	ch, err := c.client().V1Charges.Create(ctx, params)
	if err != nil {
		return ChargeResult{}, chargeError(err)
	}
	return ChargeResult{ChargeID: ch.ID, Status: string(ch.Status), Amount: ch.Amount, Currency: string(ch.Currency),
		Replayed: replayed(ch.LastResponse)}, nil
}

func (c *StripeCharger) paymentIntent(ctx context.Context, req ChargeRequest) (ChargeResult, error) {
	params := &stripego.PaymentIntentCreateParams{
		Amount:        stripego.Int64(req.Amount),
		Currency:      stripego.String(req.Currency),
		PaymentMethod: stripego.String(req.PaymentMethod),
		Confirm:       stripego.Bool(true),
	}
	if req.StripeCustomer != "" {
		params.Customer = stripego.String(req.StripeCustomer)
	}
	if req.Description != "" {
		params.Description = stripego.String(req.Description)
	}
	setMetadata(&params.Params, req)
	pi, err := c.client().V1PaymentIntents.Create(ctx, params)
	if err != nil {
		return ChargeResult{}, chargeError(err)
	}
	res := ChargeResult{Amount: pi.Amount, Currency: string(pi.Currency), Replayed: replayed(pi.LastResponse)}
	if pi.LatestCharge != nil {
		res.ChargeID = pi.LatestCharge.ID
	}
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded, stripego.PaymentIntentStatusProcessing, stripego.PaymentIntentStatusRequiresCapture:
		res.Status = "succeeded"
	default:
		// requires_action (3-D Secure) and the like need the customer,
		// whom a background worker cannot ask.
		return ChargeResult{}, &ChargeError{Class: ClassFailed, Status: 200, Type: "payment_intent", Code: string(pi.Status),
			Message: fmt.Sprintf("PaymentIntent %s is %s, which a billing worker cannot complete", pi.ID, pi.Status)}
	}
	if res.ChargeID == "" {
		res.ChargeID = pi.ID
	}
	return res, nil
}

func setMetadata(p *stripego.Params, req ChargeRequest) {
	p.SetIdempotencyKey(req.Key)
	for k, v := range req.Metadata {
		p.AddMetadata(k, v)
	}
	p.AddMetadata(MetadataKey, req.Key)
}

func replayed(r *stripego.APIResponse) bool {
	return r != nil && r.Header.Get("Idempotent-Replayed") == "true"
}

// FindByMetadata searches charges for metadata['keybrake_key']:'key',
// newest first. Stripe's search lags writes by up to a minute (an hour in
// outages), which is why the Processor searches only for entries first
// attempted ~23 hours ago, never right after a call.
func (c *StripeCharger) FindByMetadata(ctx context.Context, key string) ([]ChargeResult, error) {
	if key == "" || strings.ContainsAny(key, `'\`) {
		return nil, keybrake.ErrorParam("key", "billing: cannot search for key %q", clip(key))
	}
	params := &stripego.ChargeSearchParams{}
	params.Query = fmt.Sprintf("metadata['%s']:'%s'", MetadataKey, key)
	var out []ChargeResult
	for ch, err := range c.client().V1Charges.Search(ctx, params) {
		if err != nil {
			return nil, chargeError(err)
		}
		out = append(out, ChargeResult{ChargeID: ch.ID, Status: string(ch.Status), Amount: ch.Amount, Currency: string(ch.Currency)})
		if len(out) >= 100 {
			break
		}
	}
	return out, nil
}

// chargeError classifies a stripe-go error. Errors without an HTTP answer
// (network, timeout, a connection cut after the charge was made) stay as
// they are: ClassOf reads them as transient.
func chargeError(err error) error {
	var se *stripego.Error
	if !errors.As(err, &se) || se.HTTPStatusCode == 0 {
		return fmt.Errorf("billing: stripe: %w", err)
	}
	return &ChargeError{
		Class:       classify(se.HTTPStatusCode, string(se.Type), string(se.Code)),
		Status:      se.HTTPStatusCode,
		Type:        string(se.Type),
		Code:        string(se.Code),
		DeclineCode: string(se.DeclineCode),
		Message:     se.Msg,
		ChargeID:    se.ChargeID,
		RequestID:   se.RequestID,
		Err:         err,
	}
}
