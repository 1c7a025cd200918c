package sqlite_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// BenchmarkReserveIDs compares reservation IDs that land on random pages of
// the primary key's B-tree (the old random IDs) with time-ordered ones
// (keybrake.NewReservationID), on a table that already holds prefill
// reservations.
func BenchmarkReserveIDs(b *testing.B) {
	const prefill = 50_000
	random := func(time.Time) string { return "rsv_" + rand.Text()[:24] }
	for _, c := range []struct {
		name string
		id   func(time.Time) string
	}{{"Random", random}, {"TimeOrdered", keybrake.NewReservationID}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			s, _ := MustOpen(b)
			defer s.Close()
			storetest.MustCreateKey(b, s, storetest.NewKey("key_hot"))
			now := storetest.T0
			reserve := func(i int) {
				now = now.Add(time.Millisecond)
				in := storetest.NewReservation("key_hot", fmt.Sprintf("idem_%d", i), 1)
				in.ID = c.id(now)
				if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: now}); err != nil {
					b.Fatal(err)
				}
			}
			for i := range prefill {
				reserve(-1 - i)
			}
			defer reportCPU(b)()
			i := 0
			for b.Loop() {
				i++
				reserve(i)
			}
		})
	}
}
