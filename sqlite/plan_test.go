package sqlite_test

import (
	"strings"
	"testing"

	"github.com/keybrake/keybrake/sqlite"
)

// TestQueryPlans pins the plans of the reservation queries that run per
// request or per resolver pass to the index each needs (migration 0023
// dropped and merged some): a plan that falls back to reading every
// reservation, or every reservation of a key, fails here.
func TestQueryPlans(t *testing.T) {
	s, _ := MustOpen(t)
	defer s.Close()
	for _, tc := range []struct {
		name, q string
		args    []any
		want    string // an index the plan must use, or a WITHOUT ROWID table's "PRIMARY KEY (…)" range
	}{
		{"Replay", `SELECT r.id FROM reservations r WHERE r.key_id = ?1 AND r.idempotency_key = ?2`, []any{"k", "i"}, "sqlite_autoindex_reservations_2"},
		{"CountRead", sqlite.QCountRead, []any{"k", "sms", "2026-11-30", "2026-11"}, "reservations_counted"},
		{"LeaseUncertain", `SELECT id FROM reservations WHERE state IN ('reserved', 'uncertain') AND (state = 'uncertain' OR created_at < ?)
			AND (lease_until IS NULL OR lease_until <= ?) ORDER BY created_at, id LIMIT ?`, []any{0, 0, 10}, "reservations_open"},
		{"OpenOfOperation", `SELECT id FROM reservations WHERE operation = ? AND state IN ('reserved', 'uncertain')
			AND created_at >= ? AND created_at < ? ORDER BY created_at, id LIMIT ?`, []any{"twilio.message", 0, 1, -1}, "reservations_open"},
		{"LeaseHeld", `SELECT id FROM reservations WHERE state = 'held' AND operation = ? AND lease_until <= ?
			ORDER BY lease_until, created_at, id LIMIT ?`, []any{"twilio.message", 0, 10}, "reservations_held_due"},
		{"ByObject", `SELECT id FROM reservations WHERE object_id <> '' AND operation LIKE 'twilio.%' AND object_id = ? ORDER BY created_at, id LIMIT ?`, []any{"SM1", 1}, "reservations_object"},
		// 0024's threshold prefilter, run per new reservation by the trigger
		// reservations_threshold_insert (NEW.* as parameters): point reads.
		{"ThresholdPrefilter", `SELECT 1 FROM spend_counters c CROSS JOIN keys k
			WHERE c.key_id = ?1 AND c.period = 'daily' AND c.bucket = ?2 AND k.id = ?1
			AND k.cap_daily > 0 AND c.micros - ?3 < k.cap_daily
			AND (c.micros >= 92233720368547758 OR (c.micros * 100) / k.cap_daily <> ((c.micros - ?3) * 100) / k.cap_daily)`,
			[]any{"k", "2026-11-30", 1}, "sqlite_autoindex_keys_1"},
		// The repeat rule's probe (0026): a primary-key range of
		// repeat_fingerprints, never the key's reservations.
		{"Repeats", `SELECT COUNT(*) FROM (SELECT 1 FROM repeat_fingerprints WHERE key_id = ?1 AND fingerprint = ? AND created_at > ? LIMIT ?)`,
			[]any{"k", "fp", 0, 3}, "PRIMARY KEY (key_id=? AND fingerprint=? AND created_at>?)"},
		{"Prune", `SELECT r.id FROM reservations r WHERE r.state IN ('settled', 'released') AND r.updated_at < ?1 AND r.created_at < ?1 LIMIT ?2`, []any{0, 10}, "reservations_final"},
		// PruneSent's batch (0032): the oldest records by sent_objects_created.
		{"PruneSent", `SELECT vendor, object_id, key_id FROM sent_objects WHERE created_at < ?1 ORDER BY created_at LIMIT ?2`, []any{0, 10}, "sent_objects_created"},
		// PruneEvents' reads and deletes of one key's chain (0029): ranges
		// of events_key_id from the key's first event.
		{"PruneFirstKept", sqlite.QPruneFirstKept, []any{"k", 0}, "INDEX events_key_id (key_id=?)"},
		{"PrunePrevOf", sqlite.QPrunePrevOf, []any{"k", 10}, "INDEX events_key_id (key_id=? AND id<?)"},
		{"PruneBefore", sqlite.QPruneBefore, []any{"k", 10, 5}, "INDEX events_key_id (key_id=? AND id<?)"},
		{"PruneAll", sqlite.QPruneAll, []any{"k", 5}, "INDEX events_key_id (key_id=?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := sqlite.QueryPlan(s, tc.q, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(plan, "INDEX "+tc.want+" ") && !strings.Contains(plan, "USING "+tc.want) {
				t.Errorf("plan does not use %s:\n%s", tc.want, plan)
			}
			if strings.Contains(plan, "SCAN c") || strings.Contains(plan, "SCAN k") {
				t.Errorf("plan reads every counter or key:\n%s", plan)
			}
			for _, line := range strings.Split(plan, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "SCAN reservations") && !strings.Contains(line, "INDEX") {
					t.Errorf("plan reads every reservation:\n%s", plan)
				}
				if strings.Contains(line, "reservations_key_time (key_id=?)") {
					t.Errorf("plan reads every reservation of the key:\n%s", plan)
				}
			}
		})
	}
}
