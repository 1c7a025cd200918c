package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"
)

// ErrNoStartPolicy is returned by Worker.Open when the durable does not
// exist, no usable ack floor is recorded, and no StartPolicy was given.
var ErrNoStartPolicy = errors.New("no start policy")

// bind finds or safely creates the durable; see Open.
func (w *Worker) bind(ctx context.Context) error {
	st, err := w.JS.Stream(ctx, w.Stream)
	if err != nil {
		return fmt.Errorf("jetstream worker: stream %q: %w", w.Stream, err)
	}
	created := st.CachedInfo().Created
	cons, err := st.Consumer(ctx, w.Durable)
	switch {
	case err == nil:
		cons, err = w.adopt(ctx, st, cons)
	case errors.Is(err, jsapi.ErrConsumerNotFound):
		cons, err = w.create(ctx, st)
	default:
		err = fmt.Errorf("jetstream worker: durable %q: %w", w.Durable, err)
	}
	if err != nil {
		return err
	}
	ci := cons.CachedInfo()
	w.setConsumer(st, created, cons, ci.Config.AckWait, ci.Config.MaxDeliver)
	return w.saveFloor(ctx, created, ci.AckFloor.Stream)
}

// adopt checks an existing durable and updates its AckWait and MaxDeliver;
// its position is left alone.
func (w *Worker) adopt(ctx context.Context, st jsapi.Stream, cons jsapi.Consumer) (jsapi.Consumer, error) {
	cfg := cons.CachedInfo().Config
	switch {
	case cfg.DeliverSubject != "":
		return nil, fmt.Errorf("jetstream worker: durable %q is a push consumer; keybrake needs a pull consumer", w.Durable)
	case cfg.AckPolicy != jsapi.AckExplicitPolicy:
		return nil, fmt.Errorf("jetstream worker: durable %q has ack policy %s; keybrake needs explicit acks", w.Durable, cfg.AckPolicy)
	case w.Subject != "" && !(cfg.FilterSubject == w.Subject || len(cfg.FilterSubjects) == 1 && cfg.FilterSubjects[0] == w.Subject):
		return nil, fmt.Errorf("jetstream worker: durable %q filters %q, not subject %q", w.Durable, filters(cfg), w.Subject)
	}
	if cfg.AckWait == w.AckWait && cfg.MaxDeliver == w.MaxDeliver {
		return cons, nil
	}
	cfg.AckWait, cfg.MaxDeliver = w.AckWait, w.MaxDeliver
	cons, err := st.UpdateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("jetstream worker: update durable %q: %w", w.Durable, err)
	}
	return cons, nil
}

