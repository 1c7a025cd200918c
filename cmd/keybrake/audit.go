package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/keybrake/keybrake"
)

func init() {
	commands["audit"] = command{"verify the hash-chained audit log, or export it as JSONL that verifies offline", runAudit}
	commands["events"] = command{"export the audit events (--since, JSONL) to keep what retention prunes; same as audit export", func(ctx context.Context, args []string, env Env) error {
		return auditCommand(ctx, "events", args, env)
	}}
}

// errChainBroken is returned when verification finds a broken chain, so
// the command exits non-zero after printing where.
var errChainBroken = errors.New("audit log does not verify")

func runAudit(ctx context.Context, args []string, env Env) error {
	return auditCommand(ctx, "audit", args, env)
}

// auditCommand is `keybrake audit` and `keybrake events` (name): one
// export, whichever name an operator reaches for.
func auditCommand(ctx context.Context, name string, args []string, env Env) error {
	fs := flagSet(name, `Checks the audit log's hash chains (one per key) and names the first broken
link of each: an edited event, a missing one, events out of order, or a
chain shorter than its head. Reads the store directly, so it needs no
running keybrake.

  keybrake audit verify [--db keybrake.db]       check the store
  keybrake audit verify --file audit.jsonl       check an export, offline
  keybrake audit export [--db …] [--since 2026-01-01] [--out audit.jsonl]
                                                 verify and write the events as JSONL
  keybrake events export …                       the same as audit export

An export is JSONL: anchor lines (where each key's chain starts), one line
per event (every field, seq and hashes included), then head lines. With
--since (a date, an RFC 3339 time, or an age like 30d) it holds each key's
events from its first one at or after that time; its anchors name the
hash the previous export ended with, so consecutive exports chain. Export
before retention prunes (serve --retention, 90 days by default), e.g.
daily: keybrake events export --since 2d --out events-$(date +%F).jsonl

The heads it prints (each key's last seq and hash) pin the log: keep them
somewhere the database's writers cannot reach, and compare later.
Exit status 1 when a chain is broken.

Usage: keybrake `+name+` [flags] <verify|export>`, env)
	db := fs.String("db", envDefault(env, "KEYBRAKE_DB", "keybrake.db"), "store: a SQLite file path or a postgres:// DSN (KEYBRAKE_DB)")
	file := fs.String("file", "", "verify: an export to check instead of the store")
	out := fs.String("out", "-", "export: the file to write, - for stdout")
	sinceFlag := fs.String("since", "", "export: only events since this date (2026-01-31), time (RFC 3339) or age (30d, 12h); default every event")
	format := fs.String("format", "jsonl", "export: the output format; jsonl is the only one")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		fs.Usage()
		return fmt.Errorf("%s: no action given: want `keybrake %s verify` or `keybrake %s export`", name, name, name)
	}
	action := rest[0]
	if len(rest) > 1 {
		return fmt.Errorf("%s %s: unexpected arguments %q (flags start with --)", name, action, rest[1:])
	}
	if *format != "jsonl" {
		return fmt.Errorf("%s %s: invalid --format %q: jsonl is the only format", name, action, *format)
	}
	since, err := parseSince(*sinceFlag, time.Now())
	if err != nil {
		return fmt.Errorf("%s %s: invalid --since %q: %v", name, action, *sinceFlag, err)
	}
	if action == "verify" && !since.IsZero() {
		return fmt.Errorf("%s verify: --since applies to export only; verify checks every event", name)
	}
	var report *keybrake.AuditReport
	switch action {
	case "verify":
		if *file != "" {
			f, err := os.Open(*file)
			if err != nil {
				return fmt.Errorf("audit verify: %w", err)
			}
			defer f.Close()
			if report, err = keybrake.VerifyAuditExport(f); err != nil {
				return fmt.Errorf("audit verify %s: %w", *file, err)
			}
			break
		}
		var err error
		if report, err = verifyStore(ctx, *db, nil); err != nil {
			return err
		}
	case "export":
		if *out == "" {
			return fmt.Errorf("%s export: --out is empty: give a file, or - for stdout", name)
		}
		var w io.Writer = env.Stdout
		var f *os.File
		if *out != "-" {
			var err error
			if f, err = os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
				return fmt.Errorf("%s export: %w", name, err)
			}
			w = f
		}
		var err error
		report, err = exportStore(ctx, *db, w, since)
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return err
		}
		if *out == "-" {
			return reportBreaks(env.Stderr, report)
		}
	default:
		return fmt.Errorf("%s: unknown action %q: want verify or export", name, action)
	}
	printReport(env.Stdout, report)
	return reportBreaks(env.Stderr, report)
}

func verifyStore(ctx context.Context, db string, w io.Writer) (*keybrake.AuditReport, error) {
	s, err := openStore(ctx, db)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return keybrake.VerifyAuditLog(ctx, s, w)
}

func exportStore(ctx context.Context, db string, w io.Writer, since time.Time) (*keybrake.AuditReport, error) {
	s, err := openStore(ctx, db)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return keybrake.ExportAuditLog(ctx, s, w, since)
}

// parseSince reads a date (2026-01-31, UTC), an RFC 3339 time, or an age
// before now (30d, 12h); "" is the zero time: everything.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", v); err == nil {
		return t, nil
	}
	if d, err := parseDays(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("want a date like 2026-01-31, a time like 2026-01-31T00:00:00Z, or an age like 30d")
}

func printReport(w io.Writer, r *keybrake.AuditReport) {
	fmt.Fprintf(w, "%d chained events in %d chains", r.Events, len(r.Heads))
	if r.Unchained > 0 {
		fmt.Fprintf(w, ", %d older unchained events (not checked)", r.Unchained)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-28s %8s  %s\n", "KEY", "HEAD", "HASH")
	for _, h := range r.Heads {
		k := h.KeyID
		if k == "" {
			k = `"" (unknown vault keys)`
		}
		fmt.Fprintf(w, "%-28s %8d  %s\n", k, h.Seq, h.Hash)
	}
	for _, a := range r.Anchors {
		fmt.Fprintf(w, "anchored: key %q starts at seq %d (pruned before it)\n", a.KeyID, a.Seq)
	}
}

func reportBreaks(w io.Writer, r *keybrake.AuditReport) error {
	if r.OK() {
		fmt.Fprintln(w, "audit log verifies")
		return nil
	}
	for _, b := range r.Breaks {
		fmt.Fprintln(w, "BROKEN:", b.String())
	}
	return errChainBroken
}
