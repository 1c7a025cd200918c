package http

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/resend"
)

// ResendConfig configures /resend/…. The route refuses every request while
// Server.Resend is nil.
type ResendConfig struct {
	// Upstream is Resend's API base URL, https://api.resend.com, or a
	// simulator's.
	Upstream *url.URL
	// APIKey is the real re_… key.
	APIKey string
	// Pricer holds the operator's rates: per email and per recipient.
	Pricer resend.Pricer
	// Simulated marks Upstream as the built-in simulator: /resend answers
	// carry Keybrake-Upstream: simulator, whatever Stripe's upstream is.
	Simulated bool
}

// resendVendor is Resend's email API behind /resend/… (docs/vendors.md).
type resendVendor struct {
	cfg ResendConfig
	now func() time.Time // the server's clock, for the age of a replayed send; nil: never too old
}

// resendRequest is a parsed Resend request.
type resendRequest struct {
	op     resend.Operation
	keyID  string          // the vault key's ID, which namespaces its Idempotency-Keys upstream
	emails []*resend.Email // emails.send and emails.batch
}

var _ Vendor = (*resendVendor)(nil)

// Name returns "resend".
func (v *resendVendor) Name() string { return keybrake.VendorResend }

// BodyKind returns "JSON": Resend takes JSON bodies.
func (v *resendVendor) BodyKind() string { return "JSON" }

// Authenticate reads Authorization: Bearer <vault key>, as Resend's SDKs
// send the API key.
func (v *resendVendor) Authenticate(r *http.Request) (string, error) {
	token, err := resend.ParseAuth(r.Header.Get("Authorization"))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(token, keybrake.VaultKeyPrefix) || len(token) > 128 {
		return "", keybrake.Errorf(keybrake.EUNAUTHORIZED, "API key is invalid: keybrake only accepts vault keys (vault_key_…); the real Resend key stays with keybrake.")
	}
	return token, nil
}

// Parse names the operation and reads its JSON body strictly; a send or a
// batch keeps its emails for pricing.
func (v *resendVendor) Parse(a ParseArgs) (*VendorRequest, error) {
	op, err := resend.ParseOperation(a.Method, a.Path)
	if err != nil {
		return nil, err
	}
	idem, err := resend.ParseIdempotencyKey(a.Header.Values("Idempotency-Key"))
	if err != nil {
		return nil, err
	}
	// Resend replays a send or a batch by its Idempotency-Key: keybrake
	// makes one when the client sent none, so the resolver can replay.
	req := &VendorRequest{Operation: op.Name, Path: op.Path, Class: resendClass(op.Class), IdempotencyKey: idem, Idempotent: op.Class == resend.ClassPriced}
	rr := &resendRequest{op: op, keyID: a.KeyID}
	switch op.Name {
	case "emails.send":
		var e *resend.Email
		if e, err = resend.ParseEmail(a.Body); err == nil {
			rr.emails = []*resend.Email{e}
		}
	case "emails.batch":
		rr.emails, err = resend.ParseBatch(a.Body)
	case "emails.update":
		_, err = resend.ParseUpdate(a.Body, op.ID)
	case "emails.cancel":
		if len(bytes.TrimSpace(a.Body)) > 0 && !bytes.Equal(bytes.TrimSpace(a.Body), []byte("{}")) {
			err = keybrake.Errorf(keybrake.EINVALID, "emails.cancel takes no body.")
		}
	}
	if err != nil {
		return nil, err
	}
	if a.Method == http.MethodGet {
		req.RawQuery = a.Query.Encode()
	} else {
		if len(a.Query) > 0 {
			return nil, keybrake.Errorf(keybrake.EINVALID, "Parameters must be in the JSON body, not the query string.")
		}
		req.Body = a.Body
	}
	req.Parsed = rr
	switch op.Name {
	case "emails.get", "emails.update", "emails.cancel":
		// Only the key that sent the email, or an ancestor, may read,
		// reschedule or cancel it (sent.go). A domain is the account's,
		// which every key sends from: domains.get is not scoped.
		req.SentID = op.ID
	case "emails.send", "emails.batch":
		req.Sends = true
	}
	return req, nil
}

var _ SentScoper = (*resendVendor)(nil)

// SentIDs returns the id of a sent email, or every id of a batch.
func (v *resendVendor) SentIDs(operation string, body []byte) []string {
	var one struct {
		ID   string `json:"id"`
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &one) != nil {
		return nil
	}
	switch operation {
	case "emails.send":
		if one.ID != "" {
			return []string{one.ID}
		}
	case "emails.batch":
		ids := make([]string, 0, len(one.Data))
		for _, d := range one.Data {
			if d.ID != "" {
				ids = append(ids, d.ID)
			}
		}
		return ids
	}
	return nil
}

// NotSent is Resend's 404 for an email id it does not know, with
// keybrake's reason after it.
func (v *resendVendor) NotSent(req *VendorRequest) error {
	return keybrake.Errorf(keybrake.ENOTFOUND, "Email not found (keybrake: this vault key may reach only the emails it, or a key minted under it, sent through keybrake; nothing was sent to Resend).")
}

func resendClass(c resend.Class) Class {
	switch c {
	case resend.ClassRead:
		return ClassRead
	case resend.ClassWrite:
		return ClassWrite
	case resend.ClassPriced:
		return ClassPriced
	}
	return ClassUnpriced
}

