package sqlite

import (
	"context"
	"database/sql"

	"github.com/keybrake/keybrake"
)

// One-statement fast paths of the ledger's two hot transitions, as in the
// PostgreSQL ledger: a worker claims a new key and later finishes its own
// lease once per event. Each is one statement, so when the group commit
// holds nothing else it runs alone, in SQLite's own implicit transaction,
// instead of BEGIN IMMEDIATE, a read, a write and COMMIT; in a batch it
// runs in its savepoint like any write. Either way it returns only once
// its change is durable. The statement changes the entry only in the state
// the shared state machine would decide the same way:
//
//	claim   no row for the key          → insert what ClaimArgs.Apply(nil) returns
//	finish  pending, leased to Owner    → the columns FinishArgs.Apply changes
//
// Any other case (an existing entry, a conflict, a replayed finish, a lost
// lease) changes nothing, and the caller falls back to the read-decide-write
// path, which decides with the state machine as before.

const (
	qClaimNew = `INSERT INTO ledger_entries (` + ledgerColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`
	qFinishHeld = `UPDATE ledger_entries SET state = ?3, charge_id = ?4, reason = ?5, lease_owner = '', lease_until = 0, updated_at = ?6
		WHERE key = ?1 AND state = 'pending' AND lease_owner = ?2
		RETURNING ` + ledgerColumns
)

// claimNew inserts the entry of a key that has none, and reports whether it
// did.
func (s *Store) claimNew(ctx context.Context, args keybrake.ClaimArgs) (*keybrake.LedgerEntry, bool, error) {
	e, _ := args.Apply(nil)
	params := []any{e.Key, e.State, e.Amount, e.Currency, e.Customer, e.Fingerprint, e.ChargeID, e.Reason, e.Attempts,
		e.LeaseOwner, ledgerMicros(e.LeaseUntil), ledgerMicros(e.FirstAttemptAt), ledgerMicros(e.CreatedAt), ledgerMicros(e.UpdatedAt)}
	wctx := context.WithoutCancel(ctx) // statements of a batch run to the end (batch.go)
	var n int64
	count := func(res sql.Result, err error) error {
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	}
	err := s.batch.writeAlone(ctx, func(tx *sql.Tx) error {
		return count(tx.StmtContext(wctx, s.wstmts[qClaimNew]).ExecContext(wctx, params...))
	}, func() error {
		return count(s.wstmts[qClaimNew].ExecContext(wctx, params...))
	})
	if err != nil {
		return nil, false, err
	}
	return normEntry(e), n == 1, nil
}

// finishHeld records the outcome of a pending entry that args.Owner holds,
// and reports whether there was one.
func (s *Store) finishHeld(ctx context.Context, args keybrake.FinishArgs) (*keybrake.LedgerEntry, bool, error) {
	params := []any{args.Key, args.Owner, args.State, args.ChargeID, args.Reason, ledgerMicros(args.Now)}
	wctx := context.WithoutCancel(ctx)
	var e *keybrake.LedgerEntry
	err := s.batch.writeAlone(ctx, func(tx *sql.Tx) error {
		var err error
		e, err = scanEntry(tx.StmtContext(wctx, s.wstmts[qFinishHeld]).QueryRowContext(wctx, params...))
		return err
	}, func() error {
		var err error
		e, err = scanEntry(s.wstmts[qFinishHeld].QueryRowContext(wctx, params...))
		return err
	})
	if keybrake.ErrorCode(err) == keybrake.ENOTFOUND {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return e, true, nil
}
