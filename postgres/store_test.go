package postgres_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/storetest"
)

// MustServerDSN returns the DSN of the test server (kbtest.PostgresServerDSN).
func MustServerDSN(tb testing.TB) string {
	tb.Helper()
	return kbtest.PostgresServerDSN(tb)
}

// MustDatabase returns a DSN selecting a fresh schema (kbtest.PostgresSchema).
func MustDatabase(tb testing.TB, serverDSN string) string {
	tb.Helper()
	return kbtest.PostgresSchema(tb, serverDSN)
}

// withParam returns dsn with one more URL query parameter (or keyword).
func withParam(dsn, key, value string) string { return kbtest.WithParam(dsn, key, value) }

// MustOpen opens a Store on dsn and closes it when the test ends.
func MustOpen(tb testing.TB, dsn string) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) {
	server := MustServerDSN(t)
	storetest.Run(t, func(t *testing.T) keybrake.Store {
		return MustOpen(t, MustDatabase(t, server))
	})
}

func TestOpen(t *testing.T) {
	t.Run("ConcurrentMigrations", func(t *testing.T) {
		// Replicas starting together: the advisory lock lets exactly one
		// apply each migration and the others find it done.
		dsn := MustDatabase(t, MustServerDSN(t))
		const replicas = 6
		errs := make(chan error, replicas)
		for range replicas {
			go func() {
				s, err := postgres.Open(context.Background(), dsn)
				if err == nil {
					s.Close()
				}
				errs <- err
			}()
		}
		for range replicas {
			if err := <-errs; err != nil {
				t.Fatalf("Open: %v", err)
			}
		}
		s := MustOpen(t, dsn)
		storetest.MustCreateKey(t, s, storetest.NewKey("key_a"))
	})
	t.Run("Reopen", func(t *testing.T) {
		dsn := MustDatabase(t, MustServerDSN(t))
		s := MustOpen(t, dsn)
		storetest.MustCreateKey(t, s, storetest.NewKey("key_a"))
		s.Close()
		s = MustOpen(t, dsn)
		if _, err := s.FindKeyByID(context.Background(), "key_a"); err != nil {
			t.Fatalf("FindKeyByID after reopen: %v", err)
		}
	})
	t.Run("ErrUnavailableNoServer", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now: connection refused
		_, err = postgres.Open(context.Background(), "postgres://postgres@"+addr+"/x?sslmode=disable")
		wantUnavailable(t, "Open", err)
	})
	t.Run("ErrUnavailableServerSilent", func(t *testing.T) {
		// A server that accepts connections and never answers: the
		// caller's deadline ends the wait.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var conns []net.Conn
		defer func() {
			l.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		}()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = postgres.Open(ctx, "postgres://postgres@"+l.Addr().String()+"/x?sslmode=disable")
		wantUnavailable(t, "Open", err)
	})
	t.Run("ErrInvalidDSN", func(t *testing.T) {
		_, err := postgres.Open(context.Background(), "postgres://u:secret@127.0.0.1:notaport/x")
		if code := keybrake.ErrorCode(err); code != keybrake.EINVALID {
			t.Fatalf("code = %q (%v), want %q", code, err, keybrake.EINVALID)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Fatalf("error leaks the password: %v", err)
		}
	})
}

// TestReplicas runs two Stores, each with its own pool, on one database, as
// two proxy replicas would: 400 concurrent reservations of 1.00 split
// between them against a total cap of 100.00 must let exactly 100 through.
func TestReplicas(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	replicas := []*postgres.Store{MustOpen(t, dsn), MustOpen(t, dsn)}
	storetest.MustCreateCappedKey(t, replicas[0], "key_hot", "UTC", keybrake.Caps{Total: storetest.Ptr(storetest.USD(100))})

	const n = 400
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := replicas[i%len(replicas)]
			r := storetest.NewReservation("key_hot", fmt.Sprintf("idem_%d", i), storetest.USD(1))
			res, err := s.Reserve(context.Background(), keybrake.ReserveArgs{Reservation: r, Now: storetest.T0})
			switch {
			case err != nil:
				errs <- err
			case res.OverCap != nil:
				over.Add(1)
			case res.Replay:
				errs <- fmt.Errorf("idem_%d: unexpected replay", i)
			default:
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Reserve: %v", err)
	}
	if ok.Load() != 100 || over.Load() != n-100 {
		t.Fatalf("reserved %d, over cap %d; want 100 and %d", ok.Load(), over.Load(), n-100)
	}
	for i, s := range replicas {
		sp := storetest.MustSpend(t, s, "key_hot", storetest.T0, time.UTC)
		if want := (keybrake.Spend{Day: storetest.USD(100), Month: storetest.USD(100), Total: storetest.USD(100)}); sp != want {
			t.Fatalf("replica %d: spend = %+v, want %+v", i, sp, want)
		}
	}
	rs, err := replicas[1].FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: "key_hot"})
	if err != nil {
		t.Fatalf("FindReservations: %v", err)
	}
	if len(rs) != 100 {
		t.Fatalf("reservations = %d, want 100", len(rs))
	}
}

