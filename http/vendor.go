package http

import (
	"context"
	"net/http"
	"net/url"

	"github.com/keybrake/keybrake"
)

// Vendor is everything the request path knows about one upstream API. The
// request path (proxy.serve for Stripe, vendorProxy.serve for the others)
// runs the same steps for every vendor — authenticate, parse, decide,
// price, reserve, forward, settle, audit — and asks the vendor only what
// differs. Adding a vendor is a package of API knowledge (stripe/, twilio/,
// resend/), an adapter here implementing Vendor, and one entry in
// Server.vendors.
type Vendor interface {
	// Name is the key's vendor field and the route prefix: "twilio" serves
	// /twilio/….
	Name() string

	// Authenticate returns the vault key a request carries in the vendor's
	// own convention, in its canonical vault_key_… form. Returns
	// EUNAUTHORIZED, never echoing the secret.
	Authenticate(r *http.Request) (string, error)

	// Parse names and classifies the operation from the method, the path
	// after the prefix and the body (read and bounded by the caller).
	// Returns EINVALID for what it cannot parse and ENOTFOUND for an
	// operation it does not know: default deny.
	Parse(args ParseArgs) (*VendorRequest, error)

	// Decide applies what the key's policy says about this vendor's
	// requests beyond the endpoint allowlist and the refusal of unpriced
	// operations, which the request path applies to every vendor. Returns
	// EFORBIDDEN saying why.
	Decide(k *keybrake.Key, req *VendorRequest) error

	// Price returns what a ClassPriced request may cost and count, reserved
	// before it is forwarded. Returns EINVALID for a bad parameter and
	// EFORBIDDEN when it cannot be priced (no rate, unknown country).
	Price(k *keybrake.Key, req *VendorRequest) (VendorCost, error)

	// Prepare rewrites the outgoing request: the real credential in place
	// of the vault key, the vendor's content type, and an idempotency key
	// where the vendor has them.
	Prepare(out *http.Request, req *VendorRequest)

	// Settle reads the answer to a request that reserved: what it settles
	// to. It is called for 2xx answers only; the request path releases on
	// 4xx and keeps 5xx and lost answers uncertain.
	Settle(req *VendorRequest, body []byte) VendorOutcome

	// Redact returns the body of a 2xx answer with every credential the
	// upstream put in it removed (Twilio's auth_token), or ok=false when
	// it cannot be passed on at all.
	Redact(req *VendorRequest, body []byte) (out []byte, ok bool)

	// Resolve finds the outcome of a reservation whose answer was lost or
	// whose price was not known yet, with rt as the transport to the
	// upstream. Final is false while it cannot tell: the reservation stays
	// counted.
	Resolve(ctx context.Context, rsv *keybrake.Reservation, rt http.RoundTripper) (VendorOutcome, error)

	// WriteError renders a refusal in the vendor's own shape and status.
	WriteError(w http.ResponseWriter, err error)
}

// ParseArgs is what Vendor.Parse reads; a struct so fields can be added
// without breaking a vendor.
type ParseArgs struct {
	Method string
	Path   string // escaped, after the vendor's route prefix
	Query  url.Values
	Header http.Header
	Body   []byte
}

// Class is how the request path treats an operation, the same four
// classes for every vendor.
type Class int

// The classes.
const (
	ClassRead     Class = iota // nothing is sent and no money moves
	ClassWrite                 // a known write that moves no money
	ClassPriced                // moves money and the vendor can price it: reserved first
	ClassUnpriced              // may move money and cannot be priced: refused unless allow_unpriced
)

// VendorRequest is a parsed request.
type VendorRequest struct {
	Operation      string // "messages.create": what allowed_endpoints names
	Class          Class
	Reason         string // why unpriced, for the refusal
	Path           string // the upstream path, as forwarded
	RawQuery       string // forwarded on GET
	Body           []byte // forwarded body (POST, PATCH)
	IdempotencyKey string // the client's, where the vendor has them; "" otherwise
	Parsed         any    // the vendor's own parsed form
}

// VendorCost is what a priced request reserves: USD micros and a count.
type VendorCost struct {
	Micros    keybrake.Micros
	CountKind string // keybrake.CountMessages…
	Count     int64
	Detail    string // for the audit log: "US, 2 GSM7 segments"
	Forward   []byte // when set, the body to forward instead (a TimeLimit the price relied on)
}

// VendorOutcome is what a response or a resolution settles a reservation
// to.
type VendorOutcome struct {
	Final  bool            // false: not known yet; the reservation stays counted
	State  string          // keybrake.StateSettled, StateReleased or StateHeld (price pending)
	Micros keybrake.Micros // the settled amount, unless AtReserved
	// AtReserved settles at the amount reserved: the vendor bills what
	// keybrake priced (Resend), or holds it until the price is known.
	AtReserved bool
	ObjectID   string
	Reason     string
}
