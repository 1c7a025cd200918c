package http

import (
	"context"
	"net/http"
	"net/url"

	"github.com/keybrake/keybrake"
)

// Vendor is everything the request path knows about one upstream API. The
// request path (proxy.serve) runs the same steps for every vendor —
// authenticate, parse, decide, price, reserve, forward, settle, audit — and
// asks the vendor only what differs. Adding a vendor is a package of API
// knowledge (stripe/, twilio/, resend/), a type here implementing Vendor,
// and one line in Server.openVendors.
//
// A vendor with a step the others lack implements one of the optional
// interfaces the path checks: Holder (money objects that stay movable
// after the request, Stripe's intents), Redactor (answers carrying a
// credential, Twilio's account), ForeignReplayTeller (idempotency keys
// shared by every vault key, Stripe's), LeftoverTeller (refusals that
// leave a money object behind, Stripe's declined intents), secretScrubber
// (answers carrying a secret that moves money, Stripe's client secrets).
type Vendor interface {
	// Name is the key's vendor field and the route prefix: "twilio" serves
	// /twilio/….
	Name() string

	// Authenticate returns the vault key a request carries in the vendor's
	// own convention, in its canonical vault_key_… form. Returns
	// EUNAUTHORIZED, never echoing the secret.
	Authenticate(r *http.Request) (string, error)

	// Parse names and classifies the operation from the method, the path
	// after the prefix, the headers and the body (read and bounded by the
	// caller), refusing what the vendor cannot parse unambiguously.
	// Returns EINVALID for what it cannot parse and ENOTFOUND for an
	// operation it does not know: default deny.
	Parse(args ParseArgs) (*VendorRequest, error)

	// Decide applies what the key's policy says about this vendor's
	// requests beyond what the request path applies to every vendor (the
	// endpoint allowlist, the refusal of unpriced operations, guards,
	// approvals and caps): scopes such as accounts, customers, countries or
	// senders. Returns EFORBIDDEN saying why.
	Decide(ctx context.Context, k *keybrake.Key, req *VendorRequest) error

	// Price returns what a ClassPriced request may cost and count, reserved
	// before it is forwarded. Returns EINVALID for a bad parameter and
	// EFORBIDDEN when it cannot be priced (no rate, unknown country).
	Price(ctx context.Context, k *keybrake.Key, req *VendorRequest) (VendorCost, error)

	// Prepare rewrites the outgoing request, whose URL and body the request
	// path has set and whose headers are empty but for Accept, User-Agent
	// and Content-Length: the real credential, the vendor's content type,
	// and the idempotency key where the vendor has them.
	Prepare(out *http.Request, req *VendorRequest)

	// Settle reads the 2xx answer to a request that reserved: what it
	// settles to. The request path releases on 4xx and keeps 5xx and lost
	// answers uncertain.
	Settle(req *VendorRequest, body []byte) VendorOutcome

	// Resolve finds the outcome of a reservation whose answer was lost or
	// whose price was not known yet, with rt as the transport to the
	// upstream. Final is false while it cannot tell: the reservation stays
	// counted.
	Resolve(ctx context.Context, rsv *keybrake.Reservation, rt http.RoundTripper) (VendorOutcome, error)

	// WriteError renders a refusal in the vendor's own shape and status.
	// err may be a *refusal carrying hints (a status, a vendor code, the
	// keybrake detail) a vendor's shape can use; keybrake.ErrorCode and
	// ErrorMessage read through it.
	WriteError(w http.ResponseWriter, r *http.Request, err error)
}

// Holder is a Vendor whose requests may act on an existing money object
// that stays movable after the request (a payment intent its client secret
// can confirm). The request path locks the object across replicas and
// keeps one hold on it, raised by the difference when a request raises
// the amount (docs/money-model.md).
type Holder interface {
	// HeldObject returns the money object a ClassPriced request acts on,
	// "" for a request that creates its own, and whether the request
	// cancels it (reserving nothing).
	HeldObject(req *VendorRequest) (object string, cancel bool)

	// Target prices a request on an object: the most the object can move
	// once the request has run, given held, what its live hold counts
	// (nil when it has none).
	Target(ctx context.Context, k *keybrake.Key, req *VendorRequest, held *VendorCost) (VendorCost, error)
}

// Redactor is a Vendor whose 2xx answers may carry a credential.
type Redactor interface {
	// Redact returns the body of a 2xx answer with every credential the
	// upstream put in it removed (Twilio's auth_token), or ok=false when
	// it cannot be passed on at all.
	Redact(req *VendorRequest, body []byte) (out []byte, ok bool)
}

// ForeignReplayTeller is a Vendor whose idempotency keys are scoped by the
// real credential, which every vault key shares: a new reservation's
// request may be answered with another client's saved response.
type ForeignReplayTeller interface {
	// ForeignReplay reports whether resp is a saved response replayed for
	// an idempotency key keybrake had not seen from this vault key.
	ForeignReplay(resp *http.Response) bool
}

