package http

import (
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
	"github.com/keybrake/keybrake/twilio"
)

// TwilioConfig configures /twilio/…. The route refuses every request while
// Server.Twilio is nil.
type TwilioConfig struct {
	// Upstream is Twilio's API base URL, https://api.twilio.com, or a
	// simulator's.
	Upstream *url.URL
	// AccountSid is the only account (AC…) a request path may name, and
	// the user a client authenticates as (or APIKeySid).
	AccountSid string
	// APIKeySid, when set, is the API key (SK…) keybrake authenticates
	// upstream with, Secret being its secret; when empty, Secret is the
	// account's auth token.
	APIKeySid string
	Secret    string
	// Rates prices messages and calls (twilio.ParseRates).
	Rates twilio.Rates
	// MaxCallSeconds prices and bounds calls without TimeLimit; see
	// twilio.Pricer.
	MaxCallSeconds int
	// SpeechPer100 prices a call's text-to-speech in a priced voice, per
	// started 100 characters; zero is twilio.DefaultSpeechPer100.
	SpeechPer100 keybrake.Micros
	// DefaultVoice is the account's default text-to-speech voice as the
	// operator declares it; "" prices a <Say> without voice as a priced
	// voice (twilio.Pricer.DefaultVoice).
	DefaultVoice string
	// LookupSkew is the margin of a lost create's lookup for the clocks of
	// keybrake and Twilio, and for Twilio's list to show a new resource;
	// 1 minute by default (vendor_twilio_lookup.go).
	LookupSkew time.Duration
	// Simulated marks Upstream as the built-in simulator: /twilio answers
	// carry Keybrake-Upstream: simulator, whatever Stripe's upstream is.
	Simulated bool
}

// twilioVendor is Twilio's Programmable Messaging and Voice API behind
// /twilio/… (docs/vendors.md).
type twilioVendor struct {
	cfg    TwilioConfig
	pricer *twilio.Pricer
	lookup *twilioLookup     // finds what a lost create made (vendor_twilio_lookup.go); nil: never looked up
	own    *twilioOwnNumbers // the account's own numbers (vendor_twilio_own.go); nil: not checked
}

// twilioRequest is a parsed Twilio request.
type twilioRequest struct {
	op   twilio.Operation
	form *twilio.Form
}

func newTwilioVendor(cfg TwilioConfig) *twilioVendor {
	return &twilioVendor{cfg: cfg, pricer: &twilio.Pricer{Rates: cfg.Rates, MaxCallSeconds: cfg.MaxCallSeconds, SpeechPer100: cfg.SpeechPer100, DefaultVoice: cfg.DefaultVoice}}
}

var (
	_ Vendor   = (*twilioVendor)(nil)
	_ Redactor = (*twilioVendor)(nil)
)

// Name returns "twilio".
func (v *twilioVendor) Name() string { return keybrake.VendorTwilio }

// BodyKind returns "form": Twilio takes form-encoded bodies.
func (v *twilioVendor) BodyKind() string { return "form" }

// Authenticate reads HTTP Basic as Twilio's SDKs send it: the configured
// account sid (or keybrake's API key sid) as user, the vault key as
// password, also in its alphanumeric form twilio-go needs (vaultkey…).
func (v *twilioVendor) Authenticate(r *http.Request) (string, error) {
	cr, err := twilio.ParseAuth(r.Header.Get("Authorization"))
	if err != nil {
		return "", err
	}
	if cr.Username != v.cfg.AccountSid && (v.cfg.APIKeySid == "" || cr.Username != v.cfg.APIKeySid) {
		return "", keybrake.Errorf(keybrake.EUNAUTHORIZED, "Authenticate: the user must be the account sid keybrake is configured with (%s).", v.cfg.AccountSid)
	}
	secret, ok := twilio.VaultKey(cr.Password)
	if !ok {
		return "", keybrake.Errorf(keybrake.EUNAUTHORIZED, "Authenticate: keybrake only accepts vault keys as the password (vaultkey… or vault_key_…); the real auth token stays with keybrake.")
	}
	return secret, nil
}

