package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// findPostmaster returns the PID of the PostgreSQL server behind dsn if it
// runs on this machine (the parent of this connection's backend), else 0.
func findPostmaster(ctx context.Context, dsn string) int {
	cfg, err := pgxpool.ParseConfig(dsn) // the DSN may hold pool_max_conns
	if err != nil {
		return 0
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return 0
	}
	defer conn.Close(context.Background())
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	ppid, _, _, err := parseProcStatTree(b)
	if err != nil {
		return 0
	}
	return ppid
}

// addServer meters a PostgreSQL server as one process: the postmaster
// (pid), every process whose parent it is (backends, walwriter,
// checkpointer…) and the children it reaped, so that a backend that exits
// during a phase still counts. The pools of the replicas keep their
// backends, so those are read alive.
func (m *cpuMeter) addServer(name string, pid int) {
	read := m.read
	m.read = func(p int) (time.Duration, error) {
		if p == pid {
			return readProcTreeCPU(pid)
		}
		return read(p)
	}
	m.add(name, pid)
}

// readProcTreeCPU returns the CPU time of pid, of its children alive now
// and of those it has reaped, from /proc.
func readProcTreeCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	_, own, reaped, err := parseProcStatTree(b)
	if err != nil {
		return 0, err
	}
	ticks := own + reaped
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		if ppid, t, _, err := parseProcStatTree(b); err == nil && ppid == pid && child != pid {
			ticks += t
		}
	}
	return ticksDuration(ticks), nil
}

// parseProcStatTree returns the parent PID (field 4), utime + stime
// (fields 14 and 15) and cutime + cstime (16 and 17, the children waited
// for) from the text of /proc/PID/stat, counting fields from the last ")"
// as parseProcStat does.
func parseProcStatTree(b []byte) (ppid int, own, reaped int64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("/proc stat: no command name in %q", b)
	}
	f := bytes.Fields(b[i+1:]) // from field 3, the state
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("/proc stat: %d fields after the command name, want 15 or more", len(f))
	}
	var n [4]int64
	for k, field := range f[11:15] {
		if n[k], err = strconv.ParseInt(string(field), 10, 64); err != nil || n[k] < 0 {
			return 0, 0, 0, fmt.Errorf("/proc stat: bad CPU time %q", field)
		}
	}
	p, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, 0, fmt.Errorf("/proc stat: bad parent PID %q", f[1])
	}
	return p, n[0] + n[1], n[2] + n[3], nil
}
