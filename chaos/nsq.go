package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	gonsq "github.com/nsqio/go-nsq"
	"github.com/nsqio/nsq/nsqd"
)

// nsqBroker is an embedded nsqd shared by the runs of one harness; each run
// has its own topic.
type nsqBroker struct {
	n    *nsqd.NSQD
	tcp  string
	errc chan error
}

type quietLogger struct{}

func (quietLogger) Output(int, string) error { return nil }

func (h *harness) nsq() (*nsqBroker, error) {
	if h.nsqd != nil {
		return h.nsqd, nil
	}
	opts := nsqd.NewOptions()
	opts.TCPAddress = "127.0.0.1:0"
	opts.HTTPAddress = "127.0.0.1:0"
	opts.HTTPSAddress = ""
	opts.DataPath = h.dir
	opts.Logger = quietLogger{}
	opts.LogLevel = nsqd.LOG_FATAL
	// The default --msg-timeout of consumers that do not ask for one: the
	// slow handler of nsq-slow-no-touch outlasts it.
	opts.MsgTimeout = nsqMsgTimeout
	// Redeliveries (timed out or deferred) are found every few
	// milliseconds instead of every 5 s.
	opts.QueueScanRefreshInterval = 50 * time.Millisecond
	opts.QueueScanInterval = 20 * time.Millisecond
	n, err := nsqd.New(opts)
	if err != nil {
		return nil, fmt.Errorf("nsqd: %w", err)
	}
	b := &nsqBroker{n: n, errc: make(chan error, 1)}
	go func() { b.errc <- n.Main() }()
	b.tcp = n.RealTCPAddr().String()
	h.nsqd = b
	return b, nil
}

func (b *nsqBroker) close() {
	b.n.Exit()
	<-b.errc
}

// idle reports whether topic/channel has nothing queued, in flight or
// deferred.
func (b *nsqBroker) idle(topic, channel string) bool {
	for _, t := range b.n.GetStats(topic, channel, false).Topics {
		for _, c := range t.Channels {
			return c.Depth == 0 && c.InFlightCount == 0 && c.DeferredCount == 0
		}
	}
	return false
}

// nsqTag is the delivery metadata an unsafe key includes.
type nsqTag int

const (
	tagNone       nsqTag = iota
	tagAttempts          // msg.Attempts
	tagConn              // a UUID made when the consumer connects
	tagInvocation        // msg.ID and the handler's invocation time
	tagMessageID         // msg.ID
)

// nsqSpec is how a mode uses NSQ.
type nsqSpec struct {
	tag nsqTag
	// reconnect: a crash cuts the consumer's TCP connection and a new
	// consumer (with a new connection UUID) takes over.
	reconnect bool
	// serverTimeout: the consumer asks for no msg-timeout, so nsqd's
	// default (nsqMsgTimeout) applies, and never TOUCHes.
	serverTimeout bool
}

// nsqConsumer is one worker process: a go-nsq consumer with the UUID the
// seed makes when it connects.
type nsqConsumer struct {
	c    *gonsq.Consumer
	uuid string
	cut  *cutter
}

// nsqRun drives one run on NSQ.
type nsqRun struct {
	r       *run
	spec    nsqSpec
	b       *nsqBroker
	topic   string
	ctx     context.Context
	mu      sync.Mutex
	current *nsqConsumer
	crashes chan struct{}
	held    []*gonsq.Message // 24 h mode: deliveries of dead workers, redelivered after the window
	holding bool
}

// nsqConcurrency is the handlers of a consumer (and its max-in-flight):
// enough that slow deliveries do not hold the others up.
const nsqConcurrency = 16

// driveNSQ publishes every event (twice for the selected events of
// producer-twice) to a fresh topic and consumes it with the seed's consumer:
// the strategy's worker runs in the handler, and the handler answers nsqd
// from its verdict (FIN, REQ, or nothing when the worker died).
func driveNSQ(ctx context.Context, r *run, spec nsqSpec) error {
	b, err := r.h.nsq()
	if err != nil {
		return err
	}
	d := &nsqRun{r: r, spec: spec, b: b, topic: "chaos_" + r.name, ctx: ctx, crashes: make(chan struct{}, 1)}
	for i := range r.faults {
		if r.faults[i].hold {
			d.holding = true
		}
	}
	if err := d.publish(); err != nil {
		return err
	}
	if err := d.connect(); err != nil {
		return err
	}
	defer func() { d.stop(d.consumer()) }()
	if spec.reconnect {
		go d.supervise(ctx)
	}
	if d.holding {
		// Every event not held is settled; the held ones wait in their dead
		// workers' hands until Stripe has forgotten their keys.
		if err := r.quiet(ctx, "the first day", func() bool { return d.heldCount()+r.settled() >= len(r.events) }); err != nil {
			return err
		}
		r.advance(idempotencyTTL)
		d.mu.Lock()
		held := d.held
		d.held, d.holding = nil, false
		d.mu.Unlock()
		for _, m := range held {
			m.RequeueWithoutBackoff(0)
		}
	}
	if err := r.waitFor(ctx, "every event to be settled", r.allSettled); err != nil {
		return err
	}
	return r.quiet(ctx, "nsqd to have nothing in flight", func() bool { return b.idle(d.topic, "billing") })
}

func (d *nsqRun) heldCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held)
}

