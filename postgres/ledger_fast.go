package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// One-statement fast paths of the ledger's two hot transitions. A worker
// claims a new key and later finishes its own lease once per event; in a
// transaction each costs four round trips (BEGIN, SELECT … FOR UPDATE, the
// write, COMMIT). Here each is one statement in its own implicit
// transaction, which PostgreSQL runs atomically under the row lock the
// statement takes, and pgx sends prepared from its statement cache. The
// statement succeeds only in the state the shared state machine would
// decide the same way:
//
//	claim   no row for the key          → insert what ClaimArgs.Apply(nil) returns
//	finish  pending, leased to Owner    → the columns FinishArgs.Apply changes
//
// Any other case (an existing entry, a conflict, a replayed finish, a lost
// lease) changes nothing, and the caller falls back to the locked
// transaction, which decides with the state machine as before.

// claimNew inserts the entry of a key that has none, and reports whether it
// did.
func (s *Store) claimNew(ctx context.Context, args keybrake.ClaimArgs) (*keybrake.LedgerEntry, bool, error) {
	next, _ := args.Apply(nil)
	e := next
	tag, err := s.pool.Exec(ctx, `INSERT INTO ledger_entries (`+ledgerColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT (key) DO NOTHING`,
		e.Key, e.State, e.Amount, e.Currency, e.Customer, e.Fingerprint, e.ChargeID, e.Reason, e.Attempts,
		e.LeaseOwner, ledgerTSPtr(e.LeaseUntil), ledgerTS(e.FirstAttemptAt), ledgerTS(e.CreatedAt), ledgerTS(e.UpdatedAt))
	if err != nil {
		return nil, false, err
	}
	return normEntry(next), tag.RowsAffected() == 1, nil
}

// finishHeld records the outcome of a pending entry that args.Owner holds,
// and reports whether there was one.
func (s *Store) finishHeld(ctx context.Context, args keybrake.FinishArgs) (*keybrake.LedgerEntry, bool, error) {
	e, err := scanEntry(s.pool.QueryRow(ctx, `UPDATE ledger_entries
		SET state = $3, charge_id = $4, reason = $5, lease_owner = '', lease_until = NULL, updated_at = $6
		WHERE key = $1 AND state = 'pending' AND lease_owner = $2
		RETURNING `+ledgerColumns,
		args.Key, args.Owner, args.State, args.ChargeID, args.Reason, ledgerTS(args.Now)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return e, true, nil
}
