package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
)

func init() {
	commands["reconcile"] = command{"compare expected billing events with the ledger and the charges upstream; republish the missing", runReconcile}
}

// Findings of a reconciliation, one per expected event (and one per ledger
// entry no expected event explains).
const (
	findingOK         = "ok"         // one charge, as expected, recorded in the ledger
	findingMissing    = "missing"    // no charge and no final ledger outcome: never processed, or still pending
	findingDuplicated = "duplicated" // more than one succeeded charge carries the key
	findingMismatched = "mismatched" // the charge or the ledger disagrees with the event
	findingDeclined   = "declined"   // the ledger recorded a decline (no money moved)
	findingFailed     = "failed"     // the ledger recorded a permanent failure (a person must look)
	findingUnexpected = "unexpected" // a ledger entry no expected event has
)

// finding is the reconciliation of one event or entry.
type finding struct {
	Kind   string
	Line   int    // the event's line in the input, 0 for unexpected entries
	Key    string // the idempotency key
	Detail string
	Body   []byte // the event, for republishing
}

// reconciler compares expected events with a ledger and the upstream.
type reconciler struct {
	Ledger    keybrake.Ledger
	Charger   billing.Charger
	Namespace string
	// Progress, when set, is called after every checked event.
	Progress func(done, total int)
}

// reconcile checks every event, then lists the ledger's entries nobody
// expected.
func (r *reconciler) reconcile(ctx context.Context, events []eventRecord) ([]finding, error) {
	var out []finding
	expected := map[string]bool{}
	for i, e := range events {
		key := e.Event.Key(r.Namespace)
		if expected[key] {
			// The same bill twice in the input: one charge is right.
			continue
		}
		expected[key] = true
		f, err := r.check(ctx, e, key)
		if err != nil {
			return out, fmt.Errorf("line %d (%s): %w", e.Line, key, err)
		}
		out = append(out, f)
		if r.Progress != nil {
			r.Progress(i+1, len(events))
		}
	}
	after := ""
	for {
		page, more, err := r.Ledger.FindEntries(ctx, keybrake.EntryFilter{Limit: 1000, StartingAfter: after})
		if err != nil {
			return out, fmt.Errorf("list ledger entries: %w", err)
		}
		for _, en := range page {
			if !expected[en.Key] && strings.HasPrefix(en.Key, "kb_"+r.Namespace+"_") {
				out = append(out, finding{Kind: findingUnexpected, Key: en.Key,
					Detail: fmt.Sprintf("ledger entry %s (%d %s, charge %s) matches no expected event", en.State, en.Amount, en.Currency, orNone(en.ChargeID))})
			}
			after = en.Key
		}
		if !more || len(page) == 0 {
			return out, nil
		}
	}
}

