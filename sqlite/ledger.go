package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/keybrake/keybrake"
)

// The billing ledger. Every method that changes an entry runs on the single
// writer (BEGIN IMMEDIATE) inside the group commit of batch.go, in a
// savepoint of its own: reading the entry, deciding with the shared state
// machine (keybrake.ClaimArgs.Apply…) and writing the result never
// interleave with another claim, in this process or another one on the same
// file, and each method returns only after the commit that made its change
// durable. Concurrent workers' claims and finishes share that commit, and
// the statements are prepared once per Store. The claim of a new key and
// the finish of a held lease first try one statement (ledger_fast.go).

var _ keybrake.Ledger = (*Store)(nil)

const ledgerColumns = `key, state, amount, currency, customer, fingerprint, charge_id, reason, attempts,
	lease_owner, lease_until, first_attempt_at, created_at, updated_at`

const conflictColumns = `id, key, fingerprint, amount, currency, customer, reason, deliveries, created_at, updated_at`

// Claim inserts or takes over the entry of args.Entry.Key; see
// keybrake.Ledger. It joins the group commit (batch.go): concurrent claims
// and finishes share one transaction, and Claim returns only once that
// transaction committed, so the lease is durable before Stripe is called.
func (s *Store) Claim(ctx context.Context, args keybrake.ClaimArgs) (*keybrake.ClaimResult, error) {
	if err := args.Validate(); err != nil {
		return nil, err
	}
	key := args.Entry.Key
	if e, ok, err := s.claimNew(ctx, args); err != nil {
		return nil, wrap(err, "claim %s", key)
	} else if ok {
		return &keybrake.ClaimResult{Entry: e, Claimed: true}, nil
	}
	var res *keybrake.ClaimResult
	// Statements of a batch run to the end whatever the caller's context:
	// one interrupted would roll back the others' writes (batch.go).
	wctx := context.WithoutCancel(ctx)
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		cur, err := s.findEntry(wctx, tx, key)
		if err != nil && keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			return err
		}
		res = &keybrake.ClaimResult{Entry: cur}
		if c, ok := args.Conflicts(cur); ok {
			if res.Conflict, err = addConflict(wctx, tx, c); err != nil {
				return fmt.Errorf("record conflict: %w", err)
			}
			return nil
		}
		next, claimed := args.Apply(cur)
		if next != nil {
			if err := s.putEntry(wctx, tx, next, cur != nil); err != nil {
				return err
			}
			res.Entry = normEntry(next)
		}
		res.Claimed = claimed
		return nil
	})
	if err != nil {
		return nil, wrap(err, "claim %s", key)
	}
	return res, nil
}

// Extend moves owner's lease on key; see keybrake.Ledger.
func (s *Store) Extend(ctx context.Context, key, owner string, now, until time.Time) (*keybrake.LedgerEntry, error) {
	return s.update(ctx, key, "extend lease of", func(cur *keybrake.LedgerEntry) (*keybrake.LedgerEntry, error) {
		return keybrake.ApplyExtend(cur, owner, now, until)
	})
}

// Finish records the final outcome of an entry; see keybrake.Ledger.
func (s *Store) Finish(ctx context.Context, args keybrake.FinishArgs) (*keybrake.LedgerEntry, error) {
	if err := args.Validate(); err != nil {
		return nil, err
	}
	if e, ok, err := s.finishHeld(ctx, args); err != nil {
		return nil, wrap(err, "finish ledger entry %s", args.Key)
	} else if ok {
		return e, nil
	}
	return s.update(ctx, args.Key, "finish", args.Apply)
}

// Release gives up owner's lease on key; see keybrake.Ledger.
func (s *Store) Release(ctx context.Context, key, owner, reason string, now time.Time) (*keybrake.LedgerEntry, error) {
	return s.update(ctx, key, "release", func(cur *keybrake.LedgerEntry) (*keybrake.LedgerEntry, error) {
		return keybrake.ApplyRelease(cur, owner, reason, now)
	})
}

// update applies fn to the entry of key in the group commit (batch.go),
// returning once the change is durable. fn returns nil to leave the entry
// as it is.
func (s *Store) update(ctx context.Context, key, what string, fn func(*keybrake.LedgerEntry) (*keybrake.LedgerEntry, error)) (*keybrake.LedgerEntry, error) {
	var out *keybrake.LedgerEntry
	wctx := context.WithoutCancel(ctx) // as in Claim
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		cur, err := s.findEntry(wctx, tx, key)
		if err != nil {
			return err
		}
		next, err := fn(cur)
		if err != nil {
			return err
		}
		if next == nil {
			out = cur
			return nil
		}
		if err := s.putEntry(wctx, tx, next, true); err != nil {
			return err
		}
		out = normEntry(next)
		return nil
	})
	if err != nil {
		return nil, wrap(err, "%s ledger entry %s", what, key)
	}
	return out, nil
}

