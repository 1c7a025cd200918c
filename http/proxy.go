package http

import (
	"bytes"
	"context"
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
)

// Stripe forgets an Idempotency-Key after 24 hours; a reservation older than
// that can no longer be replayed safely (Stripe would create a new object).
const idempotencyWindow = 24 * time.Hour

// maxUpstreamBody bounds how much of an upstream response keybrake reads to
// settle it. Stripe objects are kilobytes.
const maxUpstreamBody = 8 << 20

// proxy forwards every vendor's API requests after deciding, pricing and
// reserving: one request path, asking the Vendor only what differs.
type proxy struct {
	s  *Server
	rp *httputil.ReverseProxy
}

// call is the state of one proxied request, carried in its context from the
// wrapping handler to ModifyResponse and ErrorHandler.
type call struct {
	start      time.Time
	requestID  string
	v          Vendor
	upstream   *url.URL
	key        *keybrake.Key
	req        *VendorRequest // nil until parsed
	clientIdem string         // the Idempotency-Key the client sent, "" for none
	idemKey    string         // the reservation's key: the client's, or keybrake's own
	cost       VendorCost
	priced     bool
	rsv        *keybrake.Reservation // the reservation this request made or replays, or the hold it acts on
	replay     bool
	held       bool   // rsv is the hold of the object the request acts on, made by an earlier request
	raises     bool   // the request makes an existing object move more than the key holds on it
	lock       string // the object this request has locked (HoldService.LockObject), "" for none
	note       string // added to the audit reason (a guard overridden, an approval)
	// keyVersion is the Key.Version a priced request was decided on, for
	// its reservation to check (ReserveArgs.KeyVersion); "" for other
	// classes and for requests on held objects.
	keyVersion     string
	stale          bool // the reservation found the key changed since: decide again
	requestCounted bool // countRequest counted the request
}

type callKey struct{}

func newProxy(s *Server) *proxy {
	p := &proxy{s: s}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      s.Transport,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		BufferPool:     bufferPool{},
	}
	return p
}

// serve handles one request to vendor vr's API. path is the escaped path
// after the vendor's route prefix. Every vendor's request runs these steps,
// in this order; what differs is the Vendor's.
func (p *proxy) serve(w http.ResponseWriter, r *http.Request, vr *vendorRoute, path string) {
	s := p.s
	r = r.WithContext(withLookups(r.Context())) // lookup.go: each upstream object read once a request
	c := &call{start: s.Now(), requestID: randomID("kbreq_", 20), v: vr.Vendor, upstream: vr.upstream}
	w.Header().Set("Keybrake-Request-Id", c.requestID)
	// authlimit.go writes Stripe's shape or a plain one; it is being
	// reworked, and should then render through Vendor.WriteError.
	if !s.checkVendorAuthLimit(w, r, c.v) {
		return
	}
	key, cached, err := p.authenticateCached(r, c.v, false)
	if err != nil {
		p.unauthorized(w, r, c, key, err)
		return
	}
	c.key = key
	if c.req, err = p.parse(r, c, path); err != nil {
		p.deny(w, r, c, err, nil)
		return
	}
	// A new reservation checks that the key is still the version the
	// request was decided on, under the key row lock it takes anyway, and
	// the request is decided again on a fresh key when not (admitChecked):
	// no statement more per charge. However the key was read, a change
	// committed while deciding (upstream round trips: the account's own
	// numbers, the invoice a payment pays) is caught there
	// (TestAttackKeyVer_NarrowedWhileDeciding). A request on a held object
	// acts on its hold without always reserving, so it is not versioned.
	if c.req.Class == ClassPriced && key.Version != "" && !p.onHeldObject(c) {
		c.keyVersion = key.Version
	} else if cached && (c.req.Class == ClassPriced || c.req.Class == ClassUnpriced || c.req.Fresh) && !s.keysSynchronous() {
		// The cache may hold the key as it was before a change another
		// replica committed: its NOTIFY is delivered later, or lost (then
		// the cache holds it up to KeyCacheMaxAge), so a request that
		// moves money without a versioned reservation is decided on the
		// key as the store has it now
		// (TestAttackReplicas_NarrowedPolicyOnStaleReplica), and so is a
		// read the key's scope narrows (VendorRequest.Fresh,
		// TestAttackKeyVer_ListOnStaleKey). A store whose reports are
		// never late (SQLite while no other process has the file open)
		// has nothing newer to read.
		if key, _, err = p.authenticateCached(r, c.v, true); err != nil {
			p.unauthorized(w, r, c, key, err)
			return
		}
		c.key = key
	}
	if c.req.Operation == ownKeyOperation && r.Method == http.MethodGet {
		p.serveOwnKey(w, r, c)
		return
	}
	if c.req.Class == ClassPriced {
		defer p.unlock(c) // the object holdObject locked, if any
	}
	if !p.admitChecked(w, r, c) {
		return
	}
	p.forward(w, r, c)
}

