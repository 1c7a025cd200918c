package http

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// SweepHolds ends the holds that outlived HoldTTL: an intent nobody
// confirmed, an authorization nobody captured. A hold cannot last forever,
// since it keeps its amount counted against the key's caps, and the object
// behind it could still move money without keybrake. For each expired hold,
// leased (its object locked) so replicas never sweep the same one:
//
//	object moved or ended meanwhile (retrieved)  --> settled or released from what it says
//	object still movable                         --> canceled upstream with the real key
//	                                                 (an intent: cancel; an authorization:
//	                                                 a refund, which releases it), retrieved
//	                                                 again, then settled or released
//	still movable after that (e.g. processing)   --> left held; the next pass tries again
//
// It returns how many holds it ended.
func (s *Server) SweepHolds(ctx context.Context) (int, error) {
	now := s.Now()
	rsvs, err := s.Store.LeaseHolds(ctx, s.ID, now, now.Add(-s.HoldTTL), now.Add(s.UpstreamTimeout+lockMargin), 100)
	if err != nil {
		return 0, fmt.Errorf("lease holds: %w", err)
	}
	done := 0
	for _, rsv := range rsvs {
		ended, err := s.sweepOne(ctx, rsv)
		if uerr := s.Store.UnlockObject(context.WithoutCancel(ctx), rsv.KeyID, rsv.ObjectID, s.ID); uerr != nil {
			s.logger().Warn("unlock after sweep failed; the lock expires by itself", "object", rsv.ObjectID, "err", uerr)
		}
		if err != nil {
			s.logger().Warn("sweeping a hold failed; will retry", "reservation", rsv.ID, "object", rsv.ObjectID, "err", err)
			continue
		}
		if ended {
			done++
		}
	}
	return done, nil
}

func (s *Server) sweepOne(ctx context.Context, rsv *keybrake.Reservation) (bool, error) {
	out, err := s.fetchObject(ctx, rsv)
	if err != nil {
		return false, err
	}
	if out.State == stripe.OutcomeHeld {
		// The lease was taken before the retrieval, which may have
		// outlasted it; a request may then have taken the object and
		// captured it. Ending an authorization is a refund, which Stripe
		// applies to captured money too: act only under a lease renewed
		// for the whole upstream call, on a hold still held.
		now := s.Now()
		if err := s.Store.RenewHoldLease(ctx, keybrake.RenewArgs{KeyID: rsv.KeyID, ObjectID: rsv.ObjectID, ReservationID: rsv.ID,
			Owner: s.ID, Now: now, Until: now.Add(s.UpstreamTimeout + lockMargin)}); err != nil {
			return false, fmt.Errorf("renew the lease of %s before ending it: %w", rsv.ObjectID, err)
		}
		if err := s.endObject(ctx, rsv); err != nil {
			return false, err
		}
		if out, err = s.fetchObject(ctx, rsv); err != nil {
			return false, err
		}
	}
	if out.State == stripe.OutcomeHeld {
		s.logger().Warn("expired hold still movable after cancel; will retry", "reservation", rsv.ID, "object", rsv.ObjectID)
		return false, nil
	}
	args, reason := s.outcomeArgs(rsv, http.StatusOK, out)
	if err := s.finish(ctx, rsv, args, "hold sweeper: "+reason+" after the hold expired"); err != nil {
		return false, err
	}
	s.metrics.holdSwept(args.State)
	return true, nil
}

// objectPath is the retrieval path of a held object.
func objectPath(id string) (string, error) {
	switch {
	case strings.HasPrefix(id, "pi_"):
		return "/v1/payment_intents/" + url.PathEscape(id), nil
	case strings.HasPrefix(id, "ch_"), strings.HasPrefix(id, "py_"):
		return "/v1/charges/" + url.PathEscape(id), nil
	}
	return "", fmt.Errorf("cannot sweep object %q: unknown kind", id)
}

// fetchObject retrieves the held object upstream and reads its outcome.
func (s *Server) fetchObject(ctx context.Context, rsv *keybrake.Reservation) (stripe.Outcome, error) {
	path, err := objectPath(rsv.ObjectID)
	if err != nil {
		return stripe.Outcome{}, err
	}
	status, body, err := s.upstreamCall(ctx, http.MethodGet, path, "", "", rsv.Request.StripeAccount)
	if err != nil {
		return stripe.Outcome{}, fmt.Errorf("retrieve %s: %s", rsv.ObjectID, upstreamErrorKind(err))
	}
	if status != http.StatusOK {
		return stripe.Outcome{}, fmt.Errorf("retrieve %s: upstream answered %d", rsv.ObjectID, status)
	}
	out := stripe.ReadOutcome(body)
	if !out.Known {
		return stripe.Outcome{}, fmt.Errorf("retrieve %s: no amount in the answer", rsv.ObjectID)
	}
	return out, nil
}

// endObject cancels a held object upstream with the real key: an intent is
// canceled, an authorization released by refunding it. A 4xx is not an
// error: the object may have moved or ended meanwhile, which the next
// retrieval shows.
func (s *Server) endObject(ctx context.Context, rsv *keybrake.Reservation) error {
	method, path, body := http.MethodPost, "", ""
	if strings.HasPrefix(rsv.ObjectID, "pi_") {
		path = "/v1/payment_intents/" + url.PathEscape(rsv.ObjectID) + "/cancel"
	} else {
		path, body = "/v1/refunds", "charge="+url.QueryEscape(rsv.ObjectID)
	}
	status, _, err := s.upstreamCall(ctx, method, path, body, "kb_sweep_"+rsv.ID, rsv.Request.StripeAccount)
	if err != nil {
		return fmt.Errorf("cancel %s: %s", rsv.ObjectID, upstreamErrorKind(err))
	}
	if status >= 500 || status == http.StatusTooManyRequests {
		return fmt.Errorf("cancel %s: upstream answered %d", rsv.ObjectID, status)
	}
	return nil
}

// upstreamCall sends one request upstream with the real key.
func (s *Server) upstreamCall(ctx context.Context, method, path, body, idemKey, account string) (int, []byte, error) {
	u := *s.Upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.UpstreamKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if account != "" {
		req.Header.Set("Stripe-Account", account)
	}
	return s.roundTrip(req)
}

// holdsDue reports whether a sweep is worth a store round trip now: at most
// once a minute per replica.
func (s *Server) holdsDue(now time.Time) bool {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if now.Before(s.nextSweep) {
		return false
	}
	s.nextSweep = now.Add(time.Minute)
	return true
}
