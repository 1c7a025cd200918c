package http

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// metadataKey is the metadata field keybrake adds to the objects it creates,
// so the resolver can find them after Stripe's idempotency window.
const metadataKey = "keybrake_idempotency_key"

// stripeVendor is the Stripe API behind /stripe/v1/… and /v1/…: the
// canonical headers, Stripe's form encoding, the money model's classes and
// pricing (stripe/), holds on money objects (Holder), the metadata tag the
// resolver searches by, and Stripe's error shape.
type stripeVendor struct {
	s      *Server
	pricer *stripe.Pricer
}

// stripeRequest is a parsed Stripe request.
type stripeRequest struct {
	op     stripe.Operation
	env    envelope // the parsed headers
	form   *stripe.Form
	class  stripe.Class
	header http.Header // the client's, of which upstreamHeader forwards the inert ones
}

func newStripeVendor(s *Server) *stripeVendor {
	return &stripeVendor{s: s, pricer: &stripe.Pricer{Rates: s.Rates, Lookup: &upstreamLookup{s: s}}}
}

var (
	_ Vendor              = (*stripeVendor)(nil)
	_ Holder              = (*stripeVendor)(nil)
	_ ForeignReplayTeller = (*stripeVendor)(nil)
)

// Name returns "stripe".
func (v *stripeVendor) Name() string { return keybrake.VendorStripe }

// BodyKind returns "form": Stripe takes form-encoded bodies.
func (v *stripeVendor) BodyKind() string { return "form" }

// Authenticate finds the vault key in Authorization: Bearer, or Basic with
// the key as user name as `curl -u vault_key_…:` sends it.
func (v *stripeVendor) Authenticate(r *http.Request) (string, error) {
	secret := ""
	h := r.Header.Get("Authorization")
	switch {
	case strings.HasPrefix(h, "Bearer "):
		secret = strings.TrimSpace(strings.TrimPrefix(h, "Bearer "))
	case strings.HasPrefix(h, "Basic "):
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "Basic "))
		if err == nil {
			secret, _, _ = strings.Cut(string(raw), ":")
		}
	}
	if secret == "" {
		return "", keybrake.Errorf(keybrake.EUNAUTHORIZED, "You did not provide an API key. keybrake expects your vault key in the Authorization header (Bearer vault_key_…).")
	}
	if !strings.HasPrefix(secret, keybrake.VaultKeyPrefix) || len(secret) > 128 {
		return "", keybrake.Errorf(keybrake.EUNAUTHORIZED, "Invalid API Key provided: %s. keybrake only accepts vault keys (vault_key_…); the real Stripe secret stays with keybrake.", redact(secret))
	}
	return secret, nil
}

// Parse parses every header that selects an account or shapes the body
// once (parseEnvelope), names the operation (stripe.ParseOperation refuses
// "..", empty segments and encoded slashes), parses the form body or query
// strictly, refuses raw card data, classifies the operation under the
// money model, and refuses a free or priced write that sends a parameter
// keybrake has not reviewed (stripe.CheckParams). A POST's Idempotency-Key and metadata tag are checked here.
func (v *stripeVendor) Parse(a ParseArgs) (*VendorRequest, error) {
	env, err := parseEnvelope(a.Request)
	if err != nil {
		return nil, err
	}
	op, err := stripe.ParseOperation(a.Method, a.Path)
	if err != nil {
		return nil, err
	}
	req := &VendorRequest{Operation: op.Name, Label: op.Name, Path: op.Path, Record: op.Path, Account: env.Account, Version: env.Version}
	if op.Name == ownKeyOperation && a.Method == http.MethodGet {
		return req, nil
	}
	form, err := v.readForm(a)
	if err == nil {
		err = refuseCardData(form)
	}
	if err != nil {
		return nil, err
	}
	sr := &stripeRequest{op: op, env: env, form: form, class: stripe.Classify(op, form), header: a.Header}
	req.Class, req.Params, req.Parsed = stripeClass(sr.class), form, sr
	req.Subject = refundSubject(op, form)
	if a.Method == http.MethodPost {
		if len(env.IdempotencyKey) > 255 {
			return nil, keybrake.ErrorParam("Idempotency-Key", "Idempotency-Key is %d characters; Stripe accepts at most 255.", len(env.IdempotencyKey))
		}
		if err := checkTag(op, form, env.IdempotencyKey); err != nil {
			return nil, err
		}
		if err := checkTagKept(op, form); err != nil {
			return nil, err
		}
		req.Body, req.IdempotencyKey, req.Idempotent = a.Body, env.IdempotencyKey, true
	} else {
		req.RawQuery = a.RawQuery
	}
	// After the tag's own, more specific, checks.
	if err := stripe.CheckParams(op, form, sr.class); err != nil {
		return nil, err
	}
	req.Fingerprint = stripe.Fingerprint(stripe.FingerprintArgs{KeyID: a.KeyID, Operation: op.Name, Path: op.Path, Account: env.Account, Version: env.Version, Form: form})
	return req, nil
}

