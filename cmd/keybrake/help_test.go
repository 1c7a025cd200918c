package main_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	main "github.com/keybrake/keybrake/cmd/keybrake"
)

// TestHelp: every command answers --help (and `keybrake help NAME`) with its
// usage and flags, exits as a success, and does nothing else.
func TestHelpEveryCommand(t *testing.T) {
	names := main.Commands()
	if len(names) < 14 {
		t.Fatalf("commands = %v, want the whole list", names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
				var out, errOut bytes.Buffer
				err := main.Run(context.Background(), args, main.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }})
				if err != nil && !errors.Is(err, flag.ErrHelp) {
					t.Fatalf("%v: %v", args, err)
				}
				help := out.String() + errOut.String()
				if !strings.Contains(help, "Usage: keybrake "+name) {
					t.Fatalf("%v: no usage line:\n%s", args, help)
				}
				if name != "version" && !strings.Contains(help, "Flags:") {
					t.Errorf("%v: no flags listed:\n%s", args, help)
				}
			}
		})
	}
}

// TestReconcileFlagsFirst: reconcile names a bad flag or a missing
// argument before it reads anything, and takes flags after the file.
func TestReconcileFlagsFirst(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reconcile"}, "reconcile takes one FILE"},
		{[]string{"reconcile", "/nonexistent/events.jsonl"}, "missing --namespace"},
		{[]string{"reconcile", "/nonexistent/events.jsonl", "--namespace", "ns"}, "--vault-key"},
		{[]string{"reconcile", "/nonexistent/events.jsonl", "--namespace", "ns", "--vault-key", "vk_x", "--format", "xml"}, "invalid --format"},
		{[]string{"reconcile", "/nonexistent/events.jsonl", "--namespace", "ns", "--vault-key", "vk_x", "--progress-every", "-1"}, "--progress-every"},
		{[]string{"reconcile", "/nonexistent/events.jsonl", "--vault-key", "vk_x", "--namespace", "bad ns"}, "--namespace"},
		{[]string{"reconcile", "/nonexistent/events.jsonl", "--namespace", "ns", "--vault-key", "vk_x"}, "open the expected events"},
	} {
		err := main.Run(context.Background(), tc.args, main.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}
