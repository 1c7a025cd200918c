package main

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PhaseCPU is the CPU time (user + system) the bench's processes spent
// during one phase: each process's and their sum, per request (per event
// in a worker phase), and cores busy, the sum in CPU seconds over the
// phase's wall seconds. Cores busy near the machine's core count means the
// machine bounds the phase: its throughput cannot exceed cores / CPU per
// request (2 cores at 500 µs a request: 4,000 requests/s). Absent where
// no process's CPU time can be read (not Linux).
type PhaseCPU struct {
	Processes  []ProcCPU `json:"processes"`
	PerRequest float64   `json:"total_us_per_request"` // the sum of the processes' PerRequest
	Cores      float64   `json:"cores_busy"`
}

// ProcCPU is one process's CPU time in a phase: in all, and per request.
type ProcCPU struct {
	Name       string  `json:"name"`
	Seconds    float64 `json:"cpu_s"`
	PerRequest float64 `json:"us_per_request"`
}

// CPUSummary is PhaseCPU across runs: median (min–max) of each process's
// µs per request, of their sum and of cores busy.
type CPUSummary struct {
	Processes  []ProcCPUStat `json:"processes"`
	PerRequest Stat          `json:"total_us_per_request"`
	Cores      Stat          `json:"cores_busy"`
}

// ProcCPUStat is one process's µs per request across runs.
type ProcCPUStat struct {
	Name       string `json:"name"`
	PerRequest Stat   `json:"us_per_request"`
}

// cpuSelf is the name of the bench process in the CPU tables.
const cpuSelf = "bench"

// cpuMeter reads the CPU time of the bench process and of every child it
// is told about, at the start and the end of each phase. It is used by
// one goroutine at a time.
type cpuMeter struct {
	procs []cpuProc // the children, then the bench process last
	read  func(pid int) (time.Duration, error)
}

type cpuProc struct {
	name string
	pid  int
}

// cpuMark is the CPU time of every process that could be read at one
// moment, by PID.
type cpuMark struct {
	at   time.Time
	used map[int]time.Duration
}

func newCPUMeter() *cpuMeter {
	return &cpuMeter{procs: []cpuProc{{cpuSelf, os.Getpid()}}, read: readProcCPU}
}

// add starts metering a child, listed before the bench process.
func (m *cpuMeter) add(name string, pid int) {
	m.procs = slices.Insert(m.procs, len(m.procs)-1, cpuProc{name, pid})
}

// mark reads every process's CPU time now.
func (m *cpuMeter) mark() cpuMark {
	c := cpuMark{at: time.Now(), used: map[int]time.Duration{}}
	for _, p := range m.procs {
		if d, err := m.read(p.pid); err == nil {
			c.used[p.pid] = d
		}
	}
	return c
}

// since returns the CPU time spent from start until now over requests,
// counting every process read at both ends, or nil when none was (not
// Linux) or there were no requests. The total is the sum of the
// processes' own numbers.
func (m *cpuMeter) since(start cpuMark, requests int) *PhaseCPU {
	end := m.mark()
	if requests <= 0 {
		return nil
	}
	out := &PhaseCPU{}
	var total float64
	for _, p := range m.procs {
		t0, ok0 := start.used[p.pid]
		t1, ok1 := end.used[p.pid]
		if !ok0 || !ok1 {
			continue
		}
		s := (t1 - t0).Seconds()
		total += s
		pc := ProcCPU{Name: p.name, Seconds: s, PerRequest: s * 1e6 / float64(requests)}
		out.Processes = append(out.Processes, pc)
		out.PerRequest += pc.PerRequest
	}
	if len(out.Processes) == 0 {
		return nil
	}
	if wall := end.at.Sub(start.at).Seconds(); wall > 0 {
		out.Cores = total / wall
	}
	return out
}

// clockTicks is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// which the kernel fixes at 100 for user space on every architecture Go
// runs Linux on (sysconf(_SC_CLK_TCK), whatever the kernel's own HZ).
const clockTicks = 100

