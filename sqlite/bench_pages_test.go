package sqlite_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/storetest"
)

// BenchmarkChargePages measures a capped charge's store work with the
// inputs a real client makes, on an empty database or, with
// KEYBRAKE_BENCH_DB=FILE, on that file (a copy: the benchmark writes to it;
// e.g. one made by keybrake bench --growth 1000000): a fresh key, random
// upstream object IDs (as Stripe's charge IDs), random fingerprints
// (distinct bodies), and Idempotency-Keys either keybrake's own
// (time-ordered, "Own") or random UUIDs as the Stripe SDKs send ("SDK").
// Serial is one client (reserve, settle, event); Clients64 is 64 as
// BenchmarkCharge. Besides ns/op and cpu-ns/op it reports write-B/op, the
// bytes the process wrote to the file system per charge (/proc/self/io:
// the WAL and the checkpoints' copies into the database file), that is the
// pages a charge dirties. KEYBRAKE_BENCH_SQL runs statements on the file
// first (whatIf).
func BenchmarkChargePages(b *testing.B) {
	for _, idem := range []string{"Own", "SDK"} {
		for _, clients := range []int{1, 64} {
			name := fmt.Sprintf("%s/Serial", idem)
			if clients > 1 {
				name = fmt.Sprintf("%s/Clients%d", idem, clients)
			}
			b.Run(name, func(b *testing.B) { benchChargePages(b, idem == "SDK", clients) })
		}
	}
}

func benchChargePages(b *testing.B, sdkKeys bool, clients int) {
	s, _, key := openPages(b)
	defer s.Close()
	events, audited := storetest.AuditInBatches(b, s, 1024)
	start := time.Now()
	var n atomic.Int64
	charge := func() bool {
		i := n.Add(1)
		now := start.Add(time.Duration(i) * time.Microsecond)
		id, ok := chargePages(b, s, key, sdkKeys, now)
		if !ok {
			return false
		}
		e := storetest.NewEvent(key, now, int(i))
		e.ReservationID = id
		events <- e
		return true
	}
	b.ResetTimer()
	w0 := writeBytes()
	defer func() {
		b.ReportMetric(float64(writeBytes()-w0)/float64(b.N), "write-B/op")
	}()
	defer reportCPU(b)()
	if clients == 1 {
		for b.Loop() {
			if !charge() {
				break
			}
		}
	} else {
		b.SetParallelism(clients / max(1, runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !charge() {
					return
				}
			}
		})
	}
	close(events)
	<-audited
}

// openPages opens the store of BenchmarkChargePages (KEYBRAKE_BENCH_DB, or
// an empty one) with a fresh key capped far above any run; returns the
// store, its file and the key.
func openPages(b *testing.B) (*sqlite.Store, string, string) {
	var (
		s    *sqlite.Store
		path = os.Getenv("KEYBRAKE_BENCH_DB")
	)
	if path != "" {
		if err := whatIf(path, os.Getenv("KEYBRAKE_BENCH_SQL")); err != nil {
			b.Fatal(err)
		}
		var err error
		if s, err = sqlite.Open(path); err != nil {
			b.Fatal(err)
		}
	} else {
		s, path = MustOpen(b)
	}
	huge := keybrake.Micros(1 << 60)
	key := "key_pages_" + rand.Text()[:12]
	storetest.MustCreateCappedKey(b, s, key, "America/New_York", keybrake.Caps{
		PerRequest: storetest.Ptr(storetest.USD(100)), Daily: &huge, Monthly: &huge, Total: &huge,
	})
	return s, path, key
}

// chargePages reserves and settles one charge of key at now as a real
// client's would be: a random fingerprint (a distinct body), keybrake's own
// Idempotency-Key or an SDK's random UUID, a random upstream object ID.
func chargePages(b *testing.B, s *sqlite.Store, key string, sdkKeys bool, now time.Time) (string, bool) {
	ctx := context.Background()
	idem := "kb_" + strings.TrimPrefix(keybrake.NewReservationID(now), "rsv_")
	if sdkKeys {
		t := rand.Text()
		idem = t[:8] + "-" + t[8:12] + "-" + t[12:16] + "-" + t[16:20] + "-" + t[20:26]
	}
	in := storetest.NewReservation(key, idem, storetest.USD(1))
	in.Fingerprint = rand.Text() + rand.Text()
	res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: now})
	if err != nil || res.OverCap != nil || res.Replay {
		b.Errorf("Reserve: %+v %v", res, err)
		return "", false
	}
	if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
		SettledMicros: 990_000, Amount: 99, Currency: "usd", ObjectID: "ch_" + rand.Text()[:24], UpstreamStatus: 200, Now: now}); err != nil {
		b.Errorf("Settle: %v", err)
		return "", false
	}
	return res.Reservation.ID, true
}

