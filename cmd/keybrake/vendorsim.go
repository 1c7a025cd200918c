package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/keybrake/keybrake/resendsim"
	"github.com/keybrake/keybrake/twiliosim"
)

func init() {
	commands["twiliosim"] = command{"run the stateful Twilio simulator standalone", runTwiliosim}
	commands["resendsim"] = command{"run the stateful Resend simulator standalone", runResendsim}
}

func runTwiliosim(ctx context.Context, args []string, env Env) error {
	fs := flagSet("twiliosim", `Runs the stateful Twilio simulator standalone: Messages and Calls under
/2010-04-01/Accounts/{AccountSid}/ with Twilio's status transitions, prices
filled in after creation, list filters and paging, Twilio's error shape, plus
fault injection and ground truth under /_sim/. It authenticates with HTTP
Basic: the account SID (`+twiliosim.DefaultAccountSid+`) and its auth token
(`+twiliosim.DefaultAuthToken+`) unless set. Point twilio-go's client at it,
or keybrake serve's --twilio-upstream.`, env)
	addr := fs.String("addr", envDefault(env, "KEYBRAKE_TWILIOSIM_ADDR", "127.0.0.1:12112"), "listen address (KEYBRAKE_TWILIOSIM_ADDR)")
	sid := fs.String("account-sid", envDefault(env, "KEYBRAKE_TWILIOSIM_ACCOUNT_SID", twiliosim.DefaultAccountSid), "the account SID the simulator answers for (KEYBRAKE_TWILIOSIM_ACCOUNT_SID)")
	token := fs.String("auth-token", envDefault(env, "KEYBRAKE_TWILIOSIM_AUTH_TOKEN", twiliosim.DefaultAuthToken), "the account's auth token (KEYBRAKE_TWILIOSIM_AUTH_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("twiliosim takes no arguments, got %q", fs.Args())
	}
	logger := slog.New(slog.NewTextHandler(env.Stderr, nil))
	sim := twiliosim.New(twiliosim.Options{AccountSid: *sid, AuthToken: *token, Logger: logger})
	return serveSimulator(ctx, "twilio", *addr, "KEYBRAKE_TWILIOSIM_ADDR", sim, logger)
}

func runResendsim(ctx context.Context, args []string, env Env) error {
	fs := flagSet("resendsim", `Runs the stateful Resend simulator standalone: /emails (send, get, list,
update and cancel scheduled), /emails/batch and /domains, with Resend's
Idempotency-Key replay and error shape, plus fault injection and ground
truth under /_sim/. It accepts one API key (`+resendsim.DefaultAPIKey+` unless
set) as "Authorization: Bearer". Point resend-go's BaseURL at it, or
keybrake serve's --resend-upstream.`, env)
	addr := fs.String("addr", envDefault(env, "KEYBRAKE_RESENDSIM_ADDR", "127.0.0.1:12113"), "listen address (KEYBRAKE_RESENDSIM_ADDR)")
	key := fs.String("api-key", envDefault(env, "KEYBRAKE_RESENDSIM_API_KEY", resendsim.DefaultAPIKey), "the one API key accepted (KEYBRAKE_RESENDSIM_API_KEY)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("resendsim takes no arguments, got %q", fs.Args())
	}
	logger := slog.New(slog.NewTextHandler(env.Stderr, nil))
	sim := resendsim.New(resendsim.Options{APIKey: *key, Logger: logger})
	return serveSimulator(ctx, "resend", *addr, "KEYBRAKE_RESENDSIM_ADDR", sim, logger)
}

// serveSimulator serves a vendor simulator on addr until ctx ends.
func serveSimulator(ctx context.Context, vendor, addr, addrEnv string, h http.Handler, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("invalid --addr (%s) %q: %w", addrEnv, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	logger.Info(vendor+" simulator listening", "url", "http://"+ln.Addr().String())
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
	return srv.Shutdown(sctx)
}
