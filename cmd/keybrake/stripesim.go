package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/keybrake/keybrake/stripesim"
)

func runStripesim(ctx context.Context, args []string, env Env) error {
	fs := flagSet("stripesim", `Runs the stateful Stripe simulator standalone: customers, charges, payment
intents, refunds, transfers and payouts with Stripe's idempotency, declines
and errors, plus fault injection and ground truth under /_sim/. Any sk_test_…
key authenticates. Point a Stripe SDK's API base at it.`, env)
	addr := fs.String("addr", envDefault(env, "KEYBRAKE_SIM_ADDR", "127.0.0.1:12111"), "listen address (KEYBRAKE_SIM_ADDR)")
	statePath := fs.String("state", envDefault(env, "KEYBRAKE_SIM_STATE", ""), "file to keep state in across restarts; empty keeps it in memory (KEYBRAKE_SIM_STATE)")
	maxObjects := fs.Int("max-objects", envInt(env, "KEYBRAKE_SIM_MAX_OBJECTS", 0), "keep about this many charges, payment intents, refunds, transfers, payouts and saved idempotent responses each, forgetting the oldest finished ones (money-moved totals stay exact); 0 keeps everything, as ground-truth checks need (KEYBRAKE_SIM_MAX_OBJECTS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("stripesim takes no arguments, got %q", fs.Args())
	}
	if *maxObjects < 0 {
		return fmt.Errorf("invalid --max-objects %d: want 0 (keep everything) or more", *maxObjects)
	}
	logger := slog.New(slog.NewTextHandler(env.Stderr, nil))
	sim, err := stripesim.New(stripesim.Options{StatePath: *statePath, Logger: logger, MaxObjects: *maxObjects})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("invalid --addr (KEYBRAKE_SIM_ADDR) %q: %w", *addr, err)
	}
	srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	logger.Info("stripe simulator listening", "url", "http://"+ln.Addr().String(), "state", *statePath)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return sim.Close()
}