// admitChecked runs serve's steps from the policy decision to the
// reservation (admitSteps) and, when the reservation found the key changed
// since the request was decided (call.stale), runs them once more on the
// key read fresh from the store. A key changed again in between is refused
// with a retryable 503 rather than decided forever. It writes the refusal
// and returns false when the request must not be forwarded.
func (p *proxy) admitChecked(w http.ResponseWriter, r *http.Request, c *call) bool {
	body, note := c.req.Body, c.note // pricing may rewrite the body (VendorCost.Forward)
	if p.admitSteps(w, r, c) {
		return true
	}
	if !c.stale {
		return false
	}
	c.stale = false
	c.req.Body, c.note, c.cost, c.priced = body, note, VendorCost{}, false
	key, _, err := p.authenticateCached(r, c.v, true)
	if err != nil {
		p.unauthorized(w, r, c, key, err)
		return false
	}
	c.key, c.keyVersion = key, key.Version
	if p.admitSteps(w, r, c) {
		return true
	}
	if c.stale {
		p.deny(w, r, c, &refusal{err: &keybrake.Error{Code: keybrake.EUNAVAILABLE, Message: "This vault key changed twice while keybrake decided the request, so nothing was forwarded to " + c.vendorTitle() + ". Retry with the same Idempotency-Key."},
			status: http.StatusServiceUnavailable, retry: "true"}, nil)
	}
	return false
}

// admitSteps decides c's request on c.key and, for a priced one, reserves
// it. A stale reservation (call.stale) writes nothing: the caller decides
// again. Run twice, it gives the request its Idempotency-Key and counts it
// in the velocity limits once.
func (p *proxy) admitSteps(w http.ResponseWriter, r *http.Request, c *call) bool {
	s := p.s
	if err := p.decide(r.Context(), r, c); err != nil {
		p.deny(w, r, c, err, nil)
		return false
	}
	if c.keyVersion != "" && c.req.Class != ClassPriced {
		// Decided on the cached key as a priced request, which the vendor
		// made another class (Twilio: a create To one of the account's
		// own numbers is unpriced): it reserves nothing, so no
		// reservation checks the version. Read the key now, as for any
		// unpriced request (TestAttackKeyVer_OwnNumberCreateOnStaleKey).
		if !p.keyStill(w, r, c) {
			return false
		}
	}
	if c.idemKey == "" {
		c.assignIdempotencyKey()
	}
	if !c.requestCounted && c.key.Guards.CountsRequests() {
		if !p.countRequest(w, r, c) { // guard_requests.go: velocity limits counting every request
			return false
		}
		c.requestCounted = true
	}
	if !p.approveUnpriced(w, r, c) { // approval_unpriced.go: never reserved, so approved here
		return false
	}
	if c.req.Class == ClassPriced {
		start := time.Now()
		if ok := p.admit(w, r, c); !ok {
			return false
		}
		s.metrics.reserveTime.Observe(time.Since(start).Seconds())
	}
	return true
}

// onHeldObject reports whether c's request acts on an existing money
// object of a Holder (admit's holdObject path).
func (p *proxy) onHeldObject(c *call) bool {
	h, ok := c.v.(Holder)
	if !ok {
		return false
	}
	object, _ := h.HeldObject(c.req)
	return object != ""
}

// keyStill reports whether c's key, decided on at version c.keyVersion,
// is still that version in the store, for a priced request that reserves
// nothing (its reservation would have checked). On
// false it has written the refusal, or set c.stale.
func (p *proxy) keyStill(w http.ResponseWriter, r *http.Request, c *call) bool {
	if c.keyVersion == "" {
		return true
	}
	k, _, err := p.authenticateCached(r, c.v, true)
	if err != nil {
		p.unauthorized(w, r, c, k, err)
		return false
	}
	if k.Version != c.keyVersion {
		c.stale = true
		return false
	}
	return true
}

// authenticate finds the key of the vault key the vendor's convention
// carries. A key of another vendor is refused: a Stripe key cannot send
// SMS. A revoked or expired key is returned with its EUNAUTHORIZED, so the
// refusal is audited on it.
func (p *proxy) authenticate(r *http.Request, v Vendor) (*keybrake.Key, error) {
	k, _, err := p.authenticateCached(r, v, false)
	return k, err
}

// authenticateCached is authenticate; with fresh it reads the key from the
// store whatever the key cache holds. cached reports whether the key came
// from the cache.
func (p *proxy) authenticateCached(r *http.Request, v Vendor, fresh bool) (*keybrake.Key, bool, error) {
	secret, err := v.Authenticate(r)
	if err != nil {
		return nil, false, err
	}
	if len(r.Header.Values("Authorization")) > 1 {
		// Which one a vendor's SDK, a load balancer or the upstream would
		// read is anyone's guess: a request names one credential.
		return nil, false, keybrake.Errorf(keybrake.EUNAUTHORIZED, "The request carries more than one Authorization header; send one.")
	}
	k, cached, err := p.s.keyBySecretCached(r.Context(), secret, fresh)
	if err == nil && keyVendor(k) != v.Name() {
		return k, cached, keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key is for %s; it may not call %s.", k.Vendor, v.Name())
	}
	return k, cached, err
}

