package nsq_test

import (
	"encoding/json"
	"testing"
	"time"

	gonsq "github.com/nsqio/go-nsq"
	"github.com/nsqio/nsq/nsqd"

	"github.com/keybrake/keybrake/nsq"
)

// wait bounds every wait of the tests: long enough for a loaded CI machine,
// short enough to fail fast.
const wait = 20 * time.Second

// NSQD is an embedded nsqd on 127.0.0.1:0 with a temp data dir.
type NSQD struct {
	*nsqd.NSQD
	TCP  string
	HTTP string
}

type quietLogger struct{}

func (quietLogger) Output(int, string) error { return nil }

// MustNSQD starts an nsqd; mod adjusts its options. t.Cleanup stops it.
func MustNSQD(tb testing.TB, mod func(*nsqd.Options)) *NSQD {
	tb.Helper()
	opts := nsqd.NewOptions()
	opts.TCPAddress = "127.0.0.1:0"
	opts.HTTPAddress = "127.0.0.1:0"
	opts.HTTPSAddress = ""
	opts.DataPath = tb.TempDir()
	opts.Logger = quietLogger{}
	// nsqd looks for new channels with deferred or timed-out messages every
	// QueueScanRefreshInterval (5s by default): keep redeliveries prompt.
	opts.QueueScanRefreshInterval = 50 * time.Millisecond
	opts.QueueScanInterval = 20 * time.Millisecond
	if mod != nil {
		mod(opts)
	}
	n, err := nsqd.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- n.Main() }()
	tb.Cleanup(func() {
		n.Exit()
		<-errc
	})
	return &NSQD{NSQD: n, TCP: n.RealTCPAddr().String(), HTTP: n.RealHTTPAddr().String()}
}

// Channel returns the stats of topic/channel; zero if it does not exist.
func (n *NSQD) Channel(topic, channel string) nsqd.ChannelStats {
	for _, t := range n.GetStats(topic, channel, false).Topics {
		for _, c := range t.Channels {
			return c
		}
	}
	return nsqd.ChannelStats{}
}

// MustPublish publishes bodies to topic.
func MustPublish(tb testing.TB, addr, topic string, bodies ...string) {
	tb.Helper()
	p, err := nsq.NewPublisher([]string{addr}, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer p.Close()
	for _, b := range bodies {
		if err := p.Publish(topic, []byte(b)); err != nil {
			tb.Fatal(err)
		}
	}
}

// Subscribe consumes topic on a channel of its own, FINs every message and
// returns their bodies.
func Subscribe(tb testing.TB, addr, topic string) <-chan []byte {
	tb.Helper()
	out := make(chan []byte, 100)
	cfg := gonsq.NewConfig()
	c, err := gonsq.NewConsumer(topic, "test", cfg)
	if err != nil {
		tb.Fatal(err)
	}
	c.SetLoggerLevel(gonsq.LogLevelMax)
	c.SetLogger(quietLogger{}, gonsq.LogLevelMax)
	c.AddHandler(gonsq.HandlerFunc(func(m *gonsq.Message) error {
		out <- m.Body
		return nil
	}))
	if err := c.ConnectToNSQD(addr); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Stop()
		<-c.StopChan
	})
	return out
}

// MustDeadLetter receives one dead letter from ch.
func MustDeadLetter(tb testing.TB, ch <-chan []byte) nsq.DeadLetter {
	tb.Helper()
	var d nsq.DeadLetter
	if err := json.Unmarshal(Receive(tb, ch), &d); err != nil {
		tb.Fatal(err)
	}
	return d
}

// Receive returns the next value of ch, failing after wait.
func Receive[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		tb.Fatalf("nothing received within %s", wait)
		panic("unreachable")
	}
}

// Eventually waits until cond holds, checking whenever a tick passes.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// MustOpen opens w, with fast test defaults for the fields left zero;
// t.Cleanup closes it.
func MustOpen(tb testing.TB, w *nsq.Worker) *nsq.Worker {
	tb.Helper()
	if w.Channel == "" {
		w.Channel = "billing"
	}
	if w.Backoff == nil {
		w.Backoff = func(uint16) time.Duration { return 0 }
	}
	if w.MaxRequeueDelay == 0 {
		w.MaxRequeueDelay = 100 * time.Millisecond
	}
	if err := w.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	return w
}

// Responses returns an OnResponse hook and the channel it feeds.
func Responses() (func(nsq.Response), <-chan nsq.Response) {
	ch := make(chan nsq.Response, 100)
	return func(r nsq.Response) { ch <- r }, ch
}
