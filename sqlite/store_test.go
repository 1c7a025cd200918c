package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/storetest"
)

// template is a freshly migrated, closed database file that MustOpen
// copies: running every migration (table rebuilds included) for each of
// the conformance suite's hundreds of subtests was most of the package's
// time under the race detector.
var template struct {
	once sync.Once
	data []byte
	err  error
}

// MustOpen opens a Store on a fresh file in a temp dir, a copy of a newly
// migrated database; the caller closes it.
func MustOpen(tb testing.TB) (*sqlite.Store, string) {
	tb.Helper()
	template.once.Do(func() {
		dir, err := os.MkdirTemp("", "keybrake-template-")
		if err != nil {
			template.err = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "template.db")
		s, err := sqlite.Open(path)
		if err != nil {
			template.err = err
			return
		}
		if template.err = s.Close(); template.err != nil { // Close checkpoints the WAL into the file
			return
		}
		template.data, template.err = os.ReadFile(path)
	})
	if template.err != nil {
		tb.Fatalf("migrated template: %v", template.err)
	}
	path := filepath.Join(tb.TempDir(), "keybrake.db")
	if err := os.WriteFile(path, template.data, 0o600); err != nil {
		tb.Fatal(err)
	}
	s, err := sqlite.Open(path)
	if err != nil {
		tb.Fatalf("Open(%s): %v", path, err)
	}
	return s, path
}

// MustReopen opens another Store on path and closes it at the end of tb.
func MustReopen(tb testing.TB, path string) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(path)
	if err != nil {
		tb.Fatalf("Open(%s): %v", path, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keybrake.Store {
		s, _ := MustOpen(t)
		return s
	})
}

func TestOpen(t *testing.T) {
	ctx := context.Background()

	t.Run("ReopenKeepsData", func(t *testing.T) {
		s, path := MustOpen(t)
		storetest.MustCreateCappedKey(t, s, "key_a", "Asia/Tokyo", keybrake.Caps{Total: storetest.Ptr(storetest.USD(10))})
		r := storetest.MustReserve(t, s, "key_a", "idem_1", storetest.USD(4), storetest.T0)
		e := storetest.MustAddEvent(t, s, storetest.NewEvent("key_a", storetest.T0, 1))
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}

		s2 := MustReopen(t, path)
		got, err := s2.FindReservationByID(ctx, r.ID)
		if err != nil || got.Micros != storetest.USD(4) || got.Request.Body != r.Request.Body {
			t.Fatalf("FindReservationByID after reopen = %+v, %v", got, err)
		}
		tokyo := storetest.MustLocation(t, "Asia/Tokyo")
		if sp := storetest.MustSpend(t, s2, "key_a", storetest.T0, tokyo); sp.Total != storetest.USD(4) {
			t.Fatalf("spend after reopen = %+v", sp)
		}
		storetest.MustOverCap(t, s2, "key_a", "idem_2", storetest.USD(6)+1, storetest.T0)
		e2 := storetest.MustAddEvent(t, s2, storetest.NewEvent("key_a", storetest.T0, 2))
		if e2.ID <= e.ID {
			t.Fatalf("event ID after reopen = %d, want > %d", e2.ID, e.ID)
		}
	})

	t.Run("TwoStoresOneFile", func(t *testing.T) {
		// Two processes sharing the file: the cap holds across both.
		a, path := MustOpen(t)
		defer a.Close()
		b := MustReopen(t, path)
		storetest.MustCreateCappedKey(t, a, "key_a", "UTC", keybrake.Caps{Total: storetest.Ptr(storetest.USD(5))})
		storetest.MustReserve(t, a, "key_a", "idem_1", storetest.USD(3), storetest.T0)
		storetest.MustReserve(t, b, "key_a", "idem_2", storetest.USD(2), storetest.T0)
		storetest.MustOverCap(t, a, "key_a", "idem_3", 1, storetest.T0)
		res, err := b.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewReservation("key_a", "idem_1", storetest.USD(3)), Now: storetest.T0})
		if err != nil || !res.Replay {
			t.Fatalf("replay across stores = %+v, %v", res, err)
		}
	})

	t.Run("ErrInvalidPath", func(t *testing.T) {
		for _, path := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro"} {
			if _, err := sqlite.Open(path); keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Fatalf("Open(%q) = %v, want EINVALID", path, err)
			}
		}
	})

	t.Run("ErrMissingDir", func(t *testing.T) {
		if s, err := sqlite.Open(filepath.Join(t.TempDir(), "missing", "x.db")); err == nil {
			s.Close()
			t.Fatalf("Open in a missing directory succeeded")
		}
	})
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	s, _ := MustOpen(t)
	storetest.MustCreateKey(t, s, storetest.NewKey("key_a"))
	r := storetest.MustReserve(t, s, "key_a", "idem_1", 1, storetest.T0)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	calls := map[string]func() error{
		"Ping": func() error { return s.Ping(ctx) },
		"CreateKey": func() error {
			return s.CreateKey(ctx, storetest.NewKey("key_b"))
		},
		"FindKeyByID": func() error { _, err := s.FindKeyByID(ctx, "key_a"); return err },
		"FindKeyBySecretHash": func() error {
			_, err := s.FindKeyBySecretHash(ctx, storetest.NewKey("key_a").SecretHash)
			return err
		},
		"FindKeys":  func() error { _, _, err := s.FindKeys(ctx, keybrake.KeyFilter{}); return err },
		"UpdateKey": func() error { _, err := s.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{}, storetest.T0); return err },
		"RevokeKey": func() error { _, err := s.RevokeKey(ctx, "key_a", storetest.T0); return err },
		"Reserve": func() error {
			_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewReservation("key_a", "idem_2", 1), Now: storetest.T0})
			return err
		},
		"Settle": func() error {
			_, err := s.Settle(ctx, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateReleased, Now: storetest.T0})
			return err
		},
		"FindReservationByID": func() error { _, err := s.FindReservationByID(ctx, r.ID); return err },
		"FindReservations": func() error {
			_, err := s.FindReservations(ctx, keybrake.ReservationFilter{})
			return err
		},
		"LeaseUncertain": func() error {
			_, err := s.LeaseUncertain(ctx, "a", storetest.T0, storetest.T0, storetest.T0.Add(time.Minute), 1)
			return err
		},
		"Spend":      func() error { _, err := s.Spend(ctx, "key_a", "2026-11-29", "2026-11"); return err },
		"AddEvent":   func() error { return s.AddEvent(ctx, storetest.NewEvent("key_a", storetest.T0, 1)) },
		"FindEvents": func() error { _, _, err := s.FindEvents(ctx, keybrake.EventFilter{KeyID: "key_a"}); return err },
	}
	for name, call := range calls {
		t.Run(name+"/ErrUnavailable", func(t *testing.T) {
			if code := keybrake.ErrorCode(call()); code != keybrake.EUNAVAILABLE {
				t.Fatalf("code = %q, want %q", code, keybrake.EUNAVAILABLE)
			}
		})
	}
}

func TestAuditTamper(t *testing.T) {
	storetest.RunAuditTamper(t, func(t *testing.T) (keybrake.Store, storetest.Tamper) {
		s, path := MustOpen(t)
		db, err := sqlite.OpenDB(path)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		t.Cleanup(func() { db.Close() })
		return s, func(t *testing.T, q string) {
			t.Helper()
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("tamper %q: %v", q, err)
			}
		}
	})
}