// BenchmarkChargeFrames counts the pages a charge writes: the write-ahead
// log's frames (one a page a transaction dirtied), with the checkpointer
// stopped so that the log keeps them all; the charges and the database are
// BenchmarkChargePages's, without the audit events. Serial is one client,
// each reservation and each settlement a commit of its own, reported
// apart (reserve-frames/op, settle-frames/op); Clients64 reports
// frames/op, the commits shared. The log lists the frames per charge by
// table or index (dbstat; "new" for pages the database did not have).
func BenchmarkChargeFrames(b *testing.B) {
	for _, idem := range []string{"Own", "SDK"} {
		for _, clients := range []int{1, 64} {
			name := fmt.Sprintf("%s/Serial", idem)
			if clients > 1 {
				name = fmt.Sprintf("%s/Clients%d", idem, clients)
			}
			b.Run(name, func(b *testing.B) { benchChargeFrames(b, idem == "SDK", clients) })
		}
	}
}

func benchChargeFrames(b *testing.B, sdkKeys bool, clients int) {
	s, path, key := openPages(b)
	defer s.Close()
	if err := sqlite.StopCheckpoints(s); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var n atomic.Int64
	charge := func() bool {
		_, ok := chargePages(b, s, key, sdkKeys, start.Add(time.Duration(n.Add(1))*time.Microsecond))
		return ok
	}
	charge() // the first write after the last checkpoint starts the log over
	from := len(walCommits(b, path+"-wal"))
	b.ResetTimer()
	if clients == 1 {
		for b.Loop() {
			if !charge() {
				break
			}
		}
	} else {
		b.SetParallelism(clients / max(1, runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !charge() {
					return
				}
			}
		})
	}
	b.StopTimer()
	commits := walCommits(b, path+"-wal")[from:]
	owners, err := sqlite.PageOwners(s)
	if err != nil {
		b.Fatal(err)
	}
	by := map[string]int{}
	var frames, reserve, settle int
	for i, c := range commits {
		frames += len(c)
		if i%2 == 0 {
			reserve += len(c)
		} else {
			settle += len(c)
		}
		for _, pg := range c {
			name, ok := owners[pg]
			if !ok {
				name = "new"
			}
			by[name]++
		}
	}
	per := func(v int) float64 { return float64(v) / float64(b.N) }
	b.ReportMetric(per(frames), "frames/op")
	if clients == 1 {
		b.ReportMetric(per(reserve), "reserve-frames/op")
		b.ReportMetric(per(settle), "settle-frames/op")
	}
	names := make([]string, 0, len(by))
	for name := range by {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]] > by[names[j]] })
	var line []string
	for _, name := range names {
		line = append(line, fmt.Sprintf("%s %.2f", name, per(by[name])))
	}
	b.Logf("N=%d, %d commits; frames per charge by B-tree: %s", b.N, len(commits), strings.Join(line, ", "))
}

// walCommits reads the write-ahead log at path and returns the pages of
// each of its committed transactions, in order: the frames whose salt is
// the log header's (the log's current generation), cut at each commit
// frame (one with the database's size in pages).
func walCommits(b *testing.B, path string) [][]uint32 {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	if len(data) < 32 {
		return nil
	}
	pageSize := int(binary.BigEndian.Uint32(data[8:12]))
	salt := data[16:24]
	var (
		commits [][]uint32
		cur     []uint32
	)
	for off := 32; off+24+pageSize <= len(data); off += 24 + pageSize {
		h := data[off : off+24]
		if !bytes.Equal(h[8:16], salt) {
			break
		}
		cur = append(cur, binary.BigEndian.Uint32(h[0:4]))
		if binary.BigEndian.Uint32(h[4:8]) != 0 {
			commits, cur = append(commits, cur), nil
		}
	}
	return commits
}

// whatIf runs the statements sql (KEYBRAKE_BENCH_SQL) on the file at path
// before the store opens it, for what-if experiments (drop an index and
// measure again): once per file, as the store migrates once.
func whatIf(path, stmts string) error {
	if stmts == "" {
		return nil
	}
	db, err := sqlite.OpenDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(stmts)
	return err
}

