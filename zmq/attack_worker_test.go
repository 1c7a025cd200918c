package zmq_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/zmq"
)

// The attacks below come from a peer that can reach a worker's port: any
// host on the network, since ZeroMQ's NULL mechanism authenticates nobody.
// Each one, without the guard in zmq/guard.go, stopped the worker for every
// other producer (or killed its process).

// rawPeer is a hostile ZMTP peer on a plain TCP connection.
type rawPeer struct {
	tb testing.TB
	net.Conn
}

// dialRaw connects to a worker's tcp:// endpoint without speaking ZMTP.
func dialRaw(tb testing.TB, endpoint string) *rawPeer {
	tb.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(endpoint, "tcp://"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawPeer{tb: tb, Conn: c}
}

// handshake completes a ZMTP 3.0 NULL handshake as a socket of type typ,
// reading the worker's greeting and READY.
func (p *rawPeer) handshake(typ string) {
	p.tb.Helper()
	greeting := make([]byte, 64)
	greeting[0], greeting[9], greeting[10], greeting[11] = 0xFF, 0x7F, 3, 0
	copy(greeting[12:], "NULL")
	ready := append([]byte{5}, "READY"...)
	ready = append(ready, 11)
	ready = append(ready, "Socket-Type"...)
	ready = binary.BigEndian.AppendUint32(ready, uint32(len(typ)))
	ready = append(ready, typ...)
	p.write(append(append(greeting, 0x04, byte(len(ready))), ready...))
	p.SetReadDeadline(time.Now().Add(wait))
	if _, err := io.ReadFull(p, make([]byte, 64)); err != nil {
		p.tb.Fatalf("the worker's greeting: %v", err)
	}
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(p, hdr); err != nil || hdr[0] != 0x04 {
		p.tb.Fatalf("the worker's READY header %x: %v", hdr, err)
	}
	if _, err := io.ReadFull(p, make([]byte, hdr[1])); err != nil {
		p.tb.Fatalf("the worker's READY: %v", err)
	}
	p.SetReadDeadline(time.Time{})
}

func (p *rawPeer) write(b []byte) {
	p.tb.Helper()
	if _, err := p.Write(b); err != nil {
		p.tb.Fatal(err)
	}
}

// frame returns one ZMTP message frame.
func frame(body []byte, more bool) []byte {
	var flag byte
	if more {
		flag = 0x01
	}
	if len(body) <= 255 {
		return append([]byte{flag, byte(len(body))}, body...)
	}
	return append(binary.BigEndian.AppendUint64([]byte{flag | 0x02}, uint64(len(body))), body...)
}

// mustBeDropped waits until the worker closes the peer's connection.
func (p *rawPeer) mustBeDropped() {
	p.tb.Helper()
	p.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, p)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		p.tb.Fatalf("the worker kept the hostile connection open for %s", wait)
	}
}

// zmqWorker is one of the three workers, opened on 127.0.0.1:0, with the
// legitimate producer that talks to it.
type zmqWorker struct {
	name string
	peer string // the socket type a producer uses
	open func(t *testing.T, e *Env) (endpoint string, send func(*zmq.Envelope) <-chan Outcome)
}

func zmqWorkers() []zmqWorker {
	return []zmqWorker{
		{"Rep", "REQ", func(t *testing.T, e *Env) (string, func(*zmq.Envelope) <-chan Outcome) {
			w := MustOpen(t, &zmq.RepWorker{Endpoint: "tcp://127.0.0.1:0", Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger, SendTimeout: time.Second})
			return w.Addr(), func(env *zmq.Envelope) <-chan Outcome {
				c := &zmq.ReqClient{Endpoint: w.Addr(), Timeout: time.Second, MaxAttempts: 10, Logger: kbtest.Logger()}
				t.Cleanup(func() { c.Close() })
				return Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), env) })
			}
		}},
		{"Router", "DEALER", func(t *testing.T, e *Env) (string, func(*zmq.Envelope) <-chan Outcome) {
			w := MustOpen(t, &zmq.RouterWorker{Endpoint: "tcp://127.0.0.1:0", Handler: e.Processor(nil), Namespace: namespace, Concurrency: 4, Logger: e.Logger, SendTimeout: time.Second})
			return w.Addr(), func(env *zmq.Envelope) <-chan Outcome {
				c := &zmq.DealerClient{Endpoint: w.Addr(), Timeout: time.Second, MaxAttempts: 10, Logger: kbtest.Logger()}
				t.Cleanup(func() { c.Close() })
				return Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), env) })
			}
		}},
		{"Pull", "PUSH", func(t *testing.T, e *Env) (string, func(*zmq.Envelope) <-chan Outcome) {
			p := producer(t, "tcp://127.0.0.1:0")
			w := MustOpen(t, &zmq.PullWorker{Endpoint: "tcp://127.0.0.1:0", AckEndpoint: p.AckAddr(), Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger, SendTimeout: time.Second})
			p.Endpoint = w.Addr()
			return w.Addr(), func(env *zmq.Envelope) <-chan Outcome {
				return Go(func() (*zmq.Reply, error) { return p.Send(Ctx(t), env) })
			}
		}},
	}
}