// create creates the missing durable from the recorded ack floor, or from
// Start, or refuses.
func (w *Worker) create(ctx context.Context, st jsapi.Stream) (jsapi.Consumer, error) {
	cfg := jsapi.ConsumerConfig{
		Durable:       w.Durable,
		Description:   "keybrake billing worker",
		AckPolicy:     jsapi.AckExplicitPolicy,
		AckWait:       w.AckWait,
		MaxDeliver:    w.MaxDeliver,
		FilterSubject: w.Subject,
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream worker: stream %q: %w", w.Stream, err)
	}
	floor, err := w.Floors.LoadFloor(ctx, w.Stream, w.Durable)
	usable := err == nil && floor.StreamCreated.Equal(info.Created) && floor.StreamSeq <= info.State.LastSeq
	switch {
	case err != nil && !errors.Is(err, ErrNoFloor):
		return nil, fmt.Errorf("jetstream worker: durable %q is missing and its ack floor cannot be read: %w", w.Durable, err)
	case usable:
		cfg.DeliverPolicy = jsapi.DeliverByStartSequencePolicy
		cfg.OptStartSeq = floor.StreamSeq + 1
		w.Logger.Warn("jetstream durable missing: recreating it from the recorded ack floor, without replaying acknowledged history",
			"stream", w.Stream, "durable", w.Durable, "ack_floor", floor.StreamSeq, "start_sequence", cfg.OptStartSeq,
			"ignored_deliver_policy", w.Start.String())
	case w.Start.Deliver == DeliverNone && err == nil:
		return nil, fmt.Errorf("jetstream worker: durable %q of stream %q is missing and its recorded ack floor (stream sequence %d, stream created %s) belongs to another incarnation of the stream (created %s, last sequence %d): give an explicit deliver_policy (new, all, by_start_sequence, …): %w",
			w.Durable, w.Stream, floor.StreamSeq, floor.StreamCreated.Format(time.RFC3339Nano), info.Created.Format(time.RFC3339Nano), info.State.LastSeq, ErrNoStartPolicy)
	case w.Start.Deliver == DeliverNone:
		return nil, fmt.Errorf("jetstream worker: durable %q of stream %q does not exist and no ack floor is recorded: give an explicit deliver_policy (new, all, by_start_sequence, …) rather than let it replay the stream: %w",
			w.Durable, w.Stream, ErrNoStartPolicy)
	default:
		w.Start.apply(&cfg)
		w.Logger.Warn("jetstream durable missing: creating it from the explicit start policy", "stream", w.Stream, "durable", w.Durable, "deliver_policy", w.Start.String())
	}
	cons, err := st.CreateConsumer(ctx, cfg)
	if errors.Is(err, jsapi.ErrConsumerExists) {
		// Another worker created it first.
		cons, err = st.Consumer(ctx, w.Durable)
		if err == nil {
			return w.adopt(ctx, st, cons)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream worker: create durable %q: %w", w.Durable, err)
	}
	return cons, nil
}

func filters(cfg jsapi.ConsumerConfig) string {
	if cfg.FilterSubject != "" {
		return cfg.FilterSubject
	}
	return strings.Join(cfg.FilterSubjects, ",")
}

// setConsumer swaps in the stream st (created at created), its consumer
// cons and cons's settings.
func (w *Worker) setConsumer(st jsapi.Stream, created time.Time, cons jsapi.Consumer, ackWait time.Duration, maxDeliver int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stream, w.streamCreate = st, created
	w.consumer, w.ackWait, w.maxDeliver = cons, ackWait, maxDeliver
	if w.maxDeliver < 0 {
		w.maxDeliver = 0
	}
}

// current returns the bound consumer and its settings.
func (w *Worker) current() (jsapi.Consumer, time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.consumer, w.ackWait, w.maxDeliver
}

// bound returns the bound stream, its creation time and the consumer.
func (w *Worker) bound() (jsapi.Stream, time.Time, jsapi.Consumer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stream, w.streamCreate, w.consumer
}

// rebind binds the durable again after it disappeared under a running
// worker, unless another goroutine already did.
func (w *Worker) rebind(failed jsapi.Consumer) {
	w.rebindMu.Lock()
	defer w.rebindMu.Unlock()
	if cons, _, _ := w.current(); cons != failed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.Logger.Warn("jetstream durable disappeared while running; binding it again", "stream", w.Stream, "durable", w.Durable)
	if err := w.bind(ctx); err != nil {
		w.Logger.Error("jetstream rebind failed; retrying", "err", err)
		w.pause(time.Second)
	}
}

// saveFloor records seq as the durable's ack floor in the stream created
// at created.
func (w *Worker) saveFloor(ctx context.Context, created time.Time, seq uint64) error {
	f := Floor{StreamSeq: seq, StreamCreated: created, UpdatedAt: w.Now().UTC()}
	if err := w.Floors.SaveFloor(ctx, w.Stream, w.Durable, f); err != nil {
		return fmt.Errorf("jetstream worker: record ack floor: %w", err)
	}
	return nil
}

// kickFloor asks recordFloors to record the floor soon.
func (w *Worker) kickFloor() {
	select {
	case w.floorKick <- struct{}{}:
	default:
	}
}

// recordFloors records the consumer's ack floor after acks until
// floorStop is closed; then it records once more. A kick is recorded
// FloorInterval later, coalescing every ack of that interval into one
// consumer-info request and one KV update: recording after each ack cost
// the server three requests per event. The wait also lets the plain acks
// sent before the kick reach the consumer; and while the floor moves but
// still trails the delivered messages (acks in transit), the recorder kicks
// itself, so the floor catches up with the last ack. A stale floor costs
// nothing but a replay the ledger answers already_done.
func (w *Worker) recordFloors() {
	defer close(w.floorDone)
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-w.floorKick:
		case <-w.floorStop:
			w.recordFloor()
			return
		}
		t.Reset(w.FloorInterval)
		select {
		case <-t.C:
		case <-w.floorStop:
			t.Stop()
			w.recordFloor()
			return
		}
		if w.recordFloor() {
			w.kickFloor()
		}
	}
}

// recordFloor records the consumer's ack floor and reports whether it
// moved since the last record and still trails the delivered messages.
func (w *Worker) recordFloor() (again bool) {
	_, created, cons := w.bound()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ci, err := cons.Info(ctx)
	if err != nil {
		w.Logger.Warn("jetstream ack floor not recorded", "stream", w.Stream, "durable", w.Durable, "err", err)
		return false
	}
	if err := w.saveFloor(ctx, created, ci.AckFloor.Stream); err != nil {
		w.Logger.Warn("jetstream ack floor not recorded", "stream", w.Stream, "durable", w.Durable, "err", err)
	}
	moved := ci.AckFloor.Stream != w.lastFloor
	w.lastFloor = ci.AckFloor.Stream
	return moved && ci.AckFloor.Stream < ci.Delivered.Stream
}