// keyVendor is the vendor k may call; keys made before vendors existed
// have none and call Stripe.
func keyVendor(k *keybrake.Key) string {
	if k.Vendor == "" {
		return keybrake.VendorStripe
	}
	return k.Vendor
}

// parse reads the bounded body and has the vendor name, parse and classify
// the request, filling in the defaults of what it left empty.
func (p *proxy) parse(r *http.Request, c *call, path string) (*VendorRequest, error) {
	if err := refuseEncoding(r.Header, c.v); err != nil { // encoding.go
		return nil, err
	}
	body, err := p.readBody(r)
	if err != nil {
		return nil, err
	}
	req, err := c.v.Parse(ParseArgs{Request: r, KeyID: c.key.ID, Method: r.Method, Path: path, RawQuery: r.URL.RawQuery, Query: r.URL.Query(), Header: r.Header, Body: body})
	if err != nil {
		return nil, err
	}
	if req.Label == "" {
		req.Label = c.v.Name() + "." + req.Operation
	}
	if req.Record == "" {
		req.Record = "/" + c.v.Name() + req.Path
	}
	return req, nil
}

// readBody reads a bounded body; GET and DELETE take none.
func (p *proxy) readBody(r *http.Request) ([]byte, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodDelete {
		return nil, nil
	}
	body, err := readAllSized(io.LimitReader(r.Body, p.s.MaxBodyBytes+1), r.ContentLength, p.s.MaxBodyBytes)
	if err != nil {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Could not read the request body.")
	}
	if int64(len(body)) > p.s.MaxBodyBytes {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The request body is larger than %d bytes.", p.s.MaxBodyBytes)
	}
	return body, nil
}

// decide applies the key's policy: the endpoint allowlist, the vendor's
// own scope (Vendor.Decide), and the refusal of what may move money but
// cannot be priced. Guards, approvals and caps are applied when reserving.
func (p *proxy) decide(ctx context.Context, r *http.Request, c *call) error {
	k, req := c.key, c.req
	if err := p.s.checkAncestors(ctx, k); err != nil { // delegate_check.go: a child stays narrower than its parent
		return err
	}
	if !endpointAllowed(k.AllowedEndpoints, req.Operation, req.Path) {
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not call %s (%s %s). Allowed: %s.", req.Operation, r.Method, req.Path, allowedList(k.AllowedEndpoints))
	}
	if err := c.v.Decide(ctx, k, req); err != nil {
		return err
	}
	if req.SentID != "" {
		if err := p.s.checkSent(ctx, c); err != nil { // sent.go: only what this key (or a child) sent
			return err
		}
	}
	if req.Class == ClassUnpriced && !k.AllowUnpriced {
		why := ""
		if req.Reason != "" {
			why = " (" + req.Reason + ")"
		}
		return keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake cannot price %s%s, which may move money, so this capped vault key refuses it (fail closed). An operator can set allow_unpriced on the key to permit it without counting it.", req.Operation, why)
	}
	return nil
}

// assignIdempotencyKey gives the request the key its reservation is
// recorded under: the client's, or keybrake's own, which is also sent
// upstream when the vendor replays by it, so the resolver can replay
// safely.
func (c *call) assignIdempotencyKey() {
	c.clientIdem, c.idemKey = c.req.IdempotencyKey, c.req.IdempotencyKey
	if c.idemKey != "" || !c.req.Idempotent && c.req.Class != ClassPriced {
		return
	}
	c.idemKey = ownIdempotencyKey(c.start) // idem_key.go
	if c.req.Idempotent {
		c.req.IdempotencyKey = c.idemKey
	}
}

// admit runs the reserve step of a priced request: on an existing money
// object of a Holder, its hold (hold.go); otherwise a new reservation.
func (p *proxy) admit(w http.ResponseWriter, r *http.Request, c *call) bool {
	if h, ok := c.v.(Holder); ok {
		if object, cancel := h.HeldObject(c.req); object != "" {
			return p.holdObject(w, r, c, h, object, cancel)
		}
	}
	return p.reserve(w, r, c, func() (VendorCost, error) { return c.v.Price(r.Context(), c.key, c.req) })
}

// keyBySecret finds the key of a vault key, for every vendor's route. A
// revoked or expired key is returned with its EUNAUTHORIZED.
func (s *Server) keyBySecret(ctx context.Context, secret string) (*keybrake.Key, error) {
	k, _, err := s.keyBySecretCached(ctx, secret, false)
	return k, err
}

