package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/url"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/internal/report"
	"github.com/keybrake/keybrake/sqlite"
)

// Stat is one metric across runs.
type Stat struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

func statOf(vs []float64) Stat {
	if len(vs) == 0 {
		return Stat{}
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Min: s[0], Median: med, Max: s[len(s)-1]}
}

// String formats the stat as "median (min–max)".
func (s Stat) String() string {
	return fmt.Sprintf("%s (%s–%s)", num(s.Median), num(s.Min), num(s.Max))
}

func num(v float64) string {
	if v != 0 && v < 10 && v > -10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// SummaryRow is one operation on one path at one concurrency, across runs.
// AddedP50 and Ratio compare each run with the direct path of the same run
// at the same concurrency, then summarise.
type SummaryRow struct {
	Op        string      `json:"op"`
	Path      string      `json:"path"`
	Clients   int         `json:"clients"`
	Runs      int         `json:"runs"`
	Requests  int         `json:"requests"`
	Errors    int         `json:"errors"`
	PerSecond Stat        `json:"per_s"`
	P50       Stat        `json:"p50_us"`
	P99       Stat        `json:"p99_us"`
	Max       Stat        `json:"max_us"`
	AddedP50  *Stat       `json:"added_p50_us,omitempty"`
	Ratio     *Stat       `json:"ratio_to_direct,omitempty"`
	Reserve   *Stat       `json:"reserve_us,omitempty"` // Sample.Reserve across runs
	CPU       *CPUSummary `json:"cpu,omitempty"`
}

// WorkerSummaryRow is one consumer at one concurrency on one broker,
// across runs; Ratio is the consumer's events/s over the raw consumer's in
// the same run, AckRatio over the ack-only consumer's.
type WorkerSummaryRow struct {
	Transport   string      `json:"transport"`
	Consumer    string      `json:"consumer"`
	Concurrency int         `json:"concurrency"`
	Runs        int         `json:"runs"`
	Errors      int         `json:"errors"`
	PerSecond   Stat        `json:"events_per_s"`
	Ratio       *Stat       `json:"ratio_to_raw,omitempty"`
	AckRatio    *Stat       `json:"ratio_to_ack_only,omitempty"`
	CPU         *CPUSummary `json:"cpu,omitempty"`
}

// BenchMachine says where the numbers were taken.
type BenchMachine struct {
	CPUs      int    `json:"cpus"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	GoVersion string `json:"go_version"`
	LoadAvg   string `json:"loadavg,omitempty"` // /proc/loadavg at the start
}

// BenchReport is the output of `keybrake bench`: every run and the summary.
type BenchReport struct {
	Command       string             `json:"command"`
	Version       string             `json:"version"`
	Started       time.Time          `json:"started"`
	Seconds       float64            `json:"seconds"`
	Machine       BenchMachine       `json:"machine"`
	Processes     bool               `json:"separate_processes"`
	Store         string             `json:"store"`
	Replicas      int                `json:"replicas"`
	Runs          int                `json:"runs"`
	PhaseSeconds  float64            `json:"phase_seconds"`
	Rate          float64            `json:"rate,omitempty"` // --rate: open loop at this many requests per second
	Concurrency   []int              `json:"concurrency"`
	Keys          int                `json:"keys,omitempty"`
	Events        int                `json:"events,omitempty"`
	WorkerVia     string             `json:"worker_via,omitempty"`
	Samples       []Sample           `json:"samples"`
	Summary       []SummaryRow       `json:"summary"`
	WorkerSamples []WorkerSample     `json:"worker_samples,omitempty"`
	WorkerSummary []WorkerSummaryRow `json:"worker_summary,omitempty"`
	// HotKeySettled is the hot key's settled spend; HotKeyCharged what the
	// charges keybrake answered 200 to on it cost ($1.00 each).
	HotKeySettled string          `json:"hot_key_settled_usd"`
	HotKeyCharged string          `json:"hot_key_charged_usd"`
	CapCheck      *CapCheckResult `json:"cap_check,omitempty"`
	Guards        *GuardCost      `json:"guards,omitempty"`
	// Memory is the RSS of the bench and of every process it started.
	Memory []ProcMemory `json:"memory,omitempty"`
	Error  string       `json:"error,omitempty"` // why the run stopped early
}

// redactCommand joins the command line with the password of every DSN
// replaced by xxxxx, so a report can be shared.
func redactCommand(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		flag, val, ok := strings.Cut(a, "=")
		if !ok {
			flag, val = "", a
		}
		if u, err := url.Parse(val); err == nil && isPostgres(val) && u.User != nil {
			if flag != "" {
				out[i] = flag + "=" + u.Redacted()
			} else {
				out[i] = u.Redacted()
			}
		}
	}
	return strings.Join(out, " ")
}

func keybrakeUSD(n int) keybrake.Micros { return keybrake.Micros(n) * keybrake.MicrosPerUSD }

// runBenchReport starts the parts, runs every selected measurement and
// returns the report, partial if one failed (with the error).
func runBenchReport(ctx context.Context, c benchConfig, env Env) (*BenchReport, error) {
	rep := &BenchReport{Command: redactCommand(c.Args), Version: Version, Started: time.Now().UTC(), Processes: !c.InProcess,
		Store: "sqlite (temp file)", Replicas: c.Replicas, Runs: c.Runs, PhaseSeconds: c.Duration.Seconds(), Rate: c.Rate, Concurrency: c.Concurrency,
		Machine: BenchMachine{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version()}}
	switch {
	case isPostgres(c.DB):
		rep.Store = "postgres"
	case c.DB != "":
		rep.Store = "sqlite (" + c.DB + ", " + sqlite.Engine() + ")"
	default:
		rep.Store = "sqlite (temp file, " + sqlite.Engine() + ")"
	}
	if c.Ops["keys"] {
		rep.Keys = c.Keys
	}
	if c.Ops["worker-nsq"] || c.Ops["worker-jetstream"] {
		rep.Events, rep.WorkerVia = c.Events, c.WorkerVia
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.Machine.LoadAvg = strings.TrimSpace(string(la))
	}
	start := time.Now()
	b, err := newBench(ctx, c)
	if err != nil {
		return nil, err
	}
	err = b.measure(ctx, rep, env.Stderr)
	rep.Memory = b.mem.close()
	if cerr := b.close(); err == nil {
		err = cerr
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Summary = summarize(rep.Samples)
	rep.WorkerSummary = summarizeWorkers(rep.WorkerSamples)
	if err != nil {
		rep.Error = err.Error()
	}
	return rep, err
}

// measure runs the HTTP phases, the worker phases, the spend check, the
// cap check and the guards, filling rep as it goes.
func (b *bench) measure(ctx context.Context, rep *BenchReport, progress io.Writer) error {
	var err error
	if rep.Samples, err = b.runHTTP(ctx, progress); err != nil {
		return err
	}
	if rep.WorkerSamples, err = b.runWorkers(ctx, progress); err != nil {
		return err
	}
	b.mem.markEnd()
	sp, err := b.spent(ctx, b.keyID)
	if err != nil {
		return err
	}
	rep.HotKeySettled = sp.String()
	rep.HotKeyCharged = keybrakeUSD(int(b.hotCharges.Load())).String()
	if b.cfg.CapCheck > 0 && len(b.cfg.httpOps()) > 0 {
		fmt.Fprintf(progress, "bench: cap check: 64 clients race for a key capped at $%d…\n", b.cfg.CapCheck)
		if rep.CapCheck, err = b.capCheck(ctx, b.cfg.CapCheck); err != nil {
			return err
		}
	}
	if b.cfg.Ops["guards"] {
		if rep.Guards, err = b.guardCost(ctx, progress); err != nil {
			return err
		}
	}
	return nil
}

// summarize groups the samples by operation, path and concurrency, in the
// order they first ran.
func summarize(samples []Sample) []SummaryRow {
	type key struct {
		op, path string
		clients  int
	}
	direct := map[key]Sample{} // by op, run (in path), clients
	for _, s := range samples {
		if s.Path == pathDirect {
			direct[key{s.Op, fmt.Sprint(s.Run), s.Clients}] = s
		}
	}
	var order []key
	groups := map[key][]Sample{}
	for _, s := range samples {
		k := key{s.Op, s.Path, s.Clients}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], s)
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.op != b.op {
			return opRank(a.op) < opRank(b.op)
		}
		if a.clients != b.clients {
			return a.clients < b.clients
		}
		return pathRank(a.path) < pathRank(b.path)
	})
	var out []SummaryRow
	for _, k := range order {
		var rate, p50, p99, mx, added, ratio, reserve []float64
		var cpu []*PhaseCPU
		row := SummaryRow{Op: k.op, Path: k.path, Clients: k.clients}
		for _, s := range groups[k] {
			row.Runs++
			cpu = append(cpu, s.CPU)
			row.Requests += s.Requests
			row.Errors += s.Errors
			rate, p50, p99, mx = append(rate, s.PerSecond), append(p50, s.P50), append(p99, s.P99), append(mx, s.Max)
			if s.Reserve > 0 {
				reserve = append(reserve, s.Reserve)
			}
			if d, ok := direct[key{s.Op, fmt.Sprint(s.Run), s.Clients}]; ok && k.path != pathDirect && d.PerSecond > 0 {
				added, ratio = append(added, s.P50-d.P50), append(ratio, s.PerSecond/d.PerSecond)
			}
		}
		row.PerSecond, row.P50, row.P99, row.Max = statOf(rate), statOf(p50), statOf(p99), statOf(mx)
		row.CPU = summarizeCPU(cpu)
		if len(reserve) > 0 {
			r := statOf(reserve)
			row.Reserve = &r
		}
		if len(added) > 0 {
			a, r := statOf(added), statOf(ratio)
			row.AddedP50, row.Ratio = &a, &r
		}
		out = append(out, row)
	}
	return out
}

func opRank(op string) int {
	for i, o := range benchOps {
		if o == op {
			return i
		}
	}
	return len(benchOps)
}

func pathRank(p string) int {
	return strings.Index(pathDirect+"|"+pathBare+"|"+pathKeybrake+"|"+pathReplica1, p)
}

func consumerRank(c string) int {
	return strings.Index(consumerWorker+"|"+consumerRaw+"|"+consumerAck, c)
}

// summarizeWorkers groups the worker samples by broker, consumer and
// concurrency; the ratios divide by the raw and ack-only consumers of the
// same run.
func summarizeWorkers(samples []WorkerSample) []WorkerSummaryRow {
	type key struct {
		transport, consumer string
		conc, run           int
	}
	by := map[key]WorkerSample{}
	for _, s := range samples {
		by[key{s.Transport, s.Consumer, s.Concurrency, s.Run}] = s
	}
	type gkey struct {
		transport, consumer string
		conc                int
	}
	var order []gkey
	groups := map[gkey][]WorkerSample{}
	for _, s := range samples {
		k := gkey{s.Transport, s.Consumer, s.Concurrency}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], s)
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.transport != b.transport {
			return a.transport > b.transport // nsq first
		}
		if a.conc != b.conc {
			return a.conc < b.conc
		}
		return consumerRank(a.consumer) < consumerRank(b.consumer)
	})
	var out []WorkerSummaryRow
	for _, k := range order {
		row := WorkerSummaryRow{Transport: k.transport, Consumer: k.consumer, Concurrency: k.conc}
		var rate, ratio, ack []float64
		var cpu []*PhaseCPU
		for _, s := range groups[k] {
			row.Runs++
			cpu = append(cpu, s.CPU)
			row.Errors += s.Errors
			rate = append(rate, s.PerSecond)
			if r, ok := by[key{s.Transport, consumerRaw, s.Concurrency, s.Run}]; ok && k.consumer != consumerRaw && r.PerSecond > 0 {
				ratio = append(ratio, s.PerSecond/r.PerSecond)
			}
			if a, ok := by[key{s.Transport, consumerAck, s.Concurrency, s.Run}]; ok && k.consumer != consumerAck && a.PerSecond > 0 {
				ack = append(ack, s.PerSecond/a.PerSecond)
			}
		}
		row.PerSecond, row.CPU = statOf(rate), summarizeCPU(cpu)
		if len(ratio) > 0 {
			r := statOf(ratio)
			row.Ratio = &r
		}
		if len(ack) > 0 {
			a := statOf(ack)
			row.AckRatio = &a
		}
		out = append(out, row)
	}
	return out
}

// Failures returns what makes the numbers untrustworthy or shows a
// defect: failed requests or events, an overspend in the cap check, or
// more settled on the hot key than its charges cost.
func (r *BenchReport) Failures() []string {
	var out []string
	for _, s := range r.Summary {
		if s.Errors > 0 {
			out = append(out, fmt.Sprintf("%s on %s at %d clients: %d of %d requests failed", s.Op, s.Path, s.Clients, s.Errors, s.Requests))
		}
	}
	for _, s := range r.WorkerSamples {
		if s.Errors > 0 {
			out = append(out, fmt.Sprintf("%s %s at %d, run %d: %d errors (%s)", s.Transport, s.Consumer, s.Concurrency, s.Run, s.Errors, s.FirstErr))
		}
	}
	if c := r.CapCheck; c != nil && (c.Overspend || c.Succeeded != c.CapUSD) {
		out = append(out, fmt.Sprintf("cap check: %d charges passed a $%d cap, $%s settled, %d charged upstream", c.Succeeded, c.CapUSD, c.SettledUSD, c.Upstream))
	}
	settled, err1 := keybrake.ParseUSD(r.HotKeySettled)
	charged, err2 := keybrake.ParseUSD(r.HotKeyCharged)
	if err1 == nil && err2 == nil && settled > charged {
		out = append(out, fmt.Sprintf("hot key: $%s settled for $%s of charges", r.HotKeySettled, r.HotKeyCharged))
	}
	return out
}

var opTitles = map[string]string{
	"get":    "GET passthrough (GET /v1/customers/{id})",
	"charge": "capped charge, one hot key (POST /v1/charges, $1.00)",
	"keys":   "capped charge spread over %d keys",
	"mixed":  "GET and capped charge alternating (the charges on one hot key)",
}

func (r *BenchReport) opTitle(op string) string {
	if op == "keys" {
		return fmt.Sprintf(opTitles[op], r.Keys)
	}
	return opTitles[op]
}

func (r *BenchReport) setting() string {
	where := "every part in a process of its own"
	if !r.Processes {
		where = "every part in the bench process"
	}
	loop := "closed loop"
	if r.Rate > 0 {
		loop = fmt.Sprintf("open loop at %.0f requests/s", r.Rate)
	}
	return fmt.Sprintf("store %s, %d replica(s), %s; %d runs of %.1fs phases, %s, median (min–max) across runs; %d CPUs, load %s",
		r.Store, r.Replicas, where, r.Runs, r.PhaseSeconds, loop, r.Machine.CPUs, r.Machine.LoadAvg)
}

func (r *BenchReport) workerVia() string {
	if r.WorkerVia == "keybrake" {
		return "through keybrake"
	}
	return "direct to the simulator"
}

// print writes the summary tables.
func (r *BenchReport) print(w io.Writer) {
	fmt.Fprintf(w, "keybrake bench — %s\n", r.setting())
	cpuHead := ""
	if len(r.cpuRows()) > 0 {
		cpuHead = "\tCPU µs/req\tcores"
	}
	last := ""
	var tw *tabwriter.Writer
	for _, s := range r.Summary {
		if s.Op != last {
			if tw != nil {
				tw.Flush()
			}
			last = s.Op
			fmt.Fprintf(w, "\n%s\n", r.opTitle(s.Op))
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "clients\tpath\treq/s\t×direct\tp50 µs\tadded p50 µs\treserve µs\tp99 µs\tmax µs\terrors"+cpuHead)
		}
		ratio, added, reserve := "", "", ""
		if s.Ratio != nil {
			ratio, added = s.Ratio.String(), s.AddedP50.String()
		}
		if s.Reserve != nil {
			reserve = s.Reserve.String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d", s.Clients, s.Path, s.PerSecond, ratio, s.P50, added, reserve, s.P99, s.Max, s.Errors)
		printCPUCells(tw, cpuHead, s.CPU)
	}
	if tw != nil {
		tw.Flush()
	}
	if len(r.WorkerSummary) > 0 {
		fmt.Fprintf(w, "\nbilling worker vs a raw consumer making the same Stripe call (%s), %d events per phase\n", r.workerVia(), r.Events)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "broker\tconcurrency\tconsumer\tevents/s\t×raw\t×ack-only\terrors"+strings.ReplaceAll(cpuHead, "/req", "/event"))
		for _, s := range r.WorkerSummary {
			ratio, ack := "", ""
			if s.Ratio != nil {
				ratio = s.Ratio.String()
			}
			if s.AckRatio != nil {
				ack = s.AckRatio.String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d", s.Transport, s.Concurrency, s.Consumer, s.PerSecond, ratio, ack, s.Errors)
			printCPUCells(tw, cpuHead, s.CPU)
		}
		tw.Flush()
	}
	if slices.ContainsFunc(r.Summary, func(s SummaryRow) bool { return s.Path == pathBare }) {
		fmt.Fprintln(w, "\nbare proxy: httputil.ReverseProxy with no logic in front of the simulator, the floor of any Go proxy on this machine")
	}
	if r.HotKeySettled != "" && len(r.Summary) > 0 {
		fmt.Fprintf(w, "hot key: $%s settled for $%s of charges answered 200\n", r.HotKeySettled, r.HotKeyCharged)
	}
	if c := r.CapCheck; c != nil {
		verdict := "no overspend"
		if c.Overspend || c.Succeeded != c.CapUSD {
			verdict = "OVERSPEND OR SHORTFALL"
		}
		fmt.Fprintf(w, "cap check: 64 clients, $1.00 charges, total cap $%d: %d succeeded, %d refused (429), %d other; settled $%s; %d new charges upstream: %s\n",
			c.CapUSD, c.Succeeded, c.Refused, c.Other, c.SettledUSD, c.Upstream, verdict)
	}
	if r.Guards != nil {
		r.Guards.print(w)
	}
	printTable(w, cpuTitle, cpuTable(r.cpuRows()))
	printTable(w, memoryTitle, memoryTable(r.Memory))
	if r.Error != "" {
		fmt.Fprintf(w, "\nSTOPPED EARLY: %s\n", r.Error)
	}
}

// write writes the --json and --html files.
func (r *BenchReport) write(c benchConfig, env Env) error {
	for _, out := range []struct {
		file  string
		write func(io.Writer) error
	}{{c.JSONFile, r.WriteJSON}, {c.HTMLFile, r.WriteHTML}} {
		if err := writeReport(out.file, env.Stdout, out.write); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON writes the report as indented JSON.
func (r *BenchReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteHTML writes a self-contained page: per operation, throughput and
// latency charts (median bars, min–max whiskers across runs) and the
// table; the worker chart and table; every run's samples.
func (r *BenchReport) WriteHTML(w io.Writer) error {
	var b strings.Builder
	b.WriteString(report.Head("keybrake bench"))
	fmt.Fprintf(&b, "<h1>keybrake bench</h1>\n<p>%s.</p>\n<p><code>%s</code> — %s, %.0f s.</p>\n",
		html.EscapeString(r.setting()), html.EscapeString(r.Command), r.Started.Format(time.RFC3339), r.Seconds)
	for _, op := range r.ops() {
		rows := r.rowsOf(op)
		fmt.Fprintf(&b, "<h2>%s</h2>\n", html.EscapeString(r.opTitle(op)))
		b.WriteString(r.chart(op, rows, "throughput", "requests/s", false, func(s SummaryRow) Stat { return s.PerSecond }).SVG())
		b.WriteString(r.chart(op, rows, "p50 latency", "µs", true, func(s SummaryRow) Stat { return s.P50 }).SVG())
		b.WriteString(r.chart(op, rows, "p99 latency", "µs", true, func(s SummaryRow) Stat { return s.P99 }).SVG())
		b.WriteString("<table><tr><th>clients</th><th>path</th><th>req/s</th><th>×direct</th><th>p50 µs</th><th>added p50 µs</th><th>p99 µs</th><th>max µs</th><th>errors</th></tr>\n")
		for _, s := range rows {
			ratio, added := "", ""
			if s.Ratio != nil {
				ratio, added = s.Ratio.String(), s.AddedP50.String()
			}
			cls := "good"
			if s.Errors > 0 {
				cls = "bad"
			}
			fmt.Fprintf(&b, "<tr><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class=%q>%d</td></tr>\n",
				s.Clients, html.EscapeString(s.Path), s.PerSecond, ratio, s.P50, added, s.P99, s.Max, cls, s.Errors)
		}
		b.WriteString("</table>\n")
	}
	if len(r.WorkerSummary) > 0 {
		fmt.Fprintf(&b, "<h2>Billing worker vs a raw consumer (%s)</h2>\n", r.workerVia())
		b.WriteString(r.workerChart().SVG())
		b.WriteString("<table><tr><th>broker</th><th>concurrency</th><th>consumer</th><th>events/s</th><th>×raw</th><th>×ack-only</th><th>errors</th></tr>\n")
		for _, s := range r.WorkerSummary {
			ratio, ack := "", ""
			if s.Ratio != nil {
				ratio = s.Ratio.String()
			}
			if s.AckRatio != nil {
				ack = s.AckRatio.String()
			}
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td></tr>\n",
				s.Transport, s.Concurrency, html.EscapeString(s.Consumer), s.PerSecond, ratio, ack, s.Errors)
		}
		b.WriteString("</table>\n")
	}
	writeCPUHTML(&b, r.cpuRows())
	if len(r.Memory) > 0 {
		fmt.Fprintf(&b, "<h2>Memory</h2>\n<p>%s.</p>\n", html.EscapeString(memoryTitle))
		b.WriteString(memoryChart(r.Memory).SVG())
		writeHTMLTable(&b, memoryTable(r.Memory))
	}
	b.WriteString("<h2>Every run</h2>\n<table><tr><th>run</th><th>op</th><th>path</th><th>clients</th><th>requests</th><th>errors</th><th>req/s</th><th>p50 µs</th><th>p99 µs</th><th>max µs</th></tr>\n")
	for _, s := range r.Samples {
		fmt.Fprintf(&b, "<tr><td>%d</td><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td></tr>\n",
			s.Run, s.Op, html.EscapeString(s.Path), s.Clients, s.Requests, s.Errors, s.PerSecond, s.P50, s.P99, s.Max)
	}
	b.WriteString("</table>\n")
	if r.Error != "" {
		fmt.Fprintf(&b, "<p class=\"bad\">Stopped early: %s</p>\n", html.EscapeString(r.Error))
	}
	b.WriteString(report.Foot())
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *BenchReport) ops() []string {
	var out []string
	for _, s := range r.Summary {
		if len(out) == 0 || out[len(out)-1] != s.Op {
			out = append(out, s.Op)
		}
	}
	return out
}

func (r *BenchReport) rowsOf(op string) []SummaryRow {
	var out []SummaryRow
	for _, s := range r.Summary {
		if s.Op == op {
			out = append(out, s)
		}
	}
	return out
}

// chart draws one metric of an operation: a group per concurrency, a bar
// per path.
func (r *BenchReport) chart(op string, rows []SummaryRow, what, unit string, log bool, metric func(SummaryRow) Stat) report.Chart {
	var paths []string
	var clients []int
	for _, s := range rows {
		if !containsStr(paths, s.Path) {
			paths = append(paths, s.Path)
		}
		if len(clients) == 0 || clients[len(clients)-1] != s.Clients {
			clients = append(clients, s.Clients)
		}
	}
	c := report.Chart{Title: fmt.Sprintf("%s: %s", op, what), Unit: unit, Series: paths, Log: log}
	for _, n := range clients {
		c.Groups = append(c.Groups, fmt.Sprintf("%d clients", n))
		bars := make([]report.Bar, len(paths))
		for i := range bars {
			bars[i].Missing = true
		}
		for _, s := range rows {
			if s.Clients == n {
				m := metric(s)
				bars[indexStr(paths, s.Path)] = report.Bar{Value: m.Median, Min: m.Min, Max: m.Max}
			}
		}
		c.Bars = append(c.Bars, bars)
	}
	return c
}

func (r *BenchReport) workerChart() report.Chart {
	c := report.Chart{Title: "billing events per second", Unit: "events/s", Series: []string{consumerWorker, consumerRaw, consumerAck}}
	for _, s := range r.WorkerSummary {
		g := fmt.Sprintf("%s ×%d", s.Transport, s.Concurrency)
		if len(c.Groups) == 0 || c.Groups[len(c.Groups)-1] != g {
			c.Groups = append(c.Groups, g)
			c.Bars = append(c.Bars, []report.Bar{{Missing: true}, {Missing: true}, {Missing: true}})
		}
		c.Bars[len(c.Bars)-1][consumerIndex(s.Consumer)] = report.Bar{Value: s.PerSecond.Median, Min: s.PerSecond.Min, Max: s.PerSecond.Max}
	}
	return c
}

func consumerIndex(c string) int {
	switch c {
	case consumerWorker:
		return 0
	case consumerRaw:
		return 1
	}
	return 2
}

func containsStr(ss []string, s string) bool { return indexStr(ss, s) >= 0 }

func indexStr(ss []string, s string) int {
	for i, v := range ss {
		if v == s {
			return i
		}
	}
	return -1
}
