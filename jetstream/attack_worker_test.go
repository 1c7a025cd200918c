package jetstream_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/keybrake/keybrake/billing"
)

// A publisher sends a message near the server's max_payload (1 MiB). It is
// malformed, so the worker dead-letters it; but the dead letter carried the
// whole body, JSON-escaped or base64-encoded, and the server refused it as
// too big. The worker naked the message, and after MaxDeliver it stayed in
// the stream, never dead-lettered. The dead letter now holds the first
// MaxEventBytes of a body too big to be an event, with its size and
// SHA-256.
func TestAttackWorker_JetStreamOversizedMessageNeverDeadLettered(t *testing.T) {
	e := MustEnv(t)
	MustOpen(t, e.Worker(t, "billing", e.Processor("w1")))
	body := bytes.Repeat([]byte{0x01}, 1<<20-1024)
	if _, err := e.JS(t).Publish(context.Background(), subject, body); err != nil {
		t.Fatal(err)
	}
	d := e.MustDeadLetters(t, 1)[0]
	sum := sha256.Sum256(body)
	if d.Outcome != billing.OutcomeMalformed || !d.BodyTruncated || d.BodyBytes != len(body) || d.BodySHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("dead letter: outcome %s, truncated %v, %d bytes, sha256 %s", d.Outcome, d.BodyTruncated, d.BodyBytes, d.BodySHA256)
	}
	if got, err := d.OriginalBody(); err == nil || !bytes.HasPrefix(body, got) || len(got) != billing.MaxEventBytes {
		t.Fatalf("OriginalBody: %d bytes, %v", len(got), err)
	}
}