// A peer connects and says nothing, or half a greeting, and stays. go-zeromq
// ran every handshake in its accept loop, one at a time, without a deadline:
// no producer could connect after it, and nothing was charged until the
// worker restarted.
func TestAttackWorker_ZMQSilentPeerWedgesAccept(t *testing.T) {
	for _, w := range zmqWorkers() {
		for _, stall := range []struct {
			name  string
			bytes []byte
		}{
			{"Nothing", nil},
			{"HalfAGreeting", []byte{0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F}},
		} {
			t.Run(w.name+"/"+stall.name, func(t *testing.T) {
				e := MustEnv(t)
				endpoint, send := w.open(t, e)
				attacker := dialRaw(t, endpoint)
				if stall.bytes != nil {
					attacker.write(stall.bytes)
				}
				env := MustEnvelope(t, Event("acct_1"))
				rep := MustFinal(t, send(env), zmq.StatusCharged)
				e.MustOneCharge(t, env.Key, rep.ChargeID)
			})
		}
	}
}

// A peer completes the handshake, then announces a frame of 2^40 bytes (or
// 2^62: go-zeromq's make panics and the worker process dies) and sends
// nothing more; or sends a message of endless small frames. go-zeromq
// allocated what was announced and waited for it. The guard closes the
// connection at the header, and the worker goes on charging.
func TestAttackWorker_ZMQHugeFrame(t *testing.T) {
	for _, w := range zmqWorkers() {
		for _, attack := range []struct {
			name string
			send []byte
		}{
			{"Announced1TiB", []byte{0x02, 0, 0, 1, 0, 0, 0, 0, 0}},
			{"Envelope4MiB", frame(bytes.Repeat([]byte("x"), 4<<20), false)},
			{"EndlessFrames", bytes.Repeat(frame([]byte("x"), true), 10000)},
		} {
			t.Run(w.name+"/"+attack.name, func(t *testing.T) {
				e := MustEnv(t)
				endpoint, send := w.open(t, e)
				attacker := dialRaw(t, endpoint)
				attacker.handshake(w.peer)
				attacker.Write(attack.send) // the worker may close before it has all of it
				attacker.mustBeDropped()

				env := MustEnvelope(t, Event("acct_1"))
				rep := MustFinal(t, send(env), zmq.StatusCharged)
				e.MustOneCharge(t, env.Key, rep.ChargeID)
			})
		}
	}
}

// A DEALER sends requests and never reads the replies. Once the TCP
// buffers are full, go-zeromq's ROUTER blocks writing to it while holding
// the lock every reply takes, with no deadline: every other producer's
// reply waits behind it, then every handler, then the receive loop. The
// guard drops a connection whose write stalls for the worker's SendTimeout.
func TestAttackWorker_ZMQNonReadingPeerWedgesReplies(t *testing.T) {
	for _, w := range zmqWorkers()[:2] { // the PULL worker never writes to its producers' connections
		t.Run(w.name, func(t *testing.T) {
			e := MustEnv(t)
			endpoint, send := w.open(t, e)
			attacker := dialRaw(t, endpoint)
			attacker.handshake(w.peer)
			// Each request is refused (not an envelope); the ROUTER's reply
			// echoes the routing frames, so 60 KiB of them fill the
			// buffers fast. The REP gets many small ones.
			req := append(frame(nil, true), frame([]byte("x"), false)...)
			if w.name == "Router" {
				req = append(append(frame(bytes.Repeat([]byte("r"), 60<<10), true), frame(nil, true)...), frame([]byte("x"), false)...)
			}
			flood := bytes.Repeat(req, 64)
			for {
				// Until the worker stops reading too: it is stuck, or it
				// dropped us.
				attacker.SetWriteDeadline(time.Now().Add(2 * time.Second))
				if _, err := attacker.Write(flood); err != nil {
					break
				}
			}
			env := MustEnvelope(t, Event("acct_1"))
			rep := MustFinal(t, send(env), zmq.StatusCharged)
			e.MustOneCharge(t, env.Key, rep.ChargeID)
		})
	}
}

