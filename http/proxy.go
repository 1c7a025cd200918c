package http

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// Stripe forgets an Idempotency-Key after 24 hours; a reservation older than
// that can no longer be replayed safely (Stripe would create a new object).
const idempotencyWindow = 24 * time.Hour

// maxUpstreamBody bounds how much of an upstream response keybrake reads to
// settle it. Stripe objects are kilobytes.
const maxUpstreamBody = 8 << 20

// metadataKey is the metadata field keybrake adds to the objects it creates,
// so the resolver can find them after Stripe's idempotency window.
const metadataKey = "keybrake_idempotency_key"

// proxy forwards Stripe API requests after deciding, pricing and reserving.
type proxy struct {
	s      *Server
	rp     *httputil.ReverseProxy
	pricer *stripe.Pricer
}

// call is the state of one proxied request, carried in its context from the
// wrapping handler to ModifyResponse and ErrorHandler.
type call struct {
	start     time.Time
	requestID string
	key       *keybrake.Key
	op        stripe.Operation
	env       envelope // the parsed headers
	account   string   // the effective connected account (env.Account)
	idemKey   string
	form      *stripe.Form
	body      []byte // forwarded body
	price     stripe.Price
	priced    bool
	rsv       *keybrake.Reservation // the reservation this request made or replays, or the hold it acts on
	replay    bool
	held      bool   // rsv is the hold of the object the request acts on, made by an earlier request
	lock      string // the object this request has locked (HoldService.LockObject), "" for none
	settled   bool
	note      string // added to the audit reason (a guard overridden)
}

type callKey struct{}

func newProxy(s *Server) *proxy {
	p := &proxy{s: s}
	p.pricer = &stripe.Pricer{Rates: s.Rates, Lookup: &upstreamLookup{p: p}}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      s.Transport,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		BufferPool:     bufferPool{},
	}
	return p
}

// serve handles one request to the Stripe API. path is the escaped path
// with any /stripe prefix removed.
func (p *proxy) serve(w http.ResponseWriter, r *http.Request, path string) {
	s := p.s
	c := &call{start: s.Now(), requestID: randomID("kbreq_", 20)}
	w.Header().Set("Keybrake-Request-Id", c.requestID)
	if !s.checkAuthLimit(w, r, true) {
		return
	}

	key, err := p.authenticate(r)
	if err != nil {
		p.unauthorized(w, r, c, key, err)
		return
	}
	c.key = key
	if c.env, err = parseEnvelope(r); err != nil {
		p.deny(w, r, c, err, nil)
		return
	}
	c.account = c.env.Account
	op, err := stripe.ParseOperation(r.Method, path)
	if err != nil {
		p.deny(w, r, c, err, nil)
		return
	}
	c.op = op

	if op.Name == "keybrake.key" && r.Method == http.MethodGet {
		p.serveOwnKey(w, r, c)
		return
	}
	form, err := p.readForm(r, c)
	if err == nil {
		err = refuseCardData(form)
	}
	if err != nil {
		p.deny(w, r, c, err, nil)
		return
	}
	c.form = form
	class := stripe.Classify(op, form)
	if err := p.decide(r.Context(), c, form, class); err != nil {
		p.deny(w, r, c, err, nil)
		return
	}
	if r.Method == http.MethodPost {
		if err := p.idempotencyKey(r, c); err != nil {
			p.deny(w, r, c, err, nil)
			return
		}
		if err := checkTag(c, form); err != nil {
			p.deny(w, r, c, err, nil)
			return
		}
	}
	if !p.countRequest(w, r, c, form) { // guard_requests.go: velocity limits counting every request
		return
	}
	if class == stripe.ClassPriced && stripe.HoldsObject(op) {
		defer p.unlock(c)
		if ok := p.holdObject(w, r, c, form); !ok {
			return
		}
	} else if class == stripe.ClassPriced {
		price := func() (stripe.Price, error) { return p.pricer.Price(r.Context(), c.op, form, c.account) }
		if ok := p.reserve(w, r, c, form, price); !ok {
			return
		}
	}
	p.forward(w, r, c)
}