// writeBytes returns what the process has written to storage so far
// (write_bytes of /proc/self/io), 0 where it cannot be read.
func writeBytes() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkChargeKeysFrames compares one hot key with 1,000 keys charged
// round-robin (keybrake bench's charge and keys operations), page by page:
// 64 clients reserve and settle as keybrake bench's charges are (keybrake's
// own Idempotency-Keys, random fingerprints and object IDs, settled for the
// amount reserved, as a $1.00 charge is) and one audit writer
// appends their events in batches as serve's does; the checkpointer is
// stopped, so the log keeps every frame. Reports frames/op (pages written a
// charge), cpu-ns/op and, in the log, the frames per charge by B-tree.
func BenchmarkChargeKeysFrames(b *testing.B) {
	for _, keys := range []int{1, 1000} {
		name := "HotKey"
		if keys > 1 {
			name = fmt.Sprintf("Keys%d", keys)
		}
		b.Run(name, func(b *testing.B) { benchChargeKeysFrames(b, keys) })
	}
}

func benchChargeKeysFrames(b *testing.B, nkeys int) {
	s, path := MustOpen(b)
	defer s.Close()
	huge := keybrake.Micros(1 << 60)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "vk_" + rand.Text()[:24] // random, as the admin API makes them
		storetest.MustCreateCappedKey(b, s, keys[i], "America/New_York", keybrake.Caps{
			PerRequest: storetest.Ptr(storetest.USD(100)), Daily: &huge, Monthly: &huge, Total: &huge,
		})
	}
	start := time.Now()
	var n atomic.Int64
	events, audited := storetest.AuditInBatches(b, s, 1024)
	charge := func() bool {
		i := n.Add(1)
		now := start.Add(time.Duration(i) * time.Microsecond)
		key := keys[int(i)%len(keys)]
		id, ok := chargeFull(b, s, key, now)
		if !ok {
			return false
		}
		e := storetest.NewEvent(key, now, int(i))
		e.ReservationID = id
		events <- e
		return true
	}
	// Every key charged once, as keybrake bench's warm-up does: the
	// measured charges meet keys that have counters, a chain head and rows.
	for range max(nkeys, 64) {
		charge()
	}
	close(events)
	<-audited
	events, audited = storetest.AuditInBatches(b, s, 1024)
	if err := sqlite.StopCheckpoints(s); err != nil {
		b.Fatal(err)
	}
	// The first write after the last checkpoint starts the log over.
	if _, ok := chargeFull(b, s, keys[0], start); !ok {
		return
	}
	from := len(walCommits(b, path+"-wal"))
	b.ResetTimer()
	stop := reportCPU(b)
	b.SetParallelism(64 / max(1, runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !charge() {
				return
			}
		}
	})
	close(events)
	<-audited
	stop()
	b.StopTimer()
	commits := walCommits(b, path+"-wal")[from:]
	owners, err := sqlite.PageOwners(s)
	if err != nil {
		b.Fatal(err)
	}
	by := map[string]int{}
	var frames int
	for _, c := range commits {
		frames += len(c)
		for _, pg := range c {
			name, ok := owners[pg]
			if !ok {
				name = "new"
			}
			by[name]++
		}
	}
	per := func(v int) float64 { return float64(v) / float64(b.N) }
	b.ReportMetric(per(frames), "frames/op")
	b.ReportMetric(float64(b.N)/float64(max(1, len(commits))), "charges/commit")
	names := make([]string, 0, len(by))
	for name := range by {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]] > by[names[j]] })
	var line []string
	for _, name := range names {
		line = append(line, fmt.Sprintf("%s %.2f", name, per(by[name])))
	}
	b.Logf("N=%d, %d commits; frames per charge by B-tree: %s", b.N, len(commits), strings.Join(line, ", "))
}

// chargeFull is chargePages with keybrake's own Idempotency-Key and the
// charge settled for what was reserved, as keybrake bench's are.
func chargeFull(b *testing.B, s *sqlite.Store, key string, now time.Time) (string, bool) {
	ctx := context.Background()
	in := storetest.NewReservation(key, "kb_"+strings.TrimPrefix(keybrake.NewReservationID(now), "rsv_"), storetest.USD(1))
	in.Fingerprint = rand.Text() + rand.Text()
	res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: now})
	if err != nil || res.OverCap != nil || res.Replay {
		b.Errorf("Reserve: %+v %v", res, err)
		return "", false
	}
	if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
		SettledMicros: storetest.USD(1), Amount: 100, Currency: "usd", ObjectID: "ch_" + rand.Text()[:24], UpstreamStatus: 200, Now: now}); err != nil {
		b.Errorf("Settle: %v", err)
		return "", false
	}
	return res.Reservation.ID, true
}
