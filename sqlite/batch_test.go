package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// TestBatchFailedWriteRollsBack: a write of the group commit that fails
// after writing leaves nothing, whether it ran alone in its transaction or
// among others, and the others of its batch commit.
func TestBatchFailedWriteRollsBack(t *testing.T) {
	ctx := context.Background()
	insert := func(tx *sql.Tx, action string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO admin_events (time, actor, action, target, detail, client) VALUES (?, 'test', ?, '', '', '')`,
			storetest.T0.UnixMicro(), action)
		return err
	}
	boom := errors.New("boom")
	failing := func(tx *sql.Tx) error {
		if err := insert(tx, "key.failed"); err != nil {
			return err
		}
		return boom
	}
	actions := func(t *testing.T, as keybrake.AdminStore) map[string]int {
		t.Helper()
		es, _, err := as.FindAdminEvents(ctx, keybrake.AdminEventFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, e := range es {
			n[e.Action]++
		}
		return n
	}
	t.Run("Alone", func(t *testing.T) {
		s, _ := MustOpen(t)
		if err := s.BatchWrite(ctx, failing); !errors.Is(err, boom) {
			t.Fatalf("BatchWrite = %v, want boom", err)
		}
		if n := actions(t, s); len(n) != 0 {
			t.Fatalf("a failed write alone committed %v", n)
		}
	})
	t.Run("AmongOthers", func(t *testing.T) {
		s, _ := MustOpen(t)
		var wg sync.WaitGroup
		errs := make([]error, 64)
		for i := range errs {
			wg.Go(func() {
				if i%2 == 0 {
					errs[i] = s.BatchWrite(ctx, failing)
				} else {
					errs[i] = s.BatchWrite(ctx, func(tx *sql.Tx) error { return insert(tx, "key.ok") })
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if (i%2 == 0) != errors.Is(err, boom) || (i%2 == 1 && err != nil) {
				t.Fatalf("write %d: %v", i, err)
			}
		}
		if n := actions(t, s); n["key.failed"] != 0 || n["key.ok"] != len(errs)/2 {
			t.Fatalf("committed %v, want only the %d good writes", n, len(errs)/2)
		}
	})
}
