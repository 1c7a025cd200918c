package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/sqlite"
)

// growthConfig is `keybrake bench --growth`: how the store grows per
// request, and what retention holds it to.
type growthConfig struct {
	PerDay    int           // charges per simulated day; 0: no growth run
	Days      int           // simulated days
	Retention time.Duration // the pruner's retention; 0: none
	Clients   int
}

func (g *growthConfig) flags(fs *flag.FlagSet) {
	fs.IntVar(&g.PerDay, "growth", 0, "instead of the latency table: send this many charges per simulated day through keybrake and print the store's size after each day (the proxy's clock moves a day at a time)")
	fs.IntVar(&g.Days, "growth-days", 1, "--growth: simulated days")
	fs.Var(days{&g.Retention}, "growth-retention", "--growth: run a retention pass with this age after each day (at least 2d), as serve --retention does; off measures growth alone")
	fs.IntVar(&g.Clients, "growth-clients", 16, "--growth: concurrent clients")
}

func (g *growthConfig) validate() error {
	switch {
	case g.PerDay < 0 || g.Days < 1 || g.Clients < 1:
		return fmt.Errorf("invalid --growth, --growth-days or --growth-clients: want positive numbers")
	case g.Retention > 0 && g.Retention < keybrake.MinRetention:
		return fmt.Errorf("invalid --growth-retention: want off or at least 2d")
	}
	return nil
}

// benchClock is the proxy's clock during a growth run.
type benchClock struct{ t atomic.Int64 }

func (c *benchClock) Now() time.Time      { return time.UnixMicro(c.t.Load()) }
func (c *benchClock) add(d time.Duration) { c.t.Add(d.Microseconds()) }

// GrowthRow is the store after one simulated day.
type GrowthRow struct {
	Day       int              `json:"day"`
	Requests  int64            `json:"requests"`   // charges sent so far
	WALBytes  int64            `json:"wal_bytes"`  // SQLite: the -wal file at the end of the day, before a checkpoint
	FileBytes int64            `json:"file_bytes"` // SQLite: the database file after a checkpoint; PostgreSQL: every table with its indexes and TOAST
	LiveBytes int64            `json:"live_bytes"` // SQLite: pages in use (the file keeps freed pages for reuse); PostgreSQL: = FileBytes
	Tables    map[string]int64 `json:"tables,omitempty"`
	Pruned    int64            `json:"pruned"` // rows the day's retention pass deleted
	PruneTook time.Duration    `json:"prune_took"`
}

// growth runs the growth measurement and prints one line per day to w.
func (b *bench) growth(ctx context.Context, g growthConfig, clock *benchClock, db string, w io.Writer) ([]GrowthRow, error) {
	p := &keybrake.Pruner{Store: b.stores[0], Retention: g.Retention, Now: clock.Now}
	var rows []GrowthRow
	var sent atomic.Int64
	fmt.Fprintf(w, "%-4s %10s %10s %10s %10s %10s %8s  %s\n", "DAY", "REQUESTS", "WAL PEAK", "FILE", "LIVE", "PRUNED", "PRUNE", "LARGEST TABLES AND INDEXES")
	for d := 1; d <= g.Days; d++ {
		if err := b.chargeDay(ctx, g, &sent); err != nil {
			return rows, err
		}
		row := GrowthRow{Day: d, Requests: sent.Load()}
		if g.Retention > 0 {
			start := time.Now()
			rep, err := p.Once(ctx)
			if err != nil {
				return rows, fmt.Errorf("retention pass: %w", err)
			}
			row.Pruned, row.PruneTook = rep.Total(), time.Since(start)
		}
		if err := measureStore(ctx, db, &row); err != nil {
			return rows, err
		}
		rows = append(rows, row)
		fmt.Fprintf(w, "%-4d %10d %8.1fMB %8.1fMB %8.1fMB %10d %8s  %s\n", d, row.Requests, mb(row.WALBytes), mb(row.FileBytes), mb(row.LiveBytes),
			row.Pruned, row.PruneTook.Round(time.Millisecond), largest(row.Tables))
		clock.add(24 * time.Hour)
	}
	return rows, nil
}

