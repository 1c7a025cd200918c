package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nsqio/nsq/nsqd"
)

func init() {
	commands["broker"] = command{"run an embedded nsqd or NATS JetStream server on loopback, to try the workers", runBroker}
}

// runBroker runs a real broker from its Go module, for trying `keybrake
// worker` and `publish` on a machine that has none installed. It is the
// same nsqd and nats-server the tests embed; for production, run the
// brokers' own releases.
func runBroker(ctx context.Context, args []string, env Env) error {
	fs := flagSet("broker", `Runs an embedded broker on loopback until interrupted: nsqd (the nsqio/nsq
v1.3.0 nsqd package) or nats-server with JetStream. For trying the workers
on a machine without a broker installed; in production run the brokers'
own releases.`, env)
	kind := fs.String("transport", envDefault(env, "KEYBRAKE_BROKER", "nsq"), "nsq or jetstream (KEYBRAKE_BROKER)")
	addr := fs.String("addr", envDefault(env, "KEYBRAKE_BROKER_ADDR", ""), "TCP listen address; default 127.0.0.1:4150 for nsq, 127.0.0.1:4222 for jetstream (KEYBRAKE_BROKER_ADDR)")
	dir := fs.String("data", envDefault(env, "KEYBRAKE_BROKER_DATA", ""), "data directory; default a temp dir removed on exit (KEYBRAKE_BROKER_DATA)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	data := *dir
	if data == "" {
		tmp, err := os.MkdirTemp("", "keybrake-broker-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		data = tmp
	}
	logger := slog.New(slog.NewTextHandler(env.Stderr, nil))
	switch *kind {
	case "nsq":
		if *addr == "" {
			*addr = "127.0.0.1:4150"
		}
		opts := nsqd.NewOptions()
		opts.TCPAddress = *addr
		opts.HTTPAddress = "127.0.0.1:0"
		opts.HTTPSAddress = ""
		opts.DataPath = data
		opts.Logger = nsqLogger{logger}
		n, err := nsqd.New(opts)
		if err != nil {
			return fmt.Errorf("invalid --addr (KEYBRAKE_BROKER_ADDR) %q: %w", *addr, err)
		}
		errc := make(chan error, 1)
		go func() { errc <- n.Main() }()
		logger.Info("nsqd listening", "tcp", n.RealTCPAddr().String(), "http", n.RealHTTPAddr().String(), "data", data)
		select {
		case <-ctx.Done():
			n.Exit()
			<-errc
			return nil
		case err := <-errc:
			return err
		}
	case "jetstream":
		if *addr == "" {
			*addr = "127.0.0.1:4222"
		}
		host, port, err := splitPort(*addr)
		if err != nil {
			return fmt.Errorf("invalid --addr (KEYBRAKE_BROKER_ADDR) %q: %v", *addr, err)
		}
		ns, err := natsserver.NewServer(&natsserver.Options{Host: host, Port: port, JetStream: true, StoreDir: data,
			HTTPHost: "127.0.0.1", HTTPPort: -1, NoLog: true, NoSigs: true})
		if err != nil {
			return err
		}
		ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			ns.Shutdown()
			return fmt.Errorf("nats-server did not start on %s", *addr)
		}
		logger.Info("nats-server (JetStream) listening", "url", ns.ClientURL(), "monitor", "http://"+ns.MonitorAddr().String(), "data", data)
		<-ctx.Done()
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil
	default:
		return fmt.Errorf("invalid --transport (KEYBRAKE_BROKER) %q: want nsq or jetstream", *kind)
	}
}

type nsqLogger struct{ l *slog.Logger }

func (n nsqLogger) Output(_ int, s string) error {
	n.l.Debug(s, "component", "nsqd")
	return nil
}

func splitPort(addr string) (string, int, error) {
	var host string
	var port int
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			host = addr[:i]
			if _, err := fmt.Sscanf(addr[i+1:], "%d", &port); err != nil || port < 0 || port > 65535 {
				return "", 0, fmt.Errorf("bad port")
			}
			return host, port, nil
		}
	}
	return "", 0, fmt.Errorf("want host:port")
}
