package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// TestChargeWrites measures what a capped $1.00 charge writes in
// PostgreSQL, driving the store as serve does for one: the reservation
// (with the request's fingerprint), its settlement from a 200 answer
// queued for later (SettleLater, with the charge's ID), and the audit event
// (AddEvents, in batches of eight as serve's audit log batches). It reports
// per charge the WAL bytes written (pg_current_wal_lsn before and after;
// WAL is deterministic for a given sequence of writes, unlike CPU) and,
// read back from the WAL with pg_walinspect, the bytes by table, the heap
// tuples written into reservations (inserts, updates, HOT updates) and the
// B-tree entries written into each of its indexes (one WAL record per
// entry); then the server's CPU per charge, which is noisy on a shared
// machine. (pg_stat_user_tables counts the same tuples, but only once each
// backend has flushed its statistics, a second or more later.)
//
// It runs on the server of KEYBRAKE_TEST_POSTGRES and needs that server to
// itself to be exact (WAL and CPU are the server's, not the schema's):
//
//	scripts/pg run -- go test ./postgres/ -run TestChargeWrites -v
//
// KEYBRAKE_WRITES_N sets the charges per case (default 1000).
//
// It also pins the outcome: a charge on a key without the repeat guard
// writes at most maxIndexEntries into the reservations' indexes.
func TestChargeWrites(t *testing.T) {
	server := MustServerDSN(t)
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("KEYBRAKE_WRITES_N")); err == nil && v > 0 {
		n = v
	}
	// Index entries a charge writes into reservations' indexes, measured
	// (docs/performance.md "PostgreSQL: fewer writes per charge (pghot)"):
	// the insert's pkey, (key_id, idempotency_key), (key_id, created_at)
	// and reservations_open; the settlement's pkey, (key_id,
	// idempotency_key), (key_id, created_at) and reservations_final. It was
	// 15 before migrations 0036 and 0037.
	const maxIndexEntries = 8
	for _, tc := range []struct {
		name string
		keys int
	}{{"HotKey", 1}, {"Keys1000", 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			w := measureCharges(t, server, tc.keys, n)
			t.Logf("%s, %d charges: WAL %.0f B/charge (%.0f B of it full-page images), by table %s; reservations: %.2f heap tuples/charge (%d inserts, %d updates, %d HOT; heap records %s), %.2f index entries/charge %s, WAL bytes by record %s; B-tree entries into all indexes %.2f/charge; server CPU %s",
				tc.name, n, w.walBytes, w.fpiBytes, w.byTable, w.heapTuples, w.ins, w.upd, w.hot, w.heap, w.indexEntries, w.perIndex, w.resBytes, w.allBtree, w.cpu)
			if w.haveWalinspect && w.indexEntries > maxIndexEntries {
				t.Errorf("a charge writes %.2f entries into reservations' indexes, want at most %d: %s", w.indexEntries, maxIndexEntries, w.perIndex)
			}
		})
	}
}

type chargeWrites struct {
	walBytes, fpiBytes float64
	ins, upd, hot      int64
	heapTuples         float64
	haveWalinspect     bool
	indexEntries       float64 // into reservations' indexes, per charge
	allBtree           float64 // into every index of the database, per charge
	perIndex           string  // entries per charge, by index
	heap               string  // reservations' heap records per charge, by type
	byTable            string  // WAL bytes per charge, by table
	resBytes           string  // reservations' WAL bytes per charge, by relation kind and record
	cpu                string
}

