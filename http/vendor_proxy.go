package http

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// vendorProxy serves the routes of a Vendor other than Stripe, whose path
// (proxy.serve) predates the interface. It runs the same steps in the same
// order: authenticate → parse → decide → price → reserve → forward →
// settle → audit.
type vendorProxy struct {
	s        *Server
	v        Vendor
	upstream *url.URL
	rp       *httputil.ReverseProxy
}

// vcall is the state of one request through a vendorProxy, carried in its
// context to the ReverseProxy's hooks.
type vcall struct {
	start     time.Time
	requestID string
	key       *keybrake.Key
	req       *VendorRequest
	cost      VendorCost
	priced    bool
	idemKey   string
	rsv       *keybrake.Reservation
	replay    bool
}

type vcallKey struct{}

func newVendorProxy(s *Server, v Vendor, upstream *url.URL) *vendorProxy {
	p := &vendorProxy{s: s, v: v, upstream: upstream}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      s.Transport,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		BufferPool:     bufferPool{},
	}
	return p
}

// serve handles one request; path is the escaped path after the vendor's
// prefix.
func (p *vendorProxy) serve(w http.ResponseWriter, r *http.Request, path string) {
	s := p.s
	c := &vcall{start: s.Now(), requestID: randomID("kbreq_", 20)}
	w.Header().Set("Keybrake-Request-Id", c.requestID)
	if !s.checkVendorAuthLimit(w, r, p.v) { // vendor_authlimit.go
		return
	}
	key, err := p.authenticate(r)
	c.key = key
	if err != nil {
		if key == nil && keybrake.ErrorCode(err) == keybrake.EUNAUTHORIZED {
			s.authFailed(r, "vault key missing, malformed or unknown")
		}
		p.deny(w, r, c, err)
		return
	}
	body, err := p.readBody(r)
	if err != nil {
		p.deny(w, r, c, err)
		return
	}
	req, err := p.v.Parse(ParseArgs{Method: r.Method, Path: path, Query: r.URL.Query(), Header: r.Header, Body: body})
	if err != nil {
		p.deny(w, r, c, err)
		return
	}
	c.req = req
	if err := p.decide(c); err != nil {
		p.deny(w, r, c, err)
		return
	}
	if req.Class == ClassPriced {
		if ok := p.reserve(w, r, c); !ok {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.UpstreamTimeout)
	defer cancel()
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, vcallKey{}, c)))
}

// authenticate finds the key of the vault key the vendor's convention
// carries. A key of another vendor is refused: a Stripe key cannot send
// SMS. A revoked or expired key is returned with its error, so the refusal
// is audited on it.
func (p *vendorProxy) authenticate(r *http.Request) (*keybrake.Key, error) {
	secret, err := p.v.Authenticate(r)
	if err != nil {
		return nil, err
	}
	k, err := p.s.keyBySecret(r.Context(), secret)
	if err != nil || k == nil {
		return k, err
	}
	if k.Vendor != p.v.Name() {
		return k, keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key is for %s; it may not call %s.", k.Vendor, p.v.Name())
	}
	return k, nil
}

// readBody reads a bounded body.
func (p *vendorProxy) readBody(r *http.Request) ([]byte, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodDelete {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, p.s.MaxBodyBytes+1))
	if err != nil {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Could not read the request body.")
	}
	if int64(len(body)) > p.s.MaxBodyBytes {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The request body is larger than %d bytes.", p.s.MaxBodyBytes)
	}
	return body, nil
}

// decide applies the endpoint allowlist, the refusal of what cannot be
// priced, and the vendor's own scope.
func (p *vendorProxy) decide(c *vcall) error {
	k, req := c.key, c.req
	if !contains(k.AllowedEndpoints, keybrake.AllEndpoints) && !contains(k.AllowedEndpoints, req.Operation) {
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not call %s. Allowed: %s.", req.Operation, allowedList(k.AllowedEndpoints))
	}
	if req.Class == ClassUnpriced && !k.AllowUnpriced {
		return keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake cannot price this %s (%s), so this vault key refuses it (fail closed). An operator can set allow_unpriced on the key to permit it without counting it.", req.Operation, req.Reason)
	}
	if req.Class == ClassPriced && k.Approval != nil && !k.Approval.IsZero() {
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key requires approvals, which keybrake applies to Stripe only; it refuses %s rather than send it unapproved.", req.Operation)
	}
	return p.v.Decide(k, req)
}

