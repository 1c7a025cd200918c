package sqlite

import (
	"context"
	"database/sql"
	"time"
)

// suspendDescendants suspends, inside tx, every key minted from id directly
// or through its children that is neither suspended nor revoked, marks them
// suspended_by id, and returns their IDs. A descendant already suspended
// keeps its own suspension (and is not resumed with id).
func suspendDescendants(ctx context.Context, tx *sql.Tx, id, reason string, at time.Time) ([]string, error) {
	return collectIDs(tx.QueryContext(ctx, `WITH RECURSIVE d(id) AS (
			SELECT id FROM keys WHERE parent_id = ?1
			UNION SELECT k.id FROM keys k JOIN d ON k.parent_id = d.id)
		UPDATE keys SET suspended_at = ?2, suspended_reason = ?3, suspended_by = ?1, updated_at = ?2
		WHERE id IN (SELECT id FROM d) AND suspended_at IS NULL AND revoked_at IS NULL RETURNING id`,
		id, at.UnixMicro(), "parent "+id+" suspended: "+reason))
}

// takeOverSuspension makes, inside tx, an explicit suspension of id its
// own where an ancestor's cascade had already suspended it or some of its
// descendants: id's mark (suspended_by) is cleared and its reason becomes
// this suspension's, and each descendant marked by a key outside id's
// subtree (an ancestor's cascade) is marked suspended_by id. Without it the
// suspension changed nothing (a suspended key stays as it was), and the
// ancestor's resume resumed the key an operator had just suspended, with its
// children (TestAttackLifecycle_OwnSuspensionUndoneByParentResume).
func takeOverSuspension(ctx context.Context, tx *sql.Tx, id, reason string, at time.Time) error {
	if _, err := tx.ExecContext(ctx, `UPDATE keys SET suspended_by = '', suspended_reason = ?2, updated_at = ?3
		WHERE id = ?1 AND suspended_at IS NOT NULL AND suspended_by <> ''`, id, reason, at.UnixMicro()); err != nil {
		return wrap(err, "suspend key %s", id)
	}
	_, err := tx.ExecContext(ctx, `WITH RECURSIVE d(id) AS (
			SELECT id FROM keys WHERE parent_id = ?1
			UNION SELECT k.id FROM keys k JOIN d ON k.parent_id = d.id)
		UPDATE keys SET suspended_by = ?1, suspended_reason = ?3, updated_at = ?2
		WHERE id IN (SELECT id FROM d) AND suspended_at IS NOT NULL AND suspended_by <> ''
			AND suspended_by <> ?1 AND suspended_by NOT IN (SELECT id FROM d)`,
		id, at.UnixMicro(), "parent "+id+" suspended: "+reason)
	return wrap(err, "suspend key %s", id)
}

// resumeDescendants resumes, inside tx, the keys id's suspension suspended
// (suspended_by id), and returns their IDs.
func resumeDescendants(ctx context.Context, tx *sql.Tx, id string, at time.Time) ([]string, error) {
	return collectIDs(tx.QueryContext(ctx, `UPDATE keys SET suspended_at = NULL, suspended_reason = '', suspended_by = '', updated_at = ?2
		WHERE suspended_by = ?1 AND suspended_at IS NOT NULL RETURNING id`, id, at.UnixMicro()))
}

func collectIDs(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, wrap(err, "cascade suspension")
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, wrap(err, "cascade suspension")
		}
		ids = append(ids, id)
	}
	return ids, wrap(rows.Err(), "cascade suspension")
}

// notifyKeys tells this process's key watchers that each of ids changed.
func (s *Store) notifyKeys(ids []string) {
	for _, id := range ids {
		s.notifyKey(id)
	}
}