func measureCharges(t *testing.T, server string, keys, n int) chargeWrites {
	ctx := context.Background()
	dsn := MustDatabase(t, server)
	schema := dsn[strings.LastIndex(dsn, "=")+1:]
	s := MustOpen(t, dsn)
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var w chargeWrites
	_, err = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`)
	w.haveWalinspect = err == nil
	if err != nil {
		t.Logf("no pg_walinspect (%v): index entries not counted", err)
	}

	caps := keybrake.Caps{Daily: storetest.Ptr(storetest.USD(1_000_000)), Monthly: storetest.Ptr(storetest.USD(10_000_000))}
	for k := range keys {
		storetest.MustCreateCappedKey(t, s, fmt.Sprintf("key_%d", k), "UTC", caps)
	}
	seq := 0
	var batch []*keybrake.Event
	charge := func(now time.Time) {
		seq++
		key := fmt.Sprintf("key_%d", seq%keys)
		r := storetest.NewReservation(key, fmt.Sprintf("idem_%d", seq), storetest.USD(1))
		sum := sha256.Sum256([]byte(r.Request.Body))
		r.Fingerprint = hex.EncodeToString(sum[:])
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: now})
		if err != nil || res.Reservation == nil {
			t.Fatalf("Reserve: %+v, %v", res, err)
		}
		chID := fmt.Sprintf("ch_%x", sha256.Sum256([]byte(res.Reservation.ID)))[:27]
		err = s.SettleLater(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled, SettledMicros: storetest.USD(1),
			Amount: 100, Currency: "usd", ObjectID: chID, UpstreamStatus: 200, Now: now}, func(_ *keybrake.Reservation, err error) {
			if err != nil {
				t.Errorf("SettleLater: %v", err)
			}
		})
		if err != nil {
			t.Fatalf("SettleLater: %v", err)
		}
		batch = append(batch, &keybrake.Event{KeyID: key, Time: now, Operation: "charges.create", Method: "POST",
			Decision: keybrake.DecisionAllow, UpstreamStatus: 200, ObjectID: chID, RequestID: fmt.Sprintf("req_%d", seq),
			IdempotencyKey: r.IdempotencyKey, ReservationID: res.Reservation.ID, Amount: 100, Currency: "usd", Micros: storetest.USD(1), Path: "/v1/charges"})
		if len(batch) == 8 {
			if err := s.AddEvents(ctx, batch); err != nil {
				t.Fatalf("AddEvents: %v", err)
			}
			batch = nil
		}
	}
	flush := func() {
		if err := s.AddEvents(ctx, batch); err != nil {
			t.Fatalf("AddEvents: %v", err)
		}
		batch = nil
		if err := s.FlushSettlements(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Every key has charged once (its counters and audit head exist), as
	// on a proxy that has run a while.
	now := storetest.T0
	for range keys {
		charge(now)
	}
	flush()
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}
	var lsn0, lsn1 string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn0); err != nil {
		t.Fatal(err)
	}
	cpu0 := serverCPU()
	for i := range n {
		charge(now.Add(time.Duration(i) * time.Millisecond))
	}
	flush()
	cpu1 := serverCPU()
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn1); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::float8 / $3`, lsn0, lsn1, n).Scan(&w.walBytes); err != nil {
		t.Fatal(err)
	}
	w.cpu = "unknown"
	if cpu0 >= 0 && cpu1 >= 0 {
		w.cpu = fmt.Sprintf("%d µs/charge (noisy: a shared machine)", (cpu1-cpu0).Microseconds()/int64(n))
	}
	if !w.haveWalinspect {
		return w
	}
	// Each WAL record between the two positions, by the relation its first
	// block belongs to: reservations' own (heap) records, the B-tree entries
	// written into each of its indexes (an insert or a split that carries
	// the new entry), and bytes by table.
	rows, err := conn.Query(ctx, `WITH rec AS (
			-- A split of a leaf (level 0) carries the entry being inserted;
			-- a split of an upper page carries none.
			SELECT resource_manager AS rm,
			       CASE WHEN record_type LIKE 'SPLIT_%' AND description !~ '^level:? 0,' THEN 'SPLIT_UPPER' ELSE record_type END AS rt,
			       record_length AS len,
			       substring(block_ref FROM 'rel \d+/\d+/(\d+)')::oid AS node
			FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn))
		SELECT rec.rm, rec.rt, coalesce(c.relname, ''),
		       coalesce(CASE WHEN c.relkind = 'i' THEN i.indrelid::regclass::text ELSE c.relname END, ''),
		       count(*), sum(rec.len)
		FROM rec LEFT JOIN pg_class c ON c.relfilenode = rec.node
		     AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $3)
		LEFT JOIN pg_index i ON i.indexrelid = c.oid
		GROUP BY 1, 2, 3, 4`, lsn0, lsn1, schema)
	if err != nil {
		t.Fatal(err)
	}
	perIndex, heap, bytes, resBytes := map[string]int64{}, map[string]int64{}, map[string]int64{}, map[string]int64{}
	var all int64
	for rows.Next() {
		var rm, rt, rel, table string
		var c, b int64
		if err := rows.Scan(&rm, &rt, &rel, &table, &c, &b); err != nil {
			t.Fatal(err)
		}
		rt = strings.TrimSuffix(rt, "+INIT") // the first tuple of a new page
		table = table[strings.LastIndex(table, ".")+1:]
		if table == "" {
			table = "other"
		}
		bytes[table] += b
		entry := rm == "Btree" && (rt == "INSERT_LEAF" || rt == "INSERT_POST" || rt == "SPLIT_L" || rt == "SPLIT_R")
		if entry {
			all += c
		}
		if table != "reservations" {
			continue
		}
		switch {
		case entry:
			perIndex[strings.TrimPrefix(rel, "reservations_")] += c
			w.indexEntries += float64(c)
		case rm == "Heap" && rel == "reservations":
			heap[rt] += c
		}
		kind := "heap"
		if rel != "reservations" {
			kind = "index"
		}
		resBytes[kind+" "+rm+"/"+rt] += b
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	w.indexEntries /= float64(n)
	w.allBtree = float64(all) / float64(n)
	w.ins, w.upd, w.hot = heap["INSERT"], heap["UPDATE"], heap["HOT_UPDATE"]
	w.heapTuples = float64(w.ins+w.upd+w.hot) / float64(n)
	w.perIndex = perCharge(perIndex, n)
	w.heap = perCharge(heap, n)
	w.byTable = perCharge(bytes, n)
	w.resBytes = perCharge(resBytes, n)
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(fpi_size), 0)::float8 / $3 FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn)`, lsn0, lsn1, n).Scan(&w.fpiBytes); err != nil {
		t.Fatal(err)
	}
	return w
}

// perCharge formats counts divided by n, by name.
func perCharge(m map[string]int64, n int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%.2f", k, float64(m[k])/float64(n))
	}
	return "(" + strings.TrimSpace(b.String()) + ")"
}
