package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

var _ keybrake.DelegationService = (*Store)(nil)

// MintChild creates a child key and escrows its total cap from the parent,
// in one transaction that holds the parent's row lock (FOR NO KEY UPDATE,
// as keybrake_reserve takes it): mints and reservations of the parent on
// every replica take turns, and each reads the counters its predecessor
// committed.
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
		now = s.Now()
	}
	now = ts(now)
	child.CreatedAt, child.UpdatedAt = now, now
	normalizeKeyTimes(&child)
	meta, err := encodeMetadata(child.Metadata)
	if err != nil {
		return keybrake.MintResult{}, err
	}

	var res keybrake.MintResult
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		res = keybrake.MintResult{}
		parent, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = $1 FOR NO KEY UPDATE`, args.ParentID))
		if err != nil {
			return notFound(err, "No such key: %s.", args.ParentID)
		}
		if err := parent.Usable(now); err != nil {
			return err
		}
		if err := keybrake.CheckChild(&child, parent, now); err != nil {
			return err
		}
		loc, err := parent.Location()
		if err != nil {
			return err
		}
		day, month := keybrake.Buckets(now, loc)
		var c counters
		if err := tx.QueryRow(ctx, `SELECT
			COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'daily' AND bucket = $2), 0),
			COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'monthly' AND bucket = $3), 0),
			COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'total' AND bucket = ''), 0)`,
			parent.ID, day, month).Scan(&c.day, &c.month, &c.total); err != nil {
			return err
		}
		spent := keybrake.Spend{Day: c.day, Month: c.month, Total: c.total}
		if oc := keybrake.CheckCaps(keybrake.EscrowCaps(parent.Caps), spent, *child.Total, now, loc); oc != nil {
			res.OverCap = oc
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO keys (id, vendor, label, secret_hash, secret_prefix,
			per_request_cap, daily_cap, monthly_cap, total_cap,
			allowed_endpoints, allowed_customers, allowed_accounts, allowed_currencies,
			timezone, allow_unpriced, metadata, expires_at, revoked_at, created_at, updated_at,
			allow_secret_reads, guards, suspended_at, suspended_reason, parent_id, mint, approval, count_caps, scope)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, NULL, $18, $18, $19, $20, NULL, '', $21, $22, $23, $24, $25)`,
			child.ID, child.Vendor, child.Label, child.SecretHash, child.SecretPrefix,
			child.PerRequest, child.Daily, child.Monthly, child.Total,
			child.AllowedEndpoints, child.AllowedCustomers, child.AllowedAccounts, child.AllowedCurrencies,
			child.Timezone, child.AllowUnpriced, meta, tsPtr(child.ExpiresAt), now,
			child.AllowSecretReads, encodeGuards(child.Guards), child.ParentID, child.Mint, encodeApproval(child.Approval),
			encodeCountCaps(child.CountCaps), encodeScope(&child)); err != nil {
			return err
		}
		esc := escrowOf(parent.ID, &child, args.EscrowID, day, month, now)
		if _, err := tx.Exec(ctx, `INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
			amount, currency, micros, settled_micros, state, day, month,
			req_method, req_path, req_body, req_stripe_account, req_stripe_version,
			object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at, customer, dup_key)
			VALUES ($1, $2, $3, '', $4, $5, 'usd', $6, 0, 'held', $7, $8, $9, $10, ''::bytea, '', '', $11, 0, 0, '', NULL, $12, $12, '', '')`,
			esc.ID, esc.KeyID, esc.IdempotencyKey, esc.Operation, esc.Amount, int64(esc.Micros), day, month,
			esc.Request.Method, esc.Request.Path, esc.ObjectID, now); err != nil {
			return err
		}
		// Counter rows in the order every writer upserts them (daily,
		// monthly, total), so concurrent upserts cannot deadlock.
		if _, err := tx.Exec(ctx, `INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
			VALUES ($1, 'daily', $2, $4), ($1, 'monthly', $3, $4), ($1, 'total', '', $4)
			ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros`,
			parent.ID, day, month, int64(esc.Micros)); err != nil {
			return err
		}
		if args.Event != nil {
			if err := addAdminEvent(ctx, tx, args.Event); err != nil {
				return err
			}
		}
		ch := child
		res.Child, res.Escrow = &ch, esc
		return nil
	})
	if err != nil {
		return keybrake.MintResult{}, s.wrap("mint under key "+args.ParentID, err)
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
// live, each at the child's total counted spend, through Settle (which
// locks the escrow row, so two replicas never settle it twice).
//
// Only a revoked child's escrow returns. A revocation is final whatever a
// request's time (keybrake.Key.Usable; keybrake_reserve since 0033), and
// it updates the key row that keybrake_reserve locks (FOR NO KEY UPDATE):
// a reservation that locked first commits before the revocation does, so
// the statement below (a snapshot taken after the revocation committed)
// sees it live or counted; one that locks after reads revoked_at (READ
// COMMITTED re-reads the locked row's newest version) and is refused. An
// expired child is first closed the same way (its revoked_at set to its
// expires_at, under the same row lock): a request decided on a clock
// still before the expiry may commit after it.
func (s *Store) ReturnEscrows(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = 100
	}
	// The rows are locked in key order, the order keybrake_reserve_many
	// locks keys in, so a pass and a reservation batch never wait on each
	// other in a cycle.
	if _, err := s.pool.Exec(ctx, `WITH due AS (
			SELECT c.id FROM keys c JOIN reservations r ON r.object_id = c.id
			WHERE r.operation = 'keybrake.escrow' AND r.state = 'held'
			AND c.revoked_at IS NULL AND c.expires_at IS NOT NULL AND c.expires_at <= $1
			ORDER BY c.id FOR NO KEY UPDATE OF c)
		UPDATE keys AS k SET revoked_at = k.expires_at, updated_at = $1
		FROM due WHERE k.id = due.id AND k.revoked_at IS NULL`, ts(now)); err != nil {
		return 0, s.wrap("close expired children", err)
	}
	type due struct {
		id    string
		spent int64
	}
	var dues []due
	err := s.query(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			var d due
			if err := rows.Scan(&d.id, &d.spent); err != nil {
				return err
			}
			dues = append(dues, d)
		}
		return nil
	}, `SELECT r.id, COALESCE((SELECT micros FROM spend_counters WHERE key_id = c.id AND window_name = 'total' AND bucket = ''), 0)
		FROM reservations r JOIN keys c ON c.id = r.object_id
		WHERE r.operation = 'keybrake.escrow' AND r.state = 'held' AND c.revoked_at IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM reservations l WHERE l.key_id = c.id AND l.state IN ('reserved', 'uncertain', 'held'))
		LIMIT $1`, limit)
	if err != nil {
		return 0, s.wrap("find ended escrows", err)
	}
	n := 0
	for _, d := range dues {
		_, err := s.Settle(ctx, keybrake.SettleArgs{ID: d.id, State: keybrake.StateSettled, SettledMicros: keybrake.Micros(d.spent), Now: now})
		if keybrake.ErrorCode(err) == keybrake.ECONFLICT {
			continue
		} else if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func encodeApproval(p *keybrake.ApprovalPolicy) []byte {
	if p.IsZero() {
		return nil
	}
	b, _ := json.Marshal(p) // plain struct: cannot fail
	return b
}