// A peer opens connection after connection and keeps them: each may hold a
// message of up to MaxMessageBytes in go-zeromq's queue, so the worker's
// memory grew with the connections one peer chose to open. The guard keeps
// at most MaxPeers (a connection past it is closed when it connects), and
// gives a slot back when its peer goes (go-zeromq closes a connection
// that reached end of file once its reader has handed the error on; the
// guard closes it at once).
func TestAttackWorker_ZMQConnectionFlood(t *testing.T) {
	e := MustEnv(t)
	w := MustOpen(t, &zmq.RouterWorker{Endpoint: "tcp://127.0.0.1:0", Handler: e.Processor(nil), Namespace: namespace,
		Logger: e.Logger, SendTimeout: time.Second, MaxPeers: 2})
	first, second := dialRaw(t, w.Addr()), dialRaw(t, w.Addr())
	first.handshake("DEALER")
	second.handshake("DEALER")
	third := dialRaw(t, w.Addr())
	third.SetReadDeadline(time.Now().Add(wait))
	if n, err := io.ReadFull(third, make([]byte, 64)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("a third connection got %d bytes of greeting (%v); want it closed when it connects", n, err)
	}

	first.Close()
	deadline := time.Now().Add(wait)
	for {
		p := dialRaw(t, w.Addr())
		p.SetReadDeadline(time.Now().Add(wait))
		if _, err := io.ReadFull(p, make([]byte, 64)); err == nil {
			break // the worker's greeting: this connection has the first one's slot
		}
		p.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no connection was taken in %s after a peer of two left: its slot was not given back", wait)
		}
	}
}

// TestAttackWorker_ZMQForgedAckLosesCharge: the PUSH producer binds its ack
// socket for the workers to connect to, and took as final any ack carrying
// the key of an envelope it was waiting for. Keys are content keys, computed
// from the namespace, customer_id and billing_period that anyone can guess,
// so a peer that reached the ack port pushed {"status":"declined","key":…}
// while the real delivery was being retried (Stripe 5xx, over cap): the
// producer stopped resending and reported the bill declined, and it was
// never charged. The producer now puts a token of its own in every envelope,
// the worker echoes it, and acks without it are dropped.
func TestAttackWorker_ZMQForgedAckLosesCharge(t *testing.T) {
	e := MustEnv(t)
	p := producer(t, "tcp://127.0.0.1:0")
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := zmq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
		first := false
		once.Do(func() { first = true })
		if first {
			// The first delivery meets a Stripe outage: retry, nothing charged.
			close(entered)
			<-gate
			return billing.Result{Outcome: billing.OutcomeTransient, Action: billing.ActionRetry, Reason: "stripe 503", Delay: time.Millisecond}
		}
		return e.Processor(nil).Process(ctx, body)
	})
	w := pullWorker(t, e, "tcp://127.0.0.1:0", p, h)
	p.Endpoint = w.Addr()
	env := MustEnvelope(t, Event("acct_1"))
	out := Go(func() (*zmq.Reply, error) { return p.Send(Ctx(t), env) })
	Receive(t, entered, "the first delivery")

	attacker := zmq4.NewPush(Ctx(t))
	defer attacker.Close()
	if err := attacker.Dial(p.AckAddr()); err != nil {
		t.Fatal(err)
	}
	forged := (&zmq.Reply{Status: zmq.StatusDeclined, Key: env.Key, Reason: "charge declined", Outcome: billing.OutcomeDeclined}).Marshal()
	// Push forged acks until the producer has read some it had no sender
	// for: dropped, or read after the Send they ended.
	for i := 0; p.StaleAcks() < 3; i++ {
		if i > 1_000_000 {
			t.Fatal("the producer never read the forged acks")
		}
		if err := attacker.Send(zmq4.NewMsg(forged)); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	rep := MustFinal(t, out, zmq.StatusCharged)
	e.MustOneCharge(t, env.Key, rep.ChargeID)
}
