package billing

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"

	"github.com/keybrake/keybrake"
)

// MaxNamespace is the longest namespace Key accepts.
const MaxNamespace = 64

// Key returns the content idempotency key of a billing event: "kb_",
// namespace, "_", then the hex SHA-256 of namespace and fields, each
// prefixed with its length as a big-endian uint64, so ("ab", "c") and
// ("a", "bc") hash apart. The key is printable ASCII of at most 3 + 64 + 1 +
// 64 = 132 characters, well under Stripe's 255. Other languages compute the
// same key with the same bytes:
//
//	h = sha256()
//	for s in [namespace, *fields]: b = s.encode("utf-8"); h.update(len(b).to_bytes(8, "big") + b)
//	key = "kb_" + namespace + "_" + h.hexdigest()
//
// Only business fields may go into the key, the fields that say which bill
// this is. Delivery metadata must not: NSQ's Attempts counter, the
// connection or consumer UUID, the nsqd address, per-delivery timestamps,
// the JetStream stream sequence and delivery count, the ZeroMQ peer identity.
// Each of them changes when the broker redelivers the same message (after a
// timeout, a consumer crash, a requeue, a pause and resume, a pod replaced),
// so a key built from them turns every retry into a new charge, which
// Stripe's idempotency then happily creates. Message IDs are stable across
// redeliveries but not across re-publishes of the same event by a producer
// that retried, so they are excluded too.
//
// namespace separates independent billing streams (and test runs) that
// could share a customer and period; it must match [A-Za-z0-9_-]{1,64}
// (ValidateNamespace), since it is part of the printable key.
func Key(namespace string, fields ...string) string {
	h := sha256.New()
	writeField(h, namespace)
	for _, f := range fields {
		writeField(h, f)
	}
	return "kb_" + namespace + "_" + hex.EncodeToString(h.Sum(nil))
}

// writeField writes s to h prefixed with its length.
func writeField(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// ValidateNamespace returns EINVALID unless ns is 1 to 64 ASCII letters,
// digits, '_' or '-'.
func ValidateNamespace(ns string) error {
	if ns == "" || len(ns) > MaxNamespace {
		return keybrake.ErrorParam("namespace", "The billing namespace must be 1 to %d characters.", MaxNamespace)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return keybrake.ErrorParam("namespace", "The billing namespace %q may hold only letters, digits, '_' and '-'.", ns)
		}
	}
	return nil
}