// authenticate finds the vault key in Authorization: Bearer, or Basic with
// the key as user name as `curl -u vault_key_…:` sends it. A revoked or
// expired key is returned with its EUNAUTHORIZED, so the refusal is
// audited on it.
func (p *proxy) authenticate(r *http.Request) (*keybrake.Key, error) {
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
		return nil, keybrake.Errorf(keybrake.EUNAUTHORIZED, "You did not provide an API key. keybrake expects your vault key in the Authorization header (Bearer vault_key_…).")
	}
	if !strings.HasPrefix(secret, keybrake.VaultKeyPrefix) || len(secret) > 128 {
		return nil, keybrake.Errorf(keybrake.EUNAUTHORIZED, "Invalid API Key provided: %s. keybrake only accepts vault keys (vault_key_…); the real Stripe secret stays with keybrake.", redact(secret))
	}
	k, err := p.s.keyBySecret(r.Context(), secret)
	if err == nil && k.Vendor != "" && k.Vendor != keybrake.VendorStripe {
		return k, keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key is for %s; it may not call stripe.", k.Vendor)
	}
	return k, err
}

// keyBySecret finds the key of a vault key, for every vendor's route. A
// revoked or expired key is returned with its EUNAUTHORIZED.
func (s *Server) keyBySecret(ctx context.Context, secret string) (*keybrake.Key, error) {
	hash := HashSecret(secret)
	k, err := s.findKey(ctx, hash)
	if keybrake.ErrorCode(err) == keybrake.ENOTFOUND {
		return nil, keybrake.Errorf(keybrake.EUNAUTHORIZED, "Invalid API Key provided: %s.", redact(secret))
	} else if err != nil {
		return nil, storeError(err)
	}
	if err := k.AcceptsSecret(hash, s.Now()); err != nil {
		return k, err
	}
	if err := k.Usable(s.Now()); err != nil {
		return k, err
	}
	return k, nil
}

// redact shows the start of a presented key, never all of it.
func redact(secret string) string {
	if len(secret) <= 14 {
		return strings.Repeat("*", len(secret))
	}
	return secret[:14] + strings.Repeat("*", 4) + secret[len(secret)-4:]
}

// storeError turns a store failure into the client's 503: never forward a
// money-moving request that could not be reserved.
func storeError(err error) error {
	if isUnavailable(err) || keybrake.ErrorCode(err) == keybrake.EINTERNAL {
		return &keybrake.Error{Code: keybrake.EUNAVAILABLE, Message: "keybrake's store is unavailable, so nothing was forwarded to Stripe. Retry later with the same Idempotency-Key."}
	}
	return err
}

