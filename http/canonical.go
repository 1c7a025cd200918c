package http

import (
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// envelope is the one parse of the request headers that select an account
// or change how Stripe reads the request. Everything downstream (decide,
// the lookups, the reservation, the fingerprint, the upstream request)
// reads it, never the raw headers, so keybrake and Stripe cannot disagree
// about which account or which body a request means.
type envelope struct {
	// Account is the effective connected account, from Stripe-Account or
	// Stripe-Context; "" for the platform.
	Account string
	// IdempotencyKey is the client's Idempotency-Key; "" if none was sent.
	IdempotencyKey string
	// Version is the Stripe-Version; "" for the account's default.
	Version string
}

// singleHeaders are the headers keybrake reads. Each may be sent at most
// once, with one value: a second line or a comma-joined value means two
// readers (keybrake, a proxy, Stripe) could each pick a different one.
var singleHeaders = []string{
	"Stripe-Account", "Stripe-Context", "Idempotency-Key", "Stripe-Version",
	"Content-Type", "Content-Encoding",
}

// inertHeaders are the client headers forwarded as sent: they describe the
// client or the answer it wants, and change nothing about what Stripe does.
// Every other client header is dropped; keybrake sets the rest itself.
var inertHeaders = []string{"User-Agent", "X-Stripe-Client-User-Agent", "Accept", "Accept-Language"}

// formType is the only body type keybrake parses, as Stripe takes it.
const formType = "application/x-www-form-urlencoded"

// maxStripeVersion bounds Stripe-Version ("2025-03-31.basil", with betas
// "2024-06-20; feature_beta=v1").
const maxStripeVersion = 200

// parseEnvelope reads the request's envelope strictly. It returns EINVALID
// naming the header for: a header of singleHeaders repeated, comma-joined
// or empty; a Stripe-Account or Stripe-Context that is not one connected
// account id (acct_ and letters or digits), or the two naming different
// accounts; an Idempotency-Key with characters other than printable ASCII
// less quotes, backslash and comma (a Content-Encoding other than identity
// is refused before, for every vendor: refuseEncoding); a Transfer-Encoding other than chunked; a POST Content-Type other than
// the form type (charset=utf-8 only); a body on GET or DELETE.
func parseEnvelope(r *http.Request) (envelope, error) {
	var env envelope
	h := map[string]string{}
	for _, name := range singleHeaders {
		vals, ok := r.Header[name]
		if !ok {
			continue
		}
		if len(vals) > 1 {
			return env, keybrake.ErrorParam(name, "The %s header was sent %d times; keybrake accepts it once, with one value, and forwarded nothing.", name, len(vals))
		}
		v := strings.Trim(vals[0], " \t")
		if v == "" {
			return env, keybrake.ErrorParam(name, "The %s header is empty; leave it out or give it one value.", name)
		}
		if strings.Contains(v, ",") {
			return env, keybrake.ErrorParam(name, "The %s header holds several comma-separated values (%q); keybrake accepts one value and forwarded nothing.", name, v)
		}
		h[name] = v
	}
	if acct, ok := h["Stripe-Account"]; ok {
		if !isAccountID(acct) {
			return env, keybrake.ErrorParam("Stripe-Account", "Invalid Stripe-Account %q: keybrake accepts one connected account id (acct_…).", acct)
		}
		env.Account = acct
	}
	if ctx, ok := h["Stripe-Context"]; ok {
		if !isAccountID(ctx) {
			return env, keybrake.ErrorParam("Stripe-Context", "Invalid Stripe-Context %q: keybrake accepts only one connected account id (acct_…), not a nested context or another kind of id.", ctx)
		}
		if env.Account != "" && env.Account != ctx {
			return env, keybrake.ErrorParam("Stripe-Context", "Stripe-Context %s names another account than Stripe-Account %s; send one of them.", ctx, env.Account)
		}
		env.Account = ctx
	}
	if k, ok := h["Idempotency-Key"]; ok {
		if !isIdempotencyKey(k) {
			return env, keybrake.ErrorParam("Idempotency-Key", "Invalid Idempotency-Key: keybrake accepts printable ASCII without quotes, backslashes or commas (a UUID is best).")
		}
		env.IdempotencyKey = k
	}
	if v, ok := h["Stripe-Version"]; ok {
		if len(v) > maxStripeVersion || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '"' || r == '\\' }) {
			return env, keybrake.ErrorParam("Stripe-Version", "Invalid Stripe-Version %q.", v)
		}
		env.Version = v
	}
	if te := r.TransferEncoding; len(te) > 1 || len(te) == 1 && te[0] != "chunked" {
		// Go's server refuses these itself; this keeps it so.
		return env, keybrake.ErrorParam("Transfer-Encoding", "Unsupported Transfer-Encoding %q.", strings.Join(te, ", "))
	}
	switch r.Method {
	case http.MethodPost:
		if ct, ok := h["Content-Type"]; ok && !isFormType(ct) {
			return env, keybrake.ErrorParam("Content-Type", "Invalid Content-Type %q: the Stripe API takes %s bodies (charset=utf-8 at most).", ct, formType)
		}
	case http.MethodGet, http.MethodDelete:
		if err := refuseBody(r); err != nil {
			return env, err
		}
	}
	return env, nil
}