// ParseArgs is what Vendor.Parse reads; a struct so fields can be added
// without breaking a vendor.
type ParseArgs struct {
	Request  *http.Request // the incoming request, for what the fields below do not carry
	KeyID    string        // the authenticated key, for the request's fingerprint
	Method   string
	Path     string // escaped, after the vendor's route prefix
	RawQuery string // as sent
	Query    url.Values
	Header   http.Header
	Body     []byte // POST, PATCH and PUT; nil for GET and DELETE
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

// ownKeyOperation is the operation keybrake answers itself with the
// calling key's policy and budget (GET /stripe/v1/keybrake/key).
const ownKeyOperation = "keybrake.key"

// VendorRequest is a parsed request. The fields after Parsed have
// defaults the request path fills in when the vendor leaves them empty.
type VendorRequest struct {
	Operation      string // "messages.create": what allowed_endpoints names
	Class          Class
	Reason         string // why unpriced, for the refusal
	Path           string // the upstream path, escaped, as forwarded
	RawQuery       string // forwarded on GET and DELETE
	Body           []byte // forwarded body (POST, PATCH)
	IdempotencyKey string // the client's, where the vendor has them; keybrake's own once reserved
	// Idempotent is true when the vendor replays this request's saved
	// answer by its Idempotency-Key: keybrake makes one when the client
	// sent none, Prepare sends it, and the resolver replays with it.
	Idempotent bool
	Account    string // the vendor account acted on (Stripe-Account), "" for the credential's own
	Version    string // the API version the request pins (Stripe-Version)
	Params     Params // what guards read of the parameters; nil for none
	// Subject is what the guards call the request's customer when the
	// vendor knows it better than the first of guardSubjects in Params
	// (the payment a refund refunds); "" to take that.
	Subject string
	Parsed  any // the vendor's own parsed form

	// SentID is the id of the message, call or email a request reads or
	// acts on (a SentScoper's fetch, update, cancel, delete): allowed
	// only to the key that sent it through keybrake, or an ancestor of
	// that key (sent.go); "" for a request naming none.
	SentID string
	// Sends is true for a create whose answer names what it made
	// (SentScoper.SentIDs), recorded as the key's own.
	Sends bool
	// Fresh is true for a request that moves no money but that the key's
	// scope narrows (a Twilio list under twilio_scope.allowed_from): on a
	// store whose key reports may be late, it is decided on the key as
	// the store has it now, as a money-moving request is, not on the
	// cache (a scope added, or a revocation, elsewhere applies at once).
	Fresh bool

	// Label names the operation in audit events, metrics and
	// reservations; "<vendor>.<operation>" by default. Stripe's keep
	// their unprefixed names ("charges.create").
	Label string
	// Record is the path audit events and reservations record, and the
	// resolver routes by; "/<vendor><Path>" by default. Stripe's record
	// the API path ("/v1/charges"), as they always have.
	Record string
	// Fingerprint tells a replay from another request under the same
	// idempotency key; "<vendor>:<operation>:<hash of the body>" by
	// default.
	Fingerprint string
}

// Params is a request's parameters as the guards read them: the customer
// (guardSubjects) and the duplicate guard's metadata.
type Params interface {
	Get(path ...string) (string, bool)
	Map(path ...string) map[string]string
}

// VendorCost is what a priced request reserves: USD micros and a count.
type VendorCost struct {
	Micros keybrake.Micros
	// Amount and Currency are the amount in the vendor's currency, in its
	// minor unit; Currency "" means Micros in USD cents.
	Amount    int64
	Currency  string
	CountKind string // keybrake.CountMessages…
	Count     int64
	Detail    string // for the audit log: "US, 2 GSM7 segments"
	Forward   []byte // when set, the body to forward instead (a TimeLimit the price relied on, a metadata tag)
	// Untracked forwards the request without reserving: an uncapped key
	// that only tracks spend, asking for an amount keybrake has no rate
	// for.
	Untracked bool
}

// VendorOutcome is what a response or a resolution settles a reservation
// to.
type VendorOutcome struct {
	Final  bool            // false: not known yet; the reservation stays counted
	State  string          // keybrake.StateSettled, StateReleased or StateHeld (still movable, or price pending)
	Micros keybrake.Micros // the settled or held amount, unless AtReserved
	// AtReserved settles or holds at the amount reserved: the vendor bills
	// what keybrake priced (Resend), the price is not known yet (Twilio),
	// or the answer's amount cannot be converted (no rate).
	AtReserved bool
	// Amount and Currency are the object's own amount, in the currency's
	// minor unit; Currency "" means the reservation's (AtReserved) or USD
	// cents of Micros.
	Amount   int64
	Currency string
	ObjectID string
	Reason   string
	// Status is the upstream status the outcome was read from, 0 for none;
	// the resolver records it on the reservation.
	Status int
	// Sent are the ids a resolved create made (SentScoper.SentIDs of the
	// answer a replay read), recorded as the reservation's key's own.
	Sent []string
}
