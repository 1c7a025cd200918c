package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/keybrake/keybrake"
)

var _ keybrake.DelegationService = (*Store)(nil)

// MintChild creates a child key and escrows its total cap from the parent,
// in one transaction of the single writer: the parent's policy and spend
// are read, checked and charged with nothing else writing in between, so
// concurrent mints of one parent are decided one after the other.
func (s *Store) MintChild(ctx context.Context, args keybrake.MintArgs) (keybrake.MintResult, error) {
	if args.Child == nil {
		return keybrake.MintResult{}, keybrake.Errorf(keybrake.EINVALID, "No child key given.")
	}
	child := *args.Child
	child.ParentID = args.ParentID
	if err := validateKey(&child); err != nil {
		return keybrake.MintResult{}, err
	}
	now := args.Now
	if now.IsZero() {
		now = s.now()
	}
	now = dbTime(now)
	child.CreatedAt, child.UpdatedAt = now, now
	normalizeKey(&child)

	var res keybrake.MintResult
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		res = keybrake.MintResult{}
		parent, err := scanKey(s.txQueryRow(ctx, tx, qKeyByID, args.ParentID))
		if err != nil {
			return wrapKeyErr(err, "mint under key %s", args.ParentID)
		}
		if err := parent.Usable(now); err != nil {
			return err
		}
		if err := keybrake.CheckChild(&child, parent, now); err != nil {
			return err
		}
		loc, err := location(parent.Timezone)
		if err != nil {
			return err
		}
		day, month := keybrake.Buckets(now, loc)
		var spent keybrake.Spend
		if err := s.txQueryRow(ctx, tx, qSpend, parent.ID, day, month).Scan(
			&spent.Day, &spent.Month, &spent.Total, &spent.Uncertain, &spent.Held); err != nil {
			return wrap(err, "mint under key %s", parent.ID)
		}
		if oc := keybrake.CheckCaps(keybrake.EscrowCaps(parent.Caps), spent, *child.Total, now, loc); oc != nil {
			res.OverCap = oc
			return nil
		}
		kargs, err := keyArgs(&child)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO keys (`+keyColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, kargs...); err != nil {
			if isUnique(err) {
				return keybrake.Errorf(keybrake.ECONFLICT, "A key with this ID or secret already exists.")
			}
			return wrap(err, "mint key %s", child.ID)
		}
		esc := escrowOf(parent.ID, &child, args.EscrowID, day, month, now)
		if _, err := s.txExec(ctx, tx, qInsertReservation, reservationArgs(esc)...); err != nil {
			if isUnique(err) {
				return keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s already exists.", esc.ID)
			}
			return wrap(err, "escrow for key %s", child.ID)
		}
		if args.Event != nil {
			if err := addAdminEventIn(ctx, tx, args.Event); err != nil {
				return err
			}
		}
		c := child
		res.Child, res.Escrow = &c, esc
		return nil
	})
	if err != nil {
		return keybrake.MintResult{}, err
	}
	return res, nil
}

// escrowOf is the parent's held reservation of child's budget.
func escrowOf(parentID string, child *keybrake.Key, id, day, month string, now time.Time) *keybrake.Reservation {
	if id == "" {
		id = keybrake.NewReservationID(now)
	}
	return &keybrake.Reservation{
		ID: id, KeyID: parentID, IdempotencyKey: "escrow:" + child.ID, Operation: keybrake.OpEscrow,
		Amount: int64((*child.Total + 9_999) / 10_000), Currency: "usd", Micros: *child.Total,
		State: keybrake.StateHeld, Day: day, Month: month, ObjectID: child.ID,
		Request:   keybrake.UpstreamRequest{Method: "POST", Path: "/vault/keys/" + parentID + "/children"},
		CreatedAt: now, UpdatedAt: now,
	}
}

// ReturnEscrows settles the held escrows of ended children with nothing
// live, each at the child's total counted spend.
//
// Only a revoked child's escrow returns: a revocation is final whatever a
// request's time (keybrake.Key.Usable), and Reserve reads revoked_at in
// the single writer's transaction, so nothing of the child commits after
// the revocation did, and what committed before is counted here. An
// expired child is first closed (closeExpiredChildren) for the same
// reason: a request decided on a clock still before the expiry may commit
// after it.
func (s *Store) ReturnEscrows(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = 100
	}
	now = dbTime(now)
	if err := s.closeExpiredChildren(ctx, now); err != nil {
		return 0, err
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT r.id,
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = c.id AND period = 'total' AND bucket = ''), 0)
		FROM reservations r JOIN keys c ON c.id = r.object_id
		WHERE r.operation = 'keybrake.escrow' AND r.state = 'held' AND c.revoked_at IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM reservations l WHERE l.key_id = c.id AND l.state IN ('reserved', 'uncertain', 'held'))
		LIMIT ?1`, limit)
	if err != nil {
		return 0, wrap(err, "find ended escrows")
	}
	var dues []escrowDue
	for rows.Next() {
		var d escrowDue
		if err := rows.Scan(&d.id, &d.spent); err != nil {
			rows.Close()
			return 0, wrap(err, "find ended escrows")
		}
		dues = append(dues, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, wrap(err, "find ended escrows")
	}
	return settleEscrows(ctx, s, dues, now)
}

// closeExpiredChildren sets revoked_at to expires_at on every child expired
// at now whose escrow is still held, in a write of the single writer: a
// reservation decided before (its now before the expiry) either committed
// first, and ReturnEscrows then counts it, or commits after and finds the
// key revoked. keybrake.Key.ClosedAtExpiry tells such a key from a revoked
// one.
func (s *Store) closeExpiredChildren(ctx context.Context, now time.Time) error {
	var ids []string
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		ids = ids[:0]
		rows, err := tx.QueryContext(ctx, `UPDATE keys AS c SET revoked_at = c.expires_at, updated_at = ?1
			WHERE c.parent_id <> '' AND c.revoked_at IS NULL AND c.expires_at IS NOT NULL AND c.expires_at <= ?1
			AND EXISTS (SELECT 1 FROM reservations r WHERE r.key_id = c.parent_id AND r.idempotency_key = 'escrow:' || c.id AND r.state = 'held')
			RETURNING id`, now.UnixMicro())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		return wrap(err, "close expired children")
	}
	for _, id := range ids {
		s.notifyKey(id)
	}
	return nil
}

