package main_test

import (
	"testing"
	"time"

	gonsq "github.com/nsqio/go-nsq"
	"github.com/nsqio/nsq/nsqd"
)

// wait bounds every wait of the worker and publish tests.
const wait = 30 * time.Second

type quietLogger struct{}

func (quietLogger) Output(int, string) error { return nil }

// MustNSQD starts an embedded nsqd on 127.0.0.1:0; t.Cleanup stops it.
func MustNSQD(tb testing.TB) *nsqd.NSQD {
	tb.Helper()
	opts := nsqd.NewOptions()
	opts.TCPAddress = "127.0.0.1:0"
	opts.HTTPAddress = "127.0.0.1:0"
	opts.HTTPSAddress = ""
	opts.DataPath = tb.TempDir()
	opts.Logger = quietLogger{}
	// Prompt redeliveries: nsqd scans new channels every 5s by default.
	opts.QueueScanRefreshInterval = 50 * time.Millisecond
	opts.QueueScanInterval = 20 * time.Millisecond
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

// channelStats returns the stats of topic/channel, zero if it is missing.
func channelStats(n *nsqd.NSQD, topic, channel string) nsqd.ChannelStats {
	for _, t := range n.GetStats(topic, channel, false).Topics {
		for _, c := range t.Channels {
			return c
		}
	}
	return nsqd.ChannelStats{}
}

// topicCount is how many messages topic received.
func topicCount(n *nsqd.NSQD, topic string) uint64 {
	for _, t := range n.GetStats(topic, "", false).Topics {
		return t.MessageCount
	}
	return 0
}

// Subscribe consumes topic on a channel of its own and returns the bodies.
func Subscribe(tb testing.TB, addr, topic string) <-chan []byte {
	tb.Helper()
	out := make(chan []byte, 1000)
	c, err := gonsq.NewConsumer(topic, "test", gonsq.NewConfig())
	if err != nil {
		tb.Fatal(err)
	}
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

// Eventually waits until cond holds, failing after wait.
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
