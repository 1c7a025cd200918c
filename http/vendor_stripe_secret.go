package http

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/keybrake/keybrake"
)

// secretScrubber is a Vendor whose answers, 2xx or not and to reads too,
// may carry a secret that moves money without passing keybrake again, and
// which keybrake removes unless the key holds what the secret moves.
type secretScrubber interface {
	// ScrubSecrets returns body with every such secret the key does not
	// hold replaced; changed is false when body is returned as it was.
	// ok=false means body may carry such a secret keybrake could not find
	// (an answer it cannot parse): it must not be passed on.
	ScrubSecrets(ctx context.Context, key *keybrake.Key, body []byte) (out []byte, changed, ok bool)
}

var _ secretScrubber = (*stripeVendor)(nil)

// ScrubSecrets nulls the client_secret of every payment intent in a Stripe
// answer, however deeply embedded (a retrieve, a list or search page, an
// expand[] of a charge or invoice, an event's data), that a browser with
// the publishable key could still confirm and that the key does not hold
// (HoldService.HeldObjects): an intent made outside keybrake, or by another
// vault key. Confirming it would move money that no cap of this key
// counts. An intent the key created is held in full, so its secret is
// returned. "Could still confirm" is every status but succeeded,
// canceled, processing and requires_capture, so a status Stripe adds later
// is redacted. If the holds cannot be read, every such secret is removed.
// The intent's next_action goes with its secret (scrubIntents).
//
// For a key without allow_unpriced it also nulls what pays a checkout
// session or an invoice (scrubPayables): such a key cannot make either
// payable, so every one it reads was made payable by somebody else, and
// paying it moves money no cap of the key counts. A key with
// allow_unpriced keeps those, and the secret of an intent that pays an
// invoice (collectInvoiceIntents): it pays the invoice whose hosted page,
// and invoices.pay, the key has uncounted anyway, and Stripe's
// subscription integration confirms it in the browser.
//
// Only an answer that may hold one of these (mayCarrySecret) is parsed:
// reads pay a byte scan. An answer that cannot be parsed is passed as it
// is, unless it holds a payment intent's secret (pi_…_secret_…) or, for a
// key without allow_unpriced, a checkout session's or invoice's payment
// page: then ok is false.
func (v *stripeVendor) ScrubSecrets(ctx context.Context, key *keybrake.Key, body []byte) ([]byte, bool, bool) {
	if !mayCarrySecret(body) {
		return body, false, true
	}
	var doc any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil || d.More() {
		return body, false, !carriesIntentSecret(body) && (key.AllowUnpriced || !carriesPayable(body))
	}
	changed := !key.AllowUnpriced && scrubPayables(doc)
	var found []map[string]any
	collectIntentSecrets(doc, &found)
	if len(found) > 0 {
		kept := map[string]bool{}
		if key.AllowUnpriced {
			collectInvoiceIntents(doc, kept)
			delete(kept, "") // an invoice without one
		}
		changed = v.scrubIntents(ctx, key, found, kept) || changed
	}
	if !changed {
		return body, false, true
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return body, false, false
	}
	return out.Bytes(), true, true
}

// scrubIntents nulls the client_secret of every intent in found that key
// does not hold and that is not in kept, and its next_action: a 3-D Secure
// or wallet redirect, a voucher, a QR code or bank transfer instructions,
// on which whoever opens it completes the payment its creator started. It
// reports whether it nulled any.
func (v *stripeVendor) scrubIntents(ctx context.Context, key *keybrake.Key, found []map[string]any, kept map[string]bool) bool {
	ids := make([]string, 0, len(found))
	for _, m := range found {
		ids = append(ids, intentID(m))
	}
	held, err := v.s.Store.HeldObjects(ctx, key.ID, ids[:min(len(ids), keybrake.MaxHeldObjects)])
	if err != nil {
		v.s.logger().Warn("reading holds failed; removing every client_secret of a confirmable payment intent from the answer", "key", key.ID, "err", err)
		held = nil
	}
	changed := false
	for i, m := range found {
		if !held[ids[i]] && !kept[ids[i]] {
			m["client_secret"] = nil
			if _, ok := m["next_action"]; ok {
				m["next_action"] = nil // the page on which its payer completes it
			}
			changed = true
		}
	}
	return changed
}

// mayCarrySecret reports whether body may hold something ScrubSecrets
// removes: a client secret, a checkout session, an invoice's payment page,
// or a \u escape, which could spell any of them.
func mayCarrySecret(body []byte) bool {
	for _, s := range [][]byte{[]byte("_secret"), []byte(`\u`), []byte("checkout.session"), []byte("hosted_invoice_url")} {
		if bytes.Contains(body, s) {
			return true
		}
	}
	return false
}

// payableFields are the fields that pay an object at amounts its creator
// chose, by object: the embedded checkout's client secret and the hosted
// checkout page of a session; an invoice's hosted page and its PDF, which
// links to that page.
var payableFields = map[string][]string{
	"checkout.session": {"client_secret", "url"},
	"invoice":          {"hosted_invoice_url", "invoice_pdf"},
}

// unpayable are the statuses, by object, in which nobody can pay it any
// more (or yet: a draft invoice has no page). Every other status, a new
// one Stripe adds included, is payable: an uncollectible invoice still
// takes a payment.
var unpayable = map[string]map[string]bool{
	"checkout.session": {"complete": true, "expired": true},
	"invoice":          {"draft": true, "paid": true, "void": true},
}

