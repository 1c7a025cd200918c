// Command keybrake is the one binary of keybrake: the spend-cap proxy for the
// Stripe API, the Stripe simulator, and the tools around them. Run
// `keybrake help` for the list of commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand of keybrake.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, env Env) error
}

// Env is what a command may touch of the outside world, injected so that
// tests run commands in-process.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// commands lists keybrake's subcommands by name.
var commands = map[string]command{
	"serve":     {"run the spend-cap proxy and admin API (the main job)", runServe},
	"stripesim": {"run the stateful Stripe simulator standalone", runStripesim},
	"bench":     {"measure the proxy against the simulator directly and print ratios", runBench},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	if err := Run(ctx, os.Args[1:], env); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "keybrake:", err)
		}
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(1)
	}
}

// Run runs the keybrake command line args.
func Run(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if _, ok := commands[args[1]]; ok {
				return Run(ctx, []string{args[1], "--help"}, env)
			}
		}
		usage(env.Stdout)
		if len(args) == 0 {
			return fmt.Errorf("no command given")
		}
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		usage(env.Stderr)
		return fmt.Errorf("unknown command %q", args[0])
	}
	return cmd.run(ctx, args[1:], env)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "keybrake: a spend-cap proxy for the Stripe API, and exactly-once billing consumers.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: keybrake <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "  help       show this list; `keybrake help <command>` or `keybrake <command> --help` for a command's flags")
}

// flagSet returns a FlagSet whose usage names the command and lists every
// flag with its environment variable.
func flagSet(name, synopsis string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: keybrake %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// envDefault returns the environment variable's value if set, else def.
func envDefault(env Env, name, def string) string {
	if v := strings.TrimSpace(env.Getenv(name)); v != "" {
		return v
	}
	return def
}
