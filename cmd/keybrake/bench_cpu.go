package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux the bench runs on).
const clockTick = 10 * time.Millisecond

// cpuGroups names the processes whose CPU a phase accounts for: the bench
// itself (the load generator), each child by name (serve replicas summed
// as "serve"), and, with a PostgreSQL store on this machine, the server
// (the postmaster, every process it started, and the children it reaped).
type cpuGroups struct {
	postmaster int // 0: not found (SQLite, or a server elsewhere)
}

// cpuSample is the CPU time each group had used at one moment, and the
// machine's busy time (every process, including other users').
type cpuSample struct {
	at      time.Time
	group   map[string]time.Duration
	machine time.Duration // busy time of every CPU, from /proc/stat
}

// findPostmaster returns the pid of the PostgreSQL server behind dsn if it
// runs on this machine: the parent of this connection's backend.
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
	st, ok := readStat(pid)
	if !ok {
		return 0
	}
	return st.ppid
}

// procStat is what the bench reads of /proc/PID/stat.
type procStat struct {
	ppid      int
	cpu       time.Duration // utime + stime
	reapedCPU time.Duration // cutime + cstime: children waited for
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// The command is in parentheses and may hold spaces: fields start after
	// the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return procStat{}, false
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
	return procStat{
		ppid:      int(n(1)),
		cpu:       time.Duration(n(11)+n(12)) * clockTick,
		reapedCPU: time.Duration(n(13)+n(14)) * clockTick,
	}, true
}

// sampleCPU reads the CPU used so far by every group.
func (b *bench) sampleCPU() cpuSample {
	c := cpuSample{at: time.Now(), group: map[string]time.Duration{}}
	if st, ok := readStat(os.Getpid()); ok {
		c.group["bench"] = st.cpu
	}
	for _, ch := range b.children {
		st, ok := readStat(ch.cmd.Process.Pid)
		if !ok {
			continue
		}
		name := ch.name
		if strings.HasPrefix(name, "serve replica") {
			name = "serve"
		}
		c.group[name] += st.cpu
	}
	if pm := b.cpu.postmaster; pm != 0 {
		if st, ok := readStat(pm); ok {
			c.group["postgres"] = st.cpu + st.reapedCPU
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				pid, err := strconv.Atoi(e.Name())
				if err != nil {
					continue
				}
				if ps, ok := readStat(pid); ok && ps.ppid == pm {
					c.group["postgres"] += ps.cpu
				}
			}
		}
	}
	c.machine = machineBusy()
	return c
}

// machineBusy returns the busy time summed over every CPU (/proc/stat: all
// but idle and iowait).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy int64
	for k, v := range f[1:] {
		if k == 3 || k == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * clockTick
}

// PhaseCPU is the CPU a phase cost: microseconds per successful request of
// each process group, their total, and how many cores were busy on average
// (those processes', and the whole machine's, other users included).
type PhaseCPU struct {
	PerRequestUS map[string]float64 `json:"per_request_us"`
	TotalUS      float64            `json:"total_us"`
	CoresBusy    float64            `json:"cores_busy"`
	MachineBusy  float64            `json:"machine_cores_busy"`
}

// cpuBetween is the CPU used between two samples, per request.
func cpuBetween(a, z cpuSample, requests int) *PhaseCPU {
	wall := z.at.Sub(a.at)
	if requests <= 0 || wall <= 0 || len(z.group) == 0 {
		return nil
	}
	p := &PhaseCPU{PerRequestUS: map[string]float64{}}
	var total time.Duration
	for name, t := range z.group {
		d := t - a.group[name]
		total += d
		p.PerRequestUS[name] = float64(d.Microseconds()) / float64(requests)
	}
	p.TotalUS = float64(total.Microseconds()) / float64(requests)
	p.CoresBusy = total.Seconds() / wall.Seconds()
	p.MachineBusy = (z.machine - a.machine).Seconds() / wall.Seconds()
	return p
}

// String is the one-line form the progress output prints.
func (p *PhaseCPU) String() string {
	var sb strings.Builder
	for _, name := range []string{"postgres", "serve", "stripesim", "bench", "bare proxy"} {
		if v, ok := p.PerRequestUS[name]; ok {
			sb.WriteString(name + " " + strconv.FormatFloat(v, 'f', 0, 64) + ", ")
		}
	}
	return "cpu µs/req: " + sb.String() + "total " + strconv.FormatFloat(p.TotalUS, 'f', 0, 64) +
		"; cores busy " + strconv.FormatFloat(p.CoresBusy, 'f', 2, 64) + " (machine " + strconv.FormatFloat(p.MachineBusy, 'f', 2, 64) + ")"
}