// check reconciles one event.
func (r *reconciler) check(ctx context.Context, e eventRecord, key string) (finding, error) {
	f := finding{Line: e.Line, Key: key, Body: e.Body}
	entry, err := r.Ledger.FindEntry(ctx, key)
	if err != nil && keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
		return f, fmt.Errorf("ledger: %w", err)
	}
	found, err := r.Charger.FindByMetadata(ctx, key)
	if err != nil {
		return f, fmt.Errorf("search charges: %w", err)
	}
	var ok []billing.ChargeResult
	for _, c := range found {
		if c.Status == "succeeded" {
			ok = append(ok, c)
		}
	}
	ev := e.Event
	switch {
	case len(ok) > 1:
		ids := make([]string, len(ok))
		for i, c := range ok {
			ids[i] = c.ChargeID
		}
		sort.Strings(ids)
		f.Kind, f.Detail = findingDuplicated, fmt.Sprintf("%d charges: %s", len(ok), strings.Join(ids, ", "))
	case len(ok) == 1 && (ok[0].Amount != ev.Amount || ok[0].Currency != ev.Currency):
		f.Kind, f.Detail = findingMismatched, fmt.Sprintf("charge %s is %d %s, the event %d %s", ok[0].ChargeID, ok[0].Amount, ok[0].Currency, ev.Amount, ev.Currency)
	case len(ok) == 1 && entry == nil:
		f.Kind, f.Detail = findingMismatched, fmt.Sprintf("charge %s exists but the ledger has no entry", ok[0].ChargeID)
	case len(ok) == 1 && entry.State != keybrake.EntryCharged:
		f.Kind, f.Detail = findingMismatched, fmt.Sprintf("charge %s exists but the ledger says %s", ok[0].ChargeID, entry.State)
	case len(ok) == 1 && entry.ChargeID != ok[0].ChargeID:
		f.Kind, f.Detail = findingMismatched, fmt.Sprintf("the ledger records charge %s, the upstream has %s", entry.ChargeID, ok[0].ChargeID)
	case len(ok) == 1:
		f.Kind, f.Detail = findingOK, ok[0].ChargeID
	case entry != nil && entry.State == keybrake.EntryCharged:
		f.Kind, f.Detail = findingMismatched, fmt.Sprintf("the ledger records charge %s, the upstream has none with the key", entry.ChargeID)
	case entry != nil && entry.State == keybrake.EntryDeclined:
		f.Kind, f.Detail = findingDeclined, entry.Reason
	case entry != nil && entry.State == keybrake.EntryFailed:
		f.Kind, f.Detail = findingFailed, entry.Reason
	case entry != nil:
		f.Kind, f.Detail = findingMissing, fmt.Sprintf("pending after %d attempt(s): %s", entry.Attempts, orNone(entry.Reason))
	default:
		f.Kind, f.Detail = findingMissing, "never processed"
	}
	return f, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func runReconcile(ctx context.Context, args []string, env Env) error {
	fs := flagSet("reconcile", `Compares the expected billing events (JSON lines or CSV, as for publish) with
the ledger and with the charges found upstream by metadata[keybrake_key],
and reports every event that is missing (no charge, no final outcome),
duplicated (several charges), mismatched (amount, currency or ledger
disagree), declined or failed, and every ledger entry of the namespace that
no expected event explains. With --republish, missing events are published
again (safe: the worker charges each event once). Exits non-zero when
anything but ok or declined is found.

Stripe's search is eventually consistent (about a minute): reconcile a
billing run after it settled.

Usage: keybrake reconcile [flags] FILE`, env)
	var (
		upstream  = fs.String("upstream", envDefault(env, "KEYBRAKE_WORKER_UPSTREAM", "http://127.0.0.1:8080"), "base URL of keybrake serve (or Stripe), without a path (KEYBRAKE_WORKER_UPSTREAM)")
		vaultKey  = fs.String("vault-key", envDefault(env, "KEYBRAKE_VAULT_KEY", ""), "vault key (or Stripe key) to search charges with (KEYBRAKE_VAULT_KEY)")
		ledgerDSN = fs.String("ledger", envDefault(env, "KEYBRAKE_LEDGER", "keybrake-ledger.db"), "billing ledger: a SQLite file path or a postgres:// DSN (KEYBRAKE_LEDGER)")
		namespace = fs.String("namespace", envDefault(env, "KEYBRAKE_NAMESPACE", ""), "billing namespace of the events (KEYBRAKE_NAMESPACE)")
		format    = fs.String("format", envDefault(env, "KEYBRAKE_PUBLISH_FORMAT", ""), "jsonl or csv; default csv for a .csv file, else jsonl (KEYBRAKE_PUBLISH_FORMAT)")
		topic     = fs.String("topic", envDefault(env, "KEYBRAKE_TOPIC", "billing"), "topic to republish missing events to (KEYBRAKE_TOPIC)")
		republish = fs.Bool("republish", envDefault(env, "KEYBRAKE_REPUBLISH", "") == "true", "publish the missing events again (KEYBRAKE_REPUBLISH=true)")
		every     = fs.Int("progress-every", envInt(env, "KEYBRAKE_PROGRESS_EVERY", 100), "print progress to stderr every N events; 0 disables (KEYBRAKE_PROGRESS_EVERY)")
	)
	chosen := transportFlags(fs, env, true)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("reconcile takes one FILE of expected events (JSON lines or CSV, as for publish), got %d arguments: keybrake reconcile [flags] FILE", len(rest))
	}
	file := rest[0]
	switch *format {
	case "", "jsonl", "csv":
	default:
		return fmt.Errorf("invalid --format (KEYBRAKE_PUBLISH_FORMAT) %q: want jsonl or csv", *format)
	}
	if *namespace == "" {
		return errors.New("missing --namespace (KEYBRAKE_NAMESPACE): the billing namespace the worker charged these events under")
	}
	if err := billing.ValidateNamespace(*namespace); err != nil {
		return fmt.Errorf("invalid --namespace (KEYBRAKE_NAMESPACE): %s", keybrake.ErrorMessage(err))
	}
	if *vaultKey == "" {
		return errors.New("invalid --vault-key (KEYBRAKE_VAULT_KEY): required to search the charges")
	}
	if *every < 0 {
		return errors.New("invalid --progress-every (KEYBRAKE_PROGRESS_EVERY): want 0 or more")
	}
	cfg := WorkerConfig{Topic: "t", Channel: "c", Upstream: *upstream, VaultKey: *vaultKey, Ledger: *ledgerDSN, Namespace: *namespace,
		MaxAttempts: 1, Concurrency: 1, AckTimeout: 1e9, Lease: 1e9, StripeTimeout: 30e9, LogLevel: "info", LogFormat: "text"}
	if err := (&WorkerMain{Config: cfg}).validate(); err != nil {
		return err
	}
	var pubOpts transportOptions
	var tname string
	if *republish {
		var err error
		if tname, pubOpts, err = chosen(); err != nil {
			return err
		}
	}
	if *format == "" {
		*format = "jsonl"
		if strings.EqualFold(filepath.Ext(file), ".csv") {
			*format = "csv"
		}
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("open the expected events: %w", err)
	}
	defer f.Close()
	events, err := readEvents(f, file, *format)
	if err != nil {
		return err
	}
	ledger, closer, err := openLedger(ctx, *ledgerDSN)
	if err != nil {
		return err
	}
	defer closer.Close()
	r := &reconciler{Ledger: ledger, Charger: &billing.StripeCharger{BaseURL: strings.TrimSuffix(*upstream, "/"), Key: *vaultKey}, Namespace: *namespace}
	if *every > 0 {
		r.Progress = func(done, total int) {
			if done%*every == 0 || done == total {
				fmt.Fprintf(env.Stderr, "reconcile: checked %d of %d events\n", done, total)
			}
		}
	}
	findings, err := r.reconcile(ctx, events)
	if err != nil {
		return err
	}
	return reportFindings(ctx, env.Stdout, findings, pubOpts, tname, *topic)
}

