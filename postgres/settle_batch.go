package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/keybrake/keybrake"
)

// maxSettleBatch bounds the settlements run in one statement and committed
// together.
const maxSettleBatch = 64

// settleLinger is how long a batch of settlements queued by SettleLater
// alone waits for more to join it. Nobody waits for those settlements (the
// request was answered), and an unsettled reservation counts in full, so
// waiting costs nothing but the time it stays reserved; a batch of many
// settlements costs the server much less per settlement than several small
// ones (one statement, one commit). A batch with a settlement of Settle, which a
// caller waits for, runs at once. 10 ms, not less: with four replicas each
// process settles a quarter of the charges, and at 2 ms 0.48–0.54
// settlement statements ran per charge at 600 charges/s (most of them
// alone) against 0.24–0.27 at 10 ms (docs/performance.md, "PostgreSQL
// replicas (pgrep)").
const settleLinger = 10 * time.Millisecond

// settleOp is one settlement waiting for, or done by, a batch.
type settleOp struct {
	ctx   context.Context
	later bool // queued by SettleLater: nobody waits for it
	args  keybrake.SettleArgs
	out   *keybrake.Reservation
	err   error
	done  chan struct{}
}

// settleQueue is this process's queue of settlements, of any key (group
// commit, as keyQueue for reservations). A settlement locks only its
// reservation's row, so settlements of every key can share a batch; most of
// what one costs the server is its statement and its commit, which a batch
// pays once. One batch runs at a time per process: settlements of distinct
// reservations no longer run side by side on several connections, which
// costs a lone settlement up to one batch's wait, but on a hot key fuller
// batches measured faster than several smaller ones in flight.
type settleQueue = groupQueue[*settleOp]

// settleQueued queues op and waits for its outcome (groupQueue.wait).
func (s *Store) settleQueued(op *settleOp) (*keybrake.Reservation, error) {
	if err := s.settles.wait(op.ctx, op, op.done); err != nil {
		return nil, err
	}
	return op.out, op.err
}

// settleLater is Settle for SettleLater: the same batches, which may
// linger (settleLinger) while they hold only such settlements.
func (s *Store) settleLater(ctx context.Context, args keybrake.SettleArgs) (*keybrake.Reservation, error) {
	r, err := s.settleQueued(&settleOp{ctx: ctx, later: true, args: args, done: make(chan struct{})})
	if err != nil {
		return nil, s.wrap("settle "+args.ID, err)
	}
	return r, nil
}

// lingerSettles returns settleLinger while the pending settlements are
// fewer than a batch and all queued by SettleLater, else zero.
func lingerSettles(pending []*settleOp) time.Duration {
	if len(pending) >= maxSettleBatch {
		return 0
	}
	for _, op := range pending {
		if !op.later {
			return 0
		}
	}
	return settleLinger
}

// runSettleBatch settles the ops and answers every one, none before the
// statement that settles it has committed; if it fails, every op gets its
// error.
func (s *Store) runSettleBatch(ops []*settleOp) {
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
		ops[0].out, ops[0].err = s.settleOne(ctx, ops[0].args)
		return
	}
	// Reservation rows are locked in ID order, the same in every batch, so
	// two batches never wait on each other's rows; a reservation settled
	// twice keeps the order its settlements arrived in.
	slices.SortStableFunc(ops, func(a, b *settleOp) int { return cmp.Compare(a.args.ID, b.args.ID) })
	err := s.settleBatch(ctx, ops)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && !isConnLost(err) {
		// Rolled back as a whole: settle each alone, so each gets the
		// outcome or error it would have got without batching.
		for _, op := range ops {
			op.out, op.err = s.settleOne(ctx, op.args)
		}
		return
	}
	if err != nil {
		for _, op := range ops {
			op.out, op.err = nil, err
		}
	}
}

// settleOne settles one reservation with keybrake_settle.
func (s *Store) settleOne(ctx context.Context, a keybrake.SettleArgs) (*keybrake.Reservation, error) {
	return scanReservation(s.queryRow(ctx, `SELECT `+reservationColumns+` FROM keybrake_settle($1, $2, $3, $4, $5, $6, $7, $8)`,
		a.ID, a.State, int64(a.SettledMicros), a.Amount, a.Currency, a.ObjectID, a.UpstreamStatus, ts(a.Now)))
}

// settleBatchColumns selects the reservation columns of
// keybrake_settle_batch's composite column res.
var settleBatchColumns = func() string {
	cols := strings.Split(reservationColumns, ",")
	for i, c := range cols {
		cols[i] = "(b.res)." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}()

// settleBatch settles ops, in order, with one keybrake_settle_batch
// statement, and sets each op's outcome: the updated reservation, or the
// error keybrake_settle would have raised for it.
func (s *Store) settleBatch(ctx context.Context, ops []*settleOp) error {
	n := len(ops)
	var (
		ids, states, currencies, objectIDs = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		settled, amounts                   = make([]int64, n), make([]int64, n)
		statuses                           = make([]int32, n)
		nows                               = make([]time.Time, n)
	)
	for i, op := range ops {
		a := op.args
		ids[i], states[i], settled[i], amounts[i] = a.ID, a.State, int64(a.SettledMicros), a.Amount
		currencies[i], objectIDs[i], statuses[i], nows[i] = a.Currency, a.ObjectID, int32(a.UpstreamStatus), ts(a.Now)
	}
	outs := make([]*keybrake.Reservation, n)
	errs := make([]error, n)
	err := s.query(ctx, func(rows pgx.Rows) error {
		got := 0
		for rows.Next() {
			var ord int32
			var status string
			var message *string // NULL when ok
			if err := rows.Scan(append([]any{&ord, &status, &message}, make([]any, len(strings.Split(reservationColumns, ",")))...)...); err != nil {
				return err
			}
			if ord < 1 || int(ord) > n {
				return errors.New("keybrake_settle_batch: element out of range")
			}
			if status != "ok" && message == nil {
				return errors.New("keybrake_settle_batch: " + status + " without a message")
			}
			switch status {
			case "ok":
				r, err := scanReservation(skipRow{rows, 3})
				if err != nil {
					return err
				}
				outs[ord-1] = r
			case "notfound":
				errs[ord-1] = &pgconn.PgError{Severity: "ERROR", Code: codeNotFound, Message: *message}
			case "conflict":
				errs[ord-1] = &pgconn.PgError{Severity: "ERROR", Code: codeConflict, Message: *message}
			default:
				return errors.New("keybrake_settle_batch: unexpected status " + status)
			}
			got++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if got != n {
			return errors.New("keybrake_settle_batch: missing elements")
		}
		return nil
	}, `SELECT b.ord, b.status, b.message, `+settleBatchColumns+` FROM keybrake_settle_batch(
		$1, $2, $3, $4, $5, $6, $7, $8) AS b`,
		ids, states, settled, amounts, currencies, objectIDs, statuses, nows)
	if err != nil {
		return err
	}
	for i, op := range ops {
		op.out, op.err = outs[i], errs[i]
	}
	return nil
}

// skipRow is a row of rows whose first skip columns are not scanned.
type skipRow struct {
	rows pgx.Rows
	skip int
}

func (r skipRow) Scan(dest ...any) error {
	return r.rows.Scan(append(make([]any, r.skip), dest...)...)
}
