// Package drift compares what moved money at the vendor with what keybrake
// let through. keybrake counts the requests it proxies; money can still move
// with the real secret outside keybrake (a dashboard, a leaked key, a
// script), or an object can end up with another amount than keybrake
// settled. A Reconciler lists, per Stripe account, the charges, refunds,
// payouts and transfers created in a recent window, matches them to
// keybrake's reservations, and reports three kinds of drift:
//
//	unseen   an object keybrake has no reservation for
//	amount   an object whose amount or currency differs from its settled reservation
//	missing  a settled reservation whose object is not upstream
package drift

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// Kinds of drift.
const (
	KindUnseen  = "unseen"
	KindAmount  = "amount"
	KindMissing = "missing"
)

// MetadataKey is the metadata tag keybrake adds to every object it creates,
// holding the request's Idempotency-Key.
const MetadataKey = "keybrake_idempotency_key"

// resources are the objects listed, by their list path; each is also the
// resource of the create operation that makes it.
var resources = []string{"charges", "refunds", "payouts", "transfers"}

// Finding is one difference between the vendor's records and keybrake's.
type Finding struct {
	Kind           string    `json:"kind"`
	Account        string    `json:"account"`                   // "" for the platform account
	Object         string    `json:"object"`                    // charges, refunds, payouts, transfers
	ObjectID       string    `json:"object_id,omitempty"`       // upstream; empty for missing
	Amount         int64     `json:"amount"`                    // upstream, minor units
	Currency       string    `json:"currency"`                  // upstream
	Reserved       int64     `json:"reserved_amount,omitempty"` // keybrake's settled amount
	ReservedCcy    string    `json:"reserved_currency,omitempty"`
	KeyID          string    `json:"key_id,omitempty"` // the vault key involved, when known
	ReservationID  string    `json:"reservation_id,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"` // the object's tag or the reservation's key
	Created        time.Time `json:"created"`
}

// ID names the finding stably across runs, so a loop reports it once.
func (f Finding) ID() string {
	return f.Kind + "/" + f.Account + "/" + f.ObjectID + "/" + f.ReservationID
}

// String describes the finding in one line.
func (f Finding) String() string {
	switch f.Kind {
	case KindUnseen:
		s := fmt.Sprintf("%s %s (%d %s) was created upstream without keybrake", f.Object, f.ObjectID, f.Amount, f.Currency)
		if f.IdempotencyKey != "" {
			s += fmt.Sprintf(", though tagged %s=%s", MetadataKey, f.IdempotencyKey)
		}
		return s
	case KindAmount:
		return fmt.Sprintf("%s %s is %d %s upstream; keybrake settled %d %s (reservation %s)", f.Object, f.ObjectID, f.Amount, f.Currency, f.Reserved, f.ReservedCcy, f.ReservationID)
	default:
		return fmt.Sprintf("reservation %s (%d %s, %s) settled but no %s carries its tag upstream", f.ReservationID, f.Reserved, f.ReservedCcy, f.IdempotencyKey, f.Object)
	}
}

// Report is the outcome of one reconcile run.
type Report struct {
	Since        time.Time `json:"since"`
	Until        time.Time `json:"until"`
	Accounts     []string  `json:"accounts"`
	Objects      int       `json:"objects"`
	Reservations int       `json:"reservations"`
	Findings     []Finding `json:"findings"`
}

// Reconciler lists recent objects upstream and matches them to keybrake's
// reservations. Its zero value is not usable: set Store, Upstream and
// UpstreamKey.
type Reconciler struct {
	Store       keybrake.Store
	Upstream    *url.URL
	UpstreamKey string
	// Transport sends the list requests; default http.DefaultTransport.
	Transport http.RoundTripper
	// Accounts are connected accounts (acct_…) to check besides the
	// platform and the accounts the window's reservations name.
	Accounts []string
	// Window is how far back a run looks; default 1 h.
	Window time.Duration
	// Grace is how old a settled reservation must be before its missing
	// object counts as drift; default 1 min.
	Grace time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// reservedOps are the operations whose reservations make the listed
// objects, by resource; intents make charges too, matched by intent id.
func resourceOf(op string) string {
	res, action, _ := strings.Cut(op, ".")
	if action != "create" {
		return ""
	}
	return res
}

// Run lists and matches once.
func (r *Reconciler) Run(ctx context.Context) (*Report, error) {
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	window, grace := r.Window, r.Grace
	if window <= 0 {
		window = time.Hour
	}
	if grace <= 0 {
		grace = time.Minute
	}
	since := now.Add(-window)
	rsvs, err := r.Store.FindReservations(ctx, keybrake.ReservationFilter{CreatedFrom: since})
	if err != nil {
		return nil, fmt.Errorf("drift: find reservations: %w", err)
	}
	accounts := append([]string{""}, r.Accounts...)
	for _, rv := range rsvs {
		accounts = append(accounts, rv.Request.StripeAccount)
	}
	slices.Sort(accounts)
	accounts = slices.Compact(accounts)
	rep := &Report{Since: since, Until: now, Accounts: accounts, Reservations: len(rsvs)}

	// Reservations by the object they made and by their tag.
	byObject := map[string]*keybrake.Reservation{}
	byTag := map[string][]*keybrake.Reservation{} // account/resource/idempotency key
	for _, rv := range rsvs {
		if rv.ObjectID != "" {
			byObject[rv.Request.StripeAccount+"/"+rv.ObjectID] = rv
		}
		if res := resourceOf(rv.Operation); res != "" {
			k := rv.Request.StripeAccount + "/" + res + "/" + rv.IdempotencyKey
			byTag[k] = append(byTag[k], rv)
		}
	}
	matched := map[string]bool{}
	for _, acct := range accounts {
		for _, res := range resources {
			// A minute of slack for clock skew between keybrake and Stripe.
			objs, err := r.list(ctx, acct, res, since.Add(-time.Minute))
			if err != nil {
				return nil, err
			}
			rep.Objects += len(objs)
			for _, o := range objs {
				if f, ok := r.match(acct, res, o, byObject, byTag, matched); ok {
					rep.Findings = append(rep.Findings, f)
				}
			}
		}
	}
	for _, rv := range rsvs {
		res := resourceOf(rv.Operation)
		if !slices.Contains(resources, res) || rv.State != keybrake.StateSettled || matched[rv.ID] || rv.CreatedAt.After(now.Add(-grace)) {
			continue
		}
		rep.Findings = append(rep.Findings, Finding{
			Kind: KindMissing, Account: rv.Request.StripeAccount, Object: res, Reserved: rv.Amount, ReservedCcy: rv.Currency,
			KeyID: rv.KeyID, ReservationID: rv.ID, IdempotencyKey: rv.IdempotencyKey, Created: rv.CreatedAt,
		})
	}
	return rep, nil
}

// object is what drift reads of a listed object.
type object struct {
	ID            string            `json:"id"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Created       int64             `json:"created"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent any               `json:"payment_intent"`
	Invoice       any               `json:"invoice"`
}

func idOf(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		s, _ := v["id"].(string)
		return s
	}
	return ""
}