// refundSubject is the subject the guards count a refund under: the
// payment it refunds, the charge in a legacy path (charges.refund,
// charges.refunds.create, which name none in a parameter) or the charge
// or payment_intent parameter, before a customer it may also name, so
// one charge refunded by any of refunds.create's names is one subject,
// and a customer parameter does not make it another. "" for any other
// operation, which takes the first of guardSubjects.
func refundSubject(op stripe.Operation, form *stripe.Form) string {
	switch op.Name {
	case "charges.refund", "charges.refunds.create":
		return op.ID
	case "refunds.create":
		for _, p := range []string{"charge", "payment_intent"} {
			if v, ok := form.Get(p); ok && v != "" {
				return v
			}
		}
	}
	return ""
}

// readForm parses the body (POST) or query (GET, DELETE) strictly.
func (v *stripeVendor) readForm(a ParseArgs) (*stripe.Form, error) {
	switch a.Method {
	case http.MethodGet, http.MethodDelete:
		return parseForm(a.RawQuery)
	case http.MethodPost:
		if a.RawQuery != "" {
			return nil, keybrake.Errorf(keybrake.EINVALID, "POST parameters must be in the body, not the query string.")
		}
		return parseForm(string(a.Body))
	}
	return nil, keybrake.Errorf(keybrake.EINVALID, "Unsupported method %s; the Stripe API takes GET, POST and DELETE.", a.Method)
}

func stripeClass(c stripe.Class) Class {
	switch c {
	case stripe.ClassRead:
		return ClassRead
	case stripe.ClassWrite:
		return ClassWrite
	case stripe.ClassPriced:
		return ClassPriced
	}
	return ClassUnpriced
}

// Price prices a request that creates its own money object: the amount
// and currency of the body, or looked up upstream with the real key (full
// refunds), in USD micros through the rates table.
func (v *stripeVendor) Price(ctx context.Context, k *keybrake.Key, req *VendorRequest) (VendorCost, error) {
	sr := req.Parsed.(*stripeRequest)
	return v.price(k, req, func() (stripe.Price, error) { return v.pricer.Price(ctx, sr.op, sr.form, req.Account) })
}

// HeldObject returns the payment intent or charge a confirm, capture,
// update, cancel or increment acts on (stripe.HoldsObject).
func (v *stripeVendor) HeldObject(req *VendorRequest) (string, bool) {
	sr, ok := req.Parsed.(*stripeRequest)
	if !ok || !stripe.HoldsObject(sr.op) {
		return "", false
	}
	return sr.op.ID, sr.op.Action == "cancel"
}

// Target prices a request on an existing money object: the most it can
// move once the request has run (stripe.Pricer.Target), looked up when
// nothing is held on it.
func (v *stripeVendor) Target(ctx context.Context, k *keybrake.Key, req *VendorRequest, held *VendorCost) (VendorCost, error) {
	sr := req.Parsed.(*stripeRequest)
	if held == nil {
		return v.price(k, req, func() (stripe.Price, error) { return v.pricer.Target(ctx, sr.op, sr.form, req.Account, nil) })
	}
	target, err := v.pricer.Target(ctx, sr.op, sr.form, req.Account, &stripe.Price{Amount: held.Amount, Currency: held.Currency, Micros: held.Micros})
	if err != nil {
		return VendorCost{}, err
	}
	if err := checkCurrency(k, target.Currency); err != nil {
		return VendorCost{}, err
	}
	// A write that sets the amount or currency, or moves more than is held
	// (an overcapture), is checked by the creation's rules too.
	raises := stripe.Raises(sr.op, sr.form) || target.Micros > held.Micros
	if err := v.checkPricedRules(k, sr, req.Account, target, raises); err != nil {
		return VendorCost{}, err
	}
	return VendorCost{Micros: target.Micros, Amount: target.Amount, Currency: target.Currency}, nil
}

// price prices with price, applies the key's currency allowlist and its
// field rules to the priced amount, and tags the body. A key with nothing to count against only tracks spend: an
// amount in a currency with no rate is forwarded untracked (tracksOnly).
func (v *stripeVendor) price(k *keybrake.Key, req *VendorRequest, price func() (stripe.Price, error)) (VendorCost, error) {
	sr := req.Parsed.(*stripeRequest)
	if cur, ok := sr.form.Get("currency"); ok && tracksOnly(k) {
		cur = strings.ToLower(cur) // as Stripe reads it, and the rate table is keyed
		if _, hasRate := v.s.Rates.Rate(cur); !hasRate {
			if err := checkCurrency(k, cur); err != nil {
				return VendorCost{}, err
			}
			return VendorCost{Untracked: true, Forward: withMetadata(sr, req)}, nil
		}
	}
	pr, err := price()
	if err != nil {
		if keybrake.ErrorCode(err) == keybrake.EFORBIDDEN && strings.HasPrefix(keybrake.ErrorMessage(err), "no exchange rate") {
			err = keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake refused %s: %s, so it cannot count this amount against the key's caps and guards, which count in USD. Ask the operator to add the currency to --rates.", sr.op.Name, keybrake.ErrorMessage(err))
		}
		return VendorCost{}, err
	}
	if err := checkCurrency(k, pr.Currency); err != nil {
		return VendorCost{}, err
	}
	if err := v.checkPricedRules(k, sr, req.Account, pr, true); err != nil { // fieldrules.go: a new reservation, nothing held before
		return VendorCost{}, err
	}
	return VendorCost{Micros: pr.Micros, Amount: pr.Amount, Currency: pr.Currency, Forward: withMetadata(sr, req)}, nil
}

