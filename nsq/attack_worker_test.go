package nsq_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/nsq"
)

// A publisher sends a message near nsqd's --max-msg-size (1 MiB). It is
// malformed, so the worker dead-letters it; but the dead letter carried the
// whole body, JSON-escaped (a control character takes six bytes), and nsqd
// refused it as too big. "Never drop" then requeued the message, forever: no
// dead letter, and a poison message retried for as long as the topic lives.
// The dead letter now holds the first MaxEventBytes of a body too big to be
// an event, with its size and SHA-256.
func TestAttackWorker_NSQOversizedMessageNeverDeadLettered(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"ControlCharacters", bytes.Repeat([]byte{0x01}, 1<<20-64)},
		{"InvalidUTF8", bytes.Repeat([]byte{0xff}, 1<<20-64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := MustBilling(t, nil)
			dead := Subscribe(t, e.NSQD.TCP, "billing.dead")
			e.Worker(t, nil, nil)
			MustPublish(t, e.NSQD.TCP, "billing", string(tc.body))
			d := MustDeadLetter(t, dead)
			sum := sha256.Sum256(tc.body)
			if d.Outcome != billing.OutcomeMalformed || !strings.Contains(d.Reason, "bytes") || !d.BodyTruncated ||
				d.BodyBytes != len(tc.body) || d.BodySHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("dead letter %+v", nsq.DeadLetter{Reason: d.Reason, Outcome: d.Outcome, BodyTruncated: d.BodyTruncated, BodyBytes: d.BodyBytes, BodySHA256: d.BodySHA256})
			}
			got, err := d.OriginalBody()
			if err == nil || !bytes.HasPrefix(tc.body, got) || len(got) != billing.MaxEventBytes {
				t.Fatalf("OriginalBody: %d bytes, %v; want the first %d and an error saying it is truncated", len(got), err, billing.MaxEventBytes)
			}
		})
	}
}