// Floor returns the ack floor recorded for the worker's durable.
func (w *Worker) Floor(ctx context.Context) (Floor, error) {
	return w.Floors.LoadFloor(ctx, w.Stream, w.Durable)
}

// AdvisorySubject returns the subject of the server's MaxDeliver advisories
// for stream's consumer.
func AdvisorySubject(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

// maxDeliverAdvisory is the server's io.nats.jetstream.advisory.v1.max_deliver.
type maxDeliverAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// subscribeAdvisory dead-letters the messages the server gives up on. The
// subscription is in a queue group, so one worker of the durable handles
// each advisory; the dead letter's Nats-Msg-Id dedupes the rest.
func (w *Worker) subscribeAdvisory() error {
	nc := w.JS.Conn()
	sub, err := nc.QueueSubscribe(AdvisorySubject(w.Stream, w.Durable), "keybrake-dead-letters", w.onAdvisory)
	if err != nil {
		return fmt.Errorf("jetstream worker: subscribe to max-deliveries advisories: %w", err)
	}
	if err := nc.Flush(); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("jetstream worker: subscribe to max-deliveries advisories: %w", err)
	}
	w.advisory = sub
	return nil
}

func (w *Worker) onAdvisory(m *nats.Msg) {
	var a maxDeliverAdvisory
	if err := json.Unmarshal(m.Data, &a); err != nil {
		w.Logger.Error("jetstream max-deliveries advisory unreadable", "err", err)
		return
	}
	log := w.Logger.With("stream", a.Stream, "durable", a.Consumer, "stream_seq", a.StreamSeq, "num_delivered", a.Deliveries)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _, _ := w.bound()
	raw, err := st.GetMsg(ctx, a.StreamSeq)
	if err != nil {
		log.Error("jetstream message that exhausted its deliveries cannot be read; not dead-lettered", "err", err)
		return
	}
	d := DeadLetter{
		Reason:  fmt.Sprintf("max deliveries (%d) exhausted without an answer from a worker", a.Deliveries),
		Subject: raw.Subject, Stream: a.Stream, Consumer: a.Consumer, StreamSeq: a.StreamSeq,
		NumDelivered: a.Deliveries, Time: w.Now().UTC(),
	}
	d.setBody(raw.Data)
	if err := publishDeadLetter(ctx, w.JS, w.DeadLetterSubject, d); err != nil {
		log.Error("jetstream dead letter of an exhausted message not published", "err", err)
		return
	}
	log.Warn("jetstream dead letter", "reason", d.Reason, "dead_letter_subject", w.DeadLetterSubject)
	w.kickFloor()
}

// DuplicateConsumersError reports other consumers of a stream that receive
// a billing subject too: each of them gets every event, and only the ledger
// stands between them and a second charge.
type DuplicateConsumersError struct {
	Stream    string
	Subject   string
	Consumers []string
}

// Error implements error.
func (e *DuplicateConsumersError) Error() string {
	return fmt.Sprintf("stream %s: consumers %s also receive subject %q: every event is delivered to each of them; use one durable shared by all workers",
		e.Stream, strings.Join(e.Consumers, ", "), e.Subject)
}

// CheckDurables returns a *DuplicateConsumersError when consumers of stream
// other than durable, with acks (not viewers), receive subject ("" for the
// whole stream).
func CheckDurables(ctx context.Context, js jsapi.JetStream, stream, durable, subject string) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %q: %w", stream, err)
	}
	if subject == "" {
		subject = ">"
	}
	var others []string
	l := st.ListConsumers(ctx)
	for ci := range l.Info() {
		if ci.Name == durable || ci.Config.AckPolicy == jsapi.AckNonePolicy {
			continue
		}
		fs := ci.Config.FilterSubjects
		if ci.Config.FilterSubject != "" {
			fs = append(fs, ci.Config.FilterSubject)
		}
		if len(fs) == 0 {
			fs = []string{">"}
		}
		if slices.ContainsFunc(fs, func(f string) bool { return subjectsOverlap(f, subject) }) {
			others = append(others, ci.Name)
		}
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("list consumers of %q: %w", stream, err)
	}
	if len(others) == 0 {
		return nil
	}
	slices.Sort(others)
	return &DuplicateConsumersError{Stream: stream, Subject: subject, Consumers: others}
}
