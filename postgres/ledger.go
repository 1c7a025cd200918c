package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// The billing ledger. A claim of a new key and the finish of a held lease
// first try one statement each (ledger_fast.go). Otherwise, every method
// that changes an entry locks its row
// (SELECT … FOR UPDATE) in a READ COMMITTED transaction, decides with the
// shared state machine (keybrake.ClaimArgs.Apply…) and writes the result
// before committing, so two workers on any hosts never both take a lease.
// A first claim that races another first claim inserts with ON CONFLICT DO
// NOTHING, which waits for the other insert to commit; the claim then
// locks the row the other inserted and decides again.

var _ keybrake.Ledger = (*Store)(nil)

const ledgerColumns = `key, state, amount, currency, customer, fingerprint, charge_id, reason, attempts,
	lease_owner, lease_until, first_attempt_at, created_at, updated_at`

const conflictColumns = `id, key, fingerprint, amount, currency, customer, reason, deliveries, created_at, updated_at`

// Claim inserts or takes over the entry of args.Entry.Key; see
// keybrake.Ledger.
func (s *Store) Claim(ctx context.Context, args keybrake.ClaimArgs) (*keybrake.ClaimResult, error) {
	if err := args.Validate(); err != nil {
		return nil, err
	}
	key := args.Entry.Key
	if e, ok, err := s.claimNew(ctx, args); err != nil {
		return nil, s.wrap("claim "+key, err)
	} else if ok {
		return &keybrake.ClaimResult{Entry: e, Claimed: true}, nil
	}
	var res *keybrake.ClaimResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = &keybrake.ClaimResult{}
		cur, err := lockEntry(ctx, tx, key)
		if err != nil {
			return err
		}
		if cur == nil {
			next, claimed := args.Apply(nil)
			inserted, err := insertEntry(ctx, tx, next)
			if err != nil {
				return err
			}
			if inserted {
				res.Entry, res.Claimed = normEntry(next), claimed
				return nil
			}
			// Another first claim committed meanwhile: decide on its row.
			if cur, err = lockEntry(ctx, tx, key); err != nil {
				return err
			} else if cur == nil {
				return keybrake.Errorf(keybrake.EINTERNAL, "ledger entry %s vanished during a claim", key)
			}
		}
		res.Entry = cur
		if c, ok := args.Conflicts(cur); ok {
			res.Conflict, err = addConflict(ctx, tx, c)
			return err
		}
		next, claimed := args.Apply(cur)
		if next != nil {
			if err := updateEntry(ctx, tx, next); err != nil {
				return err
			}
			res.Entry = normEntry(next)
		}
		res.Claimed = claimed
		return nil
	})
	if err != nil {
		return nil, s.wrap("claim "+key, err)
	}
	return res, nil
}

// Extend moves owner's lease on key; see keybrake.Ledger.
func (s *Store) Extend(ctx context.Context, key, owner string, now, until time.Time) (*keybrake.LedgerEntry, error) {
	return s.updateLedger(ctx, key, "extend lease of", func(cur *keybrake.LedgerEntry) (*keybrake.LedgerEntry, error) {
		return keybrake.ApplyExtend(cur, owner, now, until)
	})
}

// Finish records the final outcome of an entry; see keybrake.Ledger.
func (s *Store) Finish(ctx context.Context, args keybrake.FinishArgs) (*keybrake.LedgerEntry, error) {
	if err := args.Validate(); err != nil {
		return nil, err
	}
	if e, ok, err := s.finishHeld(ctx, args); err != nil {
		return nil, s.wrap("finish ledger entry "+args.Key, err)
	} else if ok {
		return e, nil
	}
	return s.updateLedger(ctx, args.Key, "finish", args.Apply)
}

// Release gives up owner's lease on key; see keybrake.Ledger.
func (s *Store) Release(ctx context.Context, key, owner, reason string, now time.Time) (*keybrake.LedgerEntry, error) {
	return s.updateLedger(ctx, key, "release", func(cur *keybrake.LedgerEntry) (*keybrake.LedgerEntry, error) {
		return keybrake.ApplyRelease(cur, owner, reason, now)
	})
}

// updateLedger applies fn to the locked entry of key in one transaction. fn
// returns nil to leave the entry as it is.
func (s *Store) updateLedger(ctx context.Context, key, what string, fn func(*keybrake.LedgerEntry) (*keybrake.LedgerEntry, error)) (*keybrake.LedgerEntry, error) {
	var out *keybrake.LedgerEntry
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, err := lockEntry(ctx, tx, key)
		if err != nil {
			return err
		} else if cur == nil {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No ledger entry has this key.")
		}
		next, err := fn(cur)
		if err != nil {
			return err
		}
		if next == nil {
			out = cur
			return nil
		}
		out = normEntry(next)
		return updateEntry(ctx, tx, next)
	})
	if err != nil {
		return nil, s.wrap(what+" ledger entry "+key, err)
	}
	return out, nil
}

// FindEntry returns the entry of key; see keybrake.Ledger.
func (s *Store) FindEntry(ctx context.Context, key string) (*keybrake.LedgerEntry, error) {
	e, err := scanEntry(s.pool.QueryRow(ctx, `SELECT `+ledgerColumns+` FROM ledger_entries WHERE key = $1`, key))
	if err != nil {
		return nil, s.wrap("find ledger entry "+key, err)
	}
	return e, nil
}

