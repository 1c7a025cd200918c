package stripe

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sort"
	"strconv"
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
	h := sha256.New()
	for _, s := range []string{a.KeyID, a.Operation, a.Path, a.Account, a.Version} {
		writeField(h, s)
	}
	var pairs []Pair
	if a.Form != nil {
		pairs = append(pairs, a.Form.Pairs...)
	}
	sort.SliceStable(pairs, func(i, j int) bool { return pairs[i].Key < pairs[j].Key })
	writeField(h, strconv.Itoa(len(pairs)))
	for _, p := range pairs {
		writeField(h, p.Key)
		writeField(h, p.Value)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeField(h hash.Hash, s string) {
	h.Write([]byte(strconv.Itoa(len(s))))
	h.Write([]byte{':'})
	h.Write([]byte(s))
}
