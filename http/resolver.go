package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// resolveLoop runs Resolve every ResolveInterval until Close.
func (s *Server) resolveLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.ResolveInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.ResolveInterval*4+s.UpstreamTimeout)
			if _, err := s.Resolve(ctx); err != nil {
				s.logger().Warn("resolver pass failed", "err", err)
			}
			s.returnEscrows(ctx) // delegate.go
			if s.holdsDue(s.Now()) {
				if _, err := s.SweepHolds(ctx); err != nil {
					s.logger().Warn("hold sweep failed", "err", err)
				}
			}
			cancel()
		}
	}
}

// Resolve settles uncertain reservations, and reserved ones older than
// StaleAfter (their replica died mid-request), by replaying the identical
// request with the same Idempotency-Key: Stripe answers with its saved
// response, so the replay never moves money twice. Past Stripe's 24-hour
// window it searches for the object by the metadata keybrake attached
// instead. Each reservation is leased first, so replicas never race on one.
// It returns how many reservations reached a final state.
func (s *Server) Resolve(ctx context.Context) (int, error) {
	now := s.Now()
	rsvs, err := s.Store.LeaseUncertain(ctx, s.ID, now, now.Add(-s.StaleAfter), now.Add(time.Minute), 100)
	if err != nil {
		return 0, fmt.Errorf("lease uncertain: %w", err)
	}
	done := 0
	for _, rsv := range rsvs {
		final, err := s.resolveOne(ctx, rsv)
		if err != nil {
			s.logger().Warn("resolve failed; will retry", "reservation", rsv.ID, "err", err)
			continue
		}
		if final {
			done++
		}
	}
	s.settleVendorPrices(ctx) // vendor_resolve.go: Twilio prices reported since
	return done, nil
}

// resolveOne asks the vendor whose route rsv's request took what became of
// it, and settles it from the answer; what the vendor cannot tell yet stays
// counted.
func (s *Server) resolveOne(ctx context.Context, rsv *keybrake.Reservation) (bool, error) {
	vr := s.routeOf(rsv)
	if vr == nil {
		return false, s.leaveUncertain(ctx, rsv, 0, "resolver: the vendor of "+rsv.Request.Path+" is not configured on this server")
	}
	out, err := vr.Resolve(ctx, rsv, s.Transport)
	if err != nil {
		return false, s.leaveUncertain(ctx, rsv, out.Status, "resolver: "+err.Error())
	}
	if !out.Final {
		return false, s.leaveUncertain(ctx, rsv, out.Status, "resolver: "+out.Reason)
	}
	if _, ok := vr.Vendor.(Holder); !ok {
		s.recordResolved(ctx, vr.Vendor.Name(), rsv, out) // sent.go: a replayed send's ids are its key's
		return s.finishVendor(ctx, rsv, out)              // vendor_resolve.go
	}
	args, reason := s.settleArgs(rsv, out.Status, out)
	return true, s.finish(ctx, rsv, args, "resolver: "+reason)
}

// resolveStripe finds what became of a Stripe request whose answer was
// lost: inside Stripe's idempotency window by replaying it byte for byte
// with its Idempotency-Key, past it by searching for the metadata tag.
func (s *Server) resolveStripe(ctx context.Context, rsv *keybrake.Reservation) (VendorOutcome, error) {
	if s.Now().Sub(rsv.CreatedAt) > idempotencyWindow-time.Hour {
		return s.resolveBySearch(ctx, rsv)
	}
	status, body, err := s.replay(ctx, rsv)
	if err != nil {
		return VendorOutcome{Reason: "replay failed: " + upstreamErrorKind(err)}, nil
	}
	out := stripe.ReadOutcomeOf(rsv.Operation, body)
	switch {
	case status >= 200 && status < 300:
		o := stripeOutcome(s.Rates, out)
		o.Status, o.Reason = status, o.Reason+" by idempotent replay"
		return o, nil
	case status == http.StatusConflict || status == http.StatusTooManyRequests:
		return VendorOutcome{Status: status, Reason: fmt.Sprintf("upstream answered %d; will retry", status)}, nil
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// Stripe checks the key and its access to the account before the
		// idempotency layer, and saves no answer of this kind: the replay
		// says nothing of what the first request did, only that keybrake's
		// key cannot reach the account now (rotated, revoked, or the
		// connected account disconnected from the platform or deleted).
		return VendorOutcome{Status: status, Reason: fmt.Sprintf("upstream answered %d: keybrake's key cannot reach the account now; will retry", status)}, nil
	case status >= 400 && status < 500:
		if o, ok := s.stripeLeftover(body); ok { // leftover.go
			o.Status, o.Reason = status, leftoverReason(status, o.Reason)
			return o, nil
		}
		return VendorOutcome{Final: true, State: keybrake.StateReleased, ObjectID: out.ID, Status: status, Reason: fmt.Sprintf("released, upstream answered %d", status)}, nil
	default:
		return VendorOutcome{Status: status, Reason: fmt.Sprintf("upstream answered %d; will retry", status)}, nil
	}
}

