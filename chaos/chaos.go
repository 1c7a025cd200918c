package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

// Strategy is one way of turning deliveries into charges: the layers of
// protection a worker has.
type Strategy string

// The five strategies of every mode: none of the seeds' layers, the cap
// alone, then the layers added one by one up to all three.
const (
	// Unsafe builds the Idempotency-Key as the seed's anti-pattern does
	// (from delivery metadata, or no key at all), has no ledger, and calls
	// the simulator with the Stripe secret.
	Unsafe Strategy = "unsafe"
	// UnsafeCapped is the seed's unsafe key with no ledger, through
	// keybrake with the capped vault key: what the cap alone does. It
	// bounds the overcharge at the cap's 10 % margin, and once duplicates
	// have spent it, later events are refused (lost, for a worker without a
	// ledger to come back to them).
	UnsafeCapped Strategy = "unsafe+cap"
	// UnsafeGuarded is the seed's unsafe key with no ledger, through
	// keybrake with a vault key that has no cap and only the
	// duplicate-charge guard, matching the billing event's ID the seed's
	// worker already puts in metadata: the guard turns the seed's
	// duplicates into refusals, which the worker acknowledges.
	UnsafeGuarded Strategy = "unsafe+guard"
	// ContentKey sends billing.Key (business fields only) and nothing else:
	// what Stripe's 24-hour idempotency alone gives.
	ContentKey Strategy = "content-key"
	// KeyLedger runs billing.Processor with a SQLite ledger, straight to the
	// simulator with the Stripe secret.
	KeyLedger Strategy = "key+ledger"
	// Full is keybrake: billing.Processor, the ledger, and a vault key with
	// a lifetime cap of the expected total × 1.10 through an in-process
	// keybrake proxy.
	Full Strategy = "keybrake"
)

// Strategies lists every strategy in the order of the table.
var Strategies = []Strategy{Unsafe, UnsafeCapped, UnsafeGuarded, ContentKey, KeyLedger, Full}

// ParseStrategies parses a comma-separated list of strategy names, or
// "all"; letters (a) to (d) are accepted too.
func ParseStrategies(s string) ([]Strategy, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return Strategies, nil
	}
	var out []Strategy
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		var st Strategy
		switch f {
		case "a", string(Unsafe):
			st = Unsafe
		case "b", string(ContentKey), "content":
			st = ContentKey
		case "c", string(KeyLedger), "ledger":
			st = KeyLedger
		case "d", string(Full), "full":
			st = Full
		case "e", string(UnsafeCapped), "cap":
			st = UnsafeCapped
		case "f", string(UnsafeGuarded), "guard":
			st = UnsafeGuarded
		default:
			return nil, fmt.Errorf("unknown strategy %q (want unsafe, unsafe+cap, unsafe+guard, content-key, key+ledger, keybrake, or all)", f)
		}
		if !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	return out, nil
}

// Options configures Run. The zero value runs every mode and strategy with
// DefaultEvents events.
type Options struct {
	// Events is the number of billing events per mode and strategy;
	// DefaultEvents if zero.
	Events int
	// Modes are the names of the modes to run; nil means all.
	Modes []string
	// Strategies to run; nil means all five.
	Strategies []Strategy
	// Seed makes the events and the injected faults reproducible.
	Seed uint64
	// Fraction is the share of events that get the mode's fault;
	// DefaultFraction if zero.
	Fraction float64
	// RunTimeout bounds one mode × strategy run; DefaultRunTimeout if zero.
	RunTimeout time.Duration
	// Dir holds the SQLite files and broker data; a temporary directory,
	// removed afterwards, if empty.
	Dir string
	// Progress, when set, is called about four times a second during a
	// run, and once at its end with Done set.
	Progress func(Progress)
	// Logger receives the harness's debug logs; nil discards.
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultEvents     = 1000
	DefaultFraction   = 0.10
	DefaultRunTimeout = 3 * time.Minute
)

// Progress is the state of one run, for a progress display.
type Progress struct {
	Mode       string
	Strategy   Strategy
	Run, Runs  int   // this run's number (1-based) and the number of runs
	Events     int   // events of the run
	Settled    int   // events acknowledged at least as often as published
	Deliveries int64 // deliveries handled so far, redeliveries included
	Done       bool
	Row        *Row // the run's row, with Done
}

// Run runs the selected modes under the selected strategies and returns
// the report. Each mode × strategy runs against a fresh simulator, ledger,
// proxy and broker topic, stream or socket set, so rows are independent; a
// failed run is an error (the harness proves nothing with a row missing).
func Run(ctx context.Context, opts Options) (*Report, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	modes, err := SelectModes(o.Modes)
	if err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "keybrake-chaos-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	h := &harness{opts: o, dir: dir, client: newHTTPClient()}
	defer h.close()
	rep := &Report{Seed: o.Seed, Events: o.Events, Fraction: o.Fraction, Started: time.Now().UTC()}
	total := len(modes) * len(o.Strategies)
	n := 0
	for _, m := range modes {
		rep.Modes = append(rep.Modes, m.Info())
		for _, st := range o.Strategies {
			n++
			row, err := h.run(ctx, m, st, n, total)
			if err != nil {
				return rep, fmt.Errorf("%s/%s: %w", m.Name, st, err)
			}
			rep.Rows = append(rep.Rows, *row)
		}
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Events == 0 {
		o.Events = DefaultEvents
	}
	if o.Events < 1 || o.Events > 100000 {
		return o, errors.New("chaos: events must be between 1 and 100000")
	}
	if o.Fraction == 0 {
		o.Fraction = DefaultFraction
	}
	if o.Fraction <= 0 || o.Fraction > 1 {
		return o, errors.New("chaos: fraction must be in (0, 1]")
	}
	if o.RunTimeout == 0 {
		o.RunTimeout = DefaultRunTimeout
	}
	if len(o.Strategies) == 0 {
		o.Strategies = Strategies
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// harness holds what runs share: the brokers (started on first use) and an
// HTTP client.
type harness struct {
	opts   Options
	dir    string
	client *http.Client
	nsqd   *nsqBroker
	nats   *natsBroker
}

func (h *harness) close() {
	if h.nsqd != nil {
		h.nsqd.close()
	}
	if h.nats != nil {
		h.nats.close()
	}
	h.client.CloseIdleConnections()
}

func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: t, Timeout: 20 * time.Second}
}

var _ io.Closer = (*env)(nil)