// Parse names the operation, reads a POST body strictly and refuses a path
// naming another account than the configured one.
func (v *twilioVendor) Parse(a ParseArgs) (*VendorRequest, error) {
	op, err := twilio.ParseOperation(a.Method, a.Path)
	if err != nil {
		return nil, err
	}
	if op.Account != v.cfg.AccountSid {
		return nil, keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake proxies only account %s; the path names %s.", v.cfg.AccountSid, op.Account)
	}
	req := &VendorRequest{Operation: op.Name, Path: op.Path}
	form := &twilio.Form{}
	if a.Method == http.MethodPost {
		if len(a.Query) > 0 {
			return nil, keybrake.Errorf(keybrake.EINVALID, "POST parameters must be in the body, not the query string.")
		}
		if form, err = twilio.ParseForm(string(a.Body)); err != nil {
			return nil, err
		}
		req.Body = a.Body
	} else {
		req.RawQuery = a.Query.Encode()
	}
	class, reason := twilio.Classify(op, form, v.cfg.DefaultVoice)
	req.Class, req.Reason = twilioClass(class), reason
	req.Parsed = &twilioRequest{op: op, form: form}
	// Every resource with a sid in the path (a message, a call) is one
	// some key sent: only that key, or an ancestor, may fetch, update or
	// delete it (sent.go). A resource added later with a sid in its path
	// is scoped the same way until it is shown to be the account's.
	req.SentID = op.ID
	req.Sends = op.Name == "messages.create" || op.Name == "calls.create"
	// A list reads every key's messages or calls unless the key's
	// allowed_from narrows it (twilio.Policy.CheckList): a replica whose
	// cached key predates an allowed_from or a revocation made elsewhere
	// answered it with the whole account (TestAttackKeyVer_ListOnStaleKey).
	req.Fresh = op.Name == "messages.list" || op.Name == "calls.list"
	return req, nil
}

var _ SentScoper = (*twilioVendor)(nil)

// SentIDs returns the sid of a created message or call.
func (v *twilioVendor) SentIDs(operation string, body []byte) []string {
	if operation != "messages.create" && operation != "calls.create" {
		return nil
	}
	var res struct {
		Sid string `json:"sid"`
	}
	if json.Unmarshal(body, &res) != nil || res.Sid == "" {
		return nil
	}
	return []string{res.Sid}
}

// NotSent is Twilio's 404 for a sid it does not know (20404), with
// keybrake's reason after it.
func (v *twilioVendor) NotSent(req *VendorRequest) error {
	return keybrake.Errorf(keybrake.ENOTFOUND, "The requested resource %s was not found (keybrake: this vault key may reach only the messages and calls it, or a key minted under it, sent through keybrake; nothing was sent to Twilio).", req.Path)
}

func twilioClass(c twilio.Class) Class {
	switch c {
	case twilio.ClassRead:
		return ClassRead
	case twilio.ClassWrite:
		return ClassWrite
	case twilio.ClassPriced:
		return ClassPriced
	}
	return ClassUnpriced
}

// Decide applies the key's Twilio scope (twilio.Policy: destination
// countries and prefixes, senders, messaging services) to a create, and
// makes a create to one of the account's own numbers unpriced (ownTo).
func (v *twilioVendor) Decide(ctx context.Context, k *keybrake.Key, req *VendorRequest) error {
	tr := req.Parsed.(*twilioRequest)
	var p twilio.Policy
	if k.TwilioScope != nil {
		p = twilio.Policy(*k.TwilioScope)
		if err := p.Check(twilio.ScopeOf(tr.op, tr.form)); err != nil {
			return err
		}
	}
	// A list is narrowed to the key's senders (allowed_from) by Twilio's
	// own From filter: RawQuery is what is forwarded, parsed back here.
	query, err := url.ParseQuery(req.RawQuery)
	if err != nil {
		return keybrake.Errorf(keybrake.EINVALID, "The query string does not parse.")
	}
	if err := p.CheckList(tr.op, query); err != nil {
		return err
	}
	return v.ownTo(ctx, req)
}

