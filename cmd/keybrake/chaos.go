package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake/chaos"
)

func init() {
	commands["chaos"] = command{"reproduce the seeds' failure modes on real brokers and print duplicates and lost charges per strategy", runChaos}
}

func runChaos(ctx context.Context, args []string, env Env) error {
	fs := flagSet("chaos", `Reproduces every failure mode of the seeds with an embedded nsqd, an embedded
nats-server with JetStream, ZeroMQ sockets on loopback, the Stripe simulator
and injected crashes, under five strategies:

  unsafe       the seed's key (delivery metadata, or none), no ledger, the Stripe secret
  unsafe+cap   the seed's key, no ledger, a vault key capped at expected × 1.10 through keybrake
  content-key  billing.Key alone (Stripe's 24 h idempotency and nothing else)
  key+ledger   billing.Processor with the SQLite ledger, the Stripe secret
  keybrake     the Processor, the ledger and a vault key capped at expected × 1.10 through keybrake

and prints, per mode and strategy, the charges, the duplicates, the lost
charges, the over-cap attempts keybrake refused and the USD overcharged,
counted from the simulator's ground truth. Exits non-zero if an unsafe row
shows none of its seed's failure, an unsafe+cap row charged more than its
cap, or a keybrake row has a duplicate or a lost charge.

Modes: `+strings.Join(chaos.ModeNames(), ", ")+`

Usage: keybrake chaos [flags]`, env)
	var (
		events     = fs.Int("events", envInt(env, "KEYBRAKE_CHAOS_EVENTS", chaos.DefaultEvents), "billing events per mode and strategy (KEYBRAKE_CHAOS_EVENTS)")
		modes      = fs.String("modes", envDefault(env, "KEYBRAKE_CHAOS_MODES", "all"), "comma-separated modes or transports (nsq, jetstream, zmq), or all (KEYBRAKE_CHAOS_MODES)")
		strategies = fs.String("strategies", envDefault(env, "KEYBRAKE_CHAOS_STRATEGIES", "all"), "comma-separated strategies (unsafe, unsafe+cap, unsafe+guard, content-key, key+ledger, keybrake), or all (KEYBRAKE_CHAOS_STRATEGIES)")
		seed       = fs.Uint64("seed", envUint(env, "KEYBRAKE_CHAOS_SEED", 1), "seed of the events and of the faults (KEYBRAKE_CHAOS_SEED)")
		fraction   = fs.Float64("fraction", envFloat(env, "KEYBRAKE_CHAOS_FRACTION", chaos.DefaultFraction), "share of events that get the mode's fault (KEYBRAKE_CHAOS_FRACTION)")
		jsonFile   = fs.String("json", envDefault(env, "KEYBRAKE_CHAOS_JSON", ""), "also write the report as JSON to this file, - for stdout (KEYBRAKE_CHAOS_JSON)")
		svgFile    = fs.String("svg", envDefault(env, "KEYBRAKE_CHAOS_SVG", ""), "also write the bar chart as SVG to this file (KEYBRAKE_CHAOS_SVG)")
		htmlFile   = fs.String("html", envDefault(env, "KEYBRAKE_CHAOS_HTML", ""), "also write an HTML report (chart, table, modes) to this file (KEYBRAKE_CHAOS_HTML)")
		timeout    = fs.Duration("run-timeout", envDuration(env, "KEYBRAKE_CHAOS_RUN_TIMEOUT", chaos.DefaultRunTimeout), "bound on one mode × strategy run (KEYBRAKE_CHAOS_RUN_TIMEOUT)")
		quiet      = fs.Bool("quiet", envDefault(env, "KEYBRAKE_CHAOS_QUIET", "") == "true", "no progress on stderr (KEYBRAKE_CHAOS_QUIET=true)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("chaos takes no arguments, got %q", fs.Args())
	}
	if *events < 1 {
		return errors.New("invalid --events (KEYBRAKE_CHAOS_EVENTS): want 1 or more")
	}
	if *fraction <= 0 || *fraction > 1 {
		return errors.New("invalid --fraction (KEYBRAKE_CHAOS_FRACTION): want more than 0 and at most 1")
	}
	if *timeout <= 0 {
		return errors.New("invalid --run-timeout (KEYBRAKE_CHAOS_RUN_TIMEOUT): want a positive duration")
	}
	sts, err := chaos.ParseStrategies(*strategies)
	if err != nil {
		return fmt.Errorf("invalid --strategies (KEYBRAKE_CHAOS_STRATEGIES): %w", err)
	}
	if _, err := chaos.SelectModes(strings.Split(*modes, ",")); err != nil {
		return fmt.Errorf("invalid --modes (KEYBRAKE_CHAOS_MODES): %w", err)
	}
	opts := chaos.Options{Events: *events, Modes: strings.Split(*modes, ","), Strategies: sts, Seed: *seed, Fraction: *fraction, RunTimeout: *timeout}
	if !*quiet {
		opts.Progress = progressPrinter(env.Stderr)
	}
	rep, err := chaos.Run(ctx, opts)
	if err != nil {
		return err
	}
	if err := rep.WriteText(env.Stdout); err != nil {
		return err
	}
	for _, out := range []struct {
		file  string
		write func(io.Writer) error
	}{{*jsonFile, rep.WriteJSON}, {*svgFile, rep.WriteSVG}, {*htmlFile, rep.WriteHTML}} {
		if err := writeReport(out.file, env.Stdout, out.write); err != nil {
			return err
		}
	}
	if fails := rep.Failures(); len(fails) > 0 {
		return fmt.Errorf("the harness does not prove its point:\n  %s", strings.Join(fails, "\n  "))
	}
	return nil
}

// progressPrinter prints one line per finished run, and a line every two
// seconds for a run still going.
func progressPrinter(w io.Writer) func(chaos.Progress) {
	var last time.Time
	return func(p chaos.Progress) {
		switch {
		case p.Done && p.Row != nil:
			fmt.Fprintf(w, "[%2d/%d] %-20s %-12s %5d events %6d deliveries  %4d duplicates %4d lost  %.1fs\n", p.Run, p.Runs, p.Mode, p.Strategy,
				p.Events, p.Deliveries, p.Row.Duplicates, p.Row.Lost, p.Row.Seconds)
		case time.Since(last) >= 2*time.Second:
			last = time.Now()
			fmt.Fprintf(w, "[%2d/%d] %-20s %-12s %5d/%d settled, %d deliveries…\n", p.Run, p.Runs, p.Mode, p.Strategy, p.Settled, p.Events, p.Deliveries)
		}
	}
}

func writeReport(file string, stdout io.Writer, write func(io.Writer) error) error {
	switch file {
	case "":
		return nil
	case "-":
		return write(stdout)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	return f.Close()
}

func envUint(env Env, name string, def uint64) uint64 {
	v := envDefault(env, name, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return def
	}
	return n
}

func envFloat(env Env, name string, def float64) float64 {
	v := envDefault(env, name, "")
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return -1
	}
	return f
}