// parseProcStat returns utime + stime (fields 14 and 15, in clock ticks)
// from the text of /proc/PID/stat. The command name (field 2) is in
// parentheses and may itself hold spaces and parentheses, so the fields
// are counted from the last ")".
func parseProcStat(b []byte) (ticks int64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no command name in %q", b)
	}
	f := bytes.Fields(b[i+1:]) // from field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want 13 or more", len(f))
	}
	for _, field := range f[11:13] { // fields 14 and 15
		n, err := strconv.ParseInt(string(field), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("/proc stat: bad CPU time %q", field)
		}
		ticks += n
	}
	return ticks, nil
}

// ticksDuration converts clock ticks to a duration.
func ticksDuration(ticks int64) time.Duration {
	return time.Duration(ticks) * (time.Second / clockTicks)
}

// summarizeCPU summarises the phases of one row across runs, processes
// in the order they first appear; nil when no phase has CPU times.
func summarizeCPU(phases []*PhaseCPU) *CPUSummary {
	var names []string
	per := map[string][]float64{}
	var total, cores []float64
	for _, p := range phases {
		if p == nil {
			continue
		}
		total, cores = append(total, p.PerRequest), append(cores, p.Cores)
		for _, pc := range p.Processes {
			if _, ok := per[pc.Name]; !ok {
				names = append(names, pc.Name)
			}
			per[pc.Name] = append(per[pc.Name], pc.PerRequest)
		}
	}
	if len(total) == 0 {
		return nil
	}
	out := &CPUSummary{PerRequest: statOf(total), Cores: statOf(cores)}
	for _, n := range names {
		out.Processes = append(out.Processes, ProcCPUStat{Name: n, PerRequest: statOf(per[n])})
	}
	return out
}

// printCPUCells ends a row of a summary table: with its two CPU columns
// when the table has them (head is not empty), blank for a row without.
func printCPUCells(w io.Writer, head string, c *CPUSummary) {
	switch {
	case head == "":
	case c == nil:
		fmt.Fprint(w, "\t\t")
	default:
		fmt.Fprintf(w, "\t%s\t%s", c.PerRequest, c.Cores)
	}
	fmt.Fprintln(w)
}

// cpuRow is one line of the per-process CPU table.
type cpuRow struct {
	op      string
	clients int
	path    string
	cpu     *CPUSummary
}

// cpuRows returns every HTTP and worker row that has CPU times.
func (r *BenchReport) cpuRows() []cpuRow {
	var out []cpuRow
	for _, s := range r.Summary {
		if s.CPU != nil {
			out = append(out, cpuRow{s.Op, s.Clients, s.Path, s.CPU})
		}
	}
	for _, s := range r.WorkerSummary {
		if s.CPU != nil {
			out = append(out, cpuRow{"worker-" + s.Transport, s.Concurrency, s.Consumer, s.CPU})
		}
	}
	return out
}

const cpuTitle = "CPU per request by process (µs of user + system time from /proc/PID/stat; worker rows per event; median (min–max) across runs)"

// cpuColumns returns the processes of rows, in the order they first
// appear, the bench process last.
func cpuColumns(rows []cpuRow) []string {
	var names []string
	for _, r := range rows {
		for _, p := range r.cpu.Processes {
			if p.Name != cpuSelf && !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	return append(names, cpuSelf)
}

// cells returns the row's columns for the processes names: "-" for one
// not running in the row's phases.
func (r cpuRow) cells(names []string) []string {
	out := []string{r.op, strconv.Itoa(r.clients), r.path}
	for _, n := range names {
		v := "-"
		for _, p := range r.cpu.Processes {
			if p.Name == n {
				v = p.PerRequest.String()
			}
		}
		out = append(out, v)
	}
	return append(out, r.cpu.PerRequest.String(), r.cpu.Cores.String())
}

// cpuTable is the per-process CPU table, its header first.
func cpuTable(rows []cpuRow) [][]string {
	names := cpuColumns(rows)
	out := [][]string{append(append([]string{"operation", "clients", "path"}, names...), "total", "cores")}
	for _, r := range rows {
		out = append(out, r.cells(names))
	}
	return out
}

// writeCPUHTML writes the per-process CPU table as HTML.
func writeCPUHTML(b *strings.Builder, rows []cpuRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "<h2>CPU</h2>\n<p>%s.</p>\n", html.EscapeString(cpuTitle))
	writeHTMLTable(b, cpuTable(rows))
}
