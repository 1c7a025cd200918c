package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

var _ keybrake.ApprovalService = (*Store)(nil)

const approvalColumns = `id, key_id, idempotency_key, fingerprint, operation, method, path, account,
	amount, currency, micros, reason, state, decided_by, decided_at, reservation_id,
	expires_at, created_at, updated_at, params`

// RequestApproval records a pending approval unless the key has one for
// the Idempotency-Key, and returns the stored one. The unique (key,
// Idempotency-Key) makes concurrent requests on several replicas agree on
// one approval.
func (s *Store) RequestApproval(ctx context.Context, a *keybrake.Approval) (*keybrake.Approval, bool, error) {
	if a == nil || a.ID == "" || a.KeyID == "" || a.IdempotencyKey == "" {
		return nil, false, keybrake.Errorf(keybrake.EINVALID, "An approval needs an ID, a key and an Idempotency-Key.")
	}
	params, err := keybrake.EncodeApprovalParams(a.Params)
	if err != nil {
		return nil, false, err
	}
	var (
		out     *keybrake.Approval
		created bool
	)
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO approvals (`+approvalColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'pending', '', NULL, '', $13, $14, $14, $15)
			ON CONFLICT (key_id, idempotency_key) DO NOTHING`,
			a.ID, a.KeyID, a.IdempotencyKey, a.Fingerprint, a.Operation, a.Method, a.Path, a.Account,
			a.Amount, a.Currency, int64(a.Micros), a.Reason, ts(a.ExpiresAt), ts(a.CreatedAt), params)
		if err != nil {
			return err
		}
		created = tag.RowsAffected() == 1
		out, err = scanApproval(tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals
			WHERE key_id = $1 AND idempotency_key = $2`, a.KeyID, a.IdempotencyKey))
		return err
	})
	if err != nil {
		return nil, false, s.wrap("request approval on key "+a.KeyID, err)
	}
	return out, created, nil
}

// FindApprovalByID returns an approval. Returns ENOTFOUND.
func (s *Store) FindApprovalByID(ctx context.Context, id string) (*keybrake.Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
	if err != nil {
		return nil, s.wrap("find approval "+id, notFound(err, "No such approval."))
	}
	return a, nil
}

// FindApprovalByKey returns the key's approval for an Idempotency-Key.
// Returns ENOTFOUND when there is none.
func (s *Store) FindApprovalByKey(ctx context.Context, keyID, idempotencyKey string) (*keybrake.Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE key_id = $1 AND idempotency_key = $2`, keyID, idempotencyKey))
	if err != nil {
		return nil, s.wrap("find approval of key "+keyID, notFound(err, "No such approval."))
	}
	return a, nil
}

// FindApprovals returns approvals matching f, newest first.
func (s *Store) FindApprovals(ctx context.Context, f keybrake.ApprovalFilter) ([]*keybrake.Approval, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	var out []*keybrake.Approval
	err := s.query(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			a, err := scanApproval(rows)
			if err != nil {
				return err
			}
			out = append(out, a)
		}
		return nil
	}, `SELECT `+approvalColumns+` FROM approvals
		WHERE ($1 = '' OR key_id = $1) AND ($2 = '' OR state = $2)
		ORDER BY created_at DESC, id DESC LIMIT $3`, f.KeyID, f.State, limit)
	if err != nil {
		return nil, s.wrap("find approvals", err)
	}
	return out, nil
}

// DecideApproval approves or denies a pending approval, under the
// approval's row lock, so two approvers racing get one decision.
func (s *Store) DecideApproval(ctx context.Context, args keybrake.DecideArgs) (*keybrake.Approval, error) {
	now := ts(args.Now)
	state := keybrake.ApprovalDenied
	if args.Approve {
		state = keybrake.ApprovalApproved
	}
	var out *keybrake.Approval
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		a, err := scanApproval(tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1 FOR UPDATE`, args.ID))
		if err != nil {
			return notFound(err, "No such approval.")
		}
		if st := a.Status(now); st != keybrake.ApprovalPending {
			return keybrake.Errorf(keybrake.ECONFLICT, "Approval %s is %s; only a pending approval can be decided.", a.ID, st)
		}
		if _, err := tx.Exec(ctx, `UPDATE approvals SET state = $2, decided_by = $3, decided_at = $4, updated_at = $4 WHERE id = $1`,
			a.ID, state, args.By, now); err != nil {
			return err
		}
		a.State, a.DecidedBy, a.DecidedAt, a.UpdatedAt = state, args.By, &now, now
		if args.Event != nil {
			if err := addAdminEvent(ctx, tx, args.Event(a)); err != nil {
				return err
			}
		}
		out = a
		return nil
	})
	if err != nil {
		return nil, s.wrap("decide approval "+args.ID, err)
	}
	return out, nil
}

// UseApproval marks an approved approval used by reservationID.
func (s *Store) UseApproval(ctx context.Context, id, reservationID string, now time.Time) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var state string
		if err := tx.QueryRow(ctx, `SELECT state FROM approvals WHERE id = $1 FOR UPDATE`, id).Scan(&state); err != nil {
			return notFound(err, "No such approval.")
		}
		switch state {
		case keybrake.ApprovalUsed:
			return nil
		case keybrake.ApprovalApproved:
		default:
			return keybrake.Errorf(keybrake.ECONFLICT, "Approval %s is %s, not approved.", id, state)
		}
		_, err := tx.Exec(ctx, `UPDATE approvals SET state = 'used', reservation_id = $2, updated_at = $3 WHERE id = $1`,
			id, reservationID, ts(now))
		return err
	})
	return s.wrap("use approval "+id, err)
}

func scanApproval(row pgx.Row) (*keybrake.Approval, error) {
	var (
		a      keybrake.Approval
		micros int64
		params *string
	)
	if err := row.Scan(&a.ID, &a.KeyID, &a.IdempotencyKey, &a.Fingerprint, &a.Operation, &a.Method, &a.Path, &a.Account,
		&a.Amount, &a.Currency, &micros, &a.Reason, &a.State, &a.DecidedBy, &a.DecidedAt, &a.ReservationID,
		&a.ExpiresAt, &a.CreatedAt, &a.UpdatedAt, &params); err != nil {
		return nil, err
	}
	var err error
	if params != nil {
		a.Params, err = keybrake.DecodeApprovalParams(*params, true)
	}
	if err != nil {
		return nil, err
	}
	a.Micros = keybrake.Micros(micros)
	a.DecidedAt = tsPtr(a.DecidedAt)
	a.ExpiresAt, a.CreatedAt, a.UpdatedAt = ts(a.ExpiresAt), ts(a.CreatedAt), ts(a.UpdatedAt)
	return &a, nil
}

// LinkSecret returns a server-side secret made by migration 0018. Returns
// ENOTFOUND for an unknown name.
func (s *Store) LinkSecret(ctx context.Context, name string) ([]byte, error) {
	var secret string
	err := s.pool.QueryRow(ctx, `SELECT secret FROM link_secrets WHERE name = $1`, name).Scan(&secret)
	if err != nil {
		return nil, s.wrap("read link secret", notFound(err, "No such secret."))
	}
	return []byte(secret), nil
}
