package nsq_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nsqio/nsq/nsqd"

	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/nsq"
)

// NSQD is an embedded nsqd on 127.0.0.1:0 with a temp data dir.
type NSQD struct {
	*nsqd.NSQD
	TCP  string
	HTTP string
}

type quietLogger = kbtest.QuietLogger

// MustNSQD starts an nsqd; mod adjusts its options. t.Cleanup stops it.
func MustNSQD(tb testing.TB, mod func(*nsqd.Options)) *NSQD {
	tb.Helper()
	n := kbtest.NSQD(tb, mod)
	return &NSQD{NSQD: n, TCP: n.RealTCPAddr().String(), HTTP: n.RealHTTPAddr().String()}
}

// Channel returns the stats of topic/channel; zero if it does not exist.
func (n *NSQD) Channel(topic, channel string) nsqd.ChannelStats {
	return kbtest.NSQChannel(n.NSQD, topic, channel)
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
	return kbtest.NSQSubscribe(tb, addr, topic)
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

// Receive returns the next value of ch, failing after kbtest.Wait.
func Receive[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	return kbtest.Receive(tb, ch)
}

// Eventually waits until cond holds, failing after kbtest.Wait.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	kbtest.Eventually(tb, what, cond)
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