// Decide applies the key's Resend scope (resend.Policy: senders,
// recipient domains, recipients per email) to every email of a send or a
// batch.
func (v *resendVendor) Decide(ctx context.Context, k *keybrake.Key, req *VendorRequest) error {
	if k.ResendScope == nil {
		return nil
	}
	rr := req.Parsed.(*resendRequest)
	return resend.Policy(*k.ResendScope).Check(rr.emails, rr.op.Name == "emails.batch")
}

// Price prices every email of a send or a batch; a batch is reserved
// whole. The email count caps count recipients: Resend counts every to,
// cc and bcc address as one email against the quota its plans bill.
func (v *resendVendor) Price(ctx context.Context, k *keybrake.Key, req *VendorRequest) (VendorCost, error) {
	rr := req.Parsed.(*resendRequest)
	cost, err := v.cfg.Pricer.Price(rr.emails)
	if err != nil {
		return VendorCost{}, err
	}
	return VendorCost{Micros: cost.Micros, CountKind: keybrake.CountEmails, Count: int64(cost.Recipients),
		Detail: fmt.Sprintf("%d emails, %d recipients", cost.Emails, cost.Recipients)}, nil
}

// Prepare authenticates with the real key and passes the Idempotency-Key
// (the client's, or keybrake's own) so that a lost answer can be replayed.
func (v *resendVendor) Prepare(out *http.Request, req *VendorRequest) {
	keyID := ""
	if rr, ok := req.Parsed.(*resendRequest); ok {
		keyID = rr.keyID
	}
	v.prepare(out, keyID, req.IdempotencyKey)
}

func (v *resendVendor) prepare(out *http.Request, keyID, idem string) {
	out.Header.Set("Authorization", resend.BearerAuth(v.cfg.APIKey))
	if out.Method != http.MethodGet {
		out.Header.Set("Content-Type", "application/json")
	}
	if idem != "" {
		out.Header.Set("Idempotency-Key", upstreamIdempotencyKey(keyID, idem))
	}
}

// upstreamIdempotencyKey is the Idempotency-Key Resend sees for vault key
// keyID's key idem. Resend scopes keys by its API key, which every vault
// key shares: sent as is, one vault key's key would replay another's send
// (swallowing it, or handing over its email id). A digest of both keeps
// each vault key's keys its own, and is the same on every retry.
func upstreamIdempotencyKey(keyID, idem string) string {
	sum := sha256.Sum256([]byte(keyID + "\x00" + idem))
	return "kb_" + hex.EncodeToString(sum[:24])
}

// Settle settles a send or a batch at its reserved amount: Resend bills
// every email it accepted. A scheduled email is settled too (it is sent
// later without passing keybrake); canceling it does not release it.
func (v *resendVendor) Settle(req *VendorRequest, body []byte) VendorOutcome {
	var one struct {
		ID   string `json:"id"`
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &one)
	id := one.ID
	if id == "" && len(one.Data) > 0 {
		id = one.Data[0].ID
	}
	return VendorOutcome{Final: true, State: keybrake.StateSettled, AtReserved: true, ObjectID: id, Reason: "settled at the reserved amount"}
}

// Resolve replays a send whose answer was lost with the same
// Idempotency-Key and body: Resend answers with the first response and
// sends nothing again.
//
// Past Resend's idempotency window (less an hour, for clocks) a replay is
// a new send: Resend has forgotten the key and would send the emails
// again, uncounted, if the first send went out. Such a send is not
// replayed; it stays counted, settled at the reserved amount.
func (v *resendVendor) Resolve(ctx context.Context, rsv *keybrake.Reservation, rt http.RoundTripper) (VendorOutcome, error) {
	if v.now != nil && v.now().Sub(rsv.CreatedAt) > resend.IdempotencyWindow-time.Hour {
		return VendorOutcome{Final: true, State: keybrake.StateSettled, AtReserved: true,
			Reason: "settled at the reserved amount unreplayed: Resend forgets an Idempotency-Key after 24 hours, and a replay now could send the emails again"}, nil
	}
	u := *v.cfg.Upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + strings.TrimPrefix(rsv.Request.Path, "/resend")
	r, err := http.NewRequestWithContext(ctx, rsv.Request.Method, u.String(), strings.NewReader(rsv.Request.Body))
	if err != nil {
		return VendorOutcome{}, err
	}
	v.prepare(r, rsv.KeyID, rsv.IdempotencyKey)
	resp, err := rt.RoundTrip(r)
	if err != nil {
		return VendorOutcome{}, fmt.Errorf("replay: %s", upstreamErrorKind(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	switch st := resp.StatusCode; {
	case st >= 200 && st < 300:
		out := v.Settle(nil, body)
		out.Reason = "settled by idempotent replay"
		out.Sent = v.SentIDs(strings.TrimPrefix(rsv.Operation, keybrake.VendorResend+"."), body)
		return out, nil
	case st == http.StatusConflict || st == http.StatusTooManyRequests || st >= 500:
		return VendorOutcome{Reason: fmt.Sprintf("replay answered %d", st)}, nil
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		// Resend checks the API key before its idempotency layer and
		// saves no such answer: keybrake's key was revoked or rotated,
		// which says nothing of what the first send did.
		return VendorOutcome{Reason: fmt.Sprintf("replay answered %d: keybrake's Resend key is refused now; will retry", st)}, nil
	default:
		return VendorOutcome{Final: true, State: keybrake.StateReleased, Reason: fmt.Sprintf("released: replay answered %d", st)}, nil
	}
}

// WriteError writes err as Resend does: {"statusCode", "name", "message"}.
func (v *resendVendor) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	e := resend.ErrorFor(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.StatusCode)
	w.Write(e.Body())
}