// Price prices a message (segments × the country's rate) or a call
// (minutes × the voice rate), counting one of either. A capped key's call
// without TimeLimit is refused unless MaxCallSeconds bounds it.
func (v *twilioVendor) Price(ctx context.Context, k *keybrake.Key, req *VendorRequest) (VendorCost, error) {
	tr := req.Parsed.(*twilioRequest)
	cost, err := v.pricer.Price(tr.op, tr.form)
	if err != nil {
		return VendorCost{}, err
	}
	out := VendorCost{Micros: cost.Micros}
	where := strings.Join(cost.Countries, " or ") // GP or BL or MF: priced at the dearest
	switch {
	case cost.Messages > 0:
		out.CountKind, out.Count = keybrake.CountMessages, int64(cost.Messages)
		out.Detail = fmt.Sprintf("%s, %d %s segments", where, cost.Segments, cost.Encoding)
		if cost.MMS {
			out.Detail = fmt.Sprintf("%s, MMS, or %d %s segments if MMS Converter sends it as SMS", where, cost.Segments, cost.Encoding)
		}
	case cost.Calls > 0:
		out.CountKind, out.Count = keybrake.CountCalls, int64(cost.Calls)
		out.Detail = fmt.Sprintf("%s, %d minutes", where, cost.Minutes)
		if cost.Speech > 0 {
			out.Detail += fmt.Sprintf(", %d00 characters of priced text-to-speech", cost.Speech)
		}
		if !tr.form.Has("TimeLimit") && v.cfg.MaxCallSeconds <= 0 && (k.Caps.Any() || k.DailyCalls != nil) {
			return VendorCost{}, twilio.ErrTimeLimitRequired()
		}
	}
	if cost.AddTimeLimit {
		out.Forward = append(append([]byte{}, req.Body...), []byte("&TimeLimit="+strconv.Itoa(cost.TimeLimit))...)
	}
	return out, nil
}