// keyBySecretCached is keyBySecret; with fresh it reads the key from the
// store whatever the cache holds. cached reports whether it came from the
// cache.
func (s *Server) keyBySecretCached(ctx context.Context, secret string, fresh bool) (*keybrake.Key, bool, error) {
	hash := HashSecret(secret)
	k, cached, err := s.findKeyCached(ctx, hash, fresh)
	if keybrake.ErrorCode(err) == keybrake.ENOTFOUND {
		return nil, false, keybrake.Errorf(keybrake.EUNAUTHORIZED, "Invalid API Key provided: %s.", redact(secret))
	} else if err != nil {
		return nil, false, storeError(err)
	}
	if err := k.AcceptsSecret(hash, s.Now()); err != nil {
		return k, cached, err
	}
	if err := k.Usable(s.Now()); err != nil {
		return k, cached, err
	}
	return k, cached, nil
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

// storeError is storeError for this call's vendor.
func (c *call) storeError(err error) error {
	if isUnavailable(err) || keybrake.ErrorCode(err) == keybrake.EINTERNAL {
		retry := "."
		if c.req != nil && c.req.Idempotent {
			retry = " with the same Idempotency-Key."
		}
		return &keybrake.Error{Code: keybrake.EUNAVAILABLE, Message: "keybrake's store is unavailable, so nothing was forwarded to " + c.vendorTitle() + ". Retry later" + retry}
	}
	return err
}

// fingerprint identifies the request so a reused idempotency key with
// other parameters is told apart from a replay; Stripe's covers the
// account and API version and ignores parameter order (stripe.Fingerprint).
func (c *call) fingerprint() string {
	if c.req.Fingerprint != "" {
		return c.req.Fingerprint
	}
	return c.v.Name() + ":" + c.req.Operation + ":" + HashSecret(string(c.req.Body))
}

// reserve prices the request with price and reserves its amount and count
// against every cap, count and guard of the key, in one store transaction.
// It writes the refusal and returns false when the request must not be
// forwarded.
func (p *proxy) reserve(w http.ResponseWriter, r *http.Request, c *call, price func() (VendorCost, error)) bool {
	s := p.s
	cost, err := price()
	if err != nil {
		p.deny(w, r, c, err, nil)
		return false
	}
	if cost.Forward != nil {
		c.req.Body = cost.Forward
	}
	if cost.Untracked {
		return p.keyStill(w, r, c)
	}
	if cost.Currency == "" {
		cost.Amount, cost.Currency = usdCents(cost.Micros), "usd"
	}
	c.cost, c.priced = cost, true
	approval, ok := p.approve(w, r, c) // approval.go: a person first, above the key's threshold
	if !ok {
		return false
	}
	now := s.Now()
	rsv := &keybrake.Reservation{
		ID:             keybrake.NewReservationID(now),
		KeyID:          c.key.ID,
		IdempotencyKey: c.idemKey,
		Fingerprint:    c.fingerprint(),
		Operation:      c.req.Label,
		Amount:         cost.Amount,
		Currency:       cost.Currency,
		Micros:         cost.Micros,
		CountKind:      cost.CountKind,
		Count:          cost.Count,
		Request: keybrake.UpstreamRequest{
			Method:        r.Method,
			Path:          c.req.Record,
			Body:          string(c.req.Body),
			StripeAccount: c.req.Account,
			StripeVersion: c.req.Version,
		},
	}
	guardInputs(r, c, rsv)
	res, err := s.Store.Reserve(r.Context(), keybrake.ReserveArgs{Reservation: rsv, Now: now, KeyVersion: c.keyVersion})
	if err == nil && res.Stale {
		c.stale = true // nothing reserved; admitChecked decides again
		return false
	}
	if !p.reserved(w, r, c, res, err) {
		return false
	}
	c.rsv, c.replay = res.Reservation, res.Replay
	if res.Replay {
		if res.Reservation.Fingerprint != rsv.Fingerprint {
			p.deny(w, r, c, &refusal{err: &keybrake.Error{Code: keybrake.ECONFLICT, Param: "Idempotency-Key", Message: "Keys for idempotent requests can only be used with the same parameters they were first used with. keybrake refused this request without forwarding it."},
				status: http.StatusBadRequest, code: "parameter_invalid"}, nil)
			return false
		}
		if _, answered := s.answered.Load(res.Reservation.ID); res.Reservation.State == keybrake.StateReserved && !answered {
			// The first request is still upstream. Forwarded now, the
			// retry may reach the vendor first and act, and the first
			// then gets the saved answer or a 409, which released the
			// reservation both share: money moved, nothing counted.
			// Stripe answers concurrent uses of a key so too. A first
			// request that died is made uncertain by the resolver, and
			// its retry is then forwarded; one answered whose settlement
			// is queued in this process replays (another replica's
			// retry waits for the commit).
			p.deny(w, r, c, &refusal{err: &keybrake.Error{Code: keybrake.ECONFLICT, Param: "Idempotency-Key", Message: "A request with this Idempotency-Key is still in progress; keybrake refused this one without forwarding it. Retry with the same key once the first has been answered."},
				status: http.StatusConflict, typ: "idempotency_error", code: "idempotency_key_in_use", retry: "true"}, nil)
			return false
		}
		if prev := res.Reservation; prev.State == keybrake.StateReleased && prev.UpstreamStatus != http.StatusPaymentRequired {
			// Stripe saves the answer of a request that started executing
			// (a decline, 402), not of one refused before it (a 400, a 429
			// rate limit): under the same key the retry runs anew and may
			// charge, so it is reserved anew, under every cap. A person's
			// approval covers that new attempt only while it lives: the
			// approval is used, but nothing it approved has happened, and
			// the approver saw when it expires
			// (TestAttackApproval_UsedApprovalOutlivesItsTTL).
			if p.refuseExpiredRetry(w, r, c, approval, fmt.Sprintf("it answered %d", prev.UpstreamStatus)) {
				return false
			}
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
// Idempotency-Key whose first answer the vendor did not save.
func (p *proxy) rearm(w http.ResponseWriter, r *http.Request, c *call, rsv *keybrake.Reservation, now time.Time) bool {
	res, err := p.s.Store.Rearm(r.Context(), keybrake.ReserveArgs{Reservation: rsv, Now: now})
	if !p.reserved(w, r, c, res, err) {
		return false
	}
	c.rsv, c.replay = res.Reservation, false
	p.s.metrics.reserved(c, false)
	return true
}

// reserved writes the refusal of a reservation the store refused (a cap,
// a count, a guard) or could not make, and reports whether it was made.
func (p *proxy) reserved(w http.ResponseWriter, r *http.Request, c *call, res keybrake.ReserveResult, err error) bool {
	switch {
	case err != nil:
		p.deny(w, r, c, c.storeError(err), nil)
	case res.OverCap != nil:
		p.overCap(w, r, c, res.OverCap)
	case res.OverCount != nil:
		p.overCount(w, r, c, res.OverCount)
	case res.Guard != nil:
		p.guardRefused(w, r, c, res.Guard)
	default:
		return true
	}
	return false
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
		msg = fmt.Sprintf("keybrake refused %s: $%s is over the per-request cap of $%s on vault key %s. Nothing was sent to %s.", opName(c), o.Requested, o.Cap, c.key.ID, c.vendorTitle())
	} else {
		msg = fmt.Sprintf("keybrake refused %s: $%s would exceed the %s cap of $%s on vault key %s ($%s spent, $%s left; resets %s). Nothing was sent to %s.",
			opName(c), o.Requested, o.Window, o.Cap, c.key.ID, o.Spent, o.Remaining(), reset, c.vendorTitle())
	}
	p.deny(w, r, c, &keybrake.Error{Code: keybrake.EOVERCAP, Message: msg}, o)
}

// overCount writes the 429 of a daily count cap.
func (p *proxy) overCount(w http.ResponseWriter, r *http.Request, c *call, o *keybrake.OverCount) {
	msg := fmt.Sprintf("keybrake refused %s: %d more %s would exceed the daily cap of %d %s on vault key %s (%d used; resets %s). Nothing was sent to %s.",
		opName(c), o.Requested, o.Kind, o.Cap, o.Kind, c.key.ID, o.Used, o.ResetsAt.UTC().Format(time.RFC3339), c.vendorTitle())
	p.deny(w, r, c, &keybrake.Error{Code: keybrake.EOVERCAP, Message: msg}, o)
}

// deny refuses the request without forwarding it, in the vendor's shape,
// and records why.
func (p *proxy) deny(w http.ResponseWriter, r *http.Request, c *call, err error, detail any) {
	code := keybrake.ErrorCode(err)
	p.s.metrics.decision(opName(c), code)
	p.audit(r, c, keybrake.DecisionDeny, keybrake.ErrorMessage(err), 0, "")
	if countsForBreaker(code) {
		p.countRefusal(c, keybrake.ErrorMessage(err))
	}
	c.v.WriteError(w, r, withDetail(err, detail))
}

// joinReason puts a call's note before the audit reason.
func joinReason(note, reason string) string {
	if note == "" || reason == "" {
		return note + reason
	}
	return note + "; " + reason
}

func opName(c *call) string {
	if c.req == nil {
		return "unknown"
	}
	return c.req.Label
}

// vendorTitle names the vendor in refusals: "Nothing was sent to Twilio."
func (c *call) vendorTitle() string {
	n := c.v.Name()
	return strings.ToUpper(n[:1]) + n[1:]
}

// resolverPlan says how the resolver settles this request's uncertain
// reservation.
func (c *call) resolverPlan() string {
	if c.req.Idempotent {
		return "the resolver will replay it"
	}
	return "counted until resolved"
}

// usdCents is micros in whole cents, rounded up: an amount in USD's minor
// unit.
func usdCents(m keybrake.Micros) int64 { return (int64(m) + 9999) / 10000 }

// forward sends the request upstream. The upstream call is detached from the
// client's cancellation: once money may move, keybrake waits for the answer
// so it can settle, whether or not the client is still there.
func (p *proxy) forward(w http.ResponseWriter, r *http.Request, c *call) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), p.s.UpstreamTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, callKey{}, c)
	p.rp.ServeHTTP(w, withoutClientHeader(r.WithContext(ctx)))
}

