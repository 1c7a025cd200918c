package http

import (
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// ownIdempotencyKey returns the Idempotency-Key keybrake makes for a
// request that came without one: "kb_" and a reservation ID's characters,
// the time at now in milliseconds first, then 83 random bits. The
// reservations of a key are indexed by (key, Idempotency-Key), and a
// random key lands each new one on a random page of that index: at 64
// clients on one hot key, about 40 pages more to append to the WAL per
// commit of 64 reservations. Time first, they append at the index's end,
// as the reservation IDs do in the table. Upstream sees the same kind of
// opaque key as before; the random part keeps it unguessable.
func ownIdempotencyKey(now time.Time) string {
	return "kb_" + strings.TrimPrefix(keybrake.NewReservationID(now), keybrake.ReservationIDPrefix)
}