// reportFindings prints every finding but the ok ones and a summary, and
// republishes the missing events when pub is set.
func reportFindings(ctx context.Context, w io.Writer, findings []finding, pub transportOptions, tname, topic string) error {
	counts := map[string]int{}
	var missing [][]byte
	for _, f := range findings {
		counts[f.Kind]++
		if f.Kind == findingMissing {
			missing = append(missing, f.Body)
		}
		if f.Kind == findingOK {
			continue
		}
		where := "ledger"
		if f.Line > 0 {
			where = fmt.Sprintf("line %d", f.Line)
		}
		fmt.Fprintf(w, "%-10s %s %s: %s\n", f.Kind, where, f.Key, f.Detail)
	}
	fmt.Fprintf(w, "expected %d: ok %d, missing %d, duplicated %d, mismatched %d, declined %d, failed %d; unexpected ledger entries %d\n",
		len(findings)-counts[findingUnexpected], counts[findingOK], counts[findingMissing], counts[findingDuplicated], counts[findingMismatched],
		counts[findingDeclined], counts[findingFailed], counts[findingUnexpected])
	if pub != nil && len(missing) > 0 {
		p, err := pub.publisher(ctx, slog.New(slog.DiscardHandler))
		if err != nil {
			return fmt.Errorf("%s: %w", tname, err)
		}
		defer p.Close()
		recs := make([]eventRecord, len(missing))
		for i, b := range missing {
			recs[i] = eventRecord{Body: b}
		}
		n, err := publishEvents(ctx, p, topic, recs)
		fmt.Fprintf(w, "republished %d of %d missing events to %s topic %s\n", n, len(missing), tname, topic)
		if err != nil {
			return fmt.Errorf("republish: %w", err)
		}
	}
	if bad := len(findings) - counts[findingOK] - counts[findingDeclined]; bad > 0 {
		return fmt.Errorf("reconcile: %d finding(s) need attention", bad)
	}
	return nil
}
