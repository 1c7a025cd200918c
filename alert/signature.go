// Package alert delivers keybrake's alerts: it signs webhook payloads,
// formats them (keybrake events or Slack-compatible text), and runs the
// sender that takes deliveries from the store's outbox, attempts them and
// records every attempt, retrying with exponential backoff for a day.
package alert

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries a delivery's signature, in Stripe's shape:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>".
const SignatureHeader = "Keybrake-Signature"

// EventIDHeader carries the alert's event id, the same on every attempt and
// every endpoint: receivers deduplicate on it.
const EventIDHeader = "Keybrake-Event-Id"

// DefaultTolerance is how far a signature's timestamp may be from the
// receiver's clock before Verify refuses it (a replayed old delivery).
const DefaultTolerance = 5 * time.Minute

// Sign returns the Keybrake-Signature value for body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret, ts string, body []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte("."))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Errors Verify returns.
var (
	ErrNoSignature = errors.New("keybrake alert: no valid signature in the header")
	ErrTooOld      = errors.New("keybrake alert: signature timestamp outside the tolerance")
)

// Verify checks a Keybrake-Signature header against body with secret: one
// of its v1 signatures must match (several appear while a secret rotates),
// and its timestamp must be within tolerance of now. It returns nil, or
// ErrNoSignature or ErrTooOld.
func Verify(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	var (
		ts   string
		sigs []string
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
		case k == "t" && ts == "":
			ts = v
		case k == "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrNoSignature
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			ok = true
		}
	}
	if !ok {
		return ErrNoSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s", ErrTooOld, d.Round(time.Second))
	}
	return nil
}