// Prepare authenticates with the real credential.
func (v *twilioVendor) Prepare(out *http.Request, req *VendorRequest) {
	user := v.cfg.AccountSid
	if v.cfg.APIKeySid != "" {
		user = v.cfg.APIKeySid
	}
	out.Header.Set("Authorization", twilio.BasicAuth(user, v.cfg.Secret))
	if len(req.Body) > 0 || out.Method == http.MethodPost {
		out.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
}

// twilioResource is the part of a message or call keybrake settles from.
type twilioResource struct {
	Sid       string  `json:"sid"`
	Status    string  `json:"status"`
	Price     *string `json:"price"`
	PriceUnit string  `json:"price_unit"`
}

// Settle settles a created message or call at Twilio's price when the
// answer carries it; at creation it is null, so the reservation is held at
// the reserved amount (counted in full) with the resource's sid, and the
// resolver settles the real price once Twilio reports it.
func (v *twilioVendor) Settle(req *VendorRequest, body []byte) VendorOutcome {
	var res twilioResource
	_ = json.Unmarshal(body, &res)
	return v.withSpeech(twilioOutcome(res), res.Status, req.Parsed.(*twilioRequest).form)
}

// unspoken are the call statuses of a call that never ran its TwiML, so
// spoke nothing.
var unspoken = map[string]bool{"canceled": true, "busy": true, "no-answer": true, "failed": true}

// withSpeech adds to a call settled at Twilio's price the text-to-speech
// of its Twiml in priced voices (twilio.Speech): Twilio bills it apart,
// and the call's price does not include it, so settling at the price
// alone would release it from the caps. Nothing is added for a message,
// or a call that never ran its TwiML (status unspoken; an unknown status
// counts as spoken). A Twiml whose speech keybrake cannot price
// (loop="0") was unpriced, allowed only on a key with allow_unpriced,
// which counts no unpriced money: it settles at the call's price.
func (v *twilioVendor) withSpeech(out VendorOutcome, status string, form *twilio.Form) VendorOutcome {
	if out.State != keybrake.StateSettled || form == nil || !form.Has("Twiml") || unspoken[status] {
		return out
	}
	m, err := v.pricer.SpeechCost(form)
	switch {
	case err != nil:
		out.Reason = "settled at Twilio's price; the call's text-to-speech is unpriced and not counted"
	case m > 0:
		out.Micros += m
		out.Reason = fmt.Sprintf("settled at Twilio's price plus $%s of text-to-speech, which Twilio bills apart", m)
	}
	return out
}

// speechForm is the form of a reservation's forwarded calls.create body,
// for withSpeech; nil for any other operation, or a body that no longer
// reads (it read when it was forwarded).
func speechForm(rsv *keybrake.Reservation) *twilio.Form {
	if strings.TrimPrefix(rsv.Operation, "twilio.") != "calls.create" {
		return nil
	}
	f, _ := twilio.ParseForm(rsv.Request.Body)
	return f
}

func twilioOutcome(res twilioResource) VendorOutcome {
	m, known, err := twilio.ParsePrice(res.Price, res.PriceUnit)
	switch {
	case err != nil:
		return VendorOutcome{Final: true, State: keybrake.StateHeld, AtReserved: true, ObjectID: res.Sid, Reason: "held: " + keybrake.ErrorMessage(err) + "; an operator must settle it"}
	case !known:
		return VendorOutcome{Final: true, State: keybrake.StateHeld, AtReserved: true, ObjectID: res.Sid, Reason: "held at the reserved amount until Twilio reports the price"}
	}
	if res.Status == "failed" && messageSid(res.Sid) && m < twilio.FailedMessageFee {
		// Twilio bills a failed message its processing fee whatever
		// its price reads: settled at the price alone, a key could make
		// its messages fail (a broken MediaUrl) and spend the fee
		// outside its caps (TestAttackTwilio_FailedMessageFee).
		return VendorOutcome{Final: true, State: keybrake.StateSettled, Micros: twilio.FailedMessageFee, ObjectID: res.Sid,
			Reason: fmt.Sprintf("settled at Twilio's failed-message processing fee of $%s", twilio.FailedMessageFee)}
	}
	return VendorOutcome{Final: true, State: keybrake.StateSettled, Micros: m, ObjectID: res.Sid, Reason: "settled at Twilio's price"}
}

// messageSid says whether sid names a message (SM…, or MM… with media),
// not a call.
func messageSid(sid string) bool {
	return strings.HasPrefix(sid, "SM") || strings.HasPrefix(sid, "MM")
}

// Redact removes the auth token from accounts.fetch.
func (v *twilioVendor) Redact(req *VendorRequest, body []byte) ([]byte, bool) {
	return twilio.Redact(req.Parsed.(*twilioRequest).op, body)
}

// Resolve fetches a held message or call by its sid and settles Twilio's
// price once reported. A create whose answer was lost has no sid, and
// Twilio has no idempotency key: it is looked up by what it named
// (resolveLost), and stays counted at the reserved amount (which the
// operator's rates keep at or above Twilio's price) while that cannot
// tell.
func (v *twilioVendor) Resolve(ctx context.Context, rsv *keybrake.Reservation, rt http.RoundTripper) (VendorOutcome, error) {
	if rsv.ObjectID == "" {
		out, err := v.resolveLost(ctx, rsv, rt)
		return v.withSpeech(out, "", speechForm(rsv)), err
	}
	coll := strings.TrimSuffix(strings.TrimPrefix(rsv.Request.Path, "/twilio"), ".json")
	u := *v.cfg.Upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + coll + "/" + rsv.ObjectID + ".json"
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return VendorOutcome{}, err
	}
	v.Prepare(r, &VendorRequest{})
	resp, err := rt.RoundTrip(r)
	if err != nil {
		return VendorOutcome{}, fmt.Errorf("fetch %s: %s", rsv.ObjectID, upstreamErrorKind(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	if err != nil || resp.StatusCode != http.StatusOK {
		return VendorOutcome{Reason: fmt.Sprintf("fetch %s answered %d", rsv.ObjectID, resp.StatusCode)}, nil
	}
	var res twilioResource
	if err := json.Unmarshal(body, &res); err != nil {
		return VendorOutcome{Reason: "unreadable answer"}, nil
	}
	out := twilioOutcome(res)
	if out.State != keybrake.StateSettled {
		return VendorOutcome{Reason: "price not reported yet"}, nil
	}
	return v.withSpeech(out, res.Status, speechForm(rsv)), nil
}

// WriteError writes err as Twilio does: {"code", "message", "more_info",
// "status"}.
func (v *twilioVendor) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	e := twilio.ErrorFor(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	w.Write(e.Body())
}
