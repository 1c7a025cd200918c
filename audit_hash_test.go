package keybrake_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// referenceEventHash is EventHash as first written, field by field into
// the hash: every chain already stored must still verify.
func referenceEventHash(e *keybrake.Event) string {
	h := sha256.New()
	put := func(s string) {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
		h.Write([]byte{','})
	}
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	for _, f := range []string{
		keybrake.ChainVersion, e.PrevHash, i(e.Seq), e.KeyID, i(e.Time.UnixMicro()),
		e.Operation, e.Method, e.Path, i(e.Amount), e.Currency, i(int64(e.Micros)),
		e.Decision, e.Reason, i(int64(e.UpstreamStatus)), e.ObjectID, e.RequestID,
		e.IdempotencyKey, e.ReservationID, e.Via, e.MCPSession, e.MCPClient,
	} {
		put(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestEventHashUnchanged(t *testing.T) {
	full := keybrake.Event{
		PrevHash: strings.Repeat("ab", 32), Seq: 1234567, KeyID: "vk_1", Time: time.Date(2026, 12, 1, 3, 4, 5, 6000, time.UTC),
		Operation: "charges.create", Method: "POST", Path: "/v1/charges", Amount: 100, Currency: "usd", Micros: 1000000,
		Decision: "allow", Reason: "réason, with: colons", UpstreamStatus: 200, ObjectID: "ch_1", RequestID: "kbreq_1",
		IdempotencyKey: "idem", ReservationID: "rsv_1", Via: "mcp", MCPSession: "s", MCPClient: "c",
	}
	negative := full
	negative.Seq, negative.Amount, negative.Micros, negative.UpstreamStatus = -1, -9223372036854775808, -5, 0
	negative.Time = time.Unix(-100, 0)
	huge := full
	huge.Reason = strings.Repeat("x", 100000)
	for name, e := range map[string]keybrake.Event{"Empty": {}, "Full": full, "Negative": negative, "Huge": huge} {
		t.Run(name, func(t *testing.T) {
			// Twice: the second call reuses a pooled buffer.
			for range 2 {
				if got, want := keybrake.EventHash(&e), referenceEventHash(&e); got != want {
					t.Fatalf("EventHash %s, reference %s", got, want)
				}
			}
		})
	}
}

func BenchmarkEventHash(b *testing.B) {
	e := &keybrake.Event{KeyID: "vk_1", Seq: 42, Time: time.Unix(1764558000, 0), Operation: "charges.create", Method: "POST",
		Path: "/v1/charges", Amount: 100, Currency: "usd", Micros: 1000000, Decision: "allow", UpstreamStatus: 200,
		ObjectID: "ch_1", RequestID: "kbreq_1", ReservationID: "rsv_1", PrevHash: strings.Repeat("ab", 32)}
	b.ReportAllocs()
	for b.Loop() {
		keybrake.EventHash(e)
	}
}
