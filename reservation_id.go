package keybrake

import (
	"crypto/rand"
	"time"
)

// ReservationIDPrefix starts every reservation ID.
const ReservationIDPrefix = "rsv_"

// idTimeChars and idRandChars split a reservation ID's 24 characters: the
// creation time in milliseconds, 10 base-32 digits (good until the year
// 37,000), then 14 random base-62 characters (83 bits).
const (
	idTimeChars = 10
	idRandChars = 14
)

const (
	idTimeDigits = "0123456789abcdefghijklmnopqrstuv" // in byte order and in every collation's order
	idRandDigits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// NewReservationID returns a new reservation ID at now: "rsv_", the time in
// milliseconds (fixed-width, lowercase base 32, so IDs sort by creation
// time as bytes and under any collation of PostgreSQL or SQLite), then 83
// random bits. Inserts by ID then append to the right edge of the primary
// key's B-tree instead of landing on random pages; the random part keeps
// IDs as hard to guess as before (IDs are not secrets, but one key's
// client should not be able to name another's reservations). The format
// is the one random IDs had: "rsv_" and 24 alphanumeric characters.
func NewReservationID(now time.Time) string {
	var b [len(ReservationIDPrefix) + idTimeChars + idRandChars]byte
	copy(b[:], ReservationIDPrefix)
	ms := uint64(now.UnixMilli())
	if now.UnixMilli() < 0 {
		ms = 0
	}
	t := b[len(ReservationIDPrefix) : len(ReservationIDPrefix)+idTimeChars]
	for i := idTimeChars - 1; i >= 0; i-- {
		t[i] = idTimeDigits[ms&31]
		ms >>= 5
	}
	r := b[len(ReservationIDPrefix)+idTimeChars:]
	fillRandom(r, idRandDigits)
	return string(b[:])
}

// fillRandom fills out with characters of alphabet (at most 256) drawn
// uniformly with crypto/rand, rejecting the bytes that would bias them.
func fillRandom(out []byte, alphabet string) {
	limit := 256 - 256%len(alphabet)
	var buf [32]byte
	for i := 0; i < len(out); {
		_, _ = rand.Read(buf[:]) // crypto/rand.Read never fails (Go 1.24+)
		for _, c := range buf {
			if int(c) >= limit {
				continue
			}
			out[i] = alphabet[int(c)%len(alphabet)]
			if i++; i == len(out) {
				return
			}
		}
	}
}
