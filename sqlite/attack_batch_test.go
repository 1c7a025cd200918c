package sqlite_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/storetest"
)

// attackCancel is what the SQL function kb_attack_cancel() calls: it ends
// the context of the write running the statement that calls it.
var attackCancel atomic.Pointer[context.CancelFunc]

func init() {
	// kb_attack_cancel() ends the attacker's context from inside its own
	// statement; kb_attack_yield() lets the driver's watcher of that
	// context run while the statement goes on.
	msqlite.MustRegisterScalarFunction("kb_attack_cancel", 0, func(*msqlite.FunctionContext, []driver.Value) (driver.Value, error) {
		if c := attackCancel.Swap(nil); c != nil {
			(*c)()
		}
		return int64(1), nil
	})
	msqlite.MustRegisterScalarFunction("kb_attack_yield", 0, func(*msqlite.FunctionContext, []driver.Value) (driver.Value, error) {
		runtime.Gosched()
		return int64(1), nil
	})
}

// TestAttackBatch_CancelledWriterFailsTheBatch: a client that hangs up
// while its own write (here the lock of an object for a capture, which
// runs with the request's context) is inside a group commit must fail that
// write alone. A statement interrupted by its context rolls back SQLite's
// whole transaction, so a callback that ran its statements under its
// caller's context made every other write of the batch fail with it:
// other keys' reservations (refused), settlements, the audit, the ledger.
// The window is the lock's INSERT; a trigger on holds widens it (it ends
// the attacker's context from inside the INSERT, then keeps the statement
// running) so the test hits it every time instead of once in many
// thousand hang-ups.
func TestAttackBatch_CancelledWriterFailsTheBatch(t *testing.T) {
	ctx := context.Background()
	s, path := MustOpen(t)
	db, err := sqlite.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER kb_attack AFTER INSERT ON holds BEGIN
		SELECT kb_attack_cancel();
		SELECT count(*) FROM (WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 20000 AND kb_attack_yield()) SELECT n FROM r);
		END`); err != nil {
		t.Fatal(err)
	}
	storetest.MustCreateKey(t, s, storetest.NewKey("key_attacker"))
	const victims = 8
	for i := range victims {
		storetest.MustCreateKey(t, s, storetest.NewKey(fmt.Sprintf("key_v%d", i)))
	}

	// Hold the writer so that the attacker's lock and the victims'
	// reservations queue and are committed as one batch.
	release, entered := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.BatchWrite(ctx, func(*sql.Tx) error { close(entered); <-release; return nil }); err != nil {
			t.Error(err)
		}
	})
	<-entered
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	attackCancel.Store(&cancel)
	var lockErr error
	wg.Go(func() {
		_, lockErr = s.LockObject(actx, keybrake.LockArgs{KeyID: "key_attacker", ObjectID: "pi_attack", Owner: "req_attack",
			Now: storetest.T0, Until: storetest.T0.Add(time.Minute)})
	})
	for s.BatchQueued() < 1 {
		runtime.Gosched()
	}
	errs := make([]error, victims)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = s.Reserve(ctx, keybrake.ReserveArgs{
				Reservation: storetest.NewReservation(fmt.Sprintf("key_v%d", i), "idem_v", 1_000_000), Now: storetest.T0})
		})
	}
	for s.BatchQueued() < 1+victims {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if attackCancel.Load() != nil {
		t.Fatal("the attacker's lock never ran its INSERT")
	}
	t.Logf("the attacker's lock: %v", lockErr)
	for i, err := range errs {
		if err != nil {
			t.Errorf("victim %d's reservation failed with the attacker's hang-up: %v", i, err)
		}
	}
}
