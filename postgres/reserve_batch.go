package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/keybrake/keybrake"
)

// maxReserveBatch bounds the reservations decided in one statement and
// committed together.
const maxReserveBatch = 64

// reserveLanes is how many reservation batches one process runs at once.
// Every key belongs to one lane (laneOf), so the batches of a key never
// compete for its row lock within a process; keys of different lanes are
// decided side by side, so a batch waiting for a hot key's lock holds up a
// lane, not every reservation of the process. Fewer lanes make fuller
// batches: on 64 clients over 1,000 keys the server spent 272, 302 and 385
// µs of CPU a charge with 1, 2 and 4 lanes (BenchmarkReserveSpread,
// docs/performance.md).
const reserveLanes = 2

// reserveOp is one reservation waiting for, or decided by, a batch: r is
// complete (ID, buckets and times set) and out is the decision.
type reserveOp struct {
	ctx     context.Context
	r       keybrake.Reservation
	version string // ReserveArgs.KeyVersion
	out     reserveOutcome
	err     error
	done    chan struct{}
}

// reserveOutcome is what keybrake_reserve or keybrake_reserve_many decided
// for one reservation: status 'ok', 'replay' (replayID), 'over' (window,
// limit, spent), 'guard' (guard), 'unusable' or 'stale' (the key is no
// longer the version the request was decided on).
type reserveOutcome struct {
	status       string
	window       *string
	limit, spent *int64
	replayID     *string
	guard        *keybrake.GuardRefusal // status 'guard'
}

// keyQueue is this process's queue of reservations of one lane of keys
// (group commit). While a batch of the lane is running, reservations that
// arrive wait here; when it ends, all of them (up to maxReserveBatch) run as
// the next batch, whatever their keys, in one keybrake_reserve_many
// statement and one commit. A hot key's lock is then held once per batch
// instead of once per reservation, keys spread wide share a commit and a
// round trip, and a lone reservation still runs at once, alone.
type keyQueue = groupQueue[*reserveOp]

// reserveQueued queues op on its key's lane and waits for its decision
// (groupQueue.wait). One batch runs per lane and process at a time.
func (s *Store) reserveQueued(op *reserveOp) (reserveOutcome, error) {
	lane := laneOf(op.r.KeyID)
	v, ok := s.queues.Load(lane)
	if !ok {
		v, _ = s.queues.LoadOrStore(lane, &keyQueue{
			next: func(pending []*reserveOp) int { return sameBuckets(pending, maxReserveBatch) },
			run:  s.runReserveBatch,
		})
	}
	if err := v.(*keyQueue).wait(op.ctx, op, op.done); err != nil {
		return reserveOutcome{}, err
	}
	return op.out, op.err
}

// laneOf returns the lane of a key: FNV-1a of its ID, modulo reserveLanes.
func laneOf(keyID string) int {
	h := uint32(2166136261)
	for i := 0; i < len(keyID); i++ {
		h ^= uint32(keyID[i])
		h *= 16777619
	}
	return int(h % reserveLanes)
}

// sameBuckets returns how many of the first (at most max) ops can share a
// batch: every op of a key must count in the same day and month buckets as
// the key's first op of the batch (keybrake_reserve_many reads a key's
// counters once). The batch ends before the first op that does not.
func sameBuckets(ops []*reserveOp, max int) int {
	n := min(len(ops), max)
	first := make(map[string]*reserveOp, n)
	for i := 0; i < n; i++ {
		r := &ops[i].r
		f, ok := first[r.KeyID]
		if !ok {
			first[r.KeyID] = ops[i]
			continue
		}
		if r.Day != f.r.Day || r.Month != f.r.Month {
			return i
		}
	}
	return n
}

// runReserveBatch decides the ops and answers every one.
// None is answered before the statement that decides it has committed; if
// it fails, every op gets its error.
func (s *Store) runReserveBatch(ops []*reserveOp) {
	defer func() {
		for _, op := range ops {
			close(op.done)
		}
	}()
	ctxs := make([]context.Context, len(ops))
	for i, op := range ops {
		ctxs[i] = op.ctx
	}
	ctx, cancel := batchContext(ctxs)
	defer cancel()
	if len(ops) == 1 {
		ops[0].out, ops[0].err = s.reserveOne(ctx, &ops[0].r, ops[0].version)
		return
	}
	outs, err := s.reserveMany(ctx, ops)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && !isConnLost(err) {
		// The whole batch rolled back on an error of one of its
		// reservations (or of a key): decide each alone, so each gets the
		// very outcome or error it would have got without batching.
		for _, op := range ops {
			op.out, op.err = s.reserveOne(ctx, &op.r, op.version)
		}
		return
	}
	for i, op := range ops {
		if err != nil {
			op.err = err
			continue
		}
		op.out = outs[i]
	}
}

// batchContext returns the context a batch runs under: none of its callers'
// cancellations (the batch decides for all of them), but the latest of their
// deadlines if they all have one, so a batch against an unreachable server
// fails when the last of its callers would have given up.
func batchContext(ctxs []context.Context) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, ctx := range ctxs {
		d, ok := ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(ctx))
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(ctxs[0]), latest)
}