// TestReplicasLeaseUncertain checks that resolvers of two replicas leasing
// at once never take the same reservation.
func TestReplicasLeaseUncertain(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	replicas := []*postgres.Store{MustOpen(t, dsn), MustOpen(t, dsn)}
	s := replicas[0]
	storetest.MustCreateKey(t, s, storetest.NewKey("key_a"))
	const n = 60
	for i := range n {
		r := storetest.MustReserve(t, s, "key_a", fmt.Sprintf("idem_%d", i), storetest.USD(1), storetest.T0)
		storetest.MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateUncertain, UpstreamStatus: 502, Now: storetest.T0})
	}

	now := storetest.T0.Add(time.Minute)
	var mu sync.Mutex
	leased := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("resolver_%d", w)
			for {
				rs, err := replicas[w%2].LeaseUncertain(context.Background(), owner, now, now, now.Add(time.Hour), 3)
				if err != nil {
					errs <- err
					return
				}
				if len(rs) == 0 {
					return
				}
				mu.Lock()
				for _, r := range rs {
					if prev, dup := leased[r.ID]; dup {
						errs <- fmt.Errorf("%s leased by both %s and %s", r.ID, prev, owner)
					}
					leased[r.ID] = owner
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(leased) != n {
		t.Fatalf("leased %d reservations, want %d", len(leased), n)
	}
}

// BenchmarkReserveSettle measures a reservation and its settlement, the
// store's part of one proxied charge, from 8 goroutines at once: HotKey all
// on one key (serialised by its row lock), KeyPerGoroutine each on its own.
func BenchmarkReserveSettle(b *testing.B) {
	for _, bm := range []struct {
		name   string
		hotKey bool
	}{{"HotKey", true}, {"KeyPerGoroutine", false}} {
		b.Run(bm.name, func(b *testing.B) {
			dsn := withParam(MustDatabase(b, MustServerDSN(b)), "pool_max_conns", "16")
			s := MustOpen(b, dsn)
			noCap := keybrake.Caps{Total: storetest.Ptr(keybrake.Micros(1 << 62))}
			storetest.MustCreateCappedKey(b, s, "key_hot", "UTC", noCap)
			var seq, keys atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				keyID := "key_hot"
				if !bm.hotKey {
					keyID = fmt.Sprintf("key_%d", keys.Add(1))
					storetest.MustCreateCappedKey(b, s, keyID, "UTC", noCap)
				}
				for pb.Next() {
					r := storetest.NewReservation(keyID, fmt.Sprintf("idem_%d", seq.Add(1)), storetest.USD(1))
					res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: storetest.T0})
					if err != nil || res.Reservation == nil || res.Replay || res.OverCap != nil {
						b.Errorf("Reserve: %+v, %v", res, err)
						return
					}
					if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
						SettledMicros: storetest.USD(1), Amount: 100, Currency: "usd", Now: storetest.T0}); err != nil {
						b.Errorf("Settle: %v", err)
						return
					}
				}
			})
		})
	}
}

// TestReplicasReplays races 200 reservations on two replicas for 20
// Idempotency-Keys, so that replays land in the same batch as the
// reservation they replay as well as in later ones: each key must be counted
// once, and every replay must return that reservation.
func TestReplicasReplays(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	replicas := []*postgres.Store{MustOpen(t, dsn), MustOpen(t, dsn)}
	storetest.MustCreateCappedKey(t, replicas[0], "key_hot", "UTC", keybrake.Caps{Total: storetest.Ptr(storetest.USD(1000))})

	const n, keys = 200, 20
	var mu sync.Mutex
	first := map[string]string{}     // Idempotency-Key → ID of the reservation counted
	replays := map[string][]string{} // Idempotency-Key → IDs the replays returned
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idem := fmt.Sprintf("idem_%d", i%keys)
			r := storetest.NewReservation("key_hot", idem, storetest.USD(1))
			res, err := replicas[i%2].Reserve(context.Background(), keybrake.ReserveArgs{Reservation: r, Now: storetest.T0})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("Reserve %s: %v", idem, err)
			case res.OverCap != nil:
				t.Errorf("Reserve %s: over cap %+v", idem, res.OverCap)
			case res.Replay:
				replays[idem] = append(replays[idem], res.Reservation.ID)
			default:
				if prev, dup := first[idem]; dup {
					t.Errorf("%s counted twice: %s and %s", idem, prev, res.Reservation.ID)
				}
				first[idem] = res.Reservation.ID
			}
		}()
	}
	wg.Wait()
	if len(first) != keys {
		t.Fatalf("counted %d Idempotency-Keys, want %d", len(first), keys)
	}
	for idem, ids := range replays {
		for _, id := range ids {
			if id != first[idem] {
				t.Errorf("replay of %s returned %s, want %s", idem, id, first[idem])
			}
		}
	}
	if sp := storetest.MustSpend(t, replicas[1], "key_hot", storetest.T0, time.UTC); sp.Total != storetest.USD(keys) {
		t.Fatalf("total = %s, want %s", sp.Total, storetest.USD(keys))
	}
}

