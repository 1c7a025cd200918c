package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/storetest"
)

// TestReplicasReplaysAtCap is TestReplicasReplays with the cap binding: 40
// Idempotency-Keys of 1.00 each, 5 requests apiece over two replicas, under
// a total cap of 20.00. Since 0043 a key without guards finds its replay by
// the insert's arbiter, or, once a cap refuses, by a lookup: a counted
// Idempotency-Key must only ever be answered as itself (never refused, never
// counted twice), one refused must never be counted, and exactly 20 count.
func TestReplicasReplaysAtCap(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	replicas := []*postgres.Store{MustOpen(t, dsn), MustOpen(t, dsn)}
	storetest.MustCreateCappedKey(t, replicas[0], "key_hot", "UTC", keybrake.Caps{Total: storetest.Ptr(storetest.USD(20))})

	const n, keys, capped = 200, 40, 20
	var mu sync.Mutex
	first := map[string]string{}     // Idempotency-Key → ID of the reservation counted
	replays := map[string][]string{} // Idempotency-Key → IDs the replays returned
	refused := map[string]bool{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			idem := fmt.Sprintf("idem_%d", i%keys)
			r := storetest.NewReservation("key_hot", idem, storetest.USD(1))
			res, err := replicas[i%2].Reserve(context.Background(), keybrake.ReserveArgs{Reservation: r, Now: storetest.T0})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("Reserve %s: %v", idem, err)
			case res.OverCap != nil:
				refused[idem] = true
			case res.Replay:
				replays[idem] = append(replays[idem], res.Reservation.ID)
			default:
				if prev, dup := first[idem]; dup {
					t.Errorf("%s counted twice: %s and %s", idem, prev, res.Reservation.ID)
				}
				first[idem] = res.Reservation.ID
			}
		})
	}
	wg.Wait()
	if len(first) != capped {
		t.Fatalf("counted %d Idempotency-Keys, want %d", len(first), capped)
	}
	for idem := range refused {
		if id, ok := first[idem]; ok {
			t.Errorf("%s was refused over the cap and counted (%s)", idem, id)
		}
	}
	for idem, ids := range replays {
		for _, id := range ids {
			if id != first[idem] {
				t.Errorf("replay of %s returned %s, want %s", idem, id, first[idem])
			}
		}
	}
	if sp := storetest.MustSpend(t, replicas[1], "key_hot", storetest.T0, time.UTC); sp.Total != storetest.USD(capped) {
		t.Fatalf("total = %s, want %s", sp.Total, storetest.USD(capped))
	}
}