// FindEntry returns the entry of key; see keybrake.Ledger.
func (s *Store) FindEntry(ctx context.Context, key string) (*keybrake.LedgerEntry, error) {
	e, err := scanEntry(s.reader.QueryRowContext(ctx, `SELECT `+ledgerColumns+` FROM ledger_entries WHERE key = ?`, key))
	if err != nil {
		return nil, wrap(err, "find ledger entry %s", key)
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
	rows, err := s.reader.QueryContext(ctx, `SELECT `+ledgerColumns+` FROM ledger_entries
		WHERE key > ?1 AND (?2 = '' OR state = ?2) ORDER BY key LIMIT ?3`, f.StartingAfter, f.State, limit+1)
	if err != nil {
		return nil, false, wrap(err, "find ledger entries")
	}
	defer rows.Close()
	var out []*keybrake.LedgerEntry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, false, wrap(err, "find ledger entries")
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, false, wrap(err, "find ledger entries")
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
	rows, err := s.reader.QueryContext(ctx, `SELECT `+conflictColumns+` FROM ledger_conflicts
		WHERE id > ?1 AND (?2 = '' OR key = ?2) ORDER BY id LIMIT ?3`, f.StartingAfter, f.Key, limit+1)
	if err != nil {
		return nil, false, wrap(err, "find ledger conflicts")
	}
	defer rows.Close()
	var out []*keybrake.LedgerConflict
	for rows.Next() {
		c, err := scanConflict(rows)
		if err != nil {
			return nil, false, wrap(err, "find ledger conflicts")
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, false, wrap(err, "find ledger conflicts")
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

const (
	qFindEntry   = `SELECT ` + ledgerColumns + ` FROM ledger_entries WHERE key = ?`
	qInsertEntry = `INSERT INTO ledger_entries (` + ledgerColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// qUpdateEntry writes the columns a transition changes; the others
	// (amount, currency, customer, fingerprint, first attempt, creation) are
	// the event's and never change.
	qUpdateEntry = `UPDATE ledger_entries SET state = ?2, charge_id = ?3, reason = ?4, attempts = ?5,
		lease_owner = ?6, lease_until = ?7, updated_at = ?8 WHERE key = ?1`
)

// findEntry reads the entry of key in tx, through the prepared statement.
func (s *Store) findEntry(ctx context.Context, tx *sql.Tx, key string) (*keybrake.LedgerEntry, error) {
	return scanEntry(s.txQueryRow(ctx, tx, qFindEntry, key))
}

// putEntry writes e: every column if it is new, else the columns a
// transition changes. A plain INSERT or UPDATE, where an upsert first tried
// the insert (every column, every constraint) and then updated.
func (s *Store) putEntry(ctx context.Context, tx *sql.Tx, e *keybrake.LedgerEntry, exists bool) error {
	if exists {
		res, err := s.txExec(ctx, tx, qUpdateEntry, e.Key, e.State, e.ChargeID, e.Reason, e.Attempts,
			e.LeaseOwner, ledgerMicros(e.LeaseUntil), ledgerMicros(e.UpdatedAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("update ledger entry %s: %d rows changed, want 1", e.Key, n)
		}
		return nil
	}
	_, err := s.txExec(ctx, tx, qInsertEntry,
		e.Key, e.State, e.Amount, e.Currency, e.Customer, e.Fingerprint, e.ChargeID, e.Reason, e.Attempts,
		e.LeaseOwner, ledgerMicros(e.LeaseUntil), ledgerMicros(e.FirstAttemptAt), ledgerMicros(e.CreatedAt), ledgerMicros(e.UpdatedAt))
	return err
}

// addConflict records c, or counts one more delivery of a conflict already
// recorded for its key and fingerprint.
func addConflict(ctx context.Context, tx *sql.Tx, c *keybrake.LedgerConflict) (*keybrake.LedgerConflict, error) {
	return scanConflict(tx.QueryRowContext(ctx, `INSERT INTO ledger_conflicts
		(key, fingerprint, amount, currency, customer, reason, deliveries, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?)
		ON CONFLICT (key, fingerprint) DO UPDATE SET deliveries = deliveries + 1, updated_at = excluded.updated_at
		RETURNING `+conflictColumns,
		c.Key, c.Fingerprint, c.Amount, c.Currency, c.Customer, c.Reason, ledgerMicros(c.CreatedAt), ledgerMicros(c.UpdatedAt)))
}

func scanEntry(row interface{ Scan(...any) error }) (*keybrake.LedgerEntry, error) {
	var e keybrake.LedgerEntry
	var leaseUntil, first, created, updated int64
	err := row.Scan(&e.Key, &e.State, &e.Amount, &e.Currency, &e.Customer, &e.Fingerprint, &e.ChargeID, &e.Reason,
		&e.Attempts, &e.LeaseOwner, &leaseUntil, &first, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No ledger entry has this key.")
	} else if err != nil {
		return nil, err
	}
	e.LeaseUntil, e.FirstAttemptAt = ledgerTime(leaseUntil), ledgerTime(first)
	e.CreatedAt, e.UpdatedAt = ledgerTime(created), ledgerTime(updated)
	return &e, nil
}

func scanConflict(row interface{ Scan(...any) error }) (*keybrake.LedgerConflict, error) {
	var c keybrake.LedgerConflict
	var created, updated int64
	if err := row.Scan(&c.ID, &c.Key, &c.Fingerprint, &c.Amount, &c.Currency, &c.Customer, &c.Reason,
		&c.Deliveries, &created, &updated); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt = ledgerTime(created), ledgerTime(updated)
	return &c, nil
}

// normEntry rounds e's times as they read back from the database.
func normEntry(e *keybrake.LedgerEntry) *keybrake.LedgerEntry {
	e.LeaseUntil, e.FirstAttemptAt = ledgerTime(ledgerMicros(e.LeaseUntil)), ledgerTime(ledgerMicros(e.FirstAttemptAt))
	e.CreatedAt, e.UpdatedAt = ledgerTime(ledgerMicros(e.CreatedAt)), ledgerTime(ledgerMicros(e.UpdatedAt))
	return e
}

// ledgerMicros stores a time as unix microseconds, the zero time as 0.
func ledgerMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// ledgerTime is the inverse of ledgerMicros, in UTC.
func ledgerTime(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}