// rewrite builds the upstream request from nothing but what keybrake
// parsed: the vendor's URL, the forwarded query and body, no trailers, and
// headers the vendor builds (Vendor.Prepare) with the real credential.
func (p *proxy) rewrite(pr *httputil.ProxyRequest) {
	c := pr.In.Context().Value(callKey{}).(*call)
	u := c.upstream
	pr.Out.URL.Scheme = u.Scheme
	pr.Out.URL.Host = u.Host
	pr.Out.URL.Path, pr.Out.URL.RawPath = upstreamPath(u, c.req.Path)
	pr.Out.URL.RawQuery = c.req.RawQuery
	pr.Out.URL.ForceQuery = false
	pr.Out.Host = u.Host
	pr.Out.Header = http.Header{"Accept": {"application/json"}}
	if ua := pr.In.Header.Get("User-Agent"); ua != "" {
		pr.Out.Header.Set("User-Agent", ua)
	}
	pr.Out.TransferEncoding = nil
	// The client's chunked trailers, which nothing parsed: over HTTP/1.1
	// with a length Go drops them, over HTTP/2 it would send them after
	// the body (a Stripe-Account or Idempotency-Key keybrake never read).
	pr.Out.Trailer = nil
	pr.Out.Body, pr.Out.ContentLength = http.NoBody, 0
	if pr.In.Method != http.MethodGet && pr.In.Method != http.MethodDelete {
		pr.Out.Body = io.NopCloser(bytes.NewReader(c.req.Body))
		pr.Out.ContentLength = int64(len(c.req.Body))
		pr.Out.Header.Set("Content-Length", strconv.Itoa(len(c.req.Body)))
	}
	c.v.Prepare(pr.Out, c.req)
}