// reserve prices the request and reserves its amount and count against
// every cap of the key, in one store transaction. It writes the refusal
// and returns false when the request must not be forwarded.
func (p *vendorProxy) reserve(w http.ResponseWriter, r *http.Request, c *vcall) bool {
	cost, err := p.v.Price(c.key, c.req)
	if err != nil {
		p.deny(w, r, c, err)
		return false
	}
	c.cost, c.priced = cost, true
	if cost.Forward != nil {
		c.req.Body = cost.Forward
	}
	c.idemKey = c.req.IdempotencyKey
	if c.idemKey == "" {
		c.idemKey = randomID("kb_", 32)
		if p.v.Name() == keybrake.VendorResend {
			c.req.IdempotencyKey = c.idemKey // passed upstream, so the resolver can replay
		}
	}
	rsv := &keybrake.Reservation{
		ID:             keybrake.NewReservationID(p.s.Now()),
		KeyID:          c.key.ID,
		IdempotencyKey: c.idemKey,
		Fingerprint:    p.v.Name() + ":" + c.req.Operation + ":" + HashSecret(string(c.req.Body)),
		Operation:      p.v.Name() + "." + c.op(),
		Amount:         usdCents(cost.Micros),
		Currency:       "usd",
		Micros:         cost.Micros,
		CountKind:      cost.CountKind,
		Count:          cost.Count,
		Request:        keybrake.UpstreamRequest{Method: r.Method, Path: "/" + p.v.Name() + c.req.Path, Body: string(c.req.Body)},
	}
	res, err := p.s.Store.Reserve(r.Context(), keybrake.ReserveArgs{Reservation: rsv, Now: p.s.Now()})
	res, err = p.rearmReleased(r, rsv, res, err) // vendor_rearm.go
	switch {
	case err != nil:
		p.deny(w, r, c, vendorStoreError(err, p.v.Name()))
		return false
	case res.OverCap != nil:
		p.deny(w, r, c, overCapError(c, res.OverCap, p.v.Name()))
		return false
	case res.OverCount != nil:
		p.deny(w, r, c, overCountError(c, res.OverCount, p.v.Name()))
		return false
	case res.Guard != nil:
		msg := fmt.Sprintf("keybrake refused %s: the key's %s guard", c.op(), res.Guard.Guard)
		if res.Guard.Rule != "" {
			msg += " (" + res.Guard.Rule + ")"
		}
		p.deny(w, r, c, &keybrake.Error{Code: keybrake.EOVERCAP, Message: msg + " refused it. Nothing was sent to " + p.v.Name() + "."})
		return false
	}
	c.rsv, c.replay = res.Reservation, res.Replay
	if res.Replay && res.Reservation.Fingerprint != rsv.Fingerprint {
		p.deny(w, r, c, keybrake.Errorf(keybrake.ECONFLICT, "This Idempotency-Key was already used with another request body; keybrake refused this request without forwarding it."))
		return false
	}
	return true
}

func (c *vcall) op() string {
	if c.req == nil {
		return "unknown"
	}
	return c.req.Operation
}

// usdCents is micros in whole cents, rounded up: the reservation's amount
// in USD's minor unit.
func usdCents(m keybrake.Micros) int64 { return (int64(m) + 9999) / 10000 }

func vendorStoreError(err error, vendor string) error {
	if isUnavailable(err) || keybrake.ErrorCode(err) == keybrake.EINTERNAL {
		return &keybrake.Error{Code: keybrake.EUNAVAILABLE, Message: "keybrake's store is unavailable, so nothing was forwarded to " + vendor + ". Retry later."}
	}
	return err
}

func overCapError(c *vcall, o *keybrake.OverCap, vendor string) error {
	return &keybrake.Error{Code: keybrake.EOVERCAP, Message: fmt.Sprintf("keybrake refused %s: $%s would exceed the %s cap of $%s on vault key %s ($%s spent, $%s left). Nothing was sent to %s.",
		c.op(), o.Requested, o.Window, o.Cap, c.key.ID, o.Spent, o.Remaining(), vendor)}
}

