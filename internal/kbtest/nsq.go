package kbtest

import (
	"testing"
	"time"

	gonsq "github.com/nsqio/go-nsq"
	"github.com/nsqio/nsq/nsqd"
)

// Wait bounds every wait of a test: long enough for a loaded CI machine,
// short enough to fail fast. Nothing is asserted about how long anything
// took.
const Wait = 30 * time.Second

// QuietLogger discards the logs of nsqd and go-nsq.
type QuietLogger struct{}

// Output implements their logger interface.
func (QuietLogger) Output(int, string) error { return nil }

// NSQD starts an embedded nsqd (github.com/nsqio/nsq/nsqd) on 127.0.0.1:0
// with a temp data dir; mod may adjust its options. tb.Cleanup stops it.
func NSQD(tb testing.TB, mod func(*nsqd.Options)) *nsqd.NSQD {
	tb.Helper()
	opts := nsqd.NewOptions()
	opts.TCPAddress = "127.0.0.1:0"
	opts.HTTPAddress = "127.0.0.1:0"
	opts.HTTPSAddress = ""
	opts.DataPath = tb.TempDir()
	opts.Logger = QuietLogger{}
	// nsqd looks for channels with deferred or timed-out messages every
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
	return n
}

// NSQChannel returns the stats of topic/channel; zero if it does not exist.
func NSQChannel(n *nsqd.NSQD, topic, channel string) nsqd.ChannelStats {
	for _, t := range n.GetStats(topic, channel, false).Topics {
		for _, c := range t.Channels {
			return c
		}
	}
	return nsqd.ChannelStats{}
}

// NSQSubscribe consumes topic at the nsqd at addr on a channel of its own,
// FINs every message and returns their bodies.
func NSQSubscribe(tb testing.TB, addr, topic string) <-chan []byte {
	tb.Helper()
	out := make(chan []byte, 1000)
	c, err := gonsq.NewConsumer(topic, "test", gonsq.NewConfig())
	if err != nil {
		tb.Fatal(err)
	}
	c.SetLogger(QuietLogger{}, gonsq.LogLevelMax)
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

// Receive returns the next value of ch, failing after Wait.
func Receive[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Wait):
		tb.Fatalf("nothing received within %s", Wait)
		panic("unreachable")
	}
}

// Eventually waits until cond holds, polling, and fails after Wait.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Wait)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