// readForm reads and parses the body (POST) or query (GET) strictly.
func (p *proxy) readForm(r *http.Request, c *call) (*stripe.Form, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodDelete {
		return parseForm(r.URL.RawQuery)
	}
	if r.Method != http.MethodPost {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Unsupported method %s; the Stripe API takes GET, POST and DELETE.", r.Method)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, p.s.MaxBodyBytes+1))
	if err != nil {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Could not read the request body.")
	}
	if int64(len(body)) > p.s.MaxBodyBytes {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The request body is larger than %d bytes.", p.s.MaxBodyBytes)
	}
	if r.URL.RawQuery != "" {
		return nil, keybrake.Errorf(keybrake.EINVALID, "POST parameters must be in the body, not the query string.")
	}
	c.body = body
	return parseForm(string(body))
}

// idempotencyKey takes the client's Idempotency-Key or makes one, so that
// every POST can be replayed safely by the resolver.
func (p *proxy) idempotencyKey(r *http.Request, c *call) error {
	k := c.env.IdempotencyKey
	if len(k) > 255 {
		return keybrake.ErrorParam("Idempotency-Key", "Idempotency-Key is %d characters; Stripe accepts at most 255.", len(k))
	}
	if k == "" {
		k = randomID("kb_", 32)
	}
	c.idemKey = k
	return nil
}

// fingerprint identifies the request so a reused Idempotency-Key with other
// parameters, account or API version is told apart from a replay; see
// stripe.Fingerprint for why parameter order does not count.
func (c *call) fingerprint() string {
	return stripe.Fingerprint(stripe.FingerprintArgs{KeyID: c.key.ID, Operation: c.op.Name, Path: c.op.Path, Account: c.account, Version: c.env.Version, Form: c.form})
}

// reserve prices the operation with price and reserves it against every
// cap of the key. It writes the refusal and returns false when the request
// must not be forwarded.
func (p *proxy) reserve(w http.ResponseWriter, r *http.Request, c *call, form *stripe.Form, price func() (stripe.Price, error)) bool {
	s := p.s
	if cur, ok := form.Get("currency"); ok && !c.key.Caps.Any() && c.key.Approval.IsZero() {
		if _, hasRate := s.Rates.Rate(cur); !hasRate {
			// An uncapped key only tracks spend; with no rate there is
			// nothing to count, so forward without reserving.
			if err := p.checkCurrency(c.key, strings.ToLower(cur)); err != nil {
				p.deny(w, r, c, err, nil)
				return false
			}
			c.body = p.withMetadata(c, form)
			return true
		}
	}
	pr, err := price()
	if err != nil {
		if keybrake.ErrorCode(err) == keybrake.EFORBIDDEN && strings.HasPrefix(keybrake.ErrorMessage(err), "no exchange rate") {
			err = keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake refused %s: %s, so it cannot count this amount against the key's USD caps. Ask the operator to add the currency to --rates.", c.op.Name, keybrake.ErrorMessage(err))
		}
		p.deny(w, r, c, err, nil)
		return false
	}
	c.price, c.priced = pr, true
	if err := p.checkCurrency(c.key, pr.Currency); err != nil {
		p.deny(w, r, c, err, nil)
		return false
	}
	c.body = p.withMetadata(c, form)
	approval, ok := p.approve(w, r, c, pr) // approval.go: a person first, above the key's threshold
	if !ok {
		return false
	}
	now := s.Now()
	rsv := &keybrake.Reservation{
		ID:             randomID("rsv_", 24),
		KeyID:          c.key.ID,
		IdempotencyKey: c.idemKey,
		Fingerprint:    c.fingerprint(),
		Operation:      c.op.Name,
		Amount:         pr.Amount,
		Currency:       pr.Currency,
		Micros:         pr.Micros,
		Request: keybrake.UpstreamRequest{
			Method:        r.Method,
			Path:          c.op.Path,
			Body:          string(c.body),
			StripeAccount: c.account,
			StripeVersion: c.env.Version,
		},
	}
	guardInputs(r, c, form, rsv)
	res, err := s.Store.Reserve(r.Context(), keybrake.ReserveArgs{Reservation: rsv, Now: now})
	if err != nil {
		p.deny(w, r, c, storeError(err), nil)
		return false
	}
	if res.OverCap != nil {
		p.overCap(w, r, c, res.OverCap)
		return false
	}
	if res.Guard != nil {
		p.guardRefused(w, r, c, res.Guard)
		return false
	}
	c.rsv, c.replay = res.Reservation, res.Replay
	if res.Replay {
		if res.Reservation.Fingerprint != rsv.Fingerprint {
			p.deny(w, r, c, &keybrake.Error{Code: keybrake.EINVALID, Param: "Idempotency-Key", Message: "Keys for idempotent requests can only be used with the same parameters they were first used with. keybrake refused this request without forwarding it."}, nil)
			return false
		}
		if prev := res.Reservation; prev.State == keybrake.StateReleased && prev.UpstreamStatus != http.StatusPaymentRequired {
			// Stripe saves the answer of a request that started executing
			// (a decline, 402), not of one refused before it (a 400, a 429
			// rate limit): under the same key the retry runs anew and may
			// charge, so it is reserved anew, under every cap.
			return p.rearm(w, r, c, rsv, now)
		}
		if now.Sub(res.Reservation.CreatedAt) > idempotencyWindow-time.Hour {
			p.deny(w, r, c, &keybrake.Error{Code: keybrake.EINVALID, Param: "Idempotency-Key", Message: "This Idempotency-Key was first used more than 23 hours ago; Stripe forgets keys after 24 hours and would create a new object. Use a new key."}, nil)
			return false
		}
	}
	p.useApproval(r, approval, res.Reservation)
	s.metrics.reserved(c, res.Replay)
	return true
}

// rearm reserves again the released reservation of a retried
// Idempotency-Key whose first answer Stripe did not save.
func (p *proxy) rearm(w http.ResponseWriter, r *http.Request, c *call, rsv *keybrake.Reservation, now time.Time) bool {
	res, err := p.s.Store.Rearm(r.Context(), keybrake.ReserveArgs{Reservation: rsv, Now: now})
	if err != nil {
		p.deny(w, r, c, storeError(err), nil)
		return false
	}
	if res.OverCap != nil {
		p.overCap(w, r, c, res.OverCap)
		return false
	}
	if res.Guard != nil {
		p.guardRefused(w, r, c, res.Guard)
		return false
	}
	c.rsv, c.replay = res.Reservation, false
	p.s.metrics.reserved(c, false)
	return true
}

// checkCurrency applies the key's currency allowlist.
func (p *proxy) checkCurrency(k *keybrake.Key, currency string) error {
	if len(k.AllowedCurrencies) == 0 || contains(k.AllowedCurrencies, currency) {
		return nil
	}
	return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not move %s; allowed currencies: %s.", strings.ToUpper(currency), strings.Join(k.AllowedCurrencies, ", "))
}

// withMetadata adds metadata[keybrake_idempotency_key] to creations that
// take metadata, so the resolver can find the object by search after
// Stripe's idempotency window. The result is deterministic for one key, so
// a replay forwards the identical body.
func (p *proxy) withMetadata(c *call, form *stripe.Form) []byte {
	if !tagged(c.op) || c.idemKey == "" {
		return c.body
	}
	md := form.Map("metadata")
	if _, ok := md[metadataKey]; ok || len(md) >= 50 {
		return c.body
	}
	extra := url.QueryEscape("metadata["+metadataKey+"]") + "=" + url.QueryEscape(c.idemKey)
	if len(c.body) == 0 {
		return []byte(extra)
	}
	return append(append(append([]byte{}, c.body...), '&'), extra...)
}

// overCap writes the 429 that names the window, the cap, what is spent and
// when it resets, as a message and as headers.
func (p *proxy) overCap(w http.ResponseWriter, r *http.Request, c *call, o *keybrake.OverCap) {
	reset := "never"
	if o.ResetsAt != nil {
		loc, _ := c.key.Location()
		reset = o.ResetsAt.In(loc).Format(time.RFC3339)
		w.Header().Set("Keybrake-Resets-At", reset)
	}
	w.Header().Set("Keybrake-Window", o.Window)
	w.Header().Set("Keybrake-Cap-Usd", o.Cap.String())
	w.Header().Set("Keybrake-Spent-Usd", o.Spent.String())
	w.Header().Set("Keybrake-Remaining-Usd", o.Remaining().String())
	w.Header().Set("Keybrake-Requested-Usd", o.Requested.String())
	var msg string
	if o.Window == keybrake.WindowPerRequest {
		msg = fmt.Sprintf("keybrake refused %s: $%s is over the per-request cap of $%s on vault key %s. Nothing was sent to Stripe.", c.op.Name, o.Requested, o.Cap, c.key.ID)
	} else {
		msg = fmt.Sprintf("keybrake refused %s: $%s would exceed the %s cap of $%s on vault key %s ($%s spent, $%s left; resets %s). Nothing was sent to Stripe.",
			c.op.Name, o.Requested, o.Window, o.Cap, c.key.ID, o.Spent, o.Remaining(), reset)
	}
	err := &keybrake.Error{Code: keybrake.EOVERCAP, Message: msg}
	p.deny(w, r, c, err, o)
}

// deny refuses the request without forwarding it and records why.
func (p *proxy) deny(w http.ResponseWriter, r *http.Request, c *call, err error, detail any) {
	code := keybrake.ErrorCode(err)
	p.s.metrics.decision(opName(c), code)
	p.audit(r, c, keybrake.DecisionDeny, keybrake.ErrorMessage(err), 0, "")
	if countsForBreaker(code) {
		p.countRefusal(c, keybrake.ErrorMessage(err))
	}
	p.s.writeStripeError(w, r, err, detail)
}

// joinReason puts a call's note before the audit reason.
func joinReason(note, reason string) string {
	if note == "" || reason == "" {
		return note + reason
	}
	return note + "; " + reason
}

func opName(c *call) string {
	if c.op.Name == "" {
		return "unknown"
	}
	return c.op.Name
}

// forward sends the request upstream. The upstream call is detached from the
// client's cancellation: once money may move, keybrake waits for the answer
// so it can settle, whether or not the client is still there.
func (p *proxy) forward(w http.ResponseWriter, r *http.Request, c *call) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), p.s.UpstreamTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, callKey{}, c)
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// rewrite builds the upstream request: the upstream URL, the query and body
// keybrake parsed, and headers built from nothing (upstreamHeader): the real
// key, the effective Stripe-Account, the parsed Stripe-Version and, on POST,
// the Idempotency-Key.
func (p *proxy) rewrite(pr *httputil.ProxyRequest) {
	c := pr.In.Context().Value(callKey{}).(*call)
	u := p.s.Upstream
	pr.Out.URL.Scheme = u.Scheme
	pr.Out.URL.Host = u.Host
	pr.Out.URL.Path, pr.Out.URL.RawPath = upstreamPath(u, c.op.Path)
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	pr.Out.URL.ForceQuery = false
	pr.Out.Host = u.Host
	pr.Out.Header = upstreamHeader(pr.In.Header, c, p.s.UpstreamKey)
	pr.Out.TransferEncoding = nil
	pr.Out.Body, pr.Out.ContentLength = http.NoBody, 0
	if pr.In.Method == http.MethodPost {
		pr.Out.Header.Set("Idempotency-Key", c.idemKey)
		pr.Out.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		pr.Out.Body = io.NopCloser(bytes.NewReader(c.body))
		pr.Out.ContentLength = int64(len(c.body))
		pr.Out.Header.Set("Content-Length", strconv.Itoa(len(c.body)))
	}
}

