package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keybrake/keybrake/drift"
)

func init() {
	commands["drift"] = command{"compare Stripe's recent charges, refunds, payouts and transfers with keybrake's reservations, once", runDrift}
}

// errDrift is returned when a run finds drift, so the command exits 1.
var errDrift = errors.New("drift found")

func runDrift(ctx context.Context, args []string, env Env) error {
	fs := flagSet("drift", `Runs the drift watch once: lists, per Stripe account, the charges, refunds,
payouts and transfers created in the window, matches them to keybrake's
reservations, and prints what differs:

  unseen   an object keybrake has no reservation for (money moved outside keybrake)
  amount   an object whose amount or currency differs from what keybrake settled
  missing  a settled reservation whose object is not upstream

Reads the store directly and calls Stripe with the real secret, from the
environment only: STRIPE_SECRET_KEY (or --stripe-secret-file). Exit status 1
when drift is found. keybrake serve --drift-interval runs the same check in
the background and audits what it finds.`, env)
	db := fs.String("db", envDefault(env, "KEYBRAKE_DB", "keybrake.db"), "store: a SQLite file path or a postgres:// DSN (KEYBRAKE_DB)")
	upstream := fs.String("upstream", envDefault(env, "KEYBRAKE_UPSTREAM", "https://api.stripe.com"), "Stripe API base URL (KEYBRAKE_UPSTREAM)")
	secretFile := fs.String("stripe-secret-file", envDefault(env, "KEYBRAKE_STRIPE_SECRET_FILE", ""), "file holding the Stripe secret, instead of STRIPE_SECRET_KEY (KEYBRAKE_STRIPE_SECRET_FILE)")
	window := fs.Duration("window", time.Hour, "how far back to look")
	accounts := fs.String("accounts", "", "connected accounts to check besides the platform and those in the window's reservations, comma-separated (acct_…)")
	record := fs.Bool("record", false, "also write each finding to the audit log (decision drift)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("drift takes no arguments, got %q", fs.Args())
	}
	secret := strings.TrimSpace(env.Getenv("STRIPE_SECRET_KEY"))
	if *secretFile != "" {
		b, err := os.ReadFile(*secretFile)
		if err != nil {
			return fmt.Errorf("invalid --stripe-secret-file: %v", err)
		}
		secret = strings.TrimSpace(string(b))
	}
	if secret == "" {
		return fmt.Errorf("drift needs the Stripe secret: set STRIPE_SECRET_KEY or --stripe-secret-file")
	}
	up, err := url.Parse(*upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return fmt.Errorf("invalid --upstream %q: want a base URL like https://api.stripe.com", *upstream)
	}
	if *window <= 0 {
		return fmt.Errorf("invalid --window %s: want a positive duration", *window)
	}
	s, err := openStore(ctx, *db)
	if err != nil {
		return err
	}
	defer s.Close()
	r := &drift.Reconciler{Store: s, Upstream: up, UpstreamKey: secret, Window: *window}
	if *accounts != "" {
		r.Accounts = strings.Split(*accounts, ",")
	}
	rep, err := r.Run(ctx)
	if err != nil {
		return err
	}
	if *record {
		if err := drift.Record(ctx, s, newLogger(env, "warn", "text"), rep, time.Now(), nil, nil); err != nil {
			return fmt.Errorf("record drift: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printDrift(env.Stdout, rep)
	}
	if len(rep.Findings) > 0 {
		return errDrift
	}
	return nil
}

func printDrift(w io.Writer, rep *drift.Report) {
	fmt.Fprintf(w, "drift watch %s to %s: %d objects upstream in %d account(s), %d reservations\n",
		rep.Since.UTC().Format(time.RFC3339), rep.Until.UTC().Format(time.RFC3339), rep.Objects, len(rep.Accounts), rep.Reservations)
	if len(rep.Findings) == 0 {
		fmt.Fprintln(w, "no drift")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tACCOUNT\tOBJECT\tID\tUPSTREAM\tKEYBRAKE\tKEY\tRESERVATION")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, f := range rep.Findings {
		upstream, kb := "-", "-"
		if f.Kind != drift.KindMissing {
			upstream = fmt.Sprintf("%d %s", f.Amount, f.Currency)
		}
		if f.ReservationID != "" {
			kb = fmt.Sprintf("%d %s", f.Reserved, f.ReservedCcy)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, dash(f.Account), f.Object, dash(f.ObjectID), upstream, kb, dash(f.KeyID), dash(f.ReservationID))
	}
	tw.Flush()
}
