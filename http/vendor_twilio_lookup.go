package http

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/twilio"
)

// Twilio has no idempotency key, so a create whose answer was lost (a cut
// after sending, a 5xx, a timeout) cannot be replayed. The resolver finds
// the message or call it made, if any, by what the request named: To, the
// sender, the body, and when keybrake forwarded it (twilio/lookup.go).
//
// The decision for a lost create R, one line per outcome:
//
//	before R's window closed (forwarded + UpstreamTimeout + 2 skews)  --> wait, counted in full
//	an identical send (same signature) still in flight                --> wait
//	exact matches ≥ identical lost sends                              --> R takes the i-th match (held, or settled at its price)
//	fewer exact matches, all lost sends of one key                    --> the first ones take a match; the rest released once nothing else could be theirs
//	fewer exact matches, lost sends of several keys                   --> uncertain: which key's send reached Twilio is unknowable
//	no match and nothing to R's To from R's sender in the window      --> released (Twilio never created it)
//	a loose match (Twilio changed the body?) or too many pages        --> uncertain, for an operator
//
// "Identical lost sends" are the open reservations of the same operation
// and signature, without a sid, whose windows overlap R's; both lists are
// sorted (reservations by creation and ID, resources by date_created and
// sid), so every replica assigns the same match to the same reservation. A
// resource another reservation already names is never matched again.
// Never counting less than Twilio billed is the rule: when in doubt the
// reservation stays counted at its reserved amount, which the operator's
// rates keep at or above Twilio's price.

// defaultTwilioSkew widens the window for the clocks of keybrake and
// Twilio, Twilio's second-resolution date_created, and the time its list
// takes to show a new resource (TwilioConfig.LookupSkew).
const defaultTwilioSkew = time.Minute

// twilioLookupPages bounds a lookup: LookupPageSize resources a page. A
// lookup cut short can settle a match it found but never release.
const twilioLookupPages = 5

// twilioLookup is what the Twilio vendor needs to resolve a lost create
// beyond the upstream: who else accounts for a resource, and the clock.
type twilioLookup struct {
	store keybrake.SpendService
	now   func() time.Time
	// answerWithin is how long after forwarding Twilio could still have
	// created the resource: the proxy's upstream timeout.
	answerWithin time.Duration
	skew         time.Duration // TwilioConfig.LookupSkew
}

// window is when Twilio may have created what rsv forwarded.
func (lk *twilioLookup) window(rsv *keybrake.Reservation) (from, until time.Time) {
	return rsv.CreatedAt.Add(-lk.skew), rsv.CreatedAt.Add(lk.answerWithin + lk.skew)
}