// refuseBody returns EINVALID if a GET or DELETE carries a body: keybrake
// reads their parameters from the query only, so a body is parameters it
// did not check.
func refuseBody(r *http.Request) error {
	err := keybrake.Errorf(keybrake.EINVALID, "A %s request takes its parameters in the query string; keybrake refuses a request body on it and forwarded nothing.", r.Method)
	if r.ContentLength > 0 {
		return err
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if n, _ := io.ReadFull(r.Body, make([]byte, 1)); n > 0 {
		return err
	}
	return nil
}

// isAccountID reports whether s is one connected account id: acct_
// followed by ASCII letters and digits only.
func isAccountID(s string) bool {
	rest, ok := strings.CutPrefix(s, "acct_")
	if !ok || rest == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// isIdempotencyKey reports whether k is safe to store, forward as one
// header and quote in the resolver's metadata search: printable ASCII
// without quotes or backslashes (which would change the search query) or
// commas (which would make it read as two values).
func isIdempotencyKey(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c < 0x20 || c > 0x7e || c == '\'' || c == '"' || c == '\\' || c == ',' {
			return false
		}
	}
	return true
}

// isFormType reports whether ct is the form type, with at most a
// charset=utf-8 parameter.
func isFormType(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != formType {
		return false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return false
		}
	}
	return true
}

// parseForm parses a query string or form body as Stripe's parser would,
// refusing what another parser could read differently: a literal ';'
// (some form parsers also split on it), parameter names with control
// characters or with spaces other than U+0020 inside a nested name (some
// parsers strip spaces after a separator, so "& destination" could be
// destination to Stripe and not to keybrake, and one that trims
// metadata[keybrake_idempotency_key ] would read keybrake's tag), and
// top-level names Stripe's API never uses (isStripeName). A space inside
// a nested name is taken: Stripe's metadata keys may have them
// (metadata[Order ID]), and a parameter name is matched exactly.
func parseForm(raw string) (*stripe.Form, error) {
	if strings.Contains(raw, ";") {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Invalid form encoding: a literal ';' is ambiguous; separate parameters with & and encode ';' in values as %%3B.")
	}
	f, err := stripe.ParseForm(raw)
	if err != nil {
		return nil, err
	}
	for _, p := range f.Pairs {
		if !spacedName(p.Key) {
			return nil, keybrake.ErrorParam(p.Key, "Invalid parameter name %q: parameter names have no control characters, and spaces only inside a nested name (metadata[Order ID]).", p.Key)
		}
		if name, _, _ := strings.Cut(p.Key, "["); !isStripeName(name) {
			return nil, keybrake.ErrorParam(p.Key, "Invalid parameter name %q: the Stripe API's parameters are lower-case letters, digits and underscores, starting with a letter.", p.Key)
		}
	}
	return f, nil
}

// spacedName reports whether key's only white space is U+0020 inside a
// bracketed segment, never at either end of it, and it has no control
// characters. The top-level name is checked by isStripeName.
func spacedName(key string) bool {
	for i, r := range key {
		switch {
		case r == ' ':
			if i == 0 || i == len(key)-1 || key[i-1] == '[' || key[i+1] == ']' || !strings.Contains(key[:i], "[") {
				return false
			}
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return false
		}
	}
	return true
}

