package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/keybrake/keybrake/sqlite"
)

// Version is keybrake's version, set at build time with
// -ldflags "-X main.Version=v1.2.3"; "dev" otherwise.
var Version = "dev"

func init() {
	commands["version"] = command{"print keybrake's version, commit and Go version", runVersion}
}

func runVersion(ctx context.Context, args []string, env Env) error {
	fs := flagSet("version", "Prints keybrake's version, the commit it was built from (when known), the Go version and the SQLite engine it was built with.", env)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version takes no arguments, got %q", fs.Args())
	}
	commit := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	fmt.Fprintf(env.Stdout, "keybrake %s (commit %s, %s, %s/%s, SQLite engine: %s)\n", Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, sqlite.Engine())
	return nil
}