// TestConcurrentSettles settles 50 reservations twice each at once, plus
// unknown reservations, so that settlements share batches: each
// reservation settles exactly once (the other settlement gets ECONFLICT), an
// unknown one gets ENOTFOUND, and the counters end exact.
func TestConcurrentSettles(t *testing.T) {
	s := MustOpen(t, MustDatabase(t, MustServerDSN(t)))
	storetest.MustCreateKey(t, s, storetest.NewKey("key_a"))
	const n = 50
	ids := make([]string, n)
	for i := range n {
		ids[i] = storetest.MustReserve(t, s, "key_a", fmt.Sprintf("idem_%d", i), storetest.USD(2), storetest.T0).ID
	}

	var ok, conflict, notFound atomic.Int64
	var wg sync.WaitGroup
	settle := func(args keybrake.SettleArgs) {
		defer wg.Done()
		_, err := s.Settle(context.Background(), args)
		switch code := keybrake.ErrorCode(err); {
		case err == nil:
			ok.Add(1)
		case code == keybrake.ECONFLICT:
			conflict.Add(1)
		case code == keybrake.ENOTFOUND:
			notFound.Add(1)
		default:
			t.Errorf("Settle %s: %v", args.ID, err)
		}
	}
	for i, id := range ids {
		args := keybrake.SettleArgs{ID: id, State: keybrake.StateSettled, SettledMicros: storetest.USD(1), Amount: 100, Currency: "usd", Now: storetest.T0}
		if i%2 == 0 {
			args = keybrake.SettleArgs{ID: id, State: keybrake.StateReleased, UpstreamStatus: 402, Now: storetest.T0}
		}
		wg.Add(3)
		go settle(args)
		go settle(args)
		go settle(keybrake.SettleArgs{ID: fmt.Sprintf("rsv_unknown_%d", i), State: keybrake.StateReleased, Now: storetest.T0})
	}
	wg.Wait()
	if ok.Load() != n || conflict.Load() != n || notFound.Load() != n {
		t.Fatalf("ok %d, conflict %d, not found %d; want %d each", ok.Load(), conflict.Load(), notFound.Load(), n)
	}
	// Half released, half settled at 1.00 of the 2.00 reserved.
	sp := storetest.MustSpend(t, s, "key_a", storetest.T0, time.UTC)
	if want := (keybrake.Spend{Day: storetest.USD(n / 2), Month: storetest.USD(n / 2), Total: storetest.USD(n / 2)}); sp != want {
		t.Fatalf("spend = %+v, want %+v", sp, want)
	}
}

func TestAuditTamper(t *testing.T) {
	server := MustServerDSN(t)
	storetest.RunAuditTamper(t, func(t *testing.T) (keybrake.Store, storetest.Tamper) {
		dsn := MustDatabase(t, server)
		s := MustOpen(t, dsn)
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return s, func(t *testing.T, q string) {
			t.Helper()
			if _, err := conn.Exec(context.Background(), q); err != nil {
				t.Fatalf("tamper %q: %v", q, err)
			}
		}
	})
}

// TestReplicasAuditChain checks that four replicas writing the same keys'
// events at once still leave one verifiable chain per key.
func TestReplicasAuditChain(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	replicas := []*postgres.Store{MustOpen(t, dsn), MustOpen(t, dsn), MustOpen(t, dsn), MustOpen(t, dsn)}
	const writers, batches = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*batches)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := replicas[w%len(replicas)]
			for b := range batches {
				var batch []*keybrake.Event
				for i := range 5 {
					// Keys in different orders per writer, so lock order matters.
					k := []string{"key_a", "key_b", "key_c"}[(w+i)%3]
					batch = append(batch, storetest.NewEvent(k, storetest.T0, w*1000+b*10+i))
				}
				if err := s.AddEvents(context.Background(), batch); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("AddEvents: %v", err)
	}
	r := storetest.MustVerify(t, replicas[0])
	if !r.OK() || r.Events != writers*batches*5 {
		t.Fatalf("report: %d events, breaks %+v; want %d, none", r.Events, r.Breaks, writers*batches*5)
	}
}