// escrowDue is an escrow to settle and what its child spent.
type escrowDue struct {
	id    string
	spent int64
}

// settleEscrows settles each escrow at what its child spent; one settled
// meanwhile by another pass (ECONFLICT) is skipped.
func settleEscrows(ctx context.Context, sp keybrake.SpendService, dues []escrowDue, now time.Time) (int, error) {
	n := 0
	for _, d := range dues {
		_, err := sp.Settle(ctx, keybrake.SettleArgs{ID: d.id, State: keybrake.StateSettled,
			SettledMicros: keybrake.Micros(d.spent), Now: now})
		if keybrake.ErrorCode(err) == keybrake.ECONFLICT {
			continue
		} else if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// revokeDescendants revokes, inside tx, every key minted from id directly
// or through its children, and returns their IDs.
func revokeDescendants(ctx context.Context, tx *sql.Tx, id string, at time.Time) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `WITH RECURSIVE d(id) AS (
			SELECT id FROM keys WHERE parent_id = ?1
			UNION SELECT k.id FROM keys k JOIN d ON k.parent_id = d.id)
		UPDATE keys SET revoked_at = ?2, updated_at = ?2
		WHERE id IN (SELECT id FROM d) AND revoked_at IS NULL RETURNING id`, id, at.UnixMicro())
	if err != nil {
		return nil, wrap(err, "revoke children of %s", id)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, wrap(err, "revoke children of %s", id)
		}
		ids = append(ids, c)
	}
	return ids, wrap(rows.Err(), "revoke children of %s", id)
}

func encodeApproval(p *keybrake.ApprovalPolicy) string {
	if p.IsZero() {
		return ""
	}
	b, _ := json.Marshal(p) // plain struct: cannot fail
	return string(b)
}

func decodeApproval(s string, dst **keybrake.ApprovalPolicy) error {
	*dst = nil
	if s == "" {
		return nil
	}
	return json.Unmarshal([]byte(s), dst)
}
