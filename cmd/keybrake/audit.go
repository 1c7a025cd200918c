package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/keybrake/keybrake"
)

func init() {
	commands["audit"] = command{"verify the hash-chained audit log, or export it as JSONL that verifies offline", runAudit}
}

// errChainBroken is returned when verification finds a broken chain, so
// the command exits non-zero after printing where.
var errChainBroken = errors.New("audit log does not verify")

func runAudit(ctx context.Context, args []string, env Env) error {
	fs := flagSet("audit", `Checks the audit log's hash chains (one per key) and names the first broken
link of each: an edited event, a missing one, events out of order, or a
chain shorter than its head. Reads the store directly, so it needs no
running keybrake.

  keybrake audit verify [--db keybrake.db]       check the store
  keybrake audit verify --file audit.jsonl       check an export, offline
  keybrake audit export [--db …] --out audit.jsonl
                                                 verify and write every event as JSONL

The heads it prints (each key's last seq and hash) pin the log: keep them
somewhere the database's writers cannot reach, and compare later.
Exit status 1 when a chain is broken.

Usage: keybrake audit [flags] <verify|export>`, env)
	db := fs.String("db", envDefault(env, "KEYBRAKE_DB", "keybrake.db"), "store: a SQLite file path or a postgres:// DSN (KEYBRAKE_DB)")
	file := fs.String("file", "", "verify: an export to check instead of the store")
	out := fs.String("out", "", "export: the file to write (- for stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("audit: no action given")
	}
	action := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("audit %s: unexpected arguments %q", action, fs.Args())
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
			return fmt.Errorf("audit export: --out is required (a file, or - for stdout)")
		}
		var w io.Writer = env.Stdout
		var f *os.File
		if *out != "-" {
			var err error
			if f, err = os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
				return fmt.Errorf("audit export: %w", err)
			}
			w = f
		}
		var err error
		report, err = verifyStore(ctx, *db, w)
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
		return fmt.Errorf("audit: unknown action %q: want verify or export", action)
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