// resolveLost finds the resource a lost create made, or decides that it
// made none, as the table above says.
func (v *twilioVendor) resolveLost(ctx context.Context, rsv *keybrake.Reservation, rt http.RoundTripper) (VendorOutcome, error) {
	lk := v.lookup
	sent, err := twilio.ParseSent(rsv.Operation, rsv.Request.Body)
	if lk == nil || err != nil {
		return VendorOutcome{Reason: "Twilio has no idempotency and keybrake cannot look this create up; it stays counted until an operator reconciles it"}, nil
	}
	now := lk.now()
	group, err := lk.identical(ctx, rsv, sent)
	if err != nil {
		return VendorOutcome{}, err
	}
	idx := -1
	for i, g := range group {
		if g.ID == rsv.ID {
			idx = i
		}
		if _, until := lk.window(g); now.Before(until.Add(lk.skew)) {
			return VendorOutcome{Reason: fmt.Sprintf("looking the %s up once Twilio shows it, after %s", strings.ToLower(sent.Kind[:len(sent.Kind)-1]), until.Add(lk.skew).UTC().Format(time.RFC3339))}, nil
		}
	}
	if idx < 0 {
		return VendorOutcome{Reason: "the reservation changed meanwhile"}, nil
	}
	from, until := lk.window(rsv)
	exact, loose, complete, err := v.candidates(ctx, rsv, sent, from, until, rt)
	if err != nil {
		return VendorOutcome{}, err
	}
	oneKey := true
	for _, g := range group {
		oneKey = oneKey && g.KeyID == rsv.KeyID
	}
	clear := complete && len(loose) == 0 // nothing else in the window could be R's
	switch {
	case idx < len(exact) && (len(exact) >= len(group) || oneKey):
		return found(exact[idx], len(group)), nil
	case len(exact) > 0 && !oneKey:
		return VendorOutcome{Reason: fmt.Sprintf("%d identical sends of several keys lost their answers and Twilio shows %d; which key's reached Twilio is unknowable, so each stays counted for an operator", len(group), len(exact))}, nil
	case clear:
		reason := fmt.Sprintf("released: Twilio shows no %s to %s from %s created between %s and %s", sent.Kind, sent.To, sender(sent), from.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
		if len(exact) > 0 {
			reason = fmt.Sprintf("released: %d identical sends lost their answers and Twilio created %d, each accounted for by an earlier one", len(group), len(exact))
		}
		return VendorOutcome{Final: true, State: keybrake.StateReleased, Reason: reason}, nil
	case !complete:
		return VendorOutcome{Reason: fmt.Sprintf("more than %d resources to %s; keybrake does not release what it could not read through, an operator reconciles it", twilioLookupPages*twilio.LookupPageSize, sent.To)}, nil
	default:
		return VendorOutcome{Reason: fmt.Sprintf("Twilio shows %s to %s from %s in the window with another body (%s); it may be this one, altered by Twilio, so it stays counted for an operator", loose[0].Sid, sent.To, sender(sent), "trial prefix, Smart Encoding or link shortening")}, nil
	}
}

func sender(s twilio.Sent) string {
	if s.From != "" {
		return s.From
	}
	return s.MessagingServiceSid
}

// found settles a lost create to the resource it made: at Twilio's price
// when the list already shows it, else held at the reserved amount until
// the price pass reads it. The sid becomes the reservation's key's own
// (Sent), as it would have from the answer: the resolver records it
// before the reservation names it, so its sender can read its message
// and call by sid once it learns it (a status callback, messages.list).
func found(r twilio.Resource, identical int) VendorOutcome {
	out := twilioOutcome(twilioResource{Sid: r.Sid, Status: r.Status, Price: r.Price, PriceUnit: r.PriceUnit})
	out.Sent = []string{r.Sid}
	how := "found " + r.Sid + " by To, sender, body and time"
	if identical > 1 {
		how += fmt.Sprintf(" (one of %d identical lost sends, assigned in order)", identical)
	}
	out.Reason = how + "; " + out.Reason
	return out
}

// identical returns the open reservations without a sid whose request has
// rsv's signature and whose window overlaps rsv's, rsv included, sorted
// by creation and ID.
func (lk *twilioLookup) identical(ctx context.Context, rsv *keybrake.Reservation, sent twilio.Sent) ([]*keybrake.Reservation, error) {
	span := lk.answerWithin + 2*lk.skew
	rs, err := lk.store.FindReservations(ctx, keybrake.ReservationFilter{
		Operation: rsv.Operation, Open: true,
		CreatedFrom: rsv.CreatedAt.Add(-span), CreatedBefore: rsv.CreatedAt.Add(span + time.Microsecond),
	})
	if err != nil {
		return nil, fmt.Errorf("find identical sends: %w", err)
	}
	sig := sent.Signature()
	var out []*keybrake.Reservation
	for _, r := range rs {
		if r.ObjectID != "" {
			continue
		}
		if s, err := twilio.ParseSent(r.Operation, r.Request.Body); err == nil && s.Signature() == sig {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// candidates lists the resources to sent.To (from sent.From) and returns
// those created in [from, until] that no reservation names yet: exact and
// loose matches, sorted, and whether the list was read to its end.
func (v *twilioVendor) candidates(ctx context.Context, rsv *keybrake.Reservation, sent twilio.Sent, from, until time.Time, rt http.RoundTripper) (exact, loose []twilio.Resource, complete bool, err error) {
	next := strings.TrimPrefix(rsv.Request.Path, "/twilio") + "?" + sent.Query().Encode()
	for page := 0; page < twilioLookupPages && next != ""; page++ {
		body, err := v.get(ctx, next, rt)
		if err != nil {
			return nil, nil, false, err
		}
		p, err := twilio.ParsePage(sent.Kind, body)
		if err != nil {
			return nil, nil, false, err
		}
		for _, r := range p.Resources {
			m := sent.Match(r, from, until)
			if m == twilio.MatchNone {
				continue
			}
			taken, err := v.lookup.store.FindReservations(ctx, keybrake.ReservationFilter{ObjectID: r.Sid, Limit: 1})
			if err != nil {
				return nil, nil, false, fmt.Errorf("find the reservation of %s: %w", r.Sid, err)
			}
			switch {
			case len(taken) > 0:
			case m == twilio.MatchExact:
				exact = append(exact, r)
			default:
				loose = append(loose, r)
			}
		}
		next = p.NextPageURI
	}
	twilio.SortResources(exact)
	twilio.SortResources(loose)
	return exact, loose, next == "", nil
}

// get reads one list page; uri is a path and query under the API's root,
// as Twilio's next_page_uri is.
func (v *twilioVendor) get(ctx context.Context, uri string, rt http.RoundTripper) ([]byte, error) {
	path, query, _ := strings.Cut(uri, "?")
	if !strings.HasPrefix(path, "/"+twilio.APIVersion+"/Accounts/"+v.cfg.AccountSid+"/") {
		return nil, fmt.Errorf("list page %q is outside the account", path)
	}
	u := *v.cfg.Upstream
	u.Path, u.RawPath, u.RawQuery = strings.TrimSuffix(u.Path, "/")+path, "", query
	if _, err := url.ParseQuery(query); err != nil {
		return nil, fmt.Errorf("list page query: %w", err)
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	v.Prepare(r, &VendorRequest{})
	resp, err := rt.RoundTrip(r)
	if err != nil {
		return nil, fmt.Errorf("list %s: %s", path, upstreamErrorKind(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list %s answered %d", path, resp.StatusCode)
	}
	return body, nil
}
