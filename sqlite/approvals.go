package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/keybrake/keybrake"
)

var _ keybrake.ApprovalService = (*Store)(nil)

const approvalColumns = `id, key_id, idempotency_key, fingerprint, operation, method, path, account,
	amount, currency, micros, reason, state, decided_by, decided_at, reservation_id,
	expires_at, created_at, updated_at, params`

// RequestApproval records a pending approval unless the key has one for
// the Idempotency-Key, and returns the stored one.
func (s *Store) RequestApproval(ctx context.Context, a *keybrake.Approval) (*keybrake.Approval, bool, error) {
	if a == nil || a.ID == "" || a.KeyID == "" || a.IdempotencyKey == "" {
		return nil, false, keybrake.Errorf(keybrake.EINVALID, "An approval needs an ID, a key and an Idempotency-Key.")
	}
	in := *a
	in.State, in.DecidedBy, in.DecidedAt, in.ReservationID = keybrake.ApprovalPending, "", nil, ""
	in.CreatedAt, in.UpdatedAt, in.ExpiresAt = dbTime(in.CreatedAt), dbTime(in.CreatedAt), dbTime(in.ExpiresAt)
	params, err := keybrake.EncodeApprovalParams(in.Params)
	if err != nil {
		return nil, false, err
	}
	var (
		out     *keybrake.Approval
		created bool
	)
	err = s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		res, err := tx.ExecContext(ctx, `INSERT INTO approvals (`+approvalColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (key_id, idempotency_key) DO NOTHING`,
			in.ID, in.KeyID, in.IdempotencyKey, in.Fingerprint, in.Operation, in.Method, in.Path, in.Account,
			in.Amount, in.Currency, int64(in.Micros), in.Reason, in.State, "", nil, "",
			in.ExpiresAt.UnixMicro(), in.CreatedAt.UnixMicro(), in.UpdatedAt.UnixMicro(), params)
		if err != nil {
			if isUnique(err) {
				return keybrake.Errorf(keybrake.ECONFLICT, "Approval %s already exists.", in.ID)
			}
			return wrap(err, "request approval on key %s", in.KeyID)
		}
		n, _ := res.RowsAffected()
		created = n == 1
		out, err = scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals
			WHERE key_id = ? AND idempotency_key = ?`, in.KeyID, in.IdempotencyKey))
		return wrap(err, "request approval on key %s", in.KeyID)
	})
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// FindApprovalByID returns an approval. Returns ENOTFOUND.
func (s *Store) FindApprovalByID(ctx context.Context, id string) (*keybrake.Approval, error) {
	a, err := scanApproval(s.reader.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	return a, approvalErr(err, "find approval %s", id)
}

// FindApprovalByKey returns the key's approval for an Idempotency-Key.
// Returns ENOTFOUND when there is none.
func (s *Store) FindApprovalByKey(ctx context.Context, keyID, idempotencyKey string) (*keybrake.Approval, error) {
	a, err := scanApproval(s.reader.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE key_id = ? AND idempotency_key = ?`, keyID, idempotencyKey))
	return a, approvalErr(err, "find approval of key %s", keyID)
}

// FindApprovals returns approvals matching f, newest first.
func (s *Store) FindApprovals(ctx context.Context, f keybrake.ApprovalFilter) ([]*keybrake.Approval, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE (?1 = '' OR key_id = ?1) AND (?2 = '' OR state = ?2)
		ORDER BY created_at DESC, id DESC LIMIT ?3`, f.KeyID, f.State, limit)
	if err != nil {
		return nil, wrap(err, "find approvals")
	}
	defer rows.Close()
	var out []*keybrake.Approval
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, wrap(err, "find approvals")
		}
		out = append(out, a)
	}
	return out, wrap(rows.Err(), "find approvals")
}

// DecideApproval approves or denies a pending approval.
func (s *Store) DecideApproval(ctx context.Context, args keybrake.DecideArgs) (*keybrake.Approval, error) {
	now := dbTime(args.Now)
	state := keybrake.ApprovalDenied
	if args.Approve {
		state = keybrake.ApprovalApproved
	}
	var out *keybrake.Approval
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		a, err := scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, args.ID))
		if err != nil {
			return approvalErr(err, "decide approval %s", args.ID)
		}
		if st := a.Status(now); st != keybrake.ApprovalPending {
			return keybrake.Errorf(keybrake.ECONFLICT, "Approval %s is %s; only a pending approval can be decided.", a.ID, st)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?, updated_at = ?
			WHERE id = ?`, state, args.By, now.UnixMicro(), now.UnixMicro(), a.ID); err != nil {
			return wrap(err, "decide approval %s", a.ID)
		}
		a.State, a.DecidedBy, a.DecidedAt, a.UpdatedAt = state, args.By, &now, now
		if args.Event != nil {
			if err := addAdminEventIn(ctx, tx, args.Event(a)); err != nil {
				return err
			}
		}
		out = a
		return nil
	})
	return out, err
}

// UseApproval marks an approved approval used by reservationID.
func (s *Store) UseApproval(ctx context.Context, id, reservationID string, now time.Time) error {
	return s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		var state string
		if err := tx.QueryRowContext(ctx, `SELECT state FROM approvals WHERE id = ?`, id).Scan(&state); err != nil {
			return approvalErr(err, "use approval %s", id)
		}
		switch state {
		case keybrake.ApprovalUsed:
			return nil
		case keybrake.ApprovalApproved:
		default:
			return keybrake.Errorf(keybrake.ECONFLICT, "Approval %s is %s, not approved.", id, state)
		}
		_, err := tx.ExecContext(ctx, `UPDATE approvals SET state = 'used', reservation_id = ?, updated_at = ? WHERE id = ?`,
			reservationID, dbTime(now).UnixMicro(), id)
		return wrap(err, "use approval %s", id)
	})
}

func approvalErr(err error, format string, args ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return keybrake.Errorf(keybrake.ENOTFOUND, "No such approval.")
	}
	return wrap(err, format, args...)
}

func scanApproval(row scanner) (*keybrake.Approval, error) {
	var (
		a                         keybrake.Approval
		micros                    int64
		decided                   sql.NullInt64
		expires, created, updated int64
		params                    sql.NullString
	)
	if err := row.Scan(&a.ID, &a.KeyID, &a.IdempotencyKey, &a.Fingerprint, &a.Operation, &a.Method, &a.Path, &a.Account,
		&a.Amount, &a.Currency, &micros, &a.Reason, &a.State, &a.DecidedBy, &decided, &a.ReservationID,
		&expires, &created, &updated, &params); err != nil {
		return nil, err
	}
	var err error
	if a.Params, err = keybrake.DecodeApprovalParams(params.String, params.Valid); err != nil {
		return nil, err
	}
	a.Micros, a.DecidedAt = keybrake.Micros(micros), timePtr(decided)
	a.ExpiresAt, a.CreatedAt, a.UpdatedAt = fromMicros(expires), fromMicros(created), fromMicros(updated)
	return &a, nil
}

// LinkSecret returns a server-side secret made by migration 0014. Returns
// ENOTFOUND for an unknown name.
func (s *Store) LinkSecret(ctx context.Context, name string) ([]byte, error) {
	var secret string
	err := s.reader.QueryRowContext(ctx, `SELECT secret FROM link_secrets WHERE name = ?`, name).Scan(&secret)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No such secret.")
	}
	if err != nil {
		return nil, wrap(err, "read link secret")
	}
	return []byte(secret), nil
}