// upstreamPath returns the URL Path and RawPath for sending the escaped
// request path rawPath (as stripe.ParseOperation checked and named it) under
// the upstream URL u: escaped exactly as the client sent it, never escaped
// twice, so Stripe decodes the segments keybrake decoded.
func upstreamPath(u *url.URL, rawPath string) (path, raw string) {
	dec, err := url.PathUnescape(rawPath)
	if err != nil {
		// ParseOperation refuses malformed escapes; keep the old behaviour.
		dec = rawPath
	}
	return strings.TrimSuffix(u.Path, "/") + dec, strings.TrimSuffix(u.EscapedPath(), "/") + rawPath
}

// modifyResponse settles the reservation from Stripe's answer: 2xx settles
// the actual amount, 4xx (declines included) releases, 5xx keeps it
// uncertain and counted for the resolver.
func (p *proxy) modifyResponse(resp *http.Response) error {
	c := resp.Request.Context().Value(callKey{}).(*call)
	if c.rsv == nil {
		// Nothing to settle: stream the answer through untouched.
		p.s.metrics.upstream(c, resp.StatusCode)
		p.s.metrics.decision(opName(c), keybrake.DecisionAllow)
		p.audit(resp.Request, c, keybrake.DecisionAllow, "", resp.StatusCode, "")
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read upstream response: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	// Keybrake-Request-Id and Keybrake-Upstream are already on the
	// response writer; ReverseProxy adds the upstream's headers to them.

	if c.rsv != nil && !c.replay && !c.held && resp.Header.Get("Idempotent-Replayed") == "true" {
		return p.foreignReplay(resp, c)
	}
	out := stripe.ReadOutcome(body)
	decision := keybrake.DecisionAllow
	if c.replay {
		decision = keybrake.DecisionReplay
	}
	reason := ""
	if c.rsv != nil {
		reason = p.settle(resp.Request.Context(), c, resp.StatusCode, out)
		resp.Header.Set("Keybrake-Reservation", c.rsv.ID)
	}
	p.s.metrics.upstream(c, resp.StatusCode)
	p.s.metrics.decision(opName(c), decision)
	p.audit(resp.Request, c, decision, reason, resp.StatusCode, out.ID)
	return nil
}

// foreignReplay answers a request whose new reservation Stripe answered with
// a saved response: Stripe scopes Idempotency-Keys by its secret, which
// every vault key shares, so the key was first used by another vault key
// (or outside keybrake) — this key's own retries find their reservation
// and are replays. Nothing moved for this request: its reservation is
// released, and the other client's object is not handed over; the client
// gets Stripe's own idempotency error and should use a new key.
func (p *proxy) foreignReplay(resp *http.Response, c *call) error {
	const msg = "This Idempotency-Key was already used by another client of this Stripe account; keybrake does not return another client's answer. Nothing was charged. Retry with a new Idempotency-Key."
	ctx := context.WithoutCancel(resp.Request.Context())
	if _, err := p.s.Store.Settle(ctx, keybrake.SettleArgs{ID: c.rsv.ID, State: keybrake.StateReleased, UpstreamStatus: resp.StatusCode, Now: p.s.Now()}); err != nil {
		p.s.logger().Error("release after a foreign replay failed; the resolver settles it", "reservation", c.rsv.ID, "err", err)
	}
	b, _ := json.Marshal(stripeError{Error: stripeErrorBody{Type: "idempotency_error", Code: "idempotency_key_in_use", Param: "Idempotency-Key", Message: msg}})
	resp.StatusCode, resp.Status = http.StatusBadRequest, "400 Bad Request"
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header = http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(b))},
		"Request-Id": resp.Header.Values("Request-Id"), "Stripe-Should-Retry": {"false"}}
	p.s.metrics.upstream(c, http.StatusBadRequest)
	p.s.metrics.decision(opName(c), keybrake.EINVALID)
	p.audit(resp.Request, c, keybrake.DecisionDeny, "released: Stripe replayed another client's answer to this Idempotency-Key", http.StatusBadRequest, "")
	return nil
}