// reserveOne decides one reservation with keybrake_reserve.
func (s *Store) reserveOne(ctx context.Context, r *keybrake.Reservation, version string) (reserveOutcome, error) {
	return scanReserveOne(s.queryRow(ctx, qReserveOne, reserveOneArgs(r, version)...))
}

// qReserveOne calls keybrake_reserve with reserveOneArgs.
const qReserveOne = `SELECT status, win, cap, spent, replay_id,
		guard, rule, earlier_id, earlier_object, earlier_at, g_limit, g_count, retry_at, suspended FROM keybrake_reserve(
		$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`

// reserveOneArgs are qReserveOne's arguments: r, decided on version of its
// key ("" checks none).
func reserveOneArgs(r *keybrake.Reservation, version string) []any {
	return []any{r.ID, r.KeyID, r.IdempotencyKey, r.Fingerprint, r.Operation,
		r.Amount, r.Currency, int64(r.Micros), r.Day, r.Month,
		r.Request.Method, r.Request.Path, []byte(r.Request.Body), r.Request.StripeAccount, r.Request.StripeVersion,
		r.CreatedAt, r.Customer, r.DupKey, r.Override, version}
}

// scanReserveOne reads the answer of qReserveOne.
func scanReserveOne(row pgx.Row) (reserveOutcome, error) {
	out, err := scanReserveOutcome(row, nil)
	if pgCode(err) == codeUnusable {
		return reserveOutcome{status: "unusable"}, nil
	}
	return out, err
}

// scanReserveOutcome reads an outcome's columns (keybrake_reserve's, after
// ord if ord is not nil).
func scanReserveOutcome(row pgx.Row, ord *int32) (reserveOutcome, error) {
	var (
		out                    reserveOutcome
		guard, rule, eid, eobj *string
		eat, retry             *time.Time
		glimit, gcount         *int32
		suspended              *bool
	)
	dest := []any{&out.status, &out.window, &out.limit, &out.spent, &out.replayID,
		&guard, &rule, &eid, &eobj, &eat, &glimit, &gcount, &retry, &suspended}
	if ord != nil {
		dest = append([]any{ord}, dest...)
	}
	if err := row.Scan(dest...); err != nil {
		return reserveOutcome{}, err
	}
	if out.status == "guard" {
		g := &keybrake.GuardRefusal{Guard: deref(guard), Rule: deref(rule), EarlierID: deref(eid), EarlierObjectID: deref(eobj)}
		if eat != nil {
			g.EarlierAt = ts(*eat)
		}
		if retry != nil {
			g.RetryAt = ts(*retry)
		}
		if glimit != nil {
			g.Limit = int(*glimit)
		}
		if gcount != nil {
			g.Count = int(*gcount)
		}
		g.Suspended = suspended != nil && *suspended
		out.guard = g
	}
	return out, nil
}

// reserveMany decides ops, of any keys, with one keybrake_reserve_many
// statement, and returns their outcomes in order.
func (s *Store) reserveMany(ctx context.Context, ops []*reserveOp) ([]reserveOutcome, error) {
	n := len(ops)
	var (
		keyIDs, days, months                    = make([]string, n), make([]string, n), make([]string, n)
		ids, idemKeys, fingerprints, operations = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		currencies, customers, dupKeys          = make([]string, n), make([]string, n), make([]string, n)
		methods, paths, accounts, versions      = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		amounts, micros                         = make([]int64, n), make([]int64, n)
		bodies                                  = make([][]byte, n)
		nows                                    = make([]time.Time, n)
		overrides                               = make([]bool, n)
		keyVersions                             = make([]string, n)
	)
	for i, op := range ops {
		r := &op.r
		keyIDs[i], days[i], months[i] = r.KeyID, r.Day, r.Month
		ids[i], idemKeys[i], fingerprints[i], operations[i] = r.ID, r.IdempotencyKey, r.Fingerprint, r.Operation
		amounts[i], currencies[i], micros[i] = r.Amount, r.Currency, int64(r.Micros)
		methods[i], paths[i], bodies[i] = r.Request.Method, r.Request.Path, []byte(r.Request.Body)
		accounts[i], versions[i], nows[i] = r.Request.StripeAccount, r.Request.StripeVersion, r.CreatedAt
		customers[i], dupKeys[i], overrides[i] = r.Customer, r.DupKey, r.Override
		keyVersions[i] = op.version
	}
	outs := make([]reserveOutcome, n)
	err := s.query(ctx, func(rows pgx.Rows) error {
		got := 0
		for rows.Next() {
			var ord int32
			out, err := scanReserveOutcome(rows, &ord)
			if err != nil {
				return err
			}
			if ord < 1 || int(ord) > n {
				return errors.New("keybrake_reserve_many: element out of range")
			}
			outs[ord-1] = out
			got++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if got != n {
			return errors.New("keybrake_reserve_many: missing elements")
		}
		return nil
	}, `SELECT ord, status, win, cap, spent, replay_id,
		guard, rule, earlier_id, earlier_object, earlier_at, g_limit, g_count, retry_at, suspended FROM keybrake_reserve_many(
		$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`,
		keyIDs, days, months, ids, idemKeys, fingerprints, operations,
		amounts, currencies, micros,
		methods, paths, bodies, accounts, versions, nows, customers, dupKeys, overrides, keyVersions)
	return outs, err
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