// FindEntries returns a page of entries ordered by key; see keybrake.Ledger.
func (s *Store) FindEntries(ctx context.Context, f keybrake.EntryFilter) ([]*keybrake.LedgerEntry, bool, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, false, err
	}
	if f.State != "" && !keybrake.ValidEntryState(f.State) {
		return nil, false, keybrake.ErrorParam("state", "Unknown ledger state %q.", f.State)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+ledgerColumns+` FROM ledger_entries
		WHERE key > $1 AND ($2 = '' OR state = $2) ORDER BY key LIMIT $3`, f.StartingAfter, f.State, limit+1)
	if err != nil {
		return nil, false, s.wrap("find ledger entries", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*keybrake.LedgerEntry, error) { return scanEntry(row) })
	if err != nil {
		return nil, false, s.wrap("find ledger entries", err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// FindConflicts returns a page of conflicts ordered by ID; see
// keybrake.Ledger.
func (s *Store) FindConflicts(ctx context.Context, f keybrake.ConflictFilter) ([]*keybrake.LedgerConflict, bool, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, false, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+conflictColumns+` FROM ledger_conflicts
		WHERE id > $1 AND ($2 = '' OR key = $2) ORDER BY id LIMIT $3`, f.StartingAfter, f.Key, limit+1)
	if err != nil {
		return nil, false, s.wrap("find ledger conflicts", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*keybrake.LedgerConflict, error) { return scanConflict(row) })
	if err != nil {
		return nil, false, s.wrap("find ledger conflicts", err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// pageLimit applies the default and the ceiling of a page size.
func pageLimit(n int) (int, error) {
	switch {
	case n < 0:
		return 0, keybrake.ErrorParam("limit", "limit must not be negative")
	case n == 0:
		return 10, nil
	case n > 1000:
		return 1000, nil
	}
	return n, nil
}

// lockEntry returns the entry of key with its row locked, or nil if none.
func lockEntry(ctx context.Context, tx pgx.Tx, key string) (*keybrake.LedgerEntry, error) {
	e, err := scanEntry(tx.QueryRow(ctx, `SELECT `+ledgerColumns+` FROM ledger_entries WHERE key = $1 FOR UPDATE`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return e, err
}

// insertEntry inserts e unless the key exists (a concurrent first claim),
// and reports whether it did.
func insertEntry(ctx context.Context, tx pgx.Tx, e *keybrake.LedgerEntry) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO ledger_entries (`+ledgerColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT (key) DO NOTHING`,
		e.Key, e.State, e.Amount, e.Currency, e.Customer, e.Fingerprint, e.ChargeID, e.Reason, e.Attempts,
		e.LeaseOwner, ledgerTSPtr(e.LeaseUntil), ledgerTS(e.FirstAttemptAt), ledgerTS(e.CreatedAt), ledgerTS(e.UpdatedAt))
	return tag.RowsAffected() == 1, err
}

// updateEntry writes the mutable columns of e.
func updateEntry(ctx context.Context, tx pgx.Tx, e *keybrake.LedgerEntry) error {
	_, err := tx.Exec(ctx, `UPDATE ledger_entries SET state = $2, charge_id = $3, reason = $4, attempts = $5,
		lease_owner = $6, lease_until = $7, updated_at = $8 WHERE key = $1`,
		e.Key, e.State, e.ChargeID, e.Reason, e.Attempts, e.LeaseOwner, ledgerTSPtr(e.LeaseUntil), ledgerTS(e.UpdatedAt))
	return err
}

// addConflict records c, or counts one more delivery of a conflict already
// recorded for its key and fingerprint.
func addConflict(ctx context.Context, tx pgx.Tx, c *keybrake.LedgerConflict) (*keybrake.LedgerConflict, error) {
	return scanConflict(tx.QueryRow(ctx, `INSERT INTO ledger_conflicts
		(key, fingerprint, amount, currency, customer, reason, deliveries, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8)
		ON CONFLICT (key, fingerprint) DO UPDATE
			SET deliveries = ledger_conflicts.deliveries + 1, updated_at = excluded.updated_at
		RETURNING `+conflictColumns,
		c.Key, c.Fingerprint, c.Amount, c.Currency, c.Customer, c.Reason, ledgerTS(c.CreatedAt), ledgerTS(c.UpdatedAt)))
}

func scanEntry(row pgx.Row) (*keybrake.LedgerEntry, error) {
	var e keybrake.LedgerEntry
	var leaseUntil *time.Time
	if err := row.Scan(&e.Key, &e.State, &e.Amount, &e.Currency, &e.Customer, &e.Fingerprint, &e.ChargeID, &e.Reason,
		&e.Attempts, &e.LeaseOwner, &leaseUntil, &e.FirstAttemptAt, &e.CreatedAt, &e.UpdatedAt); err != nil {
		return nil, err
	}
	if leaseUntil != nil {
		e.LeaseUntil = *leaseUntil
	}
	return normEntry(&e), nil
}

func scanConflict(row pgx.Row) (*keybrake.LedgerConflict, error) {
	var c keybrake.LedgerConflict
	if err := row.Scan(&c.ID, &c.Key, &c.Fingerprint, &c.Amount, &c.Currency, &c.Customer, &c.Reason,
		&c.Deliveries, &c.CreatedAt, &c.UpdatedAt); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt = ledgerTS(c.CreatedAt), ledgerTS(c.UpdatedAt)
	return &c, nil
}

// normEntry rounds e's times as they read back from the database.
func normEntry(e *keybrake.LedgerEntry) *keybrake.LedgerEntry {
	if !e.LeaseUntil.IsZero() {
		e.LeaseUntil = ledgerTS(e.LeaseUntil)
	}
	e.FirstAttemptAt, e.CreatedAt, e.UpdatedAt = ledgerTS(e.FirstAttemptAt), ledgerTS(e.CreatedAt), ledgerTS(e.UpdatedAt)
	return e
}

// ledgerTS is a time as PostgreSQL keeps it: microseconds, UTC.
func ledgerTS(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

// ledgerTSPtr maps the zero time (no lease) to NULL.
func ledgerTSPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	v := ledgerTS(t)
	return &v
}