// settle applies the upstream outcome to the request's reservation and
// returns a reason for the audit log.
func (p *proxy) settle(ctx context.Context, c *call, status int, out stripe.Outcome) string {
	rsv := c.rsv
	if c.held {
		return p.settleHold(ctx, c, status, out)
	}
	if c.replay && rsv.State != keybrake.StateUncertain {
		return "idempotent replay; already counted"
	}
	args := keybrake.SettleArgs{ID: rsv.ID, ObjectID: out.ID, UpstreamStatus: status, Now: p.s.Now()}
	reason := ""
	switch {
	case status >= 200 && status < 300:
		args, reason = p.s.outcomeArgs(rsv, status, out)
	case status == http.StatusConflict && c.replay:
		return "idempotency key in use upstream"
	case status >= 400 && status < 500:
		args.State = keybrake.StateReleased
		reason = fmt.Sprintf("released: upstream answered %d", status)
	default:
		if c.replay {
			return fmt.Sprintf("still uncertain: upstream answered %d", status)
		}
		args.State = keybrake.StateUncertain
		reason = fmt.Sprintf("uncertain: upstream answered %d; the resolver will replay it", status)
	}
	updated, err := p.s.settleOutcome(context.WithoutCancel(ctx), rsv, args)
	if err != nil {
		// The reservation stays counted; the resolver settles it later.
		p.s.logger().Error("settle failed; left for the resolver", "reservation", rsv.ID, "err", err)
		return reason + " (settle failed: " + keybrake.ErrorMessage(err) + ")"
	}
	c.rsv = updated
	return reason
}