// upstreamPath returns the URL Path and RawPath for sending the escaped
// request path rawPath (as the vendor's Parse checked and named it) under
// the upstream URL u: escaped exactly as the client sent it, never escaped
// twice, so the upstream decodes the segments keybrake decoded.
func upstreamPath(u *url.URL, rawPath string) (path, raw string) {
	dec, err := url.PathUnescape(rawPath)
	if err != nil {
		// Parse refuses malformed escapes; keep the old behaviour.
		dec = rawPath
	}
	return strings.TrimSuffix(u.Path, "/") + dec, strings.TrimSuffix(u.EscapedPath(), "/") + rawPath
}

// modifyResponse settles the reservation from the upstream's answer: 2xx
// as the vendor reads it (Vendor.Settle), 4xx (declines included)
// released, 5xx kept uncertain and counted for the resolver. An answer
// the request reserved nothing for streams through untouched, unless the
// vendor redacts its answers or scrubs their secrets (secretScrubber).
func (p *proxy) modifyResponse(resp *http.Response) error {
	c := resp.Request.Context().Value(callKey{}).(*call)
	redactor, redacts := c.v.(Redactor)
	_, scrubs := c.v.(secretScrubber)
	records := c.req.Sends && resp.StatusCode >= 200 && resp.StatusCode < 300
	if c.rsv == nil && !redacts && !scrubs && !records {
		p.s.metrics.upstream(c, resp.StatusCode)
		p.s.metrics.decision(opName(c), keybrake.DecisionAllow)
		p.audit(resp.Request, c, keybrake.DecisionAllow, "", resp.StatusCode, "")
		return nil
	}
	body, err := readAllSized(io.LimitReader(resp.Body, maxUpstreamBody+1), resp.ContentLength, maxUpstreamBody)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read upstream response: %w", err)
	}
	if len(body) > maxUpstreamBody {
		if c.rsv == nil { // a read: never pass a cut answer, or one not checked whole
			return fmt.Errorf("read upstream response: larger than %d bytes", maxUpstreamBody)
		}
		body = body[:maxUpstreamBody]
	}
	ok2xx := resp.StatusCode >= 200 && resp.StatusCode < 300
	if redacts && ok2xx {
		var ok bool
		if body, ok = redactor.Redact(c.req, body); !ok {
			rec := renderError(c.v, resp.Request, keybrake.Errorf(keybrake.EUNAVAILABLE, "keybrake could not remove the credentials from %s's answer, so it does not pass it on.", c.vendorTitle()))
			for name, vals := range rec.header {
				resp.Header[name] = vals
			}
			body = rec.body.Bytes()
			resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	// Keybrake-Request-Id and Keybrake-Upstream are already on the
	// response writer; ReverseProxy adds the upstream's headers to them.

	if t, ok := c.v.(ForeignReplayTeller); ok && c.rsv != nil && !c.replay && !c.held && t.ForeignReplay(resp) {
		return p.foreignReplay(resp, c)
	}
	var recordErr error
	if records {
		recordErr = p.s.recordSent(resp.Request.Context(), c, body) // sent.go: before the client has the ids
	}
	decision := keybrake.DecisionAllow
	if c.replay {
		decision = keybrake.DecisionReplay
	}
	reason, objectID := "", ""
	if c.rsv != nil {
		var out VendorOutcome
		if ok2xx {
			out = c.v.Settle(c.req, body)
		} else if lt, ok := c.v.(LeftoverTeller); ok && resp.StatusCode >= 400 && resp.StatusCode < 500 {
			out, _ = lt.Leftover(c.req, body) // leftover.go
		}
		objectID = out.ObjectID
		reason = p.settle(resp.Request.Context(), c, resp.StatusCode, out)
		resp.Header.Set("Keybrake-Reservation", c.rsv.ID)
	}
	if recordErr != nil {
		reason = joinReason(reason, "the ids it made were not recorded ("+keybrake.ErrorMessage(recordErr)+"): this key cannot read them through keybrake")
	}
	p.scrubSecrets(resp, c, body) // vendor_stripe_secret.go: after settling, which links the hold of an intent the key made
	p.s.metrics.upstream(c, resp.StatusCode)
	p.s.metrics.decision(opName(c), decision)
	p.audit(resp.Request, c, decision, reason, resp.StatusCode, objectID)
	return nil
}

// foreignReplay answers a request whose new reservation the vendor answered
// with a saved response: Stripe scopes Idempotency-Keys by its secret, which
// every vault key shares, so the key was first used by another vault key
// (or outside keybrake) — this key's own retries find their reservation
// and are replays. Nothing moved for this request: its reservation is
// released, and the other client's object is not handed over; the client
// gets the vendor's own idempotency error. The earlier request may have
// moved money, and may have been this client's own under a vault key since
// replaced (a billing worker given a new key after a lost answer): the
// message says so rather than "nothing was charged", which invited a
// second charge under a new key.
func (p *proxy) foreignReplay(resp *http.Response, c *call) error {
	msg := "This Idempotency-Key was already used on this " + c.vendorTitle() + " account by another vault key (or outside keybrake), and " + c.vendorTitle() +
		" answered this request with that earlier request's saved answer, which keybrake does not hand to another key: this request did nothing. " +
		"The earlier request may have moved money: if it was yours (under a vault key since rotated or replaced), look its outcome up before sending this again under a new Idempotency-Key."
	ctx := context.WithoutCancel(resp.Request.Context())
	if _, err := p.s.Store.Settle(ctx, keybrake.SettleArgs{ID: c.rsv.ID, State: keybrake.StateReleased, UpstreamStatus: resp.StatusCode, Now: p.s.Now()}); err != nil {
		p.s.logger().Error("release after a foreign replay failed; the resolver settles it", "reservation", c.rsv.ID, "err", err)
	}
	rec := renderError(c.v, resp.Request, &refusal{err: &keybrake.Error{Code: keybrake.EINVALID, Param: "Idempotency-Key", Message: msg},
		status: http.StatusBadRequest, typ: "idempotency_error", code: "idempotency_key_in_use", retry: "false"})
	b := rec.body.Bytes()
	resp.StatusCode, resp.Status = rec.status, fmt.Sprintf("%d %s", rec.status, http.StatusText(rec.status))
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	rec.header.Set("Content-Length", strconv.Itoa(len(b)))
	if ids := resp.Header.Values("Request-Id"); len(ids) > 0 {
		rec.header["Request-Id"] = ids
	}
	resp.Header = rec.header
	p.s.metrics.upstream(c, rec.status)
	p.s.metrics.decision(opName(c), keybrake.EINVALID)
	p.audit(resp.Request, c, keybrake.DecisionDeny, "released: "+c.vendorTitle()+" replayed another client's answer to this Idempotency-Key", rec.status, "")
	return nil
}

// settle applies the upstream outcome to the request's reservation and
// returns a reason for the audit log. out is the vendor's reading of a
// 2xx answer, zero for any other.
func (p *proxy) settle(ctx context.Context, c *call, status int, out VendorOutcome) string {
	rsv := c.rsv
	if c.held {
		return p.settleHold(ctx, c, status, out)
	}
	if c.replay && rsv.State != keybrake.StateUncertain {
		return "idempotent replay; already counted"
	}
	args := keybrake.SettleArgs{ID: rsv.ID, ObjectID: out.ObjectID, UpstreamStatus: status, Now: p.s.Now()}
	reason := ""
	switch {
	case status >= 200 && status < 300 && !out.Final:
		return out.Reason
	case status >= 200 && status < 300:
		args, reason = p.s.settleArgs(rsv, status, out)
	case status == http.StatusConflict && c.replay:
		return "idempotency key in use upstream"
	case c.replay && (status == http.StatusTooManyRequests || status == http.StatusUnauthorized || status == http.StatusForbidden):
		// The retry of an uncertain request was stopped before the
		// vendor's idempotency layer (a rate limit, keybrake's own key
		// refused, an account disconnected), which saves no such answer:
		// it says nothing of what the first request did. The resolver
		// waits on these too (resolver.go); released here, a sent email
		// or a charge whose answer was lost went uncounted
		// (TestAttackResend_RateLimitedRetryReleasesUncertain,
		// TestAttackResolver_ClientReplayAnsweredUnsaved).
		return fmt.Sprintf("still uncertain: the retry was answered %d, which says nothing of the first request", status)
	case status >= 400 && status < 500 && out.Final:
		args, reason = p.s.settleArgs(rsv, status, out) // a refusal that left a money object behind
		reason = leftoverReason(status, reason)
	case status >= 400 && status < 500:
		args.State = keybrake.StateReleased
		reason = fmt.Sprintf("released: upstream answered %d", status)
	default:
		if c.replay {
			return fmt.Sprintf("still uncertain: upstream answered %d", status)
		}
		args.State = keybrake.StateUncertain
		reason = fmt.Sprintf("uncertain: upstream answered %d; %s", status, c.resolverPlan())
	}
	updated, err := p.s.settleFor(context.WithoutCancel(ctx), c.v, rsv, args)
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
// uncertain; a retry with the same Idempotency-Key is safe where the
// vendor has them.
func (p *proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	c := r.Context().Value(callKey{}).(*call)
	kind := upstreamErrorKind(err)
	reason := "upstream unreachable: " + kind
	advice := "retrying with the same Idempotency-Key is safe."
	if c.rsv != nil && !c.req.Idempotent {
		advice = "it stays counted until keybrake resolves it."
	}
	if c.held {
		reason += "; the object's hold stays counted in full"
	} else if c.rsv != nil && !c.replay {
		_, serr := p.s.Store.Settle(context.WithoutCancel(r.Context()), keybrake.SettleArgs{ID: c.rsv.ID, State: keybrake.StateUncertain, Now: p.s.Now()})
		if serr != nil {
			p.s.logger().Error("mark uncertain failed; left for the resolver", "reservation", c.rsv.ID, "err", serr)
		}
		reason += "; reservation uncertain, " + c.resolverPlan()
	}
	p.s.logger().Warn("upstream failed", "vendor", c.v.Name(), "operation", opName(c), "request_id", c.requestID, "err", kind)
	p.s.metrics.upstream(c, 0)
	p.s.metrics.decision(opName(c), "upstream_error")
	p.audit(r, c, keybrake.DecisionAllow, reason, 0, "")
	msg := "keybrake could not get an answer from " + c.vendorTitle() + " (" + kind + "). The request may or may not have been processed; " + advice
	c.v.WriteError(w, r, &refusal{err: &keybrake.Error{Code: keybrake.EUNAVAILABLE, Message: msg},
		status: http.StatusBadGateway, typ: "api_error", code: "keybrake_upstream_unreachable", retry: "true"})
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
		Decision:       decision,
		Reason:         joinReason(c.note, joinReason(c.cost.Detail, reason)),
		UpstreamStatus: status,
		ObjectID:       objectID,
		RequestID:      c.requestID,
		IdempotencyKey: c.idemKey,
	}
	if o, ok := originOf(r.Context()); ok {
		e.Via, e.MCPSession, e.MCPClient = keybrake.ViaMCP, o.session, o.client
	}
	if c.priced {
		e.Amount, e.Currency, e.Micros = c.cost.Amount, c.cost.Currency, c.cost.Micros
	}
	if c.rsv != nil {
		e.ReservationID = c.rsv.ID
		if c.rsv.State == keybrake.StateSettled {
			e.Amount, e.Currency, e.Micros = c.rsv.Amount, c.rsv.Currency, c.rsv.SettledMicros
		}
	}
	if c.req != nil {
		e.Path = c.req.Record
	} else {
		e.Path = r.URL.EscapedPath()
	}
	if len(e.Path) > 512 {
		e.Path = e.Path[:512]
	}
	p.s.audit.add(e)
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

// bufferPool recycles ReverseProxy's copy buffers; upstream responses are
// small, and a fresh 32 KiB buffer per request is most of the proxy's
// garbage.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(buffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
