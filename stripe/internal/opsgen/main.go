// Command opsgen writes stripe/testdata/operations.txt, every POST and
// DELETE operation of Stripe's OpenAPI description with the name
// ParseOperation gives it, and stripe/params.txt, the request parameters
// each of them takes in the current API (see stripe/internal/specgen). The
// table of writes in stripe/class.go is checked against the first file, so
// a new Stripe version that adds writes fails the tests until each one is
// classified; the second is keybrake's allowlist of parameters on the
// writes it lets through as free or prices itself.
//
// Run it from the stripe directory with go generate (see class.go), or:
//
//	go run ./stripe/internal/opsgen -o stripe/testdata/operations.txt -params stripe/params.txt
//
// The description comes from stripe-mock's embedded copy in the module cache;
// fetch it first with go mod download github.com/stripe/stripe-mock@v0.203.0.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/keybrake/keybrake/stripe/internal/specgen"
)

func main() {
	specPath := flag.String("spec", "", "OpenAPI description (default: stripe-mock "+specgen.MockVersion+"'s spec3.json in the module cache)")
	out := flag.String("o", "", "operations output file (default: standard output)")
	params := flag.String("params", "", "parameters output file (default: not written)")
	flag.Parse()
	if err := run(*specPath, *out, *params); err != nil {
		fmt.Fprintln(os.Stderr, "opsgen:", err)
		os.Exit(1)
	}
}

func run(specPath, out, params string) error {
	if specPath == "" {
		p, err := specgen.DefaultPath()
		if err != nil {
			return err
		}
		specPath = p
	}
	sp, err := specgen.Load(specPath)
	if err != nil {
		return err
	}
	ops, err := sp.Operations()
	if err != nil {
		return err
	}
	if out == "" {
		if _, err := os.Stdout.Write(ops); err != nil {
			return err
		}
	} else if err := os.WriteFile(out, ops, 0o644); err != nil {
		return err
	}
	if params == "" {
		return nil
	}
	ps, err := sp.Params()
	if err != nil {
		return err
	}
	return os.WriteFile(params, ps, 0o644)
}