// replay sends the reservation's request again, byte for byte, with its
// Idempotency-Key.
func (s *Server) replay(ctx context.Context, rsv *keybrake.Reservation) (int, []byte, error) {
	u := *s.Upstream
	u.Path, u.RawPath = upstreamPath(s.Upstream, rsv.Request.Path)
	req, err := http.NewRequestWithContext(ctx, rsv.Request.Method, u.String(), bytes.NewReader([]byte(rsv.Request.Body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.UpstreamKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Content-Length", strconv.Itoa(len(rsv.Request.Body)))
	req.Header.Set("Idempotency-Key", rsv.IdempotencyKey)
	if rsv.Request.StripeAccount != "" {
		req.Header.Set("Stripe-Account", rsv.Request.StripeAccount)
	}
	if rsv.Request.StripeVersion != "" {
		req.Header.Set("Stripe-Version", rsv.Request.StripeVersion)
	}
	return s.roundTrip(req)
}

func (s *Server) roundTrip(req *http.Request) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(req.Context(), s.UpstreamTimeout)
	defer cancel()
	resp, err := s.Transport.RoundTrip(req.WithContext(ctx))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, body, nil
}

// resolveBySearch finds, past Stripe's idempotency window, the object a
// reservation created, by the metadata keybrake attached. Only charges and
// payment intents are searchable; others stay uncertain for an operator.
func (s *Server) resolveBySearch(ctx context.Context, rsv *keybrake.Reservation) (VendorOutcome, error) {
	var resource string
	switch {
	case strings.HasPrefix(rsv.Operation, "charges.create"):
		resource = "charges"
	case strings.HasPrefix(rsv.Operation, "payment_intents.create"):
		resource = "payment_intents"
	default:
		return VendorOutcome{Reason: "past the idempotency window and not searchable; an operator must reconcile it"}, nil
	}
	u := *s.Upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/" + resource + "/search"
	u.RawQuery = url.Values{"query": {fmt.Sprintf("metadata['%s']:'%s'", metadataKey, rsv.IdempotencyKey)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return VendorOutcome{}, err
	}
	req.Header.Set("Authorization", "Bearer "+s.UpstreamKey)
	if rsv.Request.StripeAccount != "" {
		req.Header.Set("Stripe-Account", rsv.Request.StripeAccount)
	}
	status, body, err := s.roundTrip(req)
	if err != nil || status != http.StatusOK {
		return VendorOutcome{Status: status, Reason: "search failed; will retry"}, nil
	}
	var result struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &result); err != nil {
		return VendorOutcome{Status: status, Reason: "unreadable search result; will retry"}, nil
	}
	if len(result.Data) == 0 {
		return VendorOutcome{Final: true, State: keybrake.StateReleased, Status: status, Reason: "no object found by metadata after the idempotency window; released"}, nil
	}
	if len(result.Data) > 1 {
		// The tag is the client's Idempotency-Key, which another vault key
		// (or this one, once Stripe forgot it) may send again: which object
		// is this request's is not known, and reading the wrong one could
		// release money that moved.
		return VendorOutcome{Status: status, Reason: fmt.Sprintf("%d objects carry the metadata tag after the idempotency window; an operator must reconcile it", len(result.Data))}, nil
	}
	o := stripeOutcome(s.Rates, stripe.ReadOutcome(result.Data[0]))
	o.Status, o.Reason = status, o.Reason+" from the object found by metadata"
	return o, nil
}

// leaveUncertain keeps a reservation the resolver could not settle counted
// for the next pass, marking a stale "reserved" one uncertain, and logs why.
// It returns an error only if the store failed.
func (s *Server) leaveUncertain(ctx context.Context, rsv *keybrake.Reservation, status int, reason string) error {
	s.logger().Warn("reservation still uncertain; will retry", "reservation", rsv.ID, "reason", reason)
	if rsv.State == keybrake.StateUncertain {
		return nil
	}
	_, err := s.Store.Settle(ctx, keybrake.SettleArgs{ID: rsv.ID, State: keybrake.StateUncertain, UpstreamStatus: status, Now: s.Now()})
	return err
}

func (s *Server) finish(ctx context.Context, rsv *keybrake.Reservation, args keybrake.SettleArgs, reason string) error {
	updated, err := s.settleOutcome(ctx, rsv, args)
	if err != nil {
		return fmt.Errorf("settle %s: %w", rsv.ID, err)
	}
	s.metrics.resolved(args.State)
	e := &keybrake.Event{
		KeyID: rsv.KeyID, Time: s.Now().UTC().Truncate(time.Microsecond), Operation: rsv.Operation,
		Method: rsv.Request.Method, Path: rsv.Request.Path, Amount: updated.Amount, Currency: updated.Currency,
		Micros: updated.SettledMicros, Decision: keybrake.DecisionResolve, Reason: reason,
		UpstreamStatus: args.UpstreamStatus, ObjectID: args.ObjectID, IdempotencyKey: rsv.IdempotencyKey, ReservationID: rsv.ID,
	}
	s.audit.add(e)
	s.logger().Info("reservation resolved", "reservation", rsv.ID, "state", args.State, "reason", reason)
	return nil
}