// errorHandler answers when the upstream could not be reached or cut the
// connection. Money may have moved, so the reservation stays counted as
// uncertain; a retry with the same Idempotency-Key is safe.
func (p *proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	c := r.Context().Value(callKey{}).(*call)
	reason := "upstream unreachable: " + upstreamErrorKind(err)
	if c.held {
		reason += "; the object's hold stays counted in full"
	} else if c.rsv != nil && !c.replay {
		_, serr := p.s.Store.Settle(context.WithoutCancel(r.Context()), keybrake.SettleArgs{ID: c.rsv.ID, State: keybrake.StateUncertain, Now: p.s.Now()})
		if serr != nil {
			p.s.logger().Error("mark uncertain failed; left for the resolver", "reservation", c.rsv.ID, "err", serr)
		}
		reason += "; reservation uncertain, the resolver will replay it"
	}
	p.s.logger().Warn("upstream failed", "operation", c.op.Name, "request_id", c.requestID, "err", upstreamErrorKind(err))
	p.s.metrics.upstream(c, 0)
	p.s.metrics.decision(opName(c), "upstream_error")
	p.audit(r, c, keybrake.DecisionAllow, reason, 0, "")
	w.Header().Set("Stripe-Should-Retry", "true")
	writeJSON(w, http.StatusBadGateway, stripeError{Error: stripeErrorBody{
		Type:    "api_error",
		Code:    "keybrake_upstream_unreachable",
		Message: "keybrake could not get an answer from Stripe (" + upstreamErrorKind(err) + "). The request may or may not have been processed; retrying with the same Idempotency-Key is safe.",
	}})
}

