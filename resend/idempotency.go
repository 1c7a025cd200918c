package resend

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/keybrake/keybrake"
)

// IdempotencyWindow is how long Resend remembers an Idempotency-Key.
const IdempotencyWindow = 24 * time.Hour

// MaxIdempotencyKey is the longest Idempotency-Key Resend accepts.
const MaxIdempotencyKey = 256

// ParseIdempotencyKey reads the Idempotency-Key header values (all of
// them, as http.Header holds them): "" when absent. Returns EINVALID for
// a key given twice, empty, or longer than MaxIdempotencyKey.
//
// Resend's rules, which the simulator follows and the proxy relies on to
// replay an uncertain send: a key applies to POST /emails and POST
// /emails/batch for IdempotencyWindow; a retry with the same key and the
// same body gets the first response again and sends nothing; the same
// key with another body is 409 invalid_idempotent_request; a retry while
// the first request runs is 409 concurrent_idempotent_requests.
func ParseIdempotencyKey(values []string) (string, error) {
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", keybrake.ErrorParam("Idempotency-Key", "Idempotency-Key is given more than once.")
	case values[0] == "" || len(values[0]) > MaxIdempotencyKey:
		return "", keybrake.ErrorParam("Idempotency-Key", "Idempotency-Key must be 1 to %d characters long.", MaxIdempotencyKey)
	}
	return values[0], nil
}

// Fingerprint returns a digest of a JSON body that does not depend on
// white space or the order of object fields, to tell whether a retry
// carries the same body. A body that is not JSON is digested as is.
func Fingerprint(body []byte) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	canon := body
	if dec.Decode(&v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canon = b
		}
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

// Outcome says what an email's last_event (from emails.get) means for its
// reservation: settle it, release it, or wait.
func Outcome(lastEvent string) (settle, release bool) {
	switch lastEvent {
	case "canceled":
		return false, true
	case "scheduled", "queued", "":
		return false, false
	}
	// sent, delivered, delivery_delayed, bounced, complained, opened,
	// clicked, failed…: Resend counted the email.
	return true, false
}