// scrubPayables nulls the payableFields of every checkout session and
// invoice under v that can still be paid, and reports whether it nulled
// any. A checkout session in setup mode saves a card and charges nothing;
// it keeps them.
func scrubPayables(v any) bool {
	changed := false
	switch v := v.(type) {
	case map[string]any:
		object, _ := v["object"].(string)
		status, _ := v["status"].(string)
		if fields, ok := payableFields[object]; ok && !unpayable[object][status] && v["mode"] != "setup" {
			for _, f := range fields {
				if s, _ := v[f].(string); s != "" {
					v[f] = nil
					changed = true
				}
			}
		}
		for _, e := range v {
			changed = scrubPayables(e) || changed
		}
	case []any:
		for _, e := range v {
			changed = scrubPayables(e) || changed
		}
	}
	return changed
}

// carriesPayable reports whether body, which could not be parsed, may hold
// a checkout session's or an invoice's payment page or secret.
func carriesPayable(body []byte) bool {
	for _, s := range [][]byte{[]byte("cs_test_"), []byte("cs_live_"), []byte("checkout.stripe.com"), []byte("hosted_invoice_url"), []byte("invoice.stripe.com"), []byte("pay.stripe.com")} {
		if bytes.Contains(body, s) {
			return true
		}
	}
	return false
}

// collectIntentSecrets appends to found every object under v that is a
// payment intent (its object field, or a client secret of one, pi_…) with
// a client secret and a status a browser can still confirm.
func collectIntentSecrets(v any, found *[]map[string]any) {
	switch v := v.(type) {
	case map[string]any:
		if secret, ok := v["client_secret"].(string); ok && secret != "" && (v["object"] == "payment_intent" || strings.HasPrefix(secret, "pi_")) {
			if status, _ := v["status"].(string); !unconfirmable[status] {
				*found = append(*found, v)
			}
		}
		for _, e := range v {
			collectIntentSecrets(e, found)
		}
	case []any:
		for _, e := range v {
			collectIntentSecrets(e, found)
		}
	}
}

// collectInvoiceIntents adds to ids the payment intent of every invoice
// under v, the one Stripe creates when it finalizes the invoice: an
// invoice's confirmation_secret (its client secret names the intent),
// its payment_intent (before API 2025-03-31, an ID or expanded), and an
// intent whose invoice field is set (before 2025-03-31). Intents attached
// to an invoice as payments (invoices.attach_payment, a free write) are
// not its own: they are not added.
func collectInvoiceIntents(v any, ids map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		switch v["object"] {
		case "invoice":
			if cs, ok := v["confirmation_secret"].(map[string]any); ok {
				ids[intentID(map[string]any{"client_secret": cs["client_secret"]})] = true
			}
			switch pi := v["payment_intent"].(type) {
			case string:
				ids[pi] = true
			case map[string]any:
				ids[intentID(pi)] = true
			}
		case "payment_intent":
			if inv := v["invoice"]; inv != nil && inv != "" {
				ids[intentID(v)] = true
			}
		}
		for _, e := range v {
			collectInvoiceIntents(e, ids)
		}
	case []any:
		for _, e := range v {
			collectInvoiceIntents(e, ids)
		}
	}
}

// unconfirmable are the statuses of a payment intent that no browser can
// confirm: final, or waiting for the secret key (a capture) or the bank.
var unconfirmable = map[string]bool{"succeeded": true, "canceled": true, "processing": true, "requires_capture": true}

// intentID is a payment intent's ID, or its client secret's prefix
// (pi_X_secret_Y names pi_X) when the object does not carry one.
func intentID(m map[string]any) string {
	if id, ok := m["id"].(string); ok && id != "" {
		return id
	}
	secret, _ := m["client_secret"].(string)
	id, _, _ := strings.Cut(secret, "_secret_")
	return id
}

// carriesIntentSecret reports whether body, which could not be parsed, may
// hold a payment intent's client secret.
func carriesIntentSecret(body []byte) bool {
	return bytes.Contains(body, []byte("pi_")) && (bytes.Contains(body, []byte("_secret_")) || bytes.Contains(body, []byte(`\u`)))
}

// scrubSecrets runs the vendor's ScrubSecrets on an answer read into body
// and puts what it returns on resp; an answer it cannot clean becomes the
// vendor's 502 api_error. It returns the body now on resp.
func (p *proxy) scrubSecrets(resp *http.Response, c *call, body []byte) []byte {
	sc, ok := c.v.(secretScrubber)
	if !ok {
		return body
	}
	out, changed, ok := sc.ScrubSecrets(resp.Request.Context(), c.key, body)
	switch {
	case !ok:
		rec := renderError(c.v, resp.Request, keybrake.Errorf(keybrake.EUNAVAILABLE, "keybrake could not read %s's answer to remove the client secrets and payment pages this key may not receive, so it does not pass it on.", c.vendorTitle()))
		for name, vals := range rec.header {
			resp.Header[name] = vals
		}
		out = rec.body.Bytes()
		resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
	case !changed:
		return body
	}
	setBody(resp, out)
	return out
}

// setBody makes b the body of resp, with its length.
func setBody(resp *http.Response, b []byte) {
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
}
