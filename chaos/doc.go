// Package chaos is the failure-mode harness: it reproduces every failure
// mode of the seeds (NSQ, NATS JetStream, ZeroMQ, and three that cut
// across transports) with real brokers, the Stripe simulator and injected
// crashes, and counts the duplicate and lost charges under five
// strategies, side by side.
//
// # Strategies
//
// Within a mode the transport behaves the same under every strategy: it is
// the seed's consumer (no TOUCH, no InProgress, a lazy-pirate client…).
// Only the worker's layers change:
//
//   - Unsafe: the seed's Idempotency-Key, built from delivery metadata
//     (msg.Attempts, a connection UUID, a socket timestamp, a DEALER
//     identity, an ack counter, a message ID) or absent (the JetStream seed
//     sends none); no ledger; the Stripe secret, straight to the simulator.
//     In claim-crash the key is the content key behind the seed's
//     "INSERT … ON CONFLICT DO NOTHING, skip if the row exists" pre-flight.
//   - UnsafeCapped: the Unsafe worker, but through keybrake with the vault
//     key capped at the expected total × 1.10: the cap alone. It bounds
//     what is charged; once duplicates have spent the margin, later events
//     are refused and, with no ledger to come back to them, lost.
//   - UnsafeGuarded: the Unsafe worker through keybrake with a vault key
//     that has no cap and only the duplicate-charge guard, matching the
//     billing event's ID the worker already puts in metadata: duplicates
//     are refused (409) and acknowledged, never charged.
//   - ContentKey: billing.Key from business fields, nothing else. Stripe's
//     idempotency absorbs redeliveries for 24 hours, and only for 24 hours.
//   - KeyLedger: billing.Processor with a SQLite ledger, the Stripe secret.
//   - Full: billing.Processor, the ledger, and a vault key whose lifetime
//     cap is the expected total × 1.10, through an in-process keybrake proxy
//     (http.Server on 127.0.0.1:0 with its own SQLite store).
//
// # Runs and counts
//
// Each mode × strategy is a run against a fresh simulator, ledger, proxy
// and NSQ topic, JetStream stream or set of sockets; nsqd and nats-server
// are embedded (one each for the whole harness), ZeroMQ uses go-zeromq
// sockets on loopback. N events (DefaultEvents) are made from the seed:
// one customer each, $5 to $200, about 2% on a declining card. Each
// carries its ID in metadata[chaos_event], which every charge carries to
// the simulator, so the counts come from the simulator's ground truth
// (every charge created, whether or not its answer reached the worker):
// duplicates are the succeeded charges beyond the first of an event, lost
// the events not declined that have none, USD overcharged the sum of the
// duplicates. Over-cap refusals are the proxy's 429
// keybrake_spend_cap_exceeded answers the workers got.
//
// A run ends when every event was acknowledged as often as it was
// delivered on purpose (twice for two durables, a replay or a double
// publish) and the broker has nothing queued, in flight or deferred for
// three checks in a row, 20 ms apart; it is bounded by Options.RunTimeout.
//
// # Injection
//
// The events that get the mode's fault are a seeded Fraction (10% by
// default) drawn from the seed and the mode's name, the same for every
// strategy. Faults happen in a wrapping billing.Charger, keyed by the
// event and counting its Stripe calls, so they hit the same calls whatever
// the strategy:
//
//   - a crash after the call: the Stripe call is made and answered, then
//     the worker "dies" (a panic recovered by the harness, which cancels
//     the delivery's context, so the Processor's lease keeper stops and its
//     lease stays held until it expires, as a dead worker's would); nothing
//     is recorded and the transport gets no answer;
//   - a crash before the call: the same, after the ledger claim (or the
//     seed's row insert) and before Stripe;
//   - a slow call: the call starts after slowFor.
//
// What the transport sees of a crash is mode-specific:
//
//   - nsq-attempts, claim-crash: the message goes back to nsqd unfinished
//     (REQ 0, what nsqd does itself after msg-timeout, only sooner) and
//     comes back with Attempts+1. nsq-attempts crashes the first two calls.
//   - nsq-conn-uuid: the consumer's TCP connection, through a cutting
//     proxy, is closed with RST; a new consumer (new UUID) connects; nsqd
//     redelivers after the consumer's 1 s msg-timeout.
//   - nsq-slow-no-touch: the call takes 1.2 s, nsqd's default msg-timeout
//     is 500 ms, the handler never TOUCHes; nsqd redelivers to another
//     handler while the first call is running, and the belated FIN fails.
//   - window-24h: the dying worker holds the message; once every other
//     event is settled, the simulator's and the ledger's clocks move 25 h
//     and nsqd gets the message back (REQ).
//   - producer-twice: the producer publishes the event twice.
//   - js-ackwait: the call takes 1.2 s, AckWait is 500 ms, 16 pull workers
//     fetch one message at a time and never send InProgress.
//   - js-two-durables: every event is consumed by two durables on the same
//     subject (billing-worker-v1 and -v2), 2 pull workers each.
//   - js-recreate: every event is charged and acked; the durable is
//     deleted and recreated with DeliverPolicy all.
//   - zmq-lazy-pirate: the ROUTER-side worker sends no reply; the REQ
//     client times out after 300 ms, closes its socket, opens a new one
//     (a new creation timestamp) and resends.
//   - zmq-dealer-identity: the same with DEALER clients, each socket with a
//     new random 5-byte identity, which the worker reads from the routing
//     frame.
//   - zmq-ack-counter: the PULL worker process is killed (both sockets
//     closed) and a new one, counter at 0, connects; the producer resends
//     what has no ack after 300 ms.
//
// Which events fail and how is reproducible from the seed. The counts of
// the Unsafe strategy can vary slightly between runs where timing decides
// (a redelivery racing a slow call, a worker restart catching other
// deliveries in flight); the zeros of the Full strategy do not.
package chaos
