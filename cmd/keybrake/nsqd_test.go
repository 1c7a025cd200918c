package main_test

import (
	"testing"

	"github.com/nsqio/nsq/nsqd"

	"github.com/keybrake/keybrake/internal/kbtest"
)

// MustNSQD starts an embedded nsqd on 127.0.0.1:0; t.Cleanup stops it.
func MustNSQD(tb testing.TB) *nsqd.NSQD {
	tb.Helper()
	return kbtest.NSQD(tb, nil)
}

// channelStats returns the stats of topic/channel, zero if it is missing.
func channelStats(n *nsqd.NSQD, topic, channel string) nsqd.ChannelStats {
	return kbtest.NSQChannel(n, topic, channel)
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
	return kbtest.NSQSubscribe(tb, addr, topic)
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
