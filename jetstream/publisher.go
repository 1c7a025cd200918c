package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"

	"github.com/keybrake/keybrake/billing"
)

// MsgIDHeader is the header JetStream deduplicates published messages on.
const MsgIDHeader = jsapi.MsgIDHeader

// ErrDuplicate is returned (wrapped) by Publisher.Publish when the stream
// already holds a message with the event's key within its duplicate window:
// the event was not stored again.
var ErrDuplicate = errors.New("duplicate: the stream already holds this event")

// Publisher validates billing events and publishes them to a JetStream
// subject with Nats-Msg-Id set to the event's content key, so the stream's
// duplicate window drops a producer's second publish of the same event (a
// retry after a lost PubAck, a re-run batch). Past the window, the ledger
// still charges the event once.
//
// The key is the bill (customer and period), not the contents: a corrected
// event re-published within the window is dropped as a duplicate too, and
// Publish says so with ErrDuplicate, rather than recording a conflict.
type Publisher struct {
	JS        jsapi.JetStream // required
	Subject   string          // required
	Namespace string          // required; the namespace of billing.Key, as the workers use
}

// Publish decodes body as a billing.Event and publishes it. It returns the
// PubAck once the stream stored it; EINVALID from billing.DecodeEvent for a
// malformed event, which is not published; and an error wrapping
// ErrDuplicate, with the PubAck, when the stream already had it.
func (p *Publisher) Publish(ctx context.Context, body []byte) (*jsapi.PubAck, error) {
	key, err := eventKey(p.Namespace, body)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(p.Subject)
	m.Data = body
	ack, err := p.JS.PublishMsg(ctx, m, jsapi.WithMsgID(key))
	if err != nil {
		return nil, fmt.Errorf("publish %s to %s: %w", key, p.Subject, err)
	}
	if ack.Duplicate {
		return ack, fmt.Errorf("publish %s to %s: %w (stream %s, sequence %d)", key, p.Subject, ErrDuplicate, ack.Stream, ack.Sequence)
	}
	return ack, nil
}

// CorePublisher publishes billing events on Core NATS, with Nats-Msg-Id set
// to the content key (useful if a stream captures the subject). Core NATS
// stores nothing: an event published while no QueueWorker is subscribed is
// lost, so prefer the JetStream Publisher for billing.
type CorePublisher struct {
	Conn      *nats.Conn // required
	Subject   string     // required
	Namespace string     // required
}

// Publish decodes body as a billing.Event and publishes it, returning once
// the server has it (a flush), not once a worker processed it. Returns
// EINVALID for a malformed event.
func (p *CorePublisher) Publish(ctx context.Context, body []byte) error {
	key, err := eventKey(p.Namespace, body)
	if err != nil {
		return err
	}
	m := nats.NewMsg(p.Subject)
	m.Data = body
	m.Header.Set(MsgIDHeader, key)
	if err := p.Conn.PublishMsg(m); err != nil {
		return fmt.Errorf("publish %s to %s: %w", key, p.Subject, err)
	}
	if err := flush(ctx, p.Conn); err != nil {
		return fmt.Errorf("publish %s to %s: %w", key, p.Subject, err)
	}
	return nil
}

// eventKey validates body and returns its content key.
func eventKey(namespace string, body []byte) (string, error) {
	if err := billing.ValidateNamespace(namespace); err != nil {
		return "", err
	}
	ev, err := billing.DecodeEvent(body)
	if err != nil {
		return "", err
	}
	return ev.Key(namespace), nil
}

// flush waits for the server to have everything published on nc, within
// ctx's deadline or nats.go's default flush timeout.
func flush(ctx context.Context, nc *nats.Conn) error {
	if _, ok := ctx.Deadline(); ok {
		return nc.FlushWithContext(ctx)
	}
	return nc.Flush()
}
