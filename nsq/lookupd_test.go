package nsq_test

import (
	"context"
	"testing"
	"time"

	gonsq "github.com/nsqio/go-nsq"
	"github.com/nsqio/nsq/nsqd"
	"github.com/nsqio/nsq/nsqlookupd"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/nsq"
)

// A worker given only nsqlookupd finds the nsqd that holds its topic and
// consumes from it, as `keybrake worker --lookupd` does.
func TestWorker_Lookupd(t *testing.T) {
	lopts := nsqlookupd.NewOptions()
	lopts.TCPAddress = "127.0.0.1:0"
	lopts.HTTPAddress = "127.0.0.1:0"
	lopts.BroadcastAddress = "127.0.0.1"
	lopts.Logger = quietLogger{}
	l, err := nsqlookupd.New(lopts)
	if err != nil {
		t.Fatal(err)
	}
	lerr := make(chan error, 1)
	go func() { lerr <- l.Main() }()
	t.Cleanup(func() {
		l.Exit()
		<-lerr
	})

	n := MustNSQD(t, func(o *nsqd.Options) {
		o.NSQLookupdTCPAddresses = []string{l.RealTCPAddr().String()}
		o.BroadcastAddress = "127.0.0.1"
	})
	MustPublish(t, n.TCP, "billing", "ev1")
	// nsqd registers the topic with nsqlookupd in the background.
	Eventually(t, "nsqlookupd to know the topic", func() bool {
		return len(l.DB.FindProducers("topic", "billing", "")) > 0
	})

	cfg := gonsq.NewConfig()
	cfg.LookupdPollInterval = 100 * time.Millisecond
	hook, resp := Responses()
	MustOpen(t, &nsq.Worker{Topic: "billing", LookupdAddrs: []string{l.RealHTTPAddr().String()}, Config: cfg, OnResponse: hook,
		Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
			return ack(string(body))
		})})
	r := Receive(t, resp)
	if r.Verb != nsq.VerbFinish || r.Result.Key != "ev1" {
		t.Fatalf("response %+v", r)
	}
}
