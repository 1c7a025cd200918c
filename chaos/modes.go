package chaos

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"
)

// Mode is one failure mode of the seeds, reproduced on a real transport.
type Mode struct {
	Name      string // e.g. "nsq-attempts"
	Transport string // "nsq", "jetstream" or "zmq"
	// Failure is the seed's failure in one sentence.
	Failure string
	// UnsafeKey is what the Unsafe strategy's Idempotency-Key is made of.
	UnsafeKey string
	// Injection says how the harness makes the failure happen.
	Injection string
	// Expect is the Unsafe strategy's failure the mode must show:
	// "duplicates" or "lost".
	Expect string

	acks      int  // acknowledgements every copy of an event gets (two durables, a replay); 0 means 1
	noKey     bool // Unsafe sends no Idempotency-Key at all (the JetStream seed)
	preflight bool // Unsafe does the seed's "insert the row, skip if it exists" before charging
	fault     func(r *rand.Rand) fault
	drive     func(ctx context.Context, r *run) error
}

// ModeInfo describes a mode in the report.
type ModeInfo struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Failure   string `json:"failure"`
	UnsafeKey string `json:"unsafe_key"`
	Injection string `json:"injection"`
	Expect    string `json:"expect"`
}

// Info returns the mode's description.
func (m *Mode) Info() ModeInfo {
	return ModeInfo{Name: m.Name, Transport: m.Transport, Failure: m.Failure, UnsafeKey: m.UnsafeKey, Injection: m.Injection, Expect: m.Expect}
}

// fault is what happens to one selected event. Calls count the Stripe
// calls made for the event, whichever delivery or worker makes them.
type fault struct {
	crashBefore int           // the worker dies before Stripe call 1..crashBefore (after its ledger claim)
	crashAfter  int           // the worker dies after Stripe call 1..crashAfter answered
	slow        int           // Stripe calls 1..slow take slowFor
	slowFor     time.Duration //
	copies      int           // the producer publishes the event this many times (0 = once)
	hold        bool          // a crashed delivery is redelivered only after Stripe's 24 h window
}

// Timings of the injected faults, short enough for 1,000 events a mode in
// seconds, long enough to be unmistakable on a loaded machine.
const (
	nsqMsgTimeout  = 500 * time.Millisecond // nsqd's default --msg-timeout in the harness
	jsAckWait      = 500 * time.Millisecond
	slowCall       = 1200 * time.Millisecond // a Stripe call slower than msg-timeout and AckWait
	zmqTimeout     = 300 * time.Millisecond  // lazy-pirate reply timeout, DEALER resend timeout, PUSH ack timeout
	ledgerLease    = time.Second
	idempotencyTTL = 25 * time.Hour // past Stripe's 24 h
)