func overCountError(c *vcall, o *keybrake.OverCount, vendor string) error {
	return &keybrake.Error{Code: keybrake.EOVERCAP, Message: fmt.Sprintf("keybrake refused %s: %d more %s would exceed the %s cap of %d %s on vault key %s (%d used; resets %s). Nothing was sent to %s.",
		c.op(), o.Requested, o.Kind, o.Window, o.Cap, o.Kind, c.key.ID, o.Used, o.ResetsAt.UTC().Format(time.RFC3339), vendor)}
}

// deny refuses the request in the vendor's shape and records why.
func (p *vendorProxy) deny(w http.ResponseWriter, r *http.Request, c *vcall, err error) {
	code := keybrake.ErrorCode(err)
	if code == keybrake.EINTERNAL {
		p.s.logger().Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	p.s.metrics.decision(p.v.Name()+"."+c.op(), code)
	p.audit(r, c, keybrake.DecisionDeny, keybrake.ErrorMessage(err), 0, "")
	p.v.WriteError(w, err)
}

// rewrite builds the upstream request from nothing but what keybrake
// parsed: the vendor's URL, the forwarded query and body, and the real
// credential (Vendor.Prepare).
func (p *vendorProxy) rewrite(pr *httputil.ProxyRequest) {
	c := pr.In.Context().Value(vcallKey{}).(*vcall)
	u := p.upstream
	pr.Out.URL.Scheme, pr.Out.URL.Host = u.Scheme, u.Host
	pr.Out.URL.Path, pr.Out.URL.RawPath = strings.TrimSuffix(u.Path, "/")+c.req.Path, ""
	pr.Out.URL.RawQuery, pr.Out.URL.ForceQuery = c.req.RawQuery, false
	pr.Out.Host = u.Host
	pr.Out.Header = http.Header{"Accept": {"application/json"}}
	if ua := pr.In.Header.Get("User-Agent"); ua != "" {
		pr.Out.Header.Set("User-Agent", ua)
	}
	pr.Out.TransferEncoding = nil
	pr.Out.Body, pr.Out.ContentLength = http.NoBody, 0
	if pr.In.Method != http.MethodGet && pr.In.Method != http.MethodDelete {
		pr.Out.Body = io.NopCloser(bytes.NewReader(c.req.Body))
		pr.Out.ContentLength = int64(len(c.req.Body))
		pr.Out.Header.Set("Content-Length", strconv.Itoa(len(c.req.Body)))
	}
	p.v.Prepare(pr.Out, c.req)
}

// modifyResponse redacts what the vendor says must not reach the client
// and settles the reservation: 2xx as the vendor reads it, 4xx released,
// anything else uncertain for the resolver.
func (p *vendorProxy) modifyResponse(resp *http.Response) error {
	c := resp.Request.Context().Value(vcallKey{}).(*vcall)
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read upstream response: %w", err)
	}
	ok2xx := resp.StatusCode >= 200 && resp.StatusCode < 300
	if ok2xx {
		var ok bool
		if body, ok = p.v.Redact(c.req, body); !ok {
			body = nil
			resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
			var b bytes.Buffer
			p.v.WriteError(bufferWriter{&b, resp.Header}, keybrake.Errorf(keybrake.EUNAVAILABLE, "keybrake could not remove the credentials from %s's answer, so it does not pass it on.", p.v.Name()))
			body = b.Bytes()
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))

	decision, reason, objectID := keybrake.DecisionAllow, "", ""
	if c.replay {
		decision = keybrake.DecisionReplay
	}
	if c.rsv != nil {
		resp.Header.Set("Keybrake-Reservation", c.rsv.ID)
		var out VendorOutcome
		switch st := resp.StatusCode; {
		case c.replay && c.rsv.State != keybrake.StateUncertain && c.rsv.State != keybrake.StateReserved:
			out.Reason = "idempotent replay; already counted"
		case c.replay && !ok2xx:
			out.Reason = fmt.Sprintf("replay answered %d; left for the resolver", st)
		case ok2xx:
			out = p.v.Settle(c.req, body)
		case st >= 400 && st < 500:
			out = VendorOutcome{Final: true, State: keybrake.StateReleased, Reason: fmt.Sprintf("released: upstream answered %d", st)}
		default:
			out = VendorOutcome{Final: true, State: keybrake.StateUncertain, Reason: fmt.Sprintf("uncertain: upstream answered %d", st)}
		}
		objectID = out.ObjectID
		reason, _ = p.s.settleVendor(resp.Request.Context(), c.rsv, out, resp.StatusCode)
	}
	p.s.metrics.decision(p.v.Name()+"."+c.op(), decision)
	p.audit(resp.Request, c, decision, reason, resp.StatusCode, objectID)
	return nil
}