// match finds the reservation of o and returns the drift, if any.
func (r *Reconciler) match(acct, res string, o object, byObject map[string]*keybrake.Reservation, byTag map[string][]*keybrake.Reservation, matched map[string]bool) (Finding, bool) {
	tag := o.Metadata[MetadataKey]
	f := Finding{Account: acct, Object: res, ObjectID: o.ID, Amount: o.Amount, Currency: o.Currency, IdempotencyKey: tag, Created: time.Unix(o.Created, 0).UTC()}
	rv := byObject[acct+"/"+o.ID]
	if rv == nil && tag != "" {
		for _, c := range byTag[acct+"/"+res+"/"+tag] {
			if !matched[c.ID] {
				rv = c
				break
			}
		}
	}
	if rv == nil && res == "charges" {
		// A charge made by confirming an intent, or by paying an invoice,
		// is covered by the reservation of that intent or invoice.
		for _, parent := range []string{idOf(o.PaymentIntent), idOf(o.Invoice)} {
			if p := byObject[acct+"/"+parent]; parent != "" && p != nil {
				matched[p.ID] = true
				return f, false
			}
		}
	}
	if rv == nil {
		f.Kind = KindUnseen
		return f, true
	}
	matched[rv.ID] = true
	f.KeyID, f.ReservationID, f.Reserved, f.ReservedCcy = rv.KeyID, rv.ID, rv.Amount, rv.Currency
	if rv.State == keybrake.StateSettled && (rv.Amount != o.Amount || !strings.EqualFold(rv.Currency, o.Currency)) {
		f.Kind = KindAmount
		return f, true
	}
	return f, false
}

// list returns every object of res created at or after since in acct.
func (r *Reconciler) list(ctx context.Context, acct, res string, since time.Time) ([]object, error) {
	var all []object
	after := ""
	for {
		q := url.Values{"limit": {"100"}, "created[gte]": {strconv.FormatInt(since.Unix(), 10)}}
		if after != "" {
			q.Set("starting_after", after)
		}
		var page struct {
			Data    []object `json:"data"`
			HasMore bool     `json:"has_more"`
		}
		if err := r.get(ctx, acct, "/v1/"+res+"?"+q.Encode(), &page); err != nil {
			return nil, err
		}
		all = append(all, page.Data...)
		if !page.HasMore || len(page.Data) == 0 {
			return all, nil
		}
		after = page.Data[len(page.Data)-1].ID
	}
}

func (r *Reconciler) get(ctx context.Context, acct, pathQuery string, v any) error {
	u := *r.Upstream
	path, query, _ := strings.Cut(pathQuery, "?")
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.UpstreamKey)
	if acct != "" {
		req.Header.Set("Stripe-Account", acct)
	}
	tr := r.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("drift: list %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("drift: list %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("drift: list %s (account %q): upstream answered %d", path, acct, resp.StatusCode)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("drift: list %s: %w", path, err)
	}
	return nil
}

// Audit returns the audit event recording f at now, so drift is in the
// same tamper-evident log as every request.
func Audit(f Finding, now time.Time) *keybrake.Event {
	return &keybrake.Event{
		KeyID: f.KeyID, Time: now, Operation: "drift." + f.Kind, Method: "GET", Path: "/v1/" + f.Object,
		Amount: f.Amount, Currency: f.Currency, Decision: keybrake.DecisionDrift, Reason: f.String(),
		ObjectID: f.ObjectID, IdempotencyKey: f.IdempotencyKey, ReservationID: f.ReservationID,
	}
}

// Record logs, audits and hands each new finding to onDrift; seen, when
// not nil, remembers what was reported so a loop reports each once.
func Record(ctx context.Context, events keybrake.EventService, logger *slog.Logger, rep *Report, now time.Time, seen map[string]bool, onDrift func(Finding)) error {
	var batch []*keybrake.Event
	for _, f := range rep.Findings {
		if seen != nil {
			if seen[f.ID()] {
				continue
			}
			seen[f.ID()] = true
		}
		logger.Warn("drift: "+f.String(), "kind", f.Kind, "account", f.Account, "object", f.ObjectID, "key_id", f.KeyID, "reservation_id", f.ReservationID)
		batch = append(batch, Audit(f, now))
		if onDrift != nil {
			onDrift(f)
		}
	}
	if len(batch) == 0 {
		return nil
	}
	return events.AddEvents(ctx, batch)
}
