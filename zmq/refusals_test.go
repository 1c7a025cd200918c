package zmq_test

import (
	"strings"
	"testing"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/zmq"
)

// refusal is a message every worker must refuse without charging.
type refusal struct {
	name  string
	msg   []byte
	check func(tb testing.TB, rep *zmq.Reply)
}

// wantRefused returns a check for a dead-letter reply with key, param and a
// reason containing reason.
func wantRefused(key, param, reason string) func(tb testing.TB, rep *zmq.Reply) {
	return func(tb testing.TB, rep *zmq.Reply) {
		tb.Helper()
		if rep.Status != zmq.StatusDeadLetter || rep.Outcome != billing.OutcomeMalformed || rep.ChargeID != "" ||
			rep.Key != key || rep.Param != param || !strings.Contains(rep.Reason, reason) {
			tb.Fatalf("reply %+v, want dead_letter/malformed with key %q, param %q and a reason with %q", rep, key, param, reason)
		}
	}
}

// refusals is the matrix of malformed envelopes and key mismatches built
// around a good envelope.
func refusals(tb testing.TB, good *zmq.Envelope) []refusal {
	ev := string(good.Event)
	// The seed's keys: built from socket metadata, or for another namespace.
	socketTS := billing.Key(namespace, "1722431800123", "acct_1", "2026-11")
	ackSeq := billing.Key(namespace, "acct_1", "2026-11", "ack-0")
	other := Event("acct_1").Key("other")
	return []refusal{
		{"NotJSON", []byte("charge acct_1 please"), wantRefused("", "", "not a keybrake envelope")},
		{"NotAnObject", []byte(`["kb", {}]`), wantRefused("", "", "not a keybrake envelope")},
		{"UnknownEnvelopeField", []byte(`{"key":"` + good.Key + `","event":` + ev + `,"socket_ts":1722431800123}`), wantRefused("", "", "unknown field")},
		{"TrailingData", []byte(`{"key":"` + good.Key + `","event":` + ev + `} {}`), wantRefused("", "", "data after")},
		{"NoKey", []byte(`{"event":` + ev + `}`), wantRefused("", "key", "no key")},
		{"NoEvent", []byte(`{"key":"` + good.Key + `"}`), wantRefused(good.Key, "event", "no event")},
		{"KeyFromSocketTimestamp", []byte(`{"key":"` + socketTS + `","event":` + ev + `}`), wantRefused(socketTS, "key", "not the content key")},
		{"KeyFromAckCounter", []byte(`{"key":"` + ackSeq + `","event":` + ev + `}`), wantRefused(ackSeq, "key", "not the content key")},
		{"KeyOfAnotherNamespace", []byte(`{"key":"` + other + `","event":` + ev + `}`), wantRefused(other, "key", "not the content key")},
		{"FractionalAmount", []byte(`{"key":"` + good.Key + `","event":{"customer_id":"acct_1","billing_period":"2026-11","amount":42.00,"currency":"usd","source":"tok_visa"}}`),
			wantRefused(good.Key, "amount", "integer")},
		{"IdentityInEvent", []byte(`{"key":"` + good.Key + `","event":{"customer_id":"acct_1","billing_period":"2026-11","amount":4200,"currency":"usd","source":"tok_visa","dealer_identity":"00a1b2c3d4"}}`),
			wantRefused(good.Key, "dealer_identity", "Unknown field")},
	}
}