// bufferWriter lets Vendor.WriteError render into a buffer.
type bufferWriter struct {
	b *bytes.Buffer
	h http.Header
}

func (w bufferWriter) Header() http.Header         { return w.h }
func (w bufferWriter) Write(b []byte) (int, error) { return w.b.Write(b) }
func (w bufferWriter) WriteHeader(int)             {}

// settleVendor applies out to rsv and returns the audit reason. A failed
// settle leaves the reservation counted for the resolver.
func (s *Server) settleVendor(ctx context.Context, rsv *keybrake.Reservation, out VendorOutcome, status int) (string, error) {
	if !out.Final {
		return out.Reason, nil
	}
	args := keybrake.SettleArgs{ID: rsv.ID, State: out.State, ObjectID: out.ObjectID, UpstreamStatus: status, Now: s.Now()}
	switch out.State {
	case keybrake.StateSettled:
		args.SettledMicros = out.Micros
		if out.AtReserved {
			args.SettledMicros = rsv.Micros
		}
		args.Amount, args.Currency = usdCents(args.SettledMicros), "usd"
	case keybrake.StateHeld:
		args.SettledMicros, args.Amount, args.Currency = rsv.Micros, rsv.Amount, "usd"
	}
	if _, err := s.Store.Settle(context.WithoutCancel(ctx), args); err != nil {
		s.logger().Error("settle failed; left for the resolver", "reservation", rsv.ID, "err", err)
		return out.Reason + " (settle failed: " + keybrake.ErrorMessage(err) + ")", err
	}
	return out.Reason, nil
}

// errorHandler answers when the upstream could not be reached or cut the
// connection: the request may have been processed, so its reservation
// stays counted as uncertain.
func (p *vendorProxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	c := r.Context().Value(vcallKey{}).(*vcall)
	reason := "upstream unreachable: " + upstreamErrorKind(err)
	if c.rsv != nil && !c.replay {
		if _, serr := p.s.Store.Settle(context.WithoutCancel(r.Context()), keybrake.SettleArgs{ID: c.rsv.ID, State: keybrake.StateUncertain, Now: p.s.Now()}); serr != nil {
			p.s.logger().Error("mark uncertain failed; left for the resolver", "reservation", c.rsv.ID, "err", serr)
		}
		reason += "; reservation uncertain, counted until resolved"
	}
	p.s.metrics.decision(p.v.Name()+"."+c.op(), "upstream_error")
	p.audit(r, c, keybrake.DecisionAllow, reason, 0, "")
	p.v.WriteError(w, keybrake.Errorf(keybrake.EUNAVAILABLE, "keybrake could not get an answer from %s (%s). The request may or may not have been processed; it stays counted until keybrake resolves it.", p.v.Name(), upstreamErrorKind(err)))
}

// audit records one event, on the key when there is one.
func (p *vendorProxy) audit(r *http.Request, c *vcall, decision, reason string, status int, objectID string) {
	if c.key == nil {
		return
	}
	e := &keybrake.Event{
		KeyID:          c.key.ID,
		Time:           p.s.Now().UTC().Truncate(time.Microsecond),
		Operation:      p.v.Name() + "." + c.op(),
		Method:         r.Method,
		Path:           r.URL.EscapedPath(),
		Decision:       decision,
		Reason:         reason,
		UpstreamStatus: status,
		ObjectID:       objectID,
		RequestID:      c.requestID,
		IdempotencyKey: c.idemKey,
	}
	if len(e.Path) > 512 {
		e.Path = e.Path[:512]
	}
	if c.priced {
		e.Amount, e.Currency, e.Micros = usdCents(c.cost.Micros), "usd", c.cost.Micros
		if c.cost.Detail != "" {
			e.Reason = joinReason(c.cost.Detail, e.Reason)
		}
	}
	if c.rsv != nil {
		e.ReservationID = c.rsv.ID
	}
	p.s.audit.add(e)
}
