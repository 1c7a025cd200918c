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