// tracksOnly reports whether k counts nothing a request's amount could be
// refused by: no cap, no approval policy, and no guard that counts the
// key's reservations (duplicate, velocity, breaker), since an untracked
// request makes no reservation for them to see. Field rules are decided
// before pricing and need none.
func tracksOnly(k *keybrake.Key) bool {
	g := k.Guards
	return !k.Caps.Any() && k.Approval.IsZero() && (g == nil || g.Duplicate == nil && len(g.Velocity) == 0 && g.Breaker == nil)
}

// checkCurrency applies the key's currency allowlist.
func checkCurrency(k *keybrake.Key, currency string) error {
	if len(k.AllowedCurrencies) == 0 || contains(k.AllowedCurrencies, currency) {
		return nil
	}
	return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not move %s; allowed currencies: %s.", strings.ToUpper(currency), strings.Join(k.AllowedCurrencies, ", "))
}

// withMetadata adds metadata[keybrake_idempotency_key] to creations that
// take metadata, so the resolver can find the object by search after
// Stripe's idempotency window. The result is deterministic for one key, so
// a replay forwards the identical body.
func withMetadata(sr *stripeRequest, req *VendorRequest) []byte {
	if !tagged(sr.op) || req.IdempotencyKey == "" {
		return req.Body
	}
	md := sr.form.Map("metadata")
	if _, ok := md[metadataKey]; ok || len(md) >= 50 {
		return req.Body
	}
	extra := url.QueryEscape("metadata["+metadataKey+"]") + "=" + url.QueryEscape(req.IdempotencyKey)
	if len(req.Body) == 0 {
		return []byte(extra)
	}
	return append(append(append([]byte{}, req.Body...), '&'), extra...)
}

// Prepare builds the upstream headers from nothing (upstreamHeader): the
// inert client headers, the real key, the effective Stripe-Account, the
// parsed Stripe-Version and, on POST, the Idempotency-Key.
func (v *stripeVendor) Prepare(out *http.Request, req *VendorRequest) {
	sr := req.Parsed.(*stripeRequest)
	out.Header = upstreamHeader(sr.header, req.Account, req.Version, v.s.UpstreamKey)
	if out.Method == http.MethodPost {
		out.Header.Set("Idempotency-Key", req.IdempotencyKey)
		out.Header.Set("Content-Type", formType)
		out.Header.Set("Content-Length", strconv.Itoa(len(req.Body)))
	}
}

// Settle reads the answer's object (stripe.ReadOutcomeOf): settled at what
// moved, held at what can still move, or released.
func (v *stripeVendor) Settle(req *VendorRequest, body []byte) VendorOutcome {
	name := ""
	if sr, ok := req.Parsed.(*stripeRequest); ok {
		name = sr.op.Name
	}
	return stripeOutcome(v.s.Rates, stripe.ReadOutcomeOf(name, body))
}

// stripeOutcome is what o says about the money of a Stripe object. An
// answer without an amount settles at what was reserved, and so does one
// in a currency with no rate: never count less than reserved.
func stripeOutcome(rates stripe.Rates, o stripe.Outcome) VendorOutcome {
	out := VendorOutcome{Final: true, ObjectID: o.ID}
	if !o.Known {
		out.State, out.AtReserved, out.Reason = keybrake.StateSettled, true, "settled"
		return out
	}
	m, err := rates.ToMicros(o.Amount, o.Currency)
	out.Micros, out.AtReserved, out.Amount, out.Currency = m, err != nil, o.Amount, o.Currency
	switch o.State {
	case stripe.OutcomeReleased:
		out.State, out.Reason = keybrake.StateReleased, "released: the object ended without moving money"
	case stripe.OutcomeHeld:
		out.State, out.Reason = keybrake.StateHeld, fmt.Sprintf("held: %s %s can still move without keybrake", formatMinor(o.Amount, o.Currency), o.Object)
	default:
		out.State, out.Reason = keybrake.StateSettled, "settled"
	}
	return out
}

// ForeignReplay reports Stripe's replay of a saved response
// (Idempotent-Replayed: true).
func (v *stripeVendor) ForeignReplay(resp *http.Response) bool {
	return resp.Header.Get("Idempotent-Replayed") == "true"
}

// Resolve finds what became of a request whose answer was lost: a replay
// with its Idempotency-Key inside Stripe's window, a search by the metadata
// tag past it (resolver.go).
func (v *stripeVendor) Resolve(ctx context.Context, rsv *keybrake.Reservation, rt http.RoundTripper) (VendorOutcome, error) {
	return v.s.resolveStripe(ctx, rsv)
}

// WriteError writes err Stripe-shaped: {"error": {"type", "code",
// "message", "param"}}.
func (v *stripeVendor) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	v.s.writeStripeError(w, r, err, nil)
}