// isStripeName reports whether name is shaped like every top-level
// parameter of Stripe's API, [a-z][a-z0-9_]* (all 624 names in its OpenAPI
// description, and the 679 of the preview one). Any other name is one
// keybrake cannot know Stripe reads as keybrake does: "Amount" or "\ufeffamount" next to amount, under a
// parser that folds case or strips a byte order mark, would be a second
// amount keybrake did not price; "_method" is the method override of
// Rack-based servers, which would make a POST keybrake classified as an
// update run as a delete.
func isStripeName(name string) bool {
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// upstreamHeader builds the upstream request's headers from nothing:
// the inert client headers, the parsed Stripe-Version, exactly one
// Stripe-Account for the effective account and never a Stripe-Context,
// and the real key. Whatever else the client sent is not forwarded.
func upstreamHeader(in http.Header, account, version, upstreamKey string) http.Header {
	out := make(http.Header, len(inertHeaders)+6)
	for _, name := range inertHeaders {
		if v, ok := in[name]; ok {
			out[name] = append([]string(nil), v...)
		}
	}
	out.Set("Authorization", "Bearer "+upstreamKey)
	if account != "" {
		out.Set("Stripe-Account", account)
	}
	if version != "" {
		out.Set("Stripe-Version", version)
	}
	return out
}

// tagged reports whether keybrake adds metadata[keybrake_idempotency_key]
// to op, so the resolver can find the object by search.
func tagged(op stripe.Operation) bool {
	if op.Action != "create" {
		return false
	}
	switch op.Resource {
	case "charges", "payment_intents", "refunds", "transfers", "payouts":
		return true
	}
	return false
}

// checkTagKept returns EINVALID naming the parameter if a write to an
// existing charge or payment intent would set, unset or clear the
// metadata tag keybrake put on it when it was created (checkTag): past
// Stripe's idempotency window the resolver finds the object of a lost
// answer by that tag alone, and releases the reservation when nothing
// carries it. Other metadata keys are the client's.
func checkTagKept(op stripe.Operation, form *stripe.Form) error {
	if op.Action == "create" || op.Resource != "charges" && op.Resource != "payment_intents" || !form.Has("metadata") {
		return nil
	}
	md, ok := form.Tree["metadata"].(map[string]any)
	if !ok {
		return keybrake.ErrorParam("metadata", "keybrake tags %s objects with metadata[%s], so metadata must be a hash of keys and values here; it may not be cleared.", op.Resource, metadataKey)
	}
	if _, ok := md[metadataKey]; ok {
		return keybrake.ErrorParam("metadata["+metadataKey+"]", "metadata[%s] is keybrake's own and may not be changed or unset.", metadataKey)
	}
	return nil
}

// stripeMetadataKeys is Stripe's limit on keys in one object's metadata.
const stripeMetadataKeys = 50

// checkTag returns EINVALID naming the parameter if the client's metadata
// could override or crowd out the tag keybrake adds to a tagged operation:
// metadata that is not a map (metadata= would unset all of it), a
// metadata[keybrake_idempotency_key] other than the request's
// Idempotency-Key, or already Stripe's 50 keys besides the tag.
func checkTag(op stripe.Operation, form *stripe.Form, idemKey string) error {
	if !tagged(op) {
		return nil
	}
	v, ok := form.Tree["metadata"]
	if !ok {
		return nil
	}
	md, ok := v.(map[string]any)
	if !ok {
		return keybrake.ErrorParam("metadata", "keybrake tags %s with metadata[%s], so metadata must be a hash of keys and values here; it may not be unset or given as a list.", op.Name, metadataKey)
	}
	n := len(md)
	if tag, ok := md[metadataKey]; ok {
		if s, _ := tag.(string); idemKey == "" || s != idemKey { // with none, keybrake makes one the tag cannot equal
			return keybrake.ErrorParam("metadata["+metadataKey+"]", "metadata[%s] is keybrake's own and must equal the request's Idempotency-Key; leave it out.", metadataKey)
		}
		n--
	}
	if n >= stripeMetadataKeys {
		return keybrake.ErrorParam("metadata", "metadata has %d keys; keybrake adds metadata[%s] to %s and Stripe takes at most %d, so send at most %d.", n, metadataKey, op.Name, stripeMetadataKeys, stripeMetadataKeys-1)
	}
	return nil
}