// upstreamErrorKind describes a transport error without echoing the request
// (which carries the real key in its headers).
func upstreamErrorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before a complete response"
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	if strings.Contains(err.Error(), "connection refused") {
		return "connection refused"
	}
	if strings.Contains(err.Error(), "connection reset") {
		return "connection reset"
	}
	return "network error"
}

// audit records one event. Failing to audit is logged, never fatal: the
// money ledger (reservations) is the source of truth.
func (p *proxy) audit(r *http.Request, c *call, decision, reason string, status int, objectID string) {
	if c.key == nil {
		return
	}
	defer p.logAccess(r, c, decision, reason, status)
	e := &keybrake.Event{
		KeyID:          c.key.ID,
		Time:           p.s.Now().UTC().Truncate(time.Microsecond),
		Operation:      opName(c),
		Method:         r.Method,
		Path:           c.op.Path,
		Decision:       decision,
		Reason:         joinReason(c.note, reason),
		UpstreamStatus: status,
		ObjectID:       objectID,
		RequestID:      c.requestID,
		IdempotencyKey: c.idemKey,
	}
	if o, ok := originOf(r.Context()); ok {
		e.Via, e.MCPSession, e.MCPClient = keybrake.ViaMCP, o.session, o.client
	}
	if c.priced {
		e.Amount, e.Currency, e.Micros = c.price.Amount, c.price.Currency, c.price.Micros
	}
	if c.rsv != nil {
		e.ReservationID = c.rsv.ID
		if c.rsv.State == keybrake.StateSettled {
			e.Amount, e.Currency, e.Micros = c.rsv.Amount, c.rsv.Currency, c.rsv.SettledMicros
		}
	}
	if e.Path == "" {
		e.Path = r.URL.EscapedPath()
		if len(e.Path) > 512 {
			e.Path = e.Path[:512]
		}
	}
	p.s.audit.add(e)
}

// object is the part of a Stripe object keybrake reads to settle.
type object struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Amount   *int64 `json:"amount"`
	Currency string `json:"currency"`
}

func parseObject(body []byte) object {
	var o object
	_ = json.Unmarshal(body, &o)
	return o
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// nowSince is the seconds since the call started, for the latency metric.
func nowSince(c *call) float64 {
	return time.Since(c.start).Seconds()
}

// bufferPool recycles ReverseProxy's copy buffers; Stripe responses are
// small, and a fresh 32 KiB buffer per request is most of the proxy's
// garbage.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(buffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