// Modes lists every mode in the order of the table.
var Modes = []*Mode{
	{
		Name: "nsq-attempts", Transport: "nsq", Expect: "duplicates",
		Failure:   "msg.Attempts in the key: every redelivery after a crash between the Stripe call and FIN gets a new key",
		UnsafeKey: "sha256(customer:period:Attempts)",
		Injection: "the worker dies after Stripe answers, before FIN, on the first 2 deliveries; the message goes back to nsqd unfinished (REQ) and comes back with Attempts+1",
		fault:     func(*rand.Rand) fault { return fault{crashAfter: 2} },
		drive:     func(ctx context.Context, r *run) error { return driveNSQ(ctx, r, nsqSpec{tag: tagAttempts}) },
	},
	{
		Name: "nsq-conn-uuid", Transport: "nsq", Expect: "duplicates",
		Failure:   "a UUID made per nsqd connection in the key: the reconnect after a crash makes a new one",
		UnsafeKey: "sha256(connUUID:customer:period)",
		Injection: "the worker dies after Stripe answers: its TCP connection to nsqd is cut without FIN, a new consumer (new UUID) connects, nsqd redelivers after msg-timeout",
		fault:     func(*rand.Rand) fault { return fault{crashAfter: 1} },
		drive: func(ctx context.Context, r *run) error {
			return driveNSQ(ctx, r, nsqSpec{tag: tagConn, reconnect: true})
		},
	},
	{
		Name: "nsq-slow-no-touch", Transport: "nsq", Expect: "duplicates",
		Failure:   "a handler slower than msg-timeout that never TOUCHes: nsqd redelivers while Stripe is still charging",
		UnsafeKey: "sha256(msgID:handler-invocation-time:customer:period)",
		Injection: fmt.Sprintf("the Stripe call takes %s, nsqd's msg-timeout is %s, the handler never TOUCHes", slowCall, nsqMsgTimeout),
		fault:     func(*rand.Rand) fault { return fault{slow: 1, slowFor: slowCall} },
		drive: func(ctx context.Context, r *run) error {
			return driveNSQ(ctx, r, nsqSpec{tag: tagInvocation, serverTimeout: true})
		},
	},
	{
		Name: "js-ackwait", Transport: "jetstream", Expect: "duplicates", noKey: true,
		Failure:   "AckWait expires during a slow Stripe call: another worker fetches the redelivery",
		UnsafeKey: "none (the seed sends no Idempotency-Key)",
		Injection: fmt.Sprintf("the Stripe call takes %s, AckWait is %s, 16 pull workers on one durable", slowCall, jsAckWait),
		fault:     func(*rand.Rand) fault { return fault{slow: 1, slowFor: slowCall} },
		drive:     func(ctx context.Context, r *run) error { return driveJetStream(ctx, r, jsAckWaitSpec) },
	},
	{
		Name: "js-two-durables", Transport: "jetstream", Expect: "duplicates", noKey: true, acks: 2,
		Failure:   "two durables on one subject (billing-worker-v1 left running beside v2): every event is delivered to both",
		UnsafeKey: "none (the seed sends no Idempotency-Key)",
		Injection: "every event, on two durable consumers of the same stream subject, 2 pull workers each",
		fault:     func(*rand.Rand) fault { return fault{} },
		drive:     func(ctx context.Context, r *run) error { return driveJetStream(ctx, r, jsTwoDurablesSpec) },
	},
	{
		Name: "js-recreate", Transport: "jetstream", Expect: "duplicates", noKey: true, acks: 2,
		Failure:   "a durable deleted and recreated with DeliverPolicy all: the stream is replayed from sequence 1",
		UnsafeKey: "none (the seed sends no Idempotency-Key)",
		Injection: "every event is charged and acked, then the durable is deleted and recreated with DeliverPolicy all",
		fault:     func(*rand.Rand) fault { return fault{} },
		drive:     func(ctx context.Context, r *run) error { return driveJetStream(ctx, r, jsRecreateSpec) },
	},
	{
		Name: "zmq-lazy-pirate", Transport: "zmq", Expect: "duplicates",
		Failure:   "lazy-pirate REQ socket recreated on timeout, with the socket's creation timestamp in the key",
		UnsafeKey: "sha256(socketCreatedAt:customer:period)",
		Injection: fmt.Sprintf("the REP side dies after Stripe answers, before replying; the REQ client times out after %s, recreates its socket and resends", zmqTimeout),
		fault:     func(*rand.Rand) fault { return fault{crashAfter: 1} },
		drive:     func(ctx context.Context, r *run) error { return driveZMQRequest(ctx, r, false) },
	},
	{
		Name: "zmq-ack-counter", Transport: "zmq", Expect: "duplicates",
		Failure:   "PUSH/PULL with the worker's ack counter in the key: the counter restarts at 0 with the worker",
		UnsafeKey: "sha256(ackSeq:customer:period)",
		Injection: fmt.Sprintf("the PULL worker dies after Stripe answers, before its ack; a new worker (counter 0) connects; the producer resends after %s", zmqTimeout),
		fault:     func(*rand.Rand) fault { return fault{crashAfter: 1} },
		drive:     driveZMQPipeline,
	},
	{
		Name: "zmq-dealer-identity", Transport: "zmq", Expect: "duplicates",
		Failure:   "ROUTER/DEALER with the DEALER's routing identity in the key: a reconnecting DEALER has a new one",
		UnsafeKey: "sha256(dealerIdentity:customer:period)",
		Injection: fmt.Sprintf("the ROUTER side dies after Stripe answers, before replying; the DEALER times out after %s, reconnects with a new random identity and resends", zmqTimeout),
		fault:     func(*rand.Rand) fault { return fault{crashAfter: 1} },
		drive:     func(ctx context.Context, r *run) error { return driveZMQRequest(ctx, r, true) },
	},
	{
		Name: "window-24h", Transport: "nsq", Expect: "duplicates",
		Failure:   "redelivery after Stripe's 24 h idempotency window: Stripe has forgotten the key",
		UnsafeKey: "sha256(customer:period:Attempts)",
		Injection: "the worker dies after Stripe answers and holds the message; the simulator's and the ledger's clocks move 25 h; then nsqd redelivers it",
		fault:     func(*rand.Rand) fault { return fault{crashAfter: 1, hold: true} },
		drive:     func(ctx context.Context, r *run) error { return driveNSQ(ctx, r, nsqSpec{tag: tagAttempts}) },
	},
	{
		Name: "claim-crash", Transport: "nsq", Expect: "lost", preflight: true,
		Failure:   "a worker killed between its ledger claim and the Stripe call: the seed's \"insert the row, skip if it exists\" never charges",
		UnsafeKey: "sha256(customer:period) after the seed's INSERT … ON CONFLICT DO NOTHING pre-flight",
		Injection: "the worker dies after claiming (the row inserted, the lease taken), before calling Stripe; nsqd redelivers",
		fault:     func(*rand.Rand) fault { return fault{crashBefore: 1} },
		drive:     func(ctx context.Context, r *run) error { return driveNSQ(ctx, r, nsqSpec{tag: tagNone}) },
	},
	{
		Name: "producer-twice", Transport: "nsq", Expect: "duplicates",
		Failure:   "the producer publishes an event twice (a publish retried after a lost answer): two messages, two message IDs",
		UnsafeKey: "sha256(nsqMessageID:customer:period)",
		Injection: "the producer publishes the event twice",
		fault:     func(*rand.Rand) fault { return fault{copies: 2} },
		drive:     func(ctx context.Context, r *run) error { return driveNSQ(ctx, r, nsqSpec{tag: tagMessageID}) },
	},
}

