package http

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// upstreamLookup prices what a request does not say (the amount of a
// payment intent being confirmed, what is left to refund) by retrieving the
// object upstream with the real key. Retrieval is always current, also when
// another replica or the dashboard changed the object meanwhile.
type upstreamLookup struct{ s *Server }

var _ stripe.Lookup = (*upstreamLookup)(nil)

type lookedUp struct {
	ID             string `json:"id"`
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amount_refunded"`
	AmountReceived int64  `json:"amount_received"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
	Captured       bool   `json:"captured"`
	LatestCharge   any    `json:"latest_charge"`
	Customer       any    `json:"customer"`
	PaymentIntent  any    `json:"payment_intent"`
}

// expandedID is the id of a field Stripe answers as an id or, expanded,
// as the object: "" for neither.
func expandedID(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case map[string]any:
		s, _ := c["id"].(string)
		return s
	}
	return ""
}

// PaymentIntent returns the intent's amount and currency.
func (l *upstreamLookup) PaymentIntent(ctx context.Context, id, account string) (int64, string, error) {
	pi, err := l.object(ctx, "/v1/payment_intents/"+url.PathEscape(id), account)
	if err != nil {
		return 0, "", err
	}
	return pi.Amount, pi.Currency, nil
}

// Charge returns the charge's amount and currency.
func (l *upstreamLookup) Charge(ctx context.Context, id, account string) (int64, string, error) {
	ch, err := l.object(ctx, "/v1/charges/"+url.PathEscape(id), account)
	if err != nil {
		return 0, "", err
	}
	return ch.Amount, ch.Currency, nil
}

// Refundable returns what is left to refund of a charge, or of a payment
// intent's latest charge.
func (l *upstreamLookup) Refundable(ctx context.Context, chargeID, paymentIntentID, account string) (int64, string, error) {
	if chargeID == "" && paymentIntentID != "" {
		pi, err := l.object(ctx, "/v1/payment_intents/"+url.PathEscape(paymentIntentID), account)
		if err != nil {
			return 0, "", err
		}
		switch lc := pi.LatestCharge.(type) {
		case string:
			chargeID = lc
		case map[string]any:
			chargeID, _ = lc["id"].(string)
		}
		if chargeID == "" {
			return 0, "", keybrake.ErrorParam("payment_intent", "Payment intent %s has no charge to refund.", paymentIntentID)
		}
	}
	ch, err := l.object(ctx, "/v1/charges/"+url.PathEscape(chargeID), account)
	if err != nil {
		return 0, "", err
	}
	return ch.Amount - ch.AmountRefunded, ch.Currency, nil
}

// get retrieves one object upstream. A 404 is EINVALID (the client named an
// object that does not exist); anything else failing is EUNAVAILABLE, since
// keybrake cannot price the request and must not forward it unpriced.
func (l *upstreamLookup) get(ctx context.Context, path, account string, v any) error {
	s := l.s
	u := *s.Upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.UpstreamKey)
	if account != "" {
		req.Header.Set("Stripe-Account", account)
	}
	resp, err := s.Transport.RoundTrip(req)
	if err != nil {
		return &keybrake.Error{Code: keybrake.EUNAVAILABLE, Message: fmt.Sprintf("keybrake could not look up %s upstream to price this request (%s); nothing was forwarded.", path, upstreamErrorKind(err))}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	if err != nil {
		return &keybrake.Error{Code: keybrake.EUNAVAILABLE, Message: "keybrake could not read the upstream lookup of " + path + "; nothing was forwarded."}
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return keybrake.Errorf(keybrake.EINVALID, "No such object upstream: %s.", path)
	case resp.StatusCode >= 300:
		return &keybrake.Error{Code: keybrake.EUNAVAILABLE, Message: fmt.Sprintf("keybrake's upstream lookup of %s answered %d, so it cannot price this request; nothing was forwarded.", path, resp.StatusCode)}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &keybrake.Error{Code: keybrake.EUNAVAILABLE, Message: "keybrake could not read the upstream lookup of " + path + "."}
	}
	return nil
}

// lookupsKey is the context key of a request's upstream lookups
// (withLookups).
type lookupsKey struct{}

// withLookups returns ctx carrying a cache of the objects a request reads
// upstream, so that each is read once a request whoever asks: the customer
// scope, the refund's guard subject and the pricer read the same charge.
func withLookups(ctx context.Context) context.Context {
	return context.WithValue(ctx, lookupsKey{}, map[string]*lookedUp{})
}

// object retrieves the object at path upstream, once a request when ctx
// carries withLookups' cache.
func (l *upstreamLookup) object(ctx context.Context, path, account string) (*lookedUp, error) {
	cache, _ := ctx.Value(lookupsKey{}).(map[string]*lookedUp)
	k := account + " " + path
	if obj, ok := cache[k]; ok {
		return obj, nil
	}
	obj := new(lookedUp)
	if err := l.get(ctx, path, account, obj); err != nil {
		return nil, err
	}
	if cache != nil {
		cache[k] = obj
	}
	return obj, nil
}

// pathCustomer returns the customer of the object retrieved at path, ""
// when it has none.
func (v *stripeVendor) pathCustomer(ctx context.Context, path, account string) (string, error) {
	obj, err := (&upstreamLookup{s: v.s}).object(ctx, path, account)
	if err != nil {
		return "", err
	}
	return expandedID(obj.Customer), nil
}

// paymentObjectPath is where a payment intent (pi_) or charge (ch_, py_)
// is retrieved, for its customer; any other id is EINVALID.
func paymentObjectPath(id string) (string, error) {
	switch {
	case strings.HasPrefix(id, "pi_"):
		return "/v1/payment_intents/" + url.PathEscape(id), nil
	case strings.HasPrefix(id, "ch_"), strings.HasPrefix(id, "py_"):
		return "/v1/charges/" + url.PathEscape(id), nil
	}
	return "", keybrake.Errorf(keybrake.EINVALID, "keybrake cannot tell which customer %q belongs to.", id)
}