func (d *nsqRun) publish() error {
	p, err := gonsq.NewProducer(d.b.tcp, gonsq.NewConfig())
	if err != nil {
		return err
	}
	p.SetLogger(quietLogger{}, gonsq.LogLevelError)
	defer p.Stop()
	var bodies [][]byte
	for i, ev := range d.r.events {
		for range d.r.expect[i] {
			bodies = append(bodies, ev.body)
		}
	}
	for len(bodies) > 0 {
		n := min(len(bodies), 200)
		if err := p.MultiPublish(d.topic, bodies[:n]); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		bodies = bodies[n:]
	}
	return nil
}

// connect starts a consumer (a new worker process with a new UUID),
// through a cutter when a crash must cut its connection.
func (d *nsqRun) connect() error {
	cfg := gonsq.NewConfig()
	cfg.MaxInFlight = nsqConcurrency
	if d.holding {
		cfg.MaxInFlight += len(d.r.faults)
	}
	cfg.MaxAttempts = 0
	cfg.MaxBackoffDuration = 0
	cfg.LookupdPollInterval = 50 * time.Millisecond
	cfg.DefaultRequeueDelay = 0
	switch {
	case d.spec.reconnect:
		// The deliveries of a cut connection come back after this (nsqd's
		// smallest).
		cfg.MsgTimeout = time.Second
	case !d.spec.serverTimeout:
		// Long enough that only the injected crashes cause redeliveries.
		cfg.MsgTimeout = time.Minute
	}
	c, err := gonsq.NewConsumer(d.topic, "billing", cfg)
	if err != nil {
		return err
	}
	c.SetLogger(quietLogger{}, gonsq.LogLevelError)
	nc := &nsqConsumer{c: c, uuid: newUUID()}
	c.AddConcurrentHandlers(gonsq.HandlerFunc(func(m *gonsq.Message) error {
		d.handle(nc, m)
		return nil
	}), nsqConcurrency)
	addr := d.b.tcp
	if d.spec.reconnect {
		if nc.cut, err = newCutter(d.b.tcp); err != nil {
			return err
		}
		addr = nc.cut.addr()
	}
	if err := c.ConnectToNSQD(addr); err != nil {
		return fmt.Errorf("nsq consumer: %w", err)
	}
	d.mu.Lock()
	d.current = nc
	d.mu.Unlock()
	return nil
}

func (d *nsqRun) consumer() *nsqConsumer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.current
}

// stop stops a consumer without waiting for deliveries nobody will answer.
func (d *nsqRun) stop(nc *nsqConsumer) {
	if nc == nil {
		return
	}
	nc.c.Stop()
	if nc.cut != nil {
		nc.cut.close()
	}
	select {
	case <-nc.c.StopChan:
	case <-time.After(2 * time.Second):
	}
}

// handle is the seed's HandleMessage: the worker runs, then FIN, REQ, or
// nothing at all when it died.
func (d *nsqRun) handle(nc *nsqConsumer, m *gonsq.Message) {
	m.DisableAutoResponse()
	v := d.r.process(d.ctx, m.Body, d.tag(nc, m))
	switch v.kind {
	case ack:
		m.Finish()
	case retry:
		m.RequeueWithoutBackoff(min(v.delay, 2*time.Second))
	case crash:
		d.crashed(m, v.event)
	}
}

// crashed makes the worker's death visible to nsqd as it would be.
func (d *nsqRun) crashed(m *gonsq.Message, event int) {
	switch {
	case event >= 0 && d.r.faults[event].hold:
		// The worker hangs holding the message; it is killed, and nsqd
		// redelivers, after Stripe's window.
		d.mu.Lock()
		if d.holding {
			d.held = append(d.held, m)
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		m.RequeueWithoutBackoff(0)
	case d.spec.reconnect:
		// The process dies: its connection drops without FIN; nsqd
		// redelivers after msg-timeout to the next process.
		select {
		case d.crashes <- struct{}{}:
		default:
		}
	default:
		// The process dies before FIN; nsqd puts the message back (after
		// msg-timeout; REQ does it at once) with Attempts+1.
		m.RequeueWithoutBackoff(0)
	}
}

// supervise restarts the worker process after each crash: the old
// connection is cut, a new consumer connects with a new UUID.
func (d *nsqRun) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.crashes:
		}
		old := d.consumer()
		if old.cut != nil {
			old.cut.close()
		}
		if err := d.connect(); err != nil {
			d.r.log.Warn("chaos: nsq reconnect", "err", err)
		}
		go d.stop(old)
	}
}

func (d *nsqRun) tag(nc *nsqConsumer, m *gonsq.Message) string {
	switch d.spec.tag {
	case tagAttempts:
		return strconv.Itoa(int(m.Attempts))
	case tagConn:
		return nc.uuid
	case tagInvocation:
		return hex.EncodeToString(m.ID[:]) + ":" + strconv.FormatInt(time.Now().UnixNano(), 10)
	case tagMessageID:
		return hex.EncodeToString(m.ID[:])
	}
	return ""
}

func newUUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// cutter is a TCP proxy to one target whose connections close at once, as
// a killed process's would.
type cutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func newCutter(target string) (*cutter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &cutter{ln: ln, target: target}
	go c.serve()
	return c, nil
}

func (c *cutter) addr() string { return c.ln.Addr().String() }

func (c *cutter) serve() {
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", c.target)
		if err != nil {
			in.Close()
			continue
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		c.conns = append(c.conns, in, out)
		c.mu.Unlock()
		go pipe(in, out)
		go pipe(out, in)
	}
}

func pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// close closes the listener and every connection, with RST where the
// kernel allows: no FIN, no last words.
func (c *cutter) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.ln.Close()
	for _, conn := range c.conns {
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		conn.Close()
	}
}
