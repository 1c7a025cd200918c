package main

import (
	"bufio"
	"bytes"
	"fmt"
	"html"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/keybrake/keybrake/internal/report"
)

// memInterval is how often the bench samples its processes' memory.
const memInterval = time.Second

// ProcMemory is one process's resident set size (RSS) over a bench run,
// read from /proc/PID/status (Linux; elsewhere nothing is sampled), in KB.
// Start is its first sample (when it was ready), Warm the sample taken when
// the first warm-up ended, End the one taken after the last measurement,
// Max the largest of every sample, and Peak the kernel's high-water mark
// (VmHWM) at the last sample, which catches a peak between two samples.
type ProcMemory struct {
	Name    string      `json:"name"`
	PID     int         `json:"pid"`
	StartKB int64       `json:"start_kb"`
	WarmKB  int64       `json:"after_warmup_kb,omitempty"`
	MaxKB   int64       `json:"max_kb"`
	EndKB   int64       `json:"end_kb"`
	PeakKB  int64       `json:"hwm_kb"`
	Samples []MemSample `json:"samples"`
}

// MemSample is one RSS reading, Seconds after the bench started sampling.
type MemSample struct {
	Seconds float64 `json:"s"`
	KB      int64   `json:"rss_kb"`
}

// memWatch samples the RSS of the bench process and of every child it is
// told about, once a memInterval, until stopped.
type memWatch struct {
	mu    sync.Mutex
	start time.Time
	procs []*ProcMemory
	read  func(pid int) (rss, hwm int64, err error) // readProcMemory; tests replace it
	stop  chan struct{}
	done  chan struct{}
}

func newMemWatch() *memWatch {
	m := &memWatch{start: time.Now(), read: readProcMemory, stop: make(chan struct{}), done: make(chan struct{})}
	m.add("bench (load generator)", os.Getpid())
	go m.loop()
	return m
}

func (m *memWatch) loop() {
	defer close(m.done)
	tick := time.NewTicker(memInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
			m.sampleAll()
		}
	}
}

// add starts watching a process, with a first sample now.
func (m *memWatch) add(name string, pid int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &ProcMemory{Name: name, PID: pid}
	m.procs = append(m.procs, p)
	m.sampleLocked(p, time.Now())
}

// sampleAll samples every process and returns the RSS of each (0 for one
// that could not be read), in the order they were added.
func (m *memWatch) sampleAll() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	out := make([]int64, len(m.procs))
	for i, p := range m.procs {
		out[i] = m.sampleLocked(p, now)
	}
	return out
}

func (m *memWatch) sampleLocked(p *ProcMemory, now time.Time) int64 {
	rss, hwm, err := m.read(p.PID)
	if err != nil || rss == 0 {
		return 0 // exited, or not Linux
	}
	if len(p.Samples) == 0 {
		p.StartKB = rss
	}
	p.Samples = append(p.Samples, MemSample{Seconds: now.Sub(m.start).Seconds(), KB: rss})
	p.MaxKB, p.PeakKB = max(p.MaxKB, rss), max(p.PeakKB, hwm)
	return rss
}

// markWarm records a sample now as every process's RSS after warm-up;
// only the first call counts.
func (m *memWatch) markWarm() {
	rss := m.sampleAll()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range m.procs {
		if p.WarmKB == 0 {
			p.WarmKB = rss[i]
		}
	}
}

// markEnd records a sample now as every process's RSS at the end.
func (m *memWatch) markEnd() {
	rss := m.sampleAll()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range m.procs {
		if rss[i] > 0 {
			p.EndKB = rss[i]
		}
	}
}

// close stops sampling and returns what was sampled, processes never read
// left out.
func (m *memWatch) close() []ProcMemory {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ProcMemory
	for _, p := range m.procs {
		if len(p.Samples) > 0 {
			if p.EndKB == 0 {
				p.EndKB = p.Samples[len(p.Samples)-1].KB
			}
			out = append(out, *p)
		}
	}
	return out
}

// readProcMemory returns a process's VmRSS and VmHWM in KB from
// /proc/PID/status.
func readProcMemory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	return parseProcStatus(b)
}

// parseProcStatus reads VmRSS and VmHWM, in kB, from the text of
// /proc/PID/status.
func parseProcStatus(b []byte) (rss, hwm int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, val, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(name) {
		case "VmRSS":
			dst = &rss
		case "VmHWM":
			dst = &hwm
		default:
			continue
		}
		f := bytes.Fields(val)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, 0, fmt.Errorf("/proc status: bad %s line %q", name, sc.Text())
		}
		if *dst, err = strconv.ParseInt(string(f[0]), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc status: bad %s line %q", name, sc.Text())
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc status: no VmRSS")
	}
	return rss, hwm, sc.Err()
}

func mbOfKB(kb int64) string {
	if kb == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(kb)/1024)
}

// growthKB is end minus after warm-up (or minus start without a warm-up).
func (p ProcMemory) growthKB() int64 {
	base := p.WarmKB
	if base == 0 {
		base = p.StartKB
	}
	return p.EndKB - base
}

const memoryTitle = "memory (RSS in MiB, /proc/PID/status sampled every second; peak = VmHWM)"

var memoryColumns = []string{"process", "pid", "start", "after warm-up", "max", "end", "end − warm-up", "peak", "samples"}

func (p ProcMemory) cells() []string {
	return []string{p.Name, strconv.Itoa(p.PID), mbOfKB(p.StartKB), mbOfKB(p.WarmKB), mbOfKB(p.MaxKB), mbOfKB(p.EndKB),
		fmt.Sprintf("%+.1f", float64(p.growthKB())/1024), mbOfKB(p.PeakKB), strconv.Itoa(len(p.Samples))}
}

// memoryTable is the memory table, its header first.
func memoryTable(procs []ProcMemory) [][]string {
	out := [][]string{memoryColumns}
	for _, p := range procs {
		out = append(out, p.cells())
	}
	return out
}

// printTable writes a blank line, the title and lines as aligned columns,
// or nothing when lines holds only the header.
func printTable(w io.Writer, title string, lines [][]string) {
	if len(lines) < 2 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, line := range lines {
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	tw.Flush()
}

// writeHTMLTable writes lines as an HTML table, the first line the header.
func writeHTMLTable(b *strings.Builder, lines [][]string) {
	b.WriteString("<table>")
	for i, line := range lines {
		cell := "td"
		if i == 0 {
			cell = "th"
		}
		b.WriteString("<tr>")
		for _, c := range line {
			fmt.Fprintf(b, "<%s>%s</%s>", cell, html.EscapeString(c), cell)
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
}

// memoryChart is every process's RSS over the run, one line each.
func memoryChart(procs []ProcMemory) report.LineChart {
	c := report.LineChart{Title: "resident memory over the run", XUnit: "seconds", YUnit: "MiB"}
	for _, p := range procs {
		l := report.Line{Name: p.Name}
		for _, s := range p.Samples {
			l.Points = append(l.Points, report.Point{X: s.Seconds, Y: float64(s.KB) / 1024})
		}
		c.Lines = append(c.Lines, l)
	}
	return c
}
