package stripe

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// FingerprintArgs is what identifies one idempotent request: who sends it,
// to which operation, on which account, read under which API version, with
// which parameters.
type FingerprintArgs struct {
	KeyID     string // the vault key sending the request
	Operation string // e.g. charges.create
	Path      string // the escaped upstream path
	Account   string // the effective connected account; "" for the platform
	Version   string // Stripe-Version; "" for the account's default
	Form      *Form  // the client's parameters, decoded; nil for none
}

// Fingerprint returns a hex SHA-256 that is equal for two requests Stripe
// would treat as the same under one Idempotency-Key, and differs when the
// key, operation, account, API version or any parameter differs.
//
// Parameters are hashed decoded (metadata%5Bx%5D and metadata[x], + and
// %20 are the same to Stripe) and sorted by name with a stable sort, so
// their order on the wire does not matter. Only the items of an a[] list
// share a name (ParseForm refuses any other repeated name), and the stable
// sort keeps them in the order sent: a list's order is part of its value
// (expand[]=a&expand[]=b is not expand[]=b&expand[]=a to every endpoint).
// Indexed lists (items[0][price]) carry their order in their names.
//
// Every field is length-prefixed, so no choice of values can make two
// different requests hash alike.
func Fingerprint(a FingerprintArgs) string {
	bp := fingerprintBufs.Get().(*[]byte)
	b := (*bp)[:0]
	for _, s := range [...]string{a.KeyID, a.Operation, a.Path, a.Account, a.Version} {
		b = appendField(b, s)
	}
	var pairs []Pair
	if a.Form != nil {
		pairs = a.Form.Pairs
	}
	if !slices.IsSortedFunc(pairs, comparePairKeys) {
		pairs = slices.Clone(pairs)
		slices.SortStableFunc(pairs, comparePairKeys)
	}
	b = appendField(b, strconv.Itoa(len(pairs)))
	for _, p := range pairs {
		b = appendField(b, p.Key)
		b = appendField(b, p.Value)
	}
	sum := sha256.Sum256(b)
	if cap(b) <= maxPooledFingerprint {
		*bp = b
		fingerprintBufs.Put(bp)
	}
	return hex.EncodeToString(sum[:])
}

// fingerprintBufs holds the buffers Fingerprint lays its fields out in
// before hashing them in one call: a capped charge fingerprints every
// request, and one buffer instead of three small writes per field keeps
// that off the allocator.
var fingerprintBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledFingerprint is the largest buffer returned to fingerprintBufs,
// so one huge body does not stay pinned in the pool.
const maxPooledFingerprint = 64 << 10

func comparePairKeys(x, y Pair) int { return strings.Compare(x.Key, y.Key) }

// appendField appends s length-prefixed: its length in decimal, ':', s.
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}