// ModeNames returns the names of every mode.
func ModeNames() []string {
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = m.Name
	}
	return names
}

// SelectModes returns the modes named (all for nil, empty or "all"), in
// the order of Modes; a transport name ("nsq", "jetstream", "zmq") selects
// its modes.
func SelectModes(names []string) ([]*Mode, error) {
	want := map[string]bool{}
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	if len(want) == 0 || want["all"] {
		return Modes, nil
	}
	var out []*Mode
	seen := map[string]bool{}
	for _, m := range Modes {
		if want[m.Name] || want[m.Transport] {
			out = append(out, m)
			seen[m.Name], seen[m.Transport] = true, true
		}
	}
	for n := range want {
		if !seen[n] {
			return nil, fmt.Errorf("unknown mode %q (modes: %s, or a transport: nsq, jetstream, zmq)", n, strings.Join(ModeNames(), ", "))
		}
	}
	return out, nil
}

// plan picks the events that get the mode's fault: a Fraction of them,
// from the seed and the mode's name, the same for every strategy.
func (m *Mode) plan(seed uint64, events int, fraction float64) map[int]fault {
	h := fnv.New64a()
	h.Write([]byte(m.Name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	out := map[int]fault{}
	for i := range events {
		if rng.Float64() < fraction {
			out[i] = m.fault(rng)
		}
	}
	// Modes that hit every event do so whatever the fraction.
	if f := m.fault(rng); f == (fault{}) {
		return map[int]fault{}
	}
	if len(out) == 0 && events > 0 {
		out[rng.IntN(events)] = m.fault(rng)
	}
	return out
}