// runGrowth is `keybrake bench --growth`.
func runGrowth(ctx context.Context, c benchConfig, g growthConfig, env Env) error {
	clock := &benchClock{}
	clock.t.Store(time.Now().Truncate(24 * time.Hour).Add(12 * time.Hour).UnixMicro())
	c.Now = clock.Now
	b, err := newBench(ctx, c)
	if err != nil {
		return err
	}
	defer b.close()
	db := b.dbPath()
	rows, err := b.growth(ctx, g, clock, db, env.Stdout)
	if err != nil {
		return err
	}
	last := rows[len(rows)-1]
	if g.Retention == 0 && last.Requests > 0 {
		fmt.Fprintf(env.Stdout, "growth: %.1f MB on disk, %.1f MB live, per 100k charges\n",
			mb(last.FileBytes*100_000/last.Requests), mb(last.LiveBytes*100_000/last.Requests))
	}
	return nil
}

func mb(n int64) float64 { return float64(n) / 1e6 }

// largest names the four largest tables or indexes.
func largest(t map[string]int64) string {
	names := make([]string, 0, len(t))
	for name := range t {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return t[names[i]] > t[names[j]] })
	var parts []string
	for _, name := range names[:min(4, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.1fMB", name, mb(t[name])))
	}
	return strings.Join(parts, ", ")
}

// chargeDay sends one day's charges from g.Clients clients.
func (b *bench) chargeDay(ctx context.Context, g growthConfig, sent *atomic.Int64) error {
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		mu   sync.Mutex
		fail error
	)
	base := b.proxyURLs[0]
	for range g.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(g.PerDay) && ctx.Err() == nil {
				if err := b.send(chargeOp(base, b.vaultKey)); err != nil {
					mu.Lock()
					fail = err
					mu.Unlock()
					return
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	if fail != nil {
		return fail
	}
	return ctx.Err()
}

// measureStore reads the store's size into row.
func measureStore(ctx context.Context, db string, row *GrowthRow) error {
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		// What autovacuum does within minutes in production (0017 sets the
		// retention tables' scale factor to 2%), done now so the day's
		// deletes show as reusable space.
		if _, err := conn.Exec(ctx, `VACUUM events, reservations, spend_counters, holds, alerts, alert_deliveries`); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		rs, err := conn.Query(ctx, `SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relkind = 'r' AND n.nspname = current_schema()`)
		if err != nil {
			return err
		}
		row.Tables = map[string]int64{}
		for rs.Next() {
			var name string
			var n int64
			if err := rs.Scan(&name, &n); err != nil {
				return err
			}
			row.Tables[name] = n
			row.FileBytes += n
		}
		row.LiveBytes = row.FileBytes
		return rs.Err()
	}
	if fi, err := os.Stat(db + "-wal"); err == nil {
		row.WALBytes = fi.Size()
	}
	conn, err := sqlite.OpenDB(db)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if fi, err := os.Stat(db); err == nil {
		row.FileBytes = fi.Size()
	}
	var pages, free, size int64
	for q, v := range map[string]*int64{"PRAGMA page_count": &pages, "PRAGMA freelist_count": &free, "PRAGMA page_size": &size} {
		if err := conn.QueryRowContext(ctx, q).Scan(v); err != nil {
			return err
		}
	}
	row.LiveBytes = (pages - free) * size
	rs, err := conn.QueryContext(ctx, `SELECT name, SUM(pgsize) FROM dbstat GROUP BY name`)
	if err != nil {
		return nil // dbstat is optional
	}
	defer rs.Close()
	row.Tables = map[string]int64{}
	for rs.Next() {
		var name string
		var n int64
		if rs.Scan(&name, &n) == nil {
			row.Tables[name] = n
		}
	}
	return nil
}
