package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/sqlite"
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

// TestBatchCloseWaitsForCommit: Close does not close the database
// under a write being committed; the write commits and is
// answered, and writes after Close are refused.
func TestBatchCloseWaitsForCommit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kb.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	release, entered := make(chan struct{}), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		wrote <- s.BatchWrite(ctx, func(tx *sql.Tx) error {
			close(entered)
			<-release
			_, err := tx.ExecContext(ctx, `INSERT INTO admin_events (time, actor, action, target, detail, client) VALUES (?, 'test', 'key.during_close', '', '', '')`, storetest.T0.UnixMicro())
			return err
		})
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close has nothing to wait for but the write: were it not to wait,
	// it would return well within this bound. (A bound, not a
	// synchronisation: the passing case never returns early.)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a write was being committed", err)
	case err := <-wrote:
		t.Fatalf("the write returned (%v) before it was let go", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-wrote; err != nil {
		t.Fatalf("the write committing during Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.BatchWrite(ctx, func(*sql.Tx) error { return nil }); keybrake.ErrorCode(err) != keybrake.EUNAVAILABLE {
		t.Fatalf("a write after Close = %v, want EUNAVAILABLE", err)
	}
	s2, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	es, _, err := s2.FindAdminEvents(ctx, keybrake.AdminEventFilter{Limit: 10})
	if err != nil || len(es) != 1 || es[0].Action != "key.during_close" {
		t.Fatalf("after reopening: %+v %v, want the one write made during Close", es, err)
	}
}
